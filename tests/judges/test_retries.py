"""Calls that meet a transient error wait for their retry beside their lane, still claimed: the judge's
concurrency counts requests in flight, so the lane sends other calls meanwhile (judges.calls.Retries)."""

import datetime
import re
import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from evaluations.models import Rating
from judges import calls, client, services
from judges.calls import MAX_WAITING_CALLS, LaneContext
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import make_judge, run_to_end


class RecordingLLM(FakeLLM):
    """The simulated model, recording which item (factories' "Hello number N") each chat request was
    for; the first request for each item of `rate_limited` gets a 429 with Retry-After `retry_after`."""

    def __init__(self, *, retry_after: float, rate_limited) -> None:
        super().__init__(FakeConfig(latency_ms=0, retry_after=retry_after))
        self.rate_limited = set(rate_limited)
        self.items: list[int] = []

    def _fault_for(self, body: bytes, config: FakeConfig) -> str | None:
        found = re.search(rb"Hello number (\d+)", body)
        assert found is not None
        item = int(found[1])
        self.items.append(item)
        return "429" if item in self.rate_limited and self.items.count(item) == 1 else None


@pytest.fixture
def recording():
    """Start RecordingLLM(retry_after=..., rate_limited=...); stopped afterwards."""
    servers: list[RecordingLLM] = []

    def start(**options) -> RecordingLLM:
        server = RecordingLLM(**options)
        server.start(stop_after=120)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def setup_evaluation(project, items: int):
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=items), [version])
    return version, evaluation


def calls_by_item(run: JudgeRun) -> list[JudgeCall]:
    return list(run.calls.order_by("item__position"))


def test_a_call_waiting_for_its_retry_leaves_the_only_slot_to_the_next_call(project, recording):
    server = recording(retry_after=1.0, rate_limited={0})
    version, evaluation = setup_evaluation(project, items=2)
    run = run_to_end(make_judge(project, server, concurrency=1), evaluation, version)
    # The second call went out, and was answered, before the first call's retry.
    assert server.items == [0, 1, 0]
    first, second = calls_by_item(run)
    assert first.finished_at is not None and second.finished_at is not None
    assert second.finished_at < first.finished_at
    assert (first.attempts, second.attempts) == (2, 1)
    assert run.status == JudgeRun.Status.DONE
    assert Rating.objects.filter(rater=run.rater).count() == 2


def test_a_lane_keeps_only_a_few_calls_waiting_then_waits_itself(project, recording):
    server = recording(retry_after=0.3, rate_limited=range(6))
    version, evaluation = setup_evaluation(project, items=6)
    run = run_to_end(make_judge(project, server, concurrency=1), evaluation, version)
    # Every first request is refused: the lane claims MAX_WAITING_CALLS calls, then sends one of them again.
    assert server.items[:MAX_WAITING_CALLS] == [*range(MAX_WAITING_CALLS)]
    assert server.items[MAX_WAITING_CALLS] in range(MAX_WAITING_CALLS)
    assert sorted(server.items) == sorted([*range(6)] * 2)
    assert [call.attempts for call in calls_by_item(run)] == [2] * 6
    assert run.status == JudgeRun.Status.DONE
    assert Rating.objects.filter(rater=run.rater).count() == 6


def test_llm_max_attempts_still_caps_a_call_sent_again_from_the_waiting_list(project, fake_llm, settings):
    settings.LLM_MAX_ATTEMPTS = 3
    version, evaluation = setup_evaluation(project, items=3)
    judge = make_judge(project, fake_llm, model="fake-judge?fault=429&fault_attempts=0&retry_after=0.01")
    run = run_to_end(judge, evaluation, version)
    for call in calls_by_item(run):
        assert call.status == JudgeCall.Status.FAILED and call.attempts == 3
        assert call.error.startswith("gave up after 3 attempts: rate limited (429)")
    assert run.status == JudgeRun.Status.FAILED and "3 call(s) failed" in run.error
    assert not Rating.objects.filter(rater=run.rater).exists()


@pytest.mark.django_db(transaction=True)
def test_a_run_cancelled_while_a_call_waits_gives_the_call_back_at_once(project, recording, monkeypatch):
    # The lane claims and stores on its own thread, so no helper thread keeps a connection to the test
    # database, which is dropped at the end.
    monkeypatch.setattr("judges.db.helper_threads_see_our_writes", lambda: False)
    server = recording(retry_after=30.0, rate_limited={0})
    version, evaluation = setup_evaluation(project, items=2)
    run = services.launch_run(
        judge=make_judge(project, server, concurrency=1), evaluation=evaluation, rubric_version=version
    )

    def work() -> None:
        try:
            services.work_lane(run_id=run.pk, lane=0)
        finally:
            connection.close()

    lane = threading.Thread(target=work)
    lane.start()
    deadline = time.monotonic() + 10
    while not Rating.objects.filter(rater=run.rater).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.items == [0, 1]  # the second call was answered while the first waits 30 s
    assert services.cancel_run(run=run)
    lane.join(timeout=5)  # the lane looks at the run's status while it waits
    assert not lane.is_alive()
    first, second = calls_by_item(run)
    assert (first.status, first.claim_token) == (JudgeCall.Status.PENDING, None)
    assert second.status == JudgeCall.Status.DONE
    assert server.items == [0, 1]  # the retry never went out

    services.resume_run(run=run)
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE
    assert server.items == [0, 1, 0]
    assert Rating.objects.filter(rater=run.rater).count() == 2


