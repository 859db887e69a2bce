"""The item browser's count of matches arrives by htmx after the page, in a real browser."""

import pytest

from tests import factories
from tests.browser.pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_full_page_of_matches_gets_its_count_after_the_page(browser_page, live_server, project):
    dataset = factories.make_dataset(project, items=60)  # 30 of them about the weather
    page = browser_page
    url = f"/p/{project.slug}/datasets/{dataset.pk}/?meta=topic%3Dweather&size=25"
    log_in(page, live_server, "rita", url)
    summary = page.locator("#items > p.muted")
    summary.filter(has_text="Items 1–25 of 30 matching.").wait_for()  # swapped in by htmx, no reload
    assert page.locator("#total").count() == 0
    page.get_by_role("link", name="Next").click()
    summary.filter(has_text="Items 26–30 of 30 matching.").wait_for()
