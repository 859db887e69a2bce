"""Single-key shortcuts never change an answer by accident: explanations typed with every shortcut letter in
them, after each way of arriving at a form, are stored exactly as typed, with exactly the value picked, and
the queue goes on where it should. Read back from the database."""

import pytest

from evaluations.models import Rating, RatingRevision
from projects.models import Membership
from rating.models import Assignment, KeyboardSettings, RaterView
from tests import factories
from tests.browser.pages import log_in
from tests.browser.test_rating_in_browser import make_study, require_explanation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Every default shortcut letter (a s b k u g) and digits, in words a rater would write.
TEXTS = [
    "B more engaging; it asks back, kindly. Undo? 2 of 5 guesses: skip it, go on",
    "a bus, a kid, a gag: b wins 3 to 1, ask us why (k u g s a b)",
    "Both say sorry, but A asks back and keeps going: 4 vs 2",
    "SAME-ish: a kick, a bug, a sky. Undo nothing. 0 1 9",
    "ask, bask, sulk, gab, buck, usage",
]


def focused_tag(page) -> str:
    return page.evaluate("document.activeElement && document.activeElement.tagName")


def item_of(page) -> int:
    return int(page.get_attribute("#rating-panel", "data-item"))


def wait_for_next(page, before: int) -> None:
    page.wait_for_function(
        "old => { const p = document.getElementById('rating-panel');"
        " return !p || p.dataset.item !== String(old) }",
        arg=before,
    )


def step_two(page, digits: str = "342") -> None:
    """The other rubrics: context fit, empathy, repetition by their digits, then Enter."""
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    for digit in digits:
        page.keyboard.press(digit)
    page.keyboard.press("Enter")


def stored(evaluation, annotator, item_id: int) -> dict[str, tuple[str, str]]:
    ratings = Rating.objects.filter(evaluation=evaluation, rater__user=annotator, item_id=item_id)
    return {
        r.rubric_version.rubric.name: (r.value, r.explanation)
        for r in ratings.select_related("rubric_version__rubric")
    }


def canonical(evaluation, item_id: int, shown: str) -> str:
    """The stored pairwise value of the letter the person saw (A = baseline once stored)."""
    left = Assignment.objects.get(evaluation=evaluation, item_id=item_id).left_side
    if shown == "SAME":
        return shown
    return shown if left == "baseline" else {"A": "B", "B": "A"}[shown]


def test_explanations_with_every_shortcut_letter_are_stored_as_typed_after_every_path(
    browser_page, live_server, annotator
):
    page = browser_page
    page.on("dialog", lambda dialog: dialog.accept())  # leaving a page with a typed answer asks first
    evaluation = make_study(annotator, items=6)
    require_explanation(evaluation)
    rate = f"{live_server.url}/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/"
    log_in(page, live_server, "anna", rate)

    # 1. Picking a choice whose explanation is required: the focus goes into the box.
    first = item_of(page)
    page.keyboard.press("b")
    assert focused_tag(page) == "TEXTAREA"
    page.keyboard.type(TEXTS[0])
    page.keyboard.press("Enter")
    step_two(page)
    wait_for_next(page, first)
    second = item_of(page)

    # 2. Undo: the answers come back with the focus in the explanation; pressing the chosen key and typing
    # a new explanation changes nothing but the explanation (the bug: "a" in "engaging" picked A).
    page.keyboard.press("u")
    page.wait_for_selector(f"#rating-panel[data-item='{first}']")
    assert focused_tag(page) == "TEXTAREA"
    page.keyboard.press("Control+A")
    page.keyboard.type(TEXTS[1])
    page.keyboard.press("Enter")
    step_two(page, "")  # the other rubrics came back too: Enter keeps them
    wait_for_next(page, first)
    assert item_of(page) == second  # the queue goes on with the item handed out after the first

    # 3. Reload in the middle of step 1 and again in step 2: nothing typed goes to a shortcut.
    page.keyboard.press("a")
    page.keyboard.type(TEXTS[2][:20])
    page.reload()
    page.wait_for_selector(f"#rating-panel[data-item='{second}']")
    # What was picked and typed is back, with the focus at the end of the explanation.
    assert page.input_value("textarea") == TEXTS[2][:20] and focused_tag(page) == "TEXTAREA"
    assert page.locator("input[type=radio]:checked").get_attribute("value") == "A"
    page.keyboard.type(TEXTS[2][20:])
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    page.reload()
    page.wait_for_selector("#rating-panel[data-stage='rest']")  # step 1 kept across the reload
    step_two(page, "515")
    wait_for_next(page, second)
    third = item_of(page)

    # 4. A refused submit (the explanation left out): the focus is in the box, the pick stays.
    page.keyboard.press("s")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    page.wait_for_selector("fieldset.rubric-form.has-error")
    page.wait_for_function("document.activeElement && document.activeElement.tagName === 'TEXTAREA'")
    page.keyboard.type(TEXTS[3])
    page.keyboard.press("Enter")
    step_two(page, "111")
    wait_for_next(page, third)
    fourth = item_of(page)

    # 5. A chosen answer waiting for its explanation: keys typed anywhere go into the box, not to shortcuts.
    page.keyboard.press("a")
    page.keyboard.press("Escape")  # focus left the box; the explanation is still missing
    page.keyboard.type(TEXTS[4])
    assert page.input_value("textarea") == TEXTS[4]
    page.keyboard.press("Enter")
    step_two(page, "222")
    wait_for_next(page, fourth)
    fifth = item_of(page)

    # 6. Revise the first item from its page: the focus is in its explanation.
    page.goto(f"{rate}{first}/")
    assert focused_tag(page) == "TEXTAREA"
    page.keyboard.press("Control+A")
    page.keyboard.type(TEXTS[0])
    page.keyboard.press("Enter")
    step_two(page, "")
    page.wait_for_url("**/rate/history/")

    got = {item: stored(evaluation, annotator, item) for item in (first, second, third, fourth)}
    quality = "Multi-turn chat quality"
    assert got[first][quality] == (canonical(evaluation, first, "B"), TEXTS[0])
    assert got[second][quality] == (canonical(evaluation, second, "A"), TEXTS[2])
    assert got[third][quality] == ("SAME", TEXTS[3])
    assert got[fourth][quality] == (canonical(evaluation, fourth, "A"), TEXTS[4])
    likert = ["Context fit and emotion attention", "Empathetical understanding", "Repetitiveness"]
    assert [got[first][name][0] for name in likert] == ["3", "4", "2"]
    assert [got[second][name][0] for name in likert] == ["5", "1", "5"]
    assert [got[third][name][0] for name in likert] == ["1", "1", "1"]
    assert [got[fourth][name][0] for name in likert] == ["2", "2", "2"]
    assert all(
        explanation == "" for item in got.values() for name in likert for _, explanation in [item[name]]
    )
    # The revision replaced the explanation the undo brought: one earlier value kept, the choice unchanged.
    assert list(RatingRevision.objects.values_list("explanation", flat=True)) == [TEXTS[1]]
    statuses = dict(Assignment.objects.filter(evaluation=evaluation).values_list("item_id", "status"))
    assert statuses == {first: "done", second: "done", third: "done", fourth: "done", fifth: "reserved"}


