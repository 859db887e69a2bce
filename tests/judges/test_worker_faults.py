"""Judge runs through a real Celery worker process, with the faults a long run meets.

Each run is small (20-60 calls at 40-150 ms) so the whole module stays well under a minute.
"""

import os
import subprocess
import sys
import time

import pytest
from celery import Celery

from evaluations.models import Rating
from judges import services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import make_judge
from tests.workers import ROOT, start_worker, stop_worker, worker_environment

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

OWN_REDIS_PORT = 8479


@pytest.fixture
def no_enqueue():
    """Here lanes really go through the broker to the worker."""
    return None


@pytest.fixture
def server():
    fake = FakeLLM(FakeConfig(latency_ms=150, retry_after=0.05, timeout_sleep=5)).start(stop_after=300)
    yield fake
    fake.stop()


def setup_run(project, server, *, items, **judge_fields):
    version = factories.make_rubric(project=project, name="Quality")
    dataset = factories.make_dataset(project, items=items)
    evaluation = factories.make_evaluation(project, dataset, [version], name="Fault study")
    judge = make_judge(project, server, concurrency=4, **judge_fields)
    return judge, evaluation, version


def wait_for(predicate, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run_finished(run):
    run.refresh_from_db()
    return not run.is_active


def done_calls(run) -> int:
    return run.calls.filter(status=JudgeCall.Status.DONE).count()


def assert_each_call_once(run, items: int):
    calls = run.calls.all()
    assert calls.count() == run.total_calls
    assert calls.filter(status=JudgeCall.Status.DONE).count() == run.total_calls
    assert Rating.objects.filter(rater=run.rater).count() == items
    keys = set(calls.values_list("item_id", "sample", "swapped"))
    assert len(keys) == run.total_calls


def test_killed_worker_run_completes_after_a_new_worker_and_resume_each_call_once(project, server):
    judge, evaluation, version = setup_run(project, server, items=40)
    worker = start_worker(concurrency=8)
    try:
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
        wait_for(lambda: done_calls(run) >= 8, timeout=20, what="the first calls")
        stop_worker(worker, kill=True)
        assert done_calls(run) < 40
        worker = start_worker(concurrency=8)
        services.resume_run(run=run)
        wait_for(lambda: run_finished(run), timeout=30, what="the run to finish")
    finally:
        stop_worker(worker)
    assert run.status == JudgeRun.Status.DONE
    assert_each_call_once(run, 40)
    lost_in_flight = server.stats.completions - 40
    assert 0 <= lost_in_flight <= 4  # only calls cut off mid-request were asked twice


def test_transient_faults_and_bad_content_are_handled_by_a_real_worker(project, celery_worker_process):
    fake = FakeLLM(FakeConfig(latency_ms=40, retry_after=0.05, timeout_sleep=3)).start(stop_after=120)
    faults = "429,500,timeout,malformed,empty,refusal,truncated_json"
    try:
        judge, evaluation, version = setup_run(
            project, fake, items=40, model=f"fake-judge?fault={faults}&fail_rate=0.5", request_timeout=0.5
        )
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
        wait_for(lambda: run_finished(run), timeout=40, what="the run to finish")
    finally:
        fake.stop()
    assert run.status == JudgeRun.Status.DONE, run.error
    assert_each_call_once(run, 40)
    assert fake.stats.faults["429"] + fake.stats.faults["500"] + fake.stats.faults["timeout"] > 0
    content_faults = sum(fake.stats.faults[f] for f in ("empty", "refusal", "truncated_json"))
    parse_failures = Rating.objects.filter(rater=run.rater, parse_failed=True)
    assert parse_failures.count() == content_faults > 0
    assert not parse_failures.exclude(value="").exists()
    assert run.calls.filter(attempts__gt=1).exists()


def test_wrong_api_key_stops_the_run_after_the_first_call(project, celery_worker_process):
    fake = FakeLLM(FakeConfig(latency_ms=20, api_key="the-right-key")).start(stop_after=60)
    try:
        judge, evaluation, version = setup_run(project, fake, items=30)
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
        wait_for(lambda: run_finished(run), timeout=20, what="the run to stop")
        time.sleep(0.5)  # anything still queued would show up in the server's count now
    finally:
        fake.stop()
    assert run.status == JudgeRun.Status.FAILED
    assert run.error.startswith("authentication failed")
    assert fake.stats.requests == 1
    assert not Rating.objects.filter(rater=run.rater).exists()


def start_own_redis() -> subprocess.Popen:
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(OWN_REDIS_PORT),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    probe = Celery("probe", broker=f"redis://127.0.0.1:{OWN_REDIS_PORT}/0")
    wait_for(lambda: _redis_answers(probe), timeout=10, what="our own redis-server")
    return process


def _redis_answers(app) -> bool:
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


def test_run_completes_when_redis_restarts_mid_run(project, server):
    """Our own redis-server (the shared one is never touched): broker and rate limits both live there."""
    url = f"redis://127.0.0.1:{OWN_REDIS_PORT}/0"
    judge, evaluation, version = setup_run(project, server, items=60, requests_per_minute=60000)
    env = {**worker_environment(), "CELERY_BROKER_URL": url, "REDIS_URL": url}
    redis_server = start_own_redis()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--loglevel",
            "ERROR",
            "--pool",
            "threads",
            "--concurrency",
            "8",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"judges-redis-{os.getpid()}@%h",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    command = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "run_judge",
            "--evaluation",
            "Fault study",
            "--rubric",
            "Quality",
            "--judge",
            judge.name,
            "--wait",
            "--interval",
            "0.5",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: JudgeRun.objects.exists(), timeout=20, what="run_judge to launch")
        run = JudgeRun.objects.get()
        wait_for(lambda: done_calls(run) >= 10, timeout=30, what="the first calls")
        redis_server.terminate()
        redis_server.wait(10)
        time.sleep(1.0)
        redis_server = start_own_redis()
        output, errors = command.communicate(timeout=60)
    finally:
        for process in (command, worker, redis_server):
            if process.poll() is None:
                os.killpg(process.pid, 9) if process is not command else process.kill()
                process.wait(10)
    assert command.returncode == 0, errors
    assert "done: 60/60 done" in output
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE
    assert_each_call_once(run, 60)
