"""Judge runs through a real Celery worker process, with the faults a long run meets.

The module runs on a redis-server of its own (127.0.0.1:8479, no persistence) as broker and rate-limit
store, so restarting Redis never touches the shared server. One worker serves the module; the kill test
replaces it. Runs are small (30-60 calls at 20-150 ms) to keep the module well under a minute of work.
"""

import os
import subprocess
import time

import pytest
from django.core.management import call_command

from evaluations.models import Rating
from judges import services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import TEST_KEY_DECLARED, TEST_KEY_ENV, make_judge
from tests.workers import start_worker, stop_worker, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# One port per pytest-xdist worker (gw0 -> 8479, gw1 -> 8478, ...), all within judges' range 8400-8499.
OWN_REDIS_PORT = 8479 - int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 20
OWN_REDIS_URL = f"redis://127.0.0.1:{OWN_REDIS_PORT}/0"


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
    import redis

    probe = redis.Redis.from_url(OWN_REDIS_URL, socket_connect_timeout=0.5)
    wait_for(lambda: _answers(probe), timeout=10, what="our own redis-server")
    return process


def _answers(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _use_broker(app, url: str) -> None:
    """Point this test process's Celery app at `url` (publishing and pings)."""
    app.conf.broker_url = url
    app._pool = None
    if "amqp" in app.__dict__:
        app.__dict__["amqp"]._producer_pool = None


class Workers:
    def __init__(self):
        self.current: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        self.current = start_worker(concurrency=8)
        return self.current


@pytest.fixture(scope="module")
def own_redis(django_db_setup):
    from config.celery import app

    previous = app.conf.broker_url
    patcher = pytest.MonkeyPatch()
    patcher.setenv("CELERY_BROKER_URL", OWN_REDIS_URL)  # the worker's environment
    patcher.setenv("REDIS_URL", OWN_REDIS_URL)
    patcher.setenv(TEST_KEY_ENV, "test-key")
    patcher.setenv("CONCORD_JUDGE_CREDENTIALS", TEST_KEY_DECLARED)
    patcher.setenv("JUDGE_STALE_SECONDS", "2")  # a starting worker takes over runs silent for 2 s
    server = start_own_redis()
    _use_broker(app, OWN_REDIS_URL)
    holder = {"server": server}
    try:
        yield holder
    finally:
        _use_broker(app, previous)
        patcher.undo()
        holder["server"].terminate()
        holder["server"].wait(10)


@pytest.fixture(scope="module")
def workers(own_redis):
    holder = Workers()
    holder.start()
    yield holder
    if holder.current is not None:
        stop_worker(holder.current)


@pytest.fixture
def no_enqueue():
    """Here lanes really go through the broker to the worker."""
    return None


@pytest.fixture
def server():
    fake = FakeLLM(FakeConfig(latency_ms=150, retry_after=0.05, timeout_sleep=3)).start(stop_after=300)
    yield fake
    fake.stop()


def setup_run(project, server, *, items, **judge_fields):
    version = factories.make_rubric(project=project, name="Quality")
    dataset = factories.make_dataset(project, items=items)
    evaluation = factories.make_evaluation(project, dataset, [version], name="Fault study")
    judge = make_judge(project, server, **{"concurrency": 4, **judge_fields})
    return judge, evaluation, version


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
    assert len(set(calls.values_list("item_id", "sample", "swapped"))) == run.total_calls


def test_transient_faults_and_bad_content_are_handled_by_a_real_worker(project, workers):
    fake = FakeLLM(FakeConfig(latency_ms=30, retry_after=0.05, timeout_sleep=3)).start(stop_after=120)
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


def test_wrong_api_key_stops_the_run_after_the_first_call(project, workers):
    fake = FakeLLM(FakeConfig(latency_ms=20, api_key="the-right-key")).start(stop_after=60)
    try:
        judge, evaluation, version = setup_run(project, fake, items=30)
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
        wait_for(lambda: run_finished(run), timeout=20, what="the run to stop")
        time.sleep(0.3)  # anything still queued would reach the server now
    finally:
        fake.stop()
    assert run.status == JudgeRun.Status.FAILED
    assert run.error.startswith("authentication failed")
    assert fake.stats.requests == 1
    assert not Rating.objects.filter(rater=run.rater).exists()


def test_run_judge_wait_prints_progress_and_exits_zero_when_done(project, workers, capsys):
    fake = FakeLLM(FakeConfig(latency_ms=20)).start(stop_after=60)
    try:
        judge, _, _ = setup_run(project, fake, items=12)
        call_command(
            "run_judge",
            "--evaluation",
            "Fault study",
            "--rubric",
            "Quality@1",
            "--judge",
            judge.name,
            "--wait",
            "--interval",
            "0.2",
        )
    finally:
        fake.stop()
    output = capsys.readouterr().out
    assert "12 calls" in output and "done: 12/12 done" in output
    assert JudgeRun.objects.get().status == JudgeRun.Status.DONE


def test_run_judge_wait_exits_non_zero_when_the_run_fails(project, workers, capsys):
    fake = FakeLLM(FakeConfig(latency_ms=20, api_key="other")).start(stop_after=60)
    try:
        judge, _, _ = setup_run(project, fake, items=5)
        with pytest.raises(SystemExit) as exit_info:
            call_command(
                "run_judge",
                "--evaluation",
                "Fault study",
                "--rubric",
                "Quality",
                "--judge",
                judge.name,
                "--wait",
                "--interval",
                "0.2",
            )
    finally:
        fake.stop()
    assert exit_info.value.code == 1
    assert "authentication failed" in capsys.readouterr().err


def test_killed_worker_run_completes_when_a_new_worker_starts_each_call_once(project, workers, server):
    judge, evaluation, version = setup_run(project, server, items=40)
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    wait_for(lambda: done_calls(run) >= 8, timeout=20, what="the first calls")
    stop_worker(workers.current, kill=True)
    assert done_calls(run) < 40
    time.sleep(2.1)  # the run's heartbeat goes stale (JUDGE_STALE_SECONDS=2 here)
    workers.start()  # no resume: the new worker takes the run over by itself
    wait_for(lambda: run_finished(run), timeout=30, what="the run to finish")
    assert run.status == JudgeRun.Status.DONE
    assert_each_call_once(run, 40)
    asked_twice = server.stats.completions - 40
    # Only calls the kill cut off were asked again: per lane (concurrency 4) at most the request in flight and
    # the one answered but not yet stored by the lane's background finish.
    assert 0 <= asked_twice <= 2 * 4


def test_run_completes_when_redis_restarts_mid_run(project, workers, own_redis, server):
    """Broker and rate limits both live on our own redis-server, which is stopped and started again.

    Last in the module: with kombu 5.7 the worker's consumer hits an AttributeError while closing the
    lost channel and the worker shuts down warmly, so its running lanes finish the run and then it
    exits (a supervisor would start it again). The run completing is what this test holds.
    """
    judge, evaluation, version = setup_run(project, server, items=60, requests_per_minute=60000)
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    wait_for(lambda: done_calls(run) >= 10, timeout=30, what="the first calls")
    own_redis["server"].terminate()
    own_redis["server"].wait(10)
    time.sleep(1.0)
    own_redis["server"] = start_own_redis()
    wait_for(lambda: run_finished(run), timeout=40, what="the run to finish")
    assert run.status == JudgeRun.Status.DONE, run.error
    assert_each_call_once(run, 60)
