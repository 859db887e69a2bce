"""The annotator's flow in a real browser, desktop (1366x900) and phone (390x844); the researcher's exports.

Screenshots go to /tmp/concord-flow-*.png so that a person can look at the layout.
"""

import contextlib
import io

import openpyxl
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from evaluations.models import Rating
from projects.models import Membership
from rating.models import Assignment
from tests import factories
from tests.browser.pages import log_in
from tests.browser.test_rating_in_browser import make_study, require_explanation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
SHOTS = "/tmp/concord-flow-{}.png"


@pytest.fixture(params=list(VIEWPORTS))
def viewport(request):
    return request.param


@pytest.fixture
def screen(chromium, viewport):
    context = chromium.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def rate_url(live_server, evaluation, tail=""):
    return f"{live_server.url}/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/{tail}"


def box(page, selector):
    found = page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return found


def test_annotator_lands_on_the_queue_and_the_comparison_is_blind(screen, viewport, live_server, annotator):
    page = screen
    make_study(annotator)
    log_in(page, live_server, "anna")
    page.wait_for_url("**/rate/")
    assert page.locator("text=New project").count() == 0
    assert page.locator("a.button", has_text="Start rating").count() == 1
    page.screenshot(path=SHOTS.format(f"home-{viewport}"), full_page=True)
    page.click("text=Start rating")
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    item = Assignment.objects.get(user=annotator, status="reserved").item
    # The dialog stops at the prompt; the two replies are only the cards, and the DOM does not say
    # which is the rated response.
    chat = page.inner_text(".dialog-card .chat")
    assert item.baseline is not None
    assert item.response["text"] not in chat and item.baseline["text"] not in chat
    cards = page.locator(".pair .side").all_inner_texts()
    assert sum(item.response["text"] in card for card in cards) == 1
    html = page.inner_html("#rating-panel")
    assert "baseline" not in html.lower()
    assert "target" not in page.eval_on_selector(".chat", "e => e.innerHTML")
    assert page.evaluate("window.scrollY") == 0  # opens at its top, the dialog first
    assert box(page, ".dialog-card")["y"] < box(page, "#rating-form")["y"] or viewport == "desktop"
    page.screenshot(path=SHOTS.format(f"compare-{viewport}"), full_page=False)


def test_a_refused_submit_keeps_the_page_with_debug_on_as_bin_concord_runs_the_demo(
    chromium, live_server, annotator, settings
):
    settings.DEBUG = True
    page = chromium.new_page()
    page.set_default_timeout(20_000)
    evaluation = make_study(annotator)
    require_explanation(evaluation)
    log_in(page, live_server, "anna", f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/")
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    page.keyboard.press("a")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")  # no explanation: refused with 400, the form alone comes back
    page.wait_for_selector("fieldset.rubric-form.has-error")
    assert page.locator(".topbar").count() == 1 and page.locator(".dialog-card").count() == 1
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).position") == "sticky"
    page.close()


def test_a_refused_submit_keeps_the_layout_and_focuses_the_first_unanswered_rubric(
    screen, viewport, live_server, annotator
):
    page = screen
    evaluation = make_study(annotator)
    log_in(page, live_server, "anna", f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/")
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    # Enter on the empty comparison: refused by the server, the form alone comes back; the focus
    # is on the unanswered rubric, not in the explanation box, so the next key picks a value.
    page.keyboard.press("Enter")
    page.wait_for_selector("fieldset.rubric-form.has-error")
    focus_settled(page)
    assert page.evaluate("document.activeElement.tagName") == "FIELDSET"
    assert page.locator("link[href$='concord.css']").count() == 1 and page.locator(".topbar").count() == 1
    assert page.locator(".dialog-card").count() == 1 and page.locator("#rating-panel").count() == 1
    assert "Pick a value for" in page.inner_text("#rating-forms")
    page.keyboard.press("b")
    assert page.is_checked("input[value=B]")
    page.keyboard.type("B asks about the job.")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    # Step 2: pick one of three and submit: the two others are named, the pick and layout stay.
    page.keyboard.press("4")
    page.keyboard.press("Enter")
    page.wait_for_selector("fieldset.rubric-form.has-error")
    focus_settled(page)
    page.screenshot(path=SHOTS.format(f"refused-{viewport}"), full_page=False)
    assert page.locator("input[type=radio]:checked").count() == 1
    assert page.locator("fieldset.rubric-form.has-error").count() == 2
    first_open = page.evaluate("document.activeElement.dataset.rubric")
    assert first_open == page.locator("fieldset.rubric-form.has-error").first.get_attribute("data-rubric")
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).position") == "sticky"
    assert page.locator("p.carried", has_text="B (right)").count() == 1
    assert not Rating.objects.exists()
    page.keyboard.press("3")
    page.keyboard.press("2")
    before = page.get_attribute("#rating-panel", "data-item")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#rating-panel:not([data-item='{before}'])")
    assert Rating.objects.filter(rater__user=annotator).count() == 4