def test_shortcuts_turned_off_never_pick_and_rebound_keys_do(browser_page, live_server, annotator):
    page = browser_page
    page.on("dialog", lambda dialog: dialog.accept())
    evaluation = make_study(annotator, items=2)
    KeyboardSettings.objects.create(user=annotator, shortcuts_on=False)
    guidelines = (
        "Read the whole dialog first.\n\n* **Prefer the reply that** keeps the talk going\n* Ignore typos"
    )
    RaterView.objects.create(evaluation=evaluation, guidelines=guidelines)
    rate = f"{live_server.url}/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/"
    log_in(page, live_server, "anna", rate)
    page.keyboard.type("absku g 123")
    assert page.locator("input[type=radio]:checked").count() == 0
    assert page.locator("#guidelines[open]").count() == 0
    assert "Single-key shortcuts are off" in page.inner_text("#keys-help")

    KeyboardSettings.objects.filter(user=annotator).update(
        shortcuts_on=True, keys={"A": "j", "guidelines": "?"}
    )
    page.reload()
    page.keyboard.press("a")  # no longer a shortcut
    assert page.locator("input[type=radio]:checked").count() == 0
    page.keyboard.press("?")
    assert page.locator("#guidelines[open]").count() == 1
    assert "Prefer the reply that" in page.inner_text("#guidelines strong")
    page.screenshot(path="/tmp/concord-guidelines.png", full_page=False)
    page.keyboard.press("?")
    page.keyboard.press("j")
    assert page.locator("input[type=radio]:checked").get_attribute("value") == "A"
    assert focused_tag(page) == "TEXTAREA"  # the optional explanation is where typing goes next
    assert "j" in page.inner_text("#keys-help") and "change or turn off keys" in page.inner_text("#keys-help")


def test_a_draft_kept_for_a_reload_never_reaches_another_account_in_the_same_tab(
    browser_page, live_server, annotator
):
    page = browser_page
    page.on("dialog", lambda dialog: dialog.accept())
    evaluation = make_study(annotator, items=1)
    evaluation.overlap = 2
    evaluation.save()
    other = factories.make_user("ben")
    Membership.objects.create(project=evaluation.project, user=other, role=Membership.Role.ANNOTATOR)
    evaluation.annotators.add(other)
    rate = f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/"
    log_in(page, live_server, "anna", rate)
    page.keyboard.press("b")
    page.keyboard.type("Anna's reason")
    page.click("form.whoami button")  # logs out: the draft stays in the tab's storage
    log_in(page, live_server, "ben", rate)
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    assert page.locator("input[type=radio]:checked").count() == 0
    assert page.input_value("textarea") == ""
