"""Real OpenAI-compatible servers for the judge tests, started once per test session on loopback ports:
llama.cpp's llama-server on a tiny generated model, and LiteLLM's proxy in front of it, each behind a
recording proxy. `python3 tests/real_servers/build.py` (bin/test runs it) builds them once per machine."""

import pytest

from tests.real_servers import servers
from tests.real_servers.tiny_model import write_tiny_model

# The model's context, which llama-server's four default slots share: one demo prompt (up to about 4,800
# tokens with its reply) or two at once fit, four at once do not.
MODEL_CONTEXT = 12288
# A server with room for each demo prompt of the Repetitiveness rubric but not for a padded item.
SMALL_CONTEXT = 4096
LITELLM_KEY_ENV = "CONCORD_TEST_LITELLM_KEY"
LITELLM_KEY = "sk-concord-real-server-tests"


@pytest.fixture(scope="session")
def server_logs(tmp_path_factory):
    return tmp_path_factory.mktemp("real-servers")


@pytest.fixture(scope="session")
def tiny_model(server_logs):
    return write_tiny_model(server_logs / "tiny.gguf", context_length=MODEL_CONTEXT)


@pytest.fixture(scope="session")
def llama_server(tiny_model, server_logs):
    """llama-server with its defaults: 4 slots sharing the model's context."""
    server = servers.start_llama_server(tiny_model, logs=server_logs)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_recorder(llama_server):
    """What Concord sends llama-server and what it answers."""
    proxy = servers.RecordingProxy(llama_server.port)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def small_context_server(tiny_model, server_logs):
    server = servers.start_llama_server(
        tiny_model,
        logs=server_logs,
        name="llama-server-small",
        args=("--ctx-size", str(SMALL_CONTEXT), "--parallel", "1"),
    )
    proxy = servers.RecordingProxy(server.port)
    yield proxy
    proxy.stop()
    server.stop()


@pytest.fixture(scope="session")
def litellm_backend_recorder(llama_server):
    """What LiteLLM sends llama-server (its own retries included)."""
    proxy = servers.RecordingProxy(llama_server.port)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def litellm_recorder(litellm_backend_recorder, server_logs):
    """What Concord sends LiteLLM's proxy and what it answers."""
    server = servers.start_litellm(
        litellm_backend_recorder.base_url, master_key=LITELLM_KEY, logs=server_logs
    )
    proxy = servers.RecordingProxy(server.port)
    yield proxy
    proxy.stop()
    server.stop()


@pytest.fixture(autouse=True)
def litellm_key(monkeypatch, settings):
    """LiteLLM's master key is a server credential the operator declared for loopback (here and for the
    worker this test starts)."""
    monkeypatch.setenv(LITELLM_KEY_ENV, LITELLM_KEY)
    monkeypatch.setenv("CONCORD_JUDGE_CREDENTIALS", f"{LITELLM_KEY_ENV}@127.0.0.1")
    settings.CONCORD_JUDGE_CREDENTIALS = {LITELLM_KEY_ENV: ["127.0.0.1"]}