def focus_settled(page) -> None:
    """rating.js moves the focus when it sets up the swapped-in form, a moment after the form is in the
    page: wait briefly for the focus to leave the body (the assertions after this say where it went)."""
    with contextlib.suppress(PlaywrightTimeoutError):
        page.wait_for_function("document.activeElement !== document.body", timeout=2000)


def scrolled_to_top(page) -> bool:
    """htmx's `show:window:top` scrolls after the swap settles, a moment after the new panel is in the
    page: wait for it (briefly) rather than read the position while the swap is still settling."""
    try:
        page.wait_for_function("window.scrollY === 0", timeout=2000)
    except PlaywrightTimeoutError:
        return False
    return True


def test_skip_key_undo_key_history_reopen_and_true_counts(screen, viewport, live_server, annotator):
    page = screen
    evaluation = make_study(annotator)
    evaluation.overlap = 1
    evaluation.save()
    log_in(page, live_server, "anna", f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/")
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    assert "0 of your share of 3" in page.inner_text(".rating-head")
    skipped = page.get_attribute("#rating-panel", "data-item")
    page.keyboard.press("k")  # the skip reason box
    page.keyboard.type("The dialog is cut off.")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#rating-panel:not([data-item='{skipped}'])")
    assert scrolled_to_top(page)
    # Rate the second item, by tapping on a phone and with keys on a desktop.
    rated = page.get_attribute("#rating-panel", "data-item")
    page.keyboard.press("a")
    page.keyboard.type("A is kinder.")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    if viewport == "phone":
        for value in ("3", "4", "2"):  # one rubric open at a time: each tap opens the next
            page.locator(f"fieldset.rubric-form.active input[data-key='{value}']").click()
        page.screenshot(path=SHOTS.format("phone-after-taps"), full_page=False)
        page.click("#rating-form button[type=submit]")
    else:
        for key in ("3", "4", "2", "Enter"):
            page.keyboard.press(key)
    page.wait_for_selector(f"#rating-panel:not([data-item='{rated}'])")
    assert scrolled_to_top(page)  # the next item starts at its top
    assert "1 of your share of 3" in page.inner_text(".rating-head")
    # u takes the submit back: its answers are in the form again, nothing of them is saved.
    page.keyboard.press("u")
    page.wait_for_selector(f"#rating-panel[data-item='{rated}']")
    assert "Undone" in page.inner_text("#rating-panel")
    assert not Rating.objects.filter(item_id=int(rated)).exists()
    assert page.is_checked("input[value=A]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#rating-panel:not([data-item='{rated}'])")
    assert Rating.objects.filter(item_id=int(rated)).count() == 4
    last = page.get_attribute("#rating-panel", "data-item")
    page.keyboard.press("k")
    page.keyboard.type("Not my language.")
    page.keyboard.press("Enter")
    # Nothing left: the home page says so with true counts, and offers History, not a looping Continue.
    page.wait_for_url("**/rate/")
    text = page.inner_text("main")
    assert "you rated 1 and set aside 2 (reopen them from History)" in text
    assert "1 rated · 2 skipped or flagged · your share 3" in text
    assert page.locator("a", has_text="Continue rating").count() == 0
    page.screenshot(path=SHOTS.format(f"done-{viewport}"), full_page=True)
    page.click("a:has-text('History')")
    page.locator(f"a.reopen[href$='/rate/{skipped}/']").click()
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    assert "You skipped this item earlier" in page.inner_text("#rating-panel")
    page.keyboard.press("s")
    page.keyboard.type("Both are fine.")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rating-panel[data-stage='rest']")
    for key in ("1", "1", "1", "Enter"):
        page.keyboard.press(key)
    page.wait_for_url("**/rate/")
    assert "2 rated · 1 skipped or flagged" in page.inner_text("main")
    statuses = dict(Assignment.objects.filter(user=annotator).values_list("item_id", "status"))
    assert statuses == {int(skipped): "done", int(rated): "done", int(last): "skipped"}


def test_phone_layout_dialog_first_one_rubric_open_and_a_short_header(chromium, live_server, annotator):
    context = chromium.new_context(viewport=VIEWPORTS["phone"])
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        evaluation = make_study(annotator)
        log_in(page, live_server, "anna", f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/")
        page.wait_for_selector("#rating-panel[data-stage='compare']")
        assert box(page, ".topbar")["height"] <= 56
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing hidden to the side
        page.keyboard.press("b")
        page.keyboard.type("B is kinder.")
        page.keyboard.press("Enter")
        page.wait_for_selector("#rating-panel[data-stage='rest']")
        # Step 2 starts at the rated reply under the header (the comparison was read in step 1), not at
        # the dialog's first turn.
        page.wait_for_function(
            "() => { const t = document.querySelector('.chat .turn.target').getBoundingClientRect().top;"
            " const header = document.querySelector('.topbar').offsetHeight;"
            " return window.scrollY > 0 && Math.abs(t - header - 8) < 3 }"
        )
        assert box(page, ".dialog-card")["y"] < box(page, "#rating-form")["y"]
        open_scales = page.locator("fieldset.rubric-form .scale:visible").count()
        assert open_scales == 1  # the other rubrics are one line each
        fieldsets = page.locator("fieldset.rubric-form")
        heights = [fieldsets.nth(n).bounding_box()["height"] for n in range(fieldsets.count())]
        assert all(height < 80 for height in sorted(heights)[:-1])  # closed rubrics: a line or two
        page.screenshot(path=SHOTS.format("phone-rest"), full_page=True)
        form_bottom = box(page, "#rating-form")
        dialog = box(page, ".dialog-card")
        assert form_bottom["y"] + form_bottom["height"] - (dialog["y"] + dialog["height"]) < 1500
    finally:
        context.close()


def test_researcher_downloads_the_spreadsheet_export_and_reads_explanations_in_their_letters(
    screen, viewport, live_server, researcher, annotator
):
    page = screen
    evaluation = make_study(annotator)
    Membership.objects.create(project=evaluation.project, user=researcher, role=Membership.Role.RESEARCHER)
    item = evaluation.dataset.items.get(external_id="c-1")
    pairwise = evaluation.rubric_versions.get(rubric__kind="pairwise")
    rater = factories.make_rater(evaluation.project, name="anna-study", user=annotator)
    factories.make_rating(
        evaluation, item, pairwise, rater, "B", side_shown="response", explanation="A asks a caring question."
    )
    log_in(page, live_server, "rita")
    assert page.locator("h1", has_text="Projects").count() == 1  # researchers land on their projects
    page.goto(f"{live_server.url}/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/")
    form = page.locator("form.export-options")
    form.scroll_into_view_if_needed()
    page.screenshot(path=SHOTS.format(f"export-{viewport}"), full_page=False)
    with page.expect_download() as download_info:
        form.locator("button", has_text="Download").click()
    download = download_info.value
    assert download.suggested_filename.endswith(".xlsx")
    book = openpyxl.load_workbook(io.BytesIO(download.path().read_bytes()), read_only=True)
    header, *rows = [list(cells) for cells in book["wide"].iter_rows(values_only=True)]
    row = dict(zip(header, next(r for r in rows if r[0] == "c-1"), strict=True))
    assert row["response"] == item.response["text"] and row["baseline"] == item.baseline["text"]
    wanted = ("Multi-turn chat quality v", "anna-study")
    (column,) = [name for name in row if name.startswith(wanted[0]) and wanted[1] in name]
    assert row[column] == "B"
    page.goto(
        f"{live_server.url}/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/report/items/{item.pk}/"
    )
    text = page.inner_text("main")
    assert "as shown: A · left was the response" in text and "A asks a caring question." in text
    page.screenshot(path=SHOTS.format(f"agreement-item-{viewport}"), full_page=True)


def test_a_long_dialog_opens_at_the_reply_being_rated(chromium, live_server, annotator):
    """Seen in a browser review: a 30-turn dialog opened at its first turn, the rated reply 1,300 px down
    inside the dialog's own scroll, so a keyboard rater could submit without having seen it."""
    project = factories.make_project(name="Long chats", annotators=[annotator])
    dataset = factories.make_dataset(project, items=1, baseline=False)
    turns = [
        {"speaker": "USER" if n % 2 == 0 else "BOT", "text": f"Turn {n}: " + "words " * 40} for n in range(30)
    ]
    dataset.items.update(context=turns, response={"speaker": "BOT", "text": "THE REPLY BEING RATED"})
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, dataset, [version], overlap=1, annotators=[annotator])
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        log_in(page, live_server, "anna", rate_url(live_server, evaluation).removeprefix(live_server.url))
        reply = page.locator("[data-role=response]")
        reply.wait_for()
        card = page.locator(".dialog-card").bounding_box()
        shown = reply.bounding_box()
        assert card is not None and shown is not None
        assert card["y"] <= shown["y"] and shown["y"] + shown["height"] <= card["y"] + card["height"] + 1
    finally:
        context.close()


def test_key_hints_show_only_where_the_keys_work(chromium, live_server, annotator):
    """Seen in a browser review: without JavaScript the key list and badges showed, though no key did
    anything. On a phone (no keyboard) they are hidden too."""
    evaluation = make_study(annotator)
    shown = {}
    for name, options in {
        "desktop": {"viewport": VIEWPORTS["desktop"]},
        "no-js": {"viewport": VIEWPORTS["desktop"], "java_script_enabled": False},
        "phone": {"viewport": VIEWPORTS["phone"]},
    }.items():
        context = chromium.new_context(**options)
        page = context.new_page()
        try:
            log_in(page, live_server, "anna", rate_url(live_server, evaluation).removeprefix(live_server.url))
            page.locator("#rating-form").wait_for()
            shown[name] = (
                page.locator("#keys-help").is_visible(),
                page.locator(".option-head kbd").first.is_visible(),
            )
        finally:
            context.close()
    assert shown == {"desktop": (True, True), "no-js": (False, False), "phone": (False, False)}


def test_history_on_a_phone_keeps_each_rows_action_in_sight(chromium, live_server, annotator):
    """Seen in a browser review at 390 px: the Revise / Reopen links sat off-screen in a table scrolled
    sideways with nothing to say so; now each row is a card."""
    from rating import services as rating_services

    evaluation = make_study(annotator)
    held = rating_services.next_assignment(evaluation=evaluation, user=annotator)
    assert held is not None
    rating_services.set_aside(
        evaluation=evaluation,
        item_id=held.item_id,
        user=annotator,
        reason="the dialog is cut off",
        flag=False,
    )
    context = chromium.new_context(viewport=VIEWPORTS["phone"])
    page = context.new_page()
    try:
        log_in(
            page,
            live_server,
            "anna",
            rate_url(live_server, evaluation, "history/").removeprefix(live_server.url),
        )
        reopen = page.locator("a.reopen").first
        reopen.wait_for()
        found, frame = reopen.bounding_box(), page.locator(".table-wrap").bounding_box()
        assert found is not None and frame is not None
        assert found["x"] + found["width"] <= frame["x"] + frame["width"]  # not cut off by the frame
        page.screenshot(path=SHOTS.format("history-phone"), full_page=True)
    finally:
        context.close()


def test_leaving_a_form_with_unsaved_answers_asks_first(chromium, live_server, annotator):
    """Seen in a browser review: answers brought back by an undo were lost, without a word, by following
    a link before submitting them again. The same holds for answers picked but not yet submitted."""
    evaluation = make_study(annotator)
    context = chromium.new_context(viewport=VIEWPORTS["desktop"])
    page = context.new_page()
    asked: list[str] = []

    def stay(dialog):
        asked.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", stay)
    try:
        log_in(page, live_server, "anna", rate_url(live_server, evaluation).removeprefix(live_server.url))
        page.locator("#rating-form").wait_for()
        item = page.get_attribute("#rating-panel", "data-item")
        page.click("a:text-is('History')")  # nothing picked yet: it just goes
        page.wait_for_url("**/rate/history/")
        page.go_back()
        page.locator("#rating-form").wait_for()
        page.keyboard.press("a")  # an answer picked, not submitted
        page.click("a:text-is('History')")
        page.wait_for_timeout(500)
        assert asked == ["beforeunload"] and page.get_attribute("#rating-panel", "data-item") == item
    finally:
        context.close()
