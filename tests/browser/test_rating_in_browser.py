"""An annotator rates with the keyboard only in a real browser; the database holds exactly what they chose."""

import pytest

from datasets.models import Dataset, Item
from evaluations.models import Rating, RatingRevision
from rating.models import Assignment, RaterView
from rubrics.builtins import ensure_builtin_rubrics
from rubrics.models import RubricVersion
from tests import factories
from tests.browser.pages import log_in

# serialized_rollback puts back rows from data migrations (the built-in rubrics) after the flush.
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HOSTILE = '<script>window.__owned = 1; alert("script")</script><img src=x onerror="window.__owned = 2">'
SCREENSHOT = "/tmp/concord-rating-page.png"


def builtin_versions() -> list[RubricVersion]:
    ensure_builtin_rubrics()  # an earlier transactional test may have flushed the migration's rows
    versions = list(RubricVersion.objects.filter(rubric__project__isnull=True).select_related("rubric"))
    assert sorted(v.rubric.kind for v in versions) == ["likert", "likert", "likert", "pairwise"]
    return versions


def make_study(annotator, items: int = 3):
    project = factories.make_project(name="Browser study", annotators=[annotator])
    dataset = Dataset.objects.create(project=project, name="Chats")
    Item.objects.bulk_create(
        Item(
            dataset=dataset,
            external_id=f"c-{n}",
            position=n,
            context=[
                {"speaker": "USER", "text": "I lost my job today and I feel awful." if n else HOSTILE},
                {"speaker": "BOT", "text": "I'm sorry to hear that. Do you want to talk about it?"},
                {"speaker": "USER", "text": "Yes. I don't know what to do next."},
            ],
            response={
                "speaker": "BOT",
                "text": f"That sounds hard. What did you enjoy most in that job? ({n})",
            },
            baseline={"speaker": "BOT", "text": f"Ok. Look for a new job. ({n})"},
        )
        for n in range(items)
    )
    evaluation = factories.make_evaluation(
        project, dataset, builtin_versions(), overlap=1, annotators=[annotator]
    )
    return evaluation


def require_explanation(evaluation) -> None:
    """The researcher asks people to explain their pairwise choice (optional by default)."""
    pairwise = [v.pk for v in evaluation.rubric_versions.all() if v.rubric.kind == "pairwise"]
    RaterView.objects.update_or_create(evaluation=evaluation, defaults={"explain_versions": pairwise})


def rate_current_item_with_keys(page, *, sentence: str, empathy: str, choice: str, repetition: str):
    """Step 1: the comparison alone; step 2: the other rubrics by name (context fit, empathy, repetition)."""
    item_before = page.get_attribute("#rating-panel", "data-item")
    page.keyboard.press(choice)  # focus goes to the required explanation
    page.keyboard.type("The left one asks a caring question.")
    page.keyboard.press("Enter")  # Enter in the explanation moves on to step 2
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    page.keyboard.press(sentence)
    page.keyboard.press(empathy)
    page.keyboard.press(repetition)
    page.keyboard.press("Enter")
    page.wait_for_function(
        "old => { const p = document.getElementById('rating-panel'); return !p || p.dataset.item !== old }",
        arg=item_before,
    )
    return int(item_before)


def test_annotator_rates_and_revises_with_the_keyboard_only(browser_page, live_server, annotator):
    page = browser_page
    dialogs: list[str] = []

    def record_and_dismiss(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record_and_dismiss)
    evaluation = make_study(annotator)
    require_explanation(evaluation)
    slug = evaluation.project.slug
    log_in(page, live_server, "anna", f"/p/{slug}/evaluations/{evaluation.pk}/rate/")

    # The hostile dialog text is shown as text, never run.
    assert page.locator(".turn", has_text="<script>window.__owned").count() == 1
    assert page.evaluate("window.__owned") is None
    page.screenshot(path=SCREENSHOT, full_page=True)

    first = rate_current_item_with_keys(page, sentence="3", empathy="4", choice="a", repetition="2")
    assert "Saved item 1." in page.inner_text("#rating-panel")
    # The second item: forgetting the required explanation comes back from the server as the form
    # alone, with the focus in the empty box; nothing is saved and the pick stays.
    second = int(page.get_attribute("#rating-panel", "data-item"))
    page.keyboard.press("s")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    page.wait_for_selector("fieldset.rubric-form.has-error")
    page.wait_for_function("document.activeElement && document.activeElement.tagName === 'TEXTAREA'")
    assert page.locator("input[type=radio]:checked").count() == 1
    assert not Rating.objects.filter(item_id=second).exists()
    page.keyboard.type("The left one asks a caring question.")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    for key in ("5", "1", "5", "Enter"):
        page.keyboard.press(key)
    page.wait_for_selector(f"#rating-panel:not([data-item='{second}'])")

    # Revise the first item from its page: the comparison again (Enter keeps it), then 1 replaces 3.
    page.goto(f"{live_server.url}/p/{slug}/evaluations/{evaluation.pk}/rate/{first}/")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.wait_for_url("**/rate/history/")
    assert "Revised item 1." in page.inner_text("main")

    # Logged out in another tab: the submit is not saved, says so, and the picks stay on the page.
    page.goto(f"{live_server.url}/p/{slug}/evaluations/{evaluation.pk}/rate/")
    page.keyboard.press("b")
    page.keyboard.type("Right is better.")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    for key in ("2", "2", "2"):
        page.keyboard.press(key)
    page.context.clear_cookies()
    page.keyboard.press("Enter")
    page.wait_for_selector(".client-error")
    assert page.inner_text(".client-error").startswith("Not saved: your session")
    assert page.locator("input[type=radio]:checked").count() == 3

    assert dialogs == [] and page.evaluate("window.__owned") is None
    ratings = Rating.objects.filter(evaluation=evaluation, rater__user=annotator).select_related(
        "rubric_version"
    )
    by_item = {
        (r.item_id, r.rubric_version.rubric.name): (r.value, r.explanation, r.side_shown) for r in ratings
    }
    left = {a.item_id: a.left_side for a in Assignment.objects.filter(evaluation=evaluation)}
    canonical_left = {"baseline": "A", "response": "B"}
    reason = "The left one asks a caring question."
    assert by_item == {
        (first, "Context fit and emotion attention"): ("1", "", ""),
        (first, "Empathetical understanding"): ("4", "", ""),
        (first, "Multi-turn chat quality"): (canonical_left[left[first]], reason, left[first]),
        (first, "Repetitiveness"): ("2", "", ""),
        (second, "Context fit and emotion attention"): ("5", "", ""),
        (second, "Empathetical understanding"): ("1", "", ""),
        (second, "Multi-turn chat quality"): ("SAME", reason, left[second]),
        (second, "Repetitiveness"): ("5", "", ""),
    }
    assert list(RatingRevision.objects.values_list("value", flat=True)) == ["3"]


def test_an_enter_before_the_swap_settles_still_goes_through_htmx(browser_page, live_server, annotator):
    # htmx takes over a swapped-in form when the swap settles; with a slow settle (a busy machine), the
    # Enter of step 2 comes first. It must still post through htmx: the next item in place, the notice in
    # the panel, not a whole page.
    page = browser_page
    evaluation = make_study(annotator)
    log_in(page, live_server, "anna", f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/")
    page.evaluate("htmx.config.defaultSettleDelay = 3000")
    page.evaluate("window.__samePage = true")
    rate_current_item_with_keys(page, sentence="3", empathy="4", choice="a", repetition="2")
    assert "Saved item 1." in page.inner_text("#rating-panel")
    assert page.evaluate("window.__samePage") is True
