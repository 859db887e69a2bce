"""Judges test fixtures: a simulated model server in a thread, and judges pointed at it."""

import pytest

from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import Judge

TEST_KEY_ENV = "CONCORD_TEST_JUDGE_KEY"


@pytest.fixture(scope="session")
def fake_llm():
    """A fast simulated model: 5 ms latency, no faults unless a request asks (model suffix)."""
    server = FakeLLM(FakeConfig(latency_ms=5, retry_after=0.05, timeout_sleep=5)).start(stop_after=900)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def judge_key(monkeypatch, settings):
    """TEST_KEY_ENV is a server credential the operator declared (in this process and for workers)."""
    monkeypatch.setenv(TEST_KEY_ENV, "test-key")
    monkeypatch.setenv("CONCORD_JUDGE_CREDENTIALS", TEST_KEY_ENV)
    settings.CONCORD_JUDGE_CREDENTIALS = [TEST_KEY_ENV]


@pytest.fixture(autouse=True)
def no_enqueue(monkeypatch):
    """Unit tests work lanes themselves; lanes a run would enqueue are recorded instead of sent."""
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(
        "judges.services.enqueue_lanes",
        lambda run_id, lanes: started.extend((run_id, lane) for lane in lanes),
    )
    return started


def make_judge(project, server, *, name="fake judge", model="fake-judge", **fields) -> Judge:
    defaults = {
        "base_url": server.base_url,
        "api_key_env": TEST_KEY_ENV,
        "concurrency": 1,
        "request_timeout": 2,
    }
    return Judge.objects.create(project=project, name=name, model=model, **{**defaults, **fields})
