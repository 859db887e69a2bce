"""The item browser's count of matches arrives by htmx after the page, in a real browser."""

from urllib.parse import urlencode

import pytest

from tests import factories

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_full_page_of_matches_gets_its_count_after_the_page(browser_page, live_server, project):
    dataset = factories.make_dataset(project, items=60)  # 30 of them about the weather
    page = browser_page
    url = f"/p/{project.slug}/datasets/{dataset.pk}/?meta=topic%3Dweather&size=25"
    page.goto(f"{live_server.url}/login/?{urlencode({'next': url})}", wait_until="domcontentloaded")
    page.fill("input[name=username]", "rita")
    page.fill("input[name=password]", "pw-concord-123")
    page.keyboard.press("Enter")
    page.wait_for_url(lambda u: "/login/" not in u)
    summary = page.locator("#items > p.muted")
    summary.filter(has_text="Items 1–25 of 30 matching.").wait_for()  # swapped in by htmx, no reload
    assert page.locator("#total").count() == 0
    page.get_by_role("link", name="Next").click()
    summary.filter(has_text="Items 26–30 of 30 matching.").wait_for()
