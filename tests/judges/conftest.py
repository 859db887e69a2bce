"""Judges test fixtures: a simulated model server in a thread, and judges pointed at it."""

import pytest

from judges import services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import Judge, JudgeRun
from tests import factories

TEST_KEY_ENV = "CONCORD_TEST_JUDGE_KEY"
# The test key may go to the simulated models and listeners the tests start on loopback (any port) and to
# the made-up provider of the judge forms' tests.
TEST_KEY_HOSTS = ["127.0.0.1", "api.example.test"]
TEST_KEY_DECLARED = ",".join(f"{TEST_KEY_ENV}@{host}" for host in TEST_KEY_HOSTS)


@pytest.fixture(scope="session")
def fake_llm():
    """A fast simulated model: 5 ms latency, no faults unless a request asks (model suffix)."""
    server = FakeLLM(FakeConfig(latency_ms=5, retry_after=0.05, timeout_sleep=5)).start(stop_after=900)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def judge_key(monkeypatch, settings):
    """TEST_KEY_ENV is a server credential the operator declared for loopback (in this process and for
    workers)."""
    monkeypatch.setenv(TEST_KEY_ENV, "test-key")
    monkeypatch.setenv("CONCORD_JUDGE_CREDENTIALS", TEST_KEY_DECLARED)
    settings.CONCORD_JUDGE_CREDENTIALS = {TEST_KEY_ENV: TEST_KEY_HOSTS}


@pytest.fixture
def declare_credential(monkeypatch, settings):
    """declare_credential(NAME, value, host="127.0.0.1"): the operator declares one more server credential,
    for that host, and sets it."""

    def declare(name: str, value: str, host: str = "127.0.0.1") -> None:
        monkeypatch.setenv(name, value)
        settings.CONCORD_JUDGE_CREDENTIALS = {**settings.CONCORD_JUDGE_CREDENTIALS, name: [host]}
        entries = [
            f"{key}@{where}" for key, hosts in settings.CONCORD_JUDGE_CREDENTIALS.items() for where in hosts
        ]
        monkeypatch.setenv("CONCORD_JUDGE_CREDENTIALS", ",".join(entries))

    return declare


@pytest.fixture(autouse=True)
def no_enqueue(monkeypatch):
    """Unit tests work lanes themselves; lanes a run would enqueue are recorded instead of sent."""
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(
        "judges.services.enqueue_lanes",
        lambda run_id, lanes, queue_stamp: started.extend((run_id, lane) for lane in lanes),
    )
    return started


@pytest.fixture
def serve():
    """Start simulated models with a provider profile: serve("openai-reasoning"); all stopped afterwards."""
    servers: list[FakeLLM] = []

    def start(profile: str, **config) -> FakeLLM:
        server = FakeLLM(FakeConfig(latency_ms=0, profile=profile, **config)).start(stop_after=60)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def judge(project, fake_llm):
    return make_judge(project, fake_llm)


@pytest.fixture
def evaluation_setup(project):
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=3), [version])
    return evaluation, version


def make_judge(project, server, *, name="fake judge", model="fake-judge", **fields) -> Judge:
    defaults = {
        "base_url": server.base_url,
        "api_key_env": TEST_KEY_ENV,
        "concurrency": 1,
        "request_timeout": 2,
    }
    return Judge.objects.create(project=project, name=name, model=model, **{**defaults, **fields})


def run_to_end(judge, evaluation, version) -> JudgeRun:
    """Launch a run and work its first lane here until no call is left."""
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    return run


def judge_form_data(**fields) -> dict:
    """What the new-judge form posts: no key, the endpoint's temperature, one sample; `fields` override."""
    data = {
        "name": "gpt judge",
        "base_url": "https://api.example.test/v1",
        "model": "gpt-4o-mini",
        "credential": "none",
        "temperature": "0",
        "max_tokens": "64",
        "samples": "1",
        "requests_per_minute": "0",
        "tokens_per_minute": "0",
        "concurrency": "1",
        "price_input_per_million": "0",
        "price_output_per_million": "0",
        "request_timeout": "5",
    }
    return {**data, **fields}
