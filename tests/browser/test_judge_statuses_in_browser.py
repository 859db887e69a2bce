"""Judge runs in a real browser: the evaluation page's run statuses change while a run finishes, without a
reload, and stop polling once nothing runs; the launch form's estimate follows the form as it changes."""

import pytest

from judges import services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import Judge
from tests import factories
from tests.browser.pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_finishing_run_turns_done_on_the_evaluation_page_without_a_reload(
    browser_page, live_server, project, monkeypatch, settings
):
    monkeypatch.setattr(
        "judges.services.enqueue_lanes", lambda run_id, lanes, queue_stamp: None
    )  # this test works the lane
    monkeypatch.setenv("CONCORD_BROWSER_JUDGE_KEY", "k")
    settings.CONCORD_JUDGE_CREDENTIALS = {
        "CONCORD_BROWSER_JUDGE_KEY": ["127.0.0.1"]
    }  # declared, as an operator would
    server = FakeLLM(FakeConfig(latency_ms=0)).start(stop_after=120)
    try:
        version = factories.make_rubric(project=project, name="Quality")
        evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=3), [version])
        judge = Judge.objects.create(
            project=project,
            name="browser judge",
            base_url=server.base_url,
            model="fake-judge",
            api_key_env="CONCORD_BROWSER_JUDGE_KEY",
        )
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
        page = browser_page
        url = f"/p/{project.slug}/evaluations/{evaluation.pk}/"
        log_in(page, live_server, "rita", url)
        section = page.locator("#evaluation_judge_runs")
        assert section.locator(".badge.run-running").count() == 1
        model_ratings = page.locator("#summary tbody tr td:nth-child(6)")
        assert model_ratings.inner_text() == "0"
        services.work_lane(run_id=run.pk, lane=0)
        section.locator(".badge.run-done").wait_for()  # swapped in by htmx polling, no reload
        assert page.locator("#evaluation_judge_runs[hx-get]").count() == 0  # and polling stopped
        # The summary counts the run's ratings once it is done, without a reload either.
        page.wait_for_function(
            "() => document.querySelector('#summary tbody tr td:nth-child(6)').innerText.trim() === '3'"
        )
    finally:
        server.stop()


def test_the_launch_form_estimates_at_once_and_again_on_every_change(browser_page, live_server, project):
    dataset = factories.make_dataset(project, items=4)
    versions = [factories.make_rubric(project=project, name=name) for name in ("Clarity", "Quality")]
    evaluation = factories.make_evaluation(project, dataset, versions)
    Judge.objects.create(project=project, name="only judge", base_url="https://api.openai.com/v1", model="m")
    page = browser_page
    log_in(page, live_server, "rita", f"/p/{project.slug}/evaluations/{evaluation.pk}/judge-runs/new/")
    launch = page.locator("#run-estimate button.primary")
    launch.wait_for()  # the project's only judge is picked: the estimate comes without pressing Estimate
    assert launch.inner_text() == "Launch 2 runs: 8 calls"
    page.get_by_label("Clarity v1").uncheck()
    page.wait_for_function(
        "() => document.querySelector('#run-estimate button.primary')?.innerText === 'Launch 1 run: 4 calls'"
    )
    page.get_by_label("Quality v1").uncheck()
    page.locator("#run-estimate .error").filter(has_text="Pick at least one rubric version.").wait_for()


def test_the_launch_button_waits_for_the_estimate_of_the_last_change(
    browser_page, live_server, project, monkeypatch
):
    """Seen in a browser: boxes unticked quickly, then Launch pressed before the last estimate came, launched
    the runs of an earlier estimate, one of them unticked (on a paid model, money nobody chose to spend)."""
    import time

    dataset = factories.make_dataset(project, items=4)
    versions = [factories.make_rubric(project=project, name=name) for name in ("Clarity", "Quality")]
    evaluation = factories.make_evaluation(project, dataset, versions)
    Judge.objects.create(project=project, name="only judge", base_url="https://api.openai.com/v1", model="m")
    estimate_runs = services.estimate_runs
    slow = {"seconds": 0.0}

    def estimate_slowly(**kwargs):
        time.sleep(slow["seconds"])  # the live server answers each request in its own thread
        return estimate_runs(**kwargs)

    monkeypatch.setattr(services, "estimate_runs", estimate_slowly)
    page = browser_page
    log_in(page, live_server, "rita", f"/p/{project.slug}/evaluations/{evaluation.pk}/judge-runs/new/")
    launch = page.locator("#run-estimate button.primary")
    launch.wait_for()
    assert launch.inner_text() == "Launch 2 runs: 8 calls" and launch.is_enabled()
    slow["seconds"] = 1.5
    page.get_by_label("Clarity v1").uncheck()
    assert launch.is_disabled()  # the estimate of both is no longer what the boxes show
    page.wait_for_function(
        "() => document.querySelector('#run-estimate button.primary')?.innerText === 'Launch 1 run: 4 calls'"
    )
    assert launch.is_enabled()
    launched = page.locator("#run-estimate input[name=rubric_versions]").evaluate_all(
        "els => els.map(e => e.value)"
    )
    assert launched == [str(versions[1].pk)]