def test_a_retry_after_of_a_day_is_waited_a_minute_at_most_and_within_the_claims_lease(
    project, fake_llm, evaluation_setup
):
    evaluation, version = evaluation_setup
    run = services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )
    ctx = LaneContext.load(run)
    waits = [calls.backoff_seconds(1, 86_400.0) for _ in range(50)]
    assert all(calls.RETRY_AFTER_CAP_SECONDS <= wait <= 1.2 * calls.RETRY_AFTER_CAP_SECONDS for wait in waits)
    every_wait = (settings.LLM_MAX_ATTEMPTS - 1) * max(waits)
    every_request = settings.LLM_MAX_ATTEMPTS * ctx.params.request_timeout
    assert every_wait + every_request < ctx.lease_seconds


def test_retry_after_is_read_as_seconds_milliseconds_or_an_http_date():
    from email.utils import format_datetime

    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    assert client._retry_after({"retry-after": "7"}) == 7.0
    assert client._retry_after({"retry-after-ms": "250", "retry-after": "7"}) == 0.25
    from_date = client._retry_after({"retry-after": format_datetime(later, usegmt=True)})
    assert from_date is not None and 27 <= from_date <= 30
    assert client._retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # already past
    assert client._retry_after({"retry-after": "soon"}) is None


class _Lane:
    """What `services.do_calls` asks of a lane's context and claims ahead: the calls it holds, in order."""

    def __init__(self, run_id: int, held: list[str]) -> None:
        self.run_id = run_id
        self.held = [calls.Claim(call=name, token=None) for name in held]  # type: ignore[arg-type]

    def stopped(self) -> bool:
        return False

    def in_hand(self):
        return self.held.pop(0) if self.held else None

    def next(self):
        return self.in_hand()

    def prefetch(self, sending) -> None:
        pass


def test_a_free_lane_sends_another_lanes_call_once_its_retry_is_due(monkeypatch):
    """Near a run's end: lane A's call "x" is refused and must wait 0.1 s while A sends its slow call "y";
    lane B has nothing left, so it waits for x's retry and sends it, instead of x waiting behind y."""
    sent: list[tuple[str, str, float]] = []
    started = time.monotonic()

    def process_call(ctx, claim):
        sent.append((threading.current_thread().name, claim.call, time.monotonic() - started))
        if claim.call == "x" and claim.attempts == 0:
            claim.attempts = 1
            claim.not_before = time.monotonic() + 0.1
            return calls.Outcome.WAITING
        if claim.call == "y":
            time.sleep(0.5)
        return calls.Outcome.DONE

    monkeypatch.setattr(services, "process_call", process_call)
    done: dict[str, int] = {}

    def lane(name: str, held: list[str], delay: float) -> None:
        time.sleep(delay)
        ctx = _Lane(run_id=-1, held=held)
        with calls.run_retries(-1) as retries:
            done[name] = services.do_calls(ctx, ctx, retries, first_lane=False)  # type: ignore[arg-type]

    lanes = [
        threading.Thread(target=lane, args=("A", ["x", "y"], 0.0), name="A"),
        threading.Thread(target=lane, args=("B", [], 0.02), name="B"),
    ]
    for thread in lanes:
        thread.start()
    for thread in lanes:
        thread.join(timeout=10)
    assert [(lane, call) for lane, call, _ in sent] == [("A", "x"), ("A", "y"), ("B", "x")]
    retried_at = sent[2][2]
    assert 0.1 <= retried_at < 0.4  # not after y's 0.5 s
    assert done == {"A": 1, "B": 1}
    assert calls._retries == {}  # the last lane to leave took the run's waiting list away


def test_the_waiting_list_holds_a_few_calls_per_lane_and_the_last_lane_gives_back_what_waits():
    given_back: list[str] = []

    class Held(calls.Claim):
        def release(self) -> None:
            given_back.append(self.call)  # type: ignore[arg-type]

    with calls.run_retries(-2) as first:
        with calls.run_retries(-2) as second:
            assert first is second and first.lanes == 2
            for n in range(2 * MAX_WAITING_CALLS - 1):
                first.add(Held(call=f"c{n}", token=None, not_before=time.monotonic() + 60))  # type: ignore[arg-type]
            assert not first.full
            first.add(Held(call="last", token=None, not_before=time.monotonic() + 60))  # type: ignore[arg-type]
            assert first.full
        assert first.lanes == 1 and not given_back  # a lane left; the other may still send them
    assert len(given_back) == 2 * MAX_WAITING_CALLS
    assert -2 not in calls._retries
