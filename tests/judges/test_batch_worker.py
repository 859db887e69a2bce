"""Batch runs through a real Celery worker and the simulated model's Batch API over HTTP: the poll task
chain submits, polls and collects; cancel and resume come from the run page."""

from dataclasses import replace

import pytest
from django.urls import reverse

from evaluations.models import Rating
from judges import batch, services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import JudgeBatch, JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import TEST_KEY_DECLARED, TEST_KEY_ENV, make_judge
from tests.workers import start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def worker(django_db_setup):
    """One worker for the module, polling batches every 0.1 s."""
    patcher = pytest.MonkeyPatch()
    patcher.setenv("JUDGE_BATCH_POLL_SECONDS", "0.1")
    patcher.setenv(TEST_KEY_ENV, "test-key")
    patcher.setenv("CONCORD_JUDGE_CREDENTIALS", TEST_KEY_DECLARED)
    process = start_worker(concurrency=4, ready_timeout=90)
    try:
        yield process
    finally:
        stop_worker(process)
        patcher.undo()


@pytest.fixture
def no_enqueue():
    """Here the poll really goes through the broker to the worker."""
    return None


def start(config: FakeConfig) -> FakeLLM:
    return FakeLLM(config).start(stop_after=120)


def launch(project, server, *, items: int, **judge_fields) -> JudgeRun:
    version = factories.make_rubric(project=project, name="Batch quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=items), [version])
    judge = make_judge(project, server, capabilities={"batch": True}, **judge_fields)
    return services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version, batch=True)


def ended(run: JudgeRun) -> bool:
    run.refresh_from_db()
    return run.batch_poller is None and not batch.open_batches(run)


def test_a_batch_run_completes_through_a_real_worker_and_rates_every_item_once(worker, project):
    server = start(FakeConfig(latency_ms=2))
    try:
        run = launch(project, server, items=8, samples=2, temperature=1.0)
        wait_for(lambda: ended(run), what="the batch run")
    finally:
        server.stop()
    assert run.status == JudgeRun.Status.DONE, run.error
    assert run.calls.filter(status=JudgeCall.Status.DONE).count() == 16
    assert Rating.objects.filter(rater=run.rater).count() == 8
    for rating in Rating.objects.filter(rater=run.rater):
        assert len(rating.details["samples"]) == 2
    remote = run.batches.get()
    assert (remote.status, remote.requests, remote.completed) == ("completed", 16, 16)
    assert len(server.batches.batches) == 1


def test_a_redelivered_poll_message_neither_submits_twice_nor_rates_twice(worker, project):
    server = start(FakeConfig(latency_ms=2))
    try:
        run = launch(project, server, items=5)
        first = str(JudgeRun.objects.get(pk=run.pk).batch_poller)
        batch.send_poll(run.pk, first)  # the broker delivers the first poll a second time
        batch.send_poll(run.pk, first)
        wait_for(lambda: ended(run), what="the batch run")
    finally:
        server.stop()
    assert run.status == JudgeRun.Status.DONE, run.error
    remotes = [(b.id, b.metadata, b.created_at, b.total) for b in server.batches.batches.values()]
    assert run.batches.count() == 1 and len(server.batches.batches) == 1, (
        remotes,
        list(run.batches.values()),
    )
    assert Rating.objects.filter(rater=run.rater).count() == 5


def test_cancel_on_the_run_page_cancels_the_remote_batch_and_keeps_partial_results(
    worker, project, researcher_client
):
    # Slow enough that the cancel reaches the batch on a loaded machine (30 x 400 ms).
    server = start(FakeConfig(latency_ms=400, batch_concurrency=1))
    try:
        run = launch(project, server, items=30)
        batches = server.batches.batches
        wait_for(lambda: any(b.completed >= 3 for b in batches.values()), what="some answers")
        researcher_client.post(reverse("judge_run_cancel", args=[project.slug, run.pk]))
        wait_for(lambda: ended(run), what="the cancelled batch to be collected")
        assert [b.status for b in batches.values()] == ["cancelled"]
        done = run.calls.filter(status=JudgeCall.Status.DONE).count()
        assert 3 <= done < 30
        assert run.calls.filter(status=JudgeCall.Status.PENDING, batch__isnull=True).count() == 30 - done
        assert run.status == JudgeRun.Status.CANCELLED
        assert Rating.objects.filter(rater=run.rater).count() == done
        page = researcher_client.get(
            reverse("judge_run_detail", args=[project.slug, run.pk])
        ).content.decode()
        assert "cancelled" in page and "Resume as a new batch" in page and "Resume as live calls" in page
        server.config = replace(server.config, latency_ms=2, batch_concurrency=8)  # the rest, quickly
        researcher_client.post(reverse("judge_run_resume", args=[project.slug, run.pk]), {"mode": "batch"})
        wait_for(lambda: ended(run) and run.status != JudgeRun.Status.RUNNING, what="the resumed run")
    finally:
        server.stop()
    assert run.status == JudgeRun.Status.DONE, run.error
    assert list(run.batches.values_list("status", flat=True)) == ["cancelled", "completed"]
    assert Rating.objects.filter(rater=run.rater).count() == 30


def test_an_expired_batch_keeps_its_results_and_resuming_as_live_calls_finishes(
    worker, project, researcher_client
):
    server = start(FakeConfig(latency_ms=2, batch_expire_after=4, batch_concurrency=1))
    try:
        run = launch(project, server, items=7)
        wait_for(lambda: ended(run), what="the expired batch")
        assert run.status == JudgeRun.Status.FAILED and "expired" in run.error
        assert run.batches.get().status == JudgeBatch.Status.EXPIRED
        assert run.calls.filter(status=JudgeCall.Status.DONE).count() == 4
        page = researcher_client.get(
            reverse("judge_run_detail", args=[project.slug, run.pk])
        ).content.decode()
        assert "expired" in page and "3 call(s) are pending" in page
        researcher_client.post(reverse("judge_run_resume", args=[project.slug, run.pk]), {"mode": "live"})
        wait_for(lambda: JudgeRun.objects.get(pk=run.pk).status == JudgeRun.Status.DONE, what="the live rest")
    finally:
        server.stop()
    run.refresh_from_db()
    assert run.mode == JudgeRun.Mode.LIVE
    assert Rating.objects.filter(rater=run.rater).count() == 7
    assert run.calls.filter(batch__isnull=False).count() == 4  # answered by the batch, at its price
