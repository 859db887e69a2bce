"""A researcher reads the agreement report on a desktop and on a phone: the summary comes first, nothing is
clipped, and every disagreement can be walked through with previous / next."""

import pytest

from tests import factories
from tests.agreement.helpers import add_ratings
from tests.browser.layout import clipped, page_scrolls_sideways
from tests.browser.pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


def rated_study(researcher, viewport: str):
    project = factories.make_project(name=f"Report {viewport}", researchers=[researcher])
    pairwise = factories.make_rubric(project=project, name="Preference", kind="pairwise")
    likert = factories.make_rubric(project=project, name="Warmth", kind="likert")
    dataset = factories.make_dataset(project, items=40)
    evaluation = factories.make_evaluation(project, dataset, [pairwise, likert], overlap=2)
    judge = "a-judge-with-a-rather-long-model-name-that-must-not-be-clipped"
    add_ratings(
        evaluation, pairwise,
        {"anna": ["A"] * 40, "bob": ["A"] * 30 + ["B"] * 10, judge: ["A"] * 12 + ["B"] * 28},
        kind={judge: "model"},
    )  # fmt: skip
    add_ratings(
        evaluation, likert,
        {"anna": [1, 2, 3, 4, 5] * 8, "bob": [1, 2, 3, 4, 4] * 8, judge: [2, 2, 3, 5, 5] * 8},
        kind={judge: "model"},
    )  # fmt: skip
    return evaluation


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_report_reads_on_desktop_and_phone_and_walks_the_disagreements(
    chromium, live_server, researcher, viewport
):
    evaluation = rated_study(researcher, viewport)
    report = f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/report/"
    context = chromium.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        log_in(page, live_server, "rita", report)
        page.wait_for_selector("#overview")
        page.screenshot(path=f"/tmp/concord-report-{viewport}.png")
        page.screenshot(path=f"/tmp/concord-report-{viewport}-full.png", full_page=True)
        assert page.locator("[data-role=overview-row]").count() == 2
        overview_top = page.locator("#overview").bounding_box()["y"]
        assert overview_top < VIEWPORTS[viewport]["height"]  # the summary is on the first screen
        assert clipped(page) == [] and not page_scrolls_sideways(page)
        if viewport == "phone":  # one header line, the current crumb shown
            assert page.locator(".topbar").bounding_box()["height"] <= 56
            assert page.locator(".topnav a").last.bounding_box()["width"] >= 60
        assert "Cohen's kappa, quadratic weights" in page.inner_text("#overview")
        page.locator(".model-rater").first.screenshot(path=f"/tmp/concord-report-model-{viewport}.png")

        page.click(
            "text=Every disagreement of a-judge-with-a-rather-long-model-name-that-must-not-be-clipped"
        )
        page.wait_for_selector(".pager")
        assert "page 1 of 2" in page.inner_text(".pager")
        page.click(".disagreements li:first-child a")
        page.wait_for_selector(".disagreement-nav")
        assert "Disagreement 1 of 28" in page.inner_text(".disagreement-nav")
        page.click(".disagreement-nav a[rel=next]")
        page.wait_for_function(
            "document.querySelector('.disagreement-nav').innerText.includes('Disagreement 2 of 28')"
        )
        page.screenshot(path=f"/tmp/concord-report-item-{viewport}.png")
        assert clipped(page) == [] and not page_scrolls_sideways(page)
    finally:
        context.close()
