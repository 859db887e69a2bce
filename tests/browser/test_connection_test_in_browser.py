"""The judge page's connection test in a real browser: the button is disabled and says what it is doing while
the requests run, the result is swapped in, and a second test while one of the person's is running says so."""

import pytest
from django.utils import timezone

from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import Judge
from projects.models import Membership
from tests.browser.pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_connection_test_shows_its_progress_then_its_result_and_runs_one_at_a_time(
    browser_page, live_server, project, researcher
):
    server = FakeLLM(FakeConfig(latency_ms=300)).start(stop_after=120)  # a few probes: about two seconds
    try:
        judge = Judge.objects.create(
            project=project, name="lab judge", base_url=server.base_url, model="fake-judge"
        )
        page = browser_page
        url = f"/p/{project.slug}/judges/{judge.pk}/"
        log_in(page, live_server, "rita", url)
        section = page.locator("#judge-connection")
        assert section.locator(".when-testing").is_hidden()
        section.get_by_role("button", name="Test connection").click()
        section.locator(".when-testing").wait_for(state="visible")  # while the requests run
        assert section.get_by_role("button", name="Test connection").is_disabled()  # no second click
        page.locator("#judge-connection .badge.ok").wait_for()  # swapped in by htmx
        assert "simulated model" in page.locator("#judge-connection").inner_text()
        Membership.objects.filter(project=project, user=researcher).update(
            connection_test_since=timezone.now()  # as if a test of theirs (in another tab) still ran
        )
        page.locator("#judge-connection").get_by_role("button", name="Test connection").click()
        page.locator("#judge-connection .badge.run-running").wait_for()
        assert "still running (one at a time)" in page.locator("#judge-connection").inner_text()
    finally:
        server.stop()
