"""Rating on a phone (390x844) by taps alone: how far the person scrolls and how often they tap per item,
measured and printed (`-s` shows it), with the candidate cards labelled as they are laid out."""

import pytest

from datasets.models import Item
from evaluations.models import Rating
from tests.browser.pages import log_in
from tests.browser.test_rating_in_browser import make_study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PHONE = {"width": 390, "height": 844}
ITEMS = 3


class Thumb:
    """Taps like a person: scrolls the target into view first (counted), then taps it (counted)."""

    def __init__(self, page):
        self.page, self.scrolled, self.taps = page, 0.0, 0

    def tap(self, selector: str) -> None:
        target = self.page.locator(selector).first
        before = self.page.evaluate("window.scrollY")
        target.scroll_into_view_if_needed()
        self.scrolled += abs(self.page.evaluate("window.scrollY") - before)
        target.tap()
        self.taps += 1


def test_a_phone_rates_by_taps_with_little_scrolling(chromium, live_server, annotator):
    context = chromium.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    evaluation = make_study(annotator, items=ITEMS + 1)
    log_in(page, live_server, "anna", f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/")
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    thumb = Thumb(page)
    for _ in range(ITEMS):
        item = page.get_attribute("#rating-panel", "data-item")
        thumb.tap("fieldset[data-kind=pairwise] label.option:has(input[value=A])")
        thumb.tap("#rating-form button[type=submit]")
        page.wait_for_selector("#rating-panel[data-stage='rest']")
        page.wait_for_timeout(300)  # the page settles where it starts (htmx's swap, then rating.js)
        for _ in range(3):  # one rubric open at a time; a tap on a value opens the next
            thumb.tap("fieldset.rubric-form.active label.option:has(input[value='3'])")
        thumb.tap("#rating-form button[type=submit]")
        page.wait_for_selector(f"#rating-panel:not([data-item='{item}'])")
    per_item_scroll, per_item_taps = thumb.scrolled / ITEMS, thumb.taps / ITEMS
    print(
        f"\nphone 390x844: {per_item_scroll:.0f} px scrolled and {per_item_taps:.0f} taps per item (2 steps)"
    )
    assert Rating.objects.filter(evaluation=evaluation).count() == 4 * ITEMS
    page.wait_for_selector("#rating-panel[data-stage='compare']")
    # A long dialog: its last turns show, the earlier ones fold into one line a tap opens.
    item = Item.objects.get(pk=page.get_attribute("#rating-panel", "data-item"))
    item.context = [{"speaker": "USER" if n % 2 else "BOT", "text": f"Turn {n} " * 20} for n in range(9)]
    item.save()
    page.reload()
    assert page.locator(".chat .turn:visible").count() == 3
    assert page.inner_text(".earlier-turns summary") == "6 earlier turns"
    page.tap(".earlier-turns summary")
    assert page.locator(".chat .turn:visible").count() == 9
    cards = page.locator(".pair .side h3").all_inner_texts()
    assert [text.split()[-1] for text in cards] == ["top", "bottom"]  # stacked, so not "left / right"
    assert per_item_taps == 6
    assert per_item_scroll <= 2 * PHONE["height"]  # at most one screen per step
    context.close()
