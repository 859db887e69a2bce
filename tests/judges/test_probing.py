"""The connection test finds what a judge's endpoint accepts and stores it; launches and runs use it."""

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core.exceptions import ValidationError

from judges import services
from judges.models import Judge
from judges.probing import test_connection as probe_connection
from tests import factories
from tests.judges.conftest import make_judge


def test_probing_a_reasoning_model_finds_max_completion_tokens_no_temperature_no_logprobs(project, serve):
    server = serve("openai-reasoning")
    judge = make_judge(project, server, model="fake-o4", temperature=0.0)
    result = probe_connection(judge=judge)
    assert result.ok, result.message
    judge.refresh_from_db()
    caps = judge.capabilities
    assert caps["token_limit"] == "max_completion_tokens" and caps["temperature"] is False
    assert caps["logprobs"] is False and caps["json_schema"] is True and caps["n"] is True
    assert judge.probed_at is not None
    assert server.stats.requests <= 9  # models list + 2 refused + base + 3 probes + GET /batches, /props


def test_probing_anthropic_finds_ignored_logprobs_and_schema_and_refused_n(project, serve):
    judge = make_judge(project, serve("anthropic-compat"), model="fake-claude", endpoint="anthropic")
    assert probe_connection(judge=judge).ok
    judge.refresh_from_db()
    assert judge.capabilities["logprobs"] is False
    assert judge.capabilities["json_schema"] is False and judge.capabilities["n"] is False


def test_probing_vllm_finds_everything(project, serve):
    judge = make_judge(project, serve("vllm"), model="fake-qwen", endpoint="vllm")
    assert probe_connection(judge=judge).ok
    judge.refresh_from_db()
    caps = judge.capabilities
    assert caps["token_limit"] == "max_tokens" and caps["logprobs"] and caps["json_schema"] and caps["n"]


def test_azure_judge_connects_through_deployment_urls_and_the_api_key_header(
    project, serve, declare_credential
):
    server = serve("azure", api_key="azure-secret")
    declare_credential("AZURE_TEST_KEY", "azure-secret")
    judge = make_judge(project, server, model="fake-gpt4o", endpoint="azure", api_key_env="AZURE_TEST_KEY")
    result = probe_connection(judge=judge)
    assert result.ok, result.message


def test_a_logprob_judge_is_refused_at_launch_when_its_endpoint_has_no_logprobs(project, serve):
    judge = make_judge(project, serve("openai-reasoning"), model="fake-o4", logprobs=True)
    probe_connection(judge=judge)
    judge.refresh_from_db()
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    with pytest.raises(ValidationError, match="returns no logprobs .*turn logprob scoring off"):
        services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    assert not judge.runs.exists()


def test_documented_families_without_logprobs_are_refused_before_any_test(project, serve):
    judge = make_judge(
        project, serve("anthropic-compat"), model="fake-claude", endpoint="anthropic", logprobs=True
    )
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    with pytest.raises(ValidationError, match="its documentation says so"):
        services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)


def test_a_reasoning_model_with_too_small_a_limit_is_named_plainly(project, serve):
    judge = make_judge(project, serve("openai-reasoning"), model="fake-o4", max_tokens=50)
    result = probe_connection(judge=judge)
    assert not result.ok and "too small for a reasoning model" in result.message
    judge.refresh_from_db()
    assert judge.capabilities == {} and judge.probed_at is None  # nothing half-stored


def start_http(status: int, content_type: str, body: bytes) -> HTTPServer:
    class Page(BaseHTTPRequestHandler):
        def _send(self):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = _send

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def other_server_judge(project, server: HTTPServer) -> Judge:
    return Judge.objects.create(
        project=project,
        name=f"not an LLM on {server.server_port}",
        base_url=f"http://127.0.0.1:{server.server_port}/v1",
        model="gpt-4o",
        api_key_env="CONCORD_TEST_JUDGE_KEY",
    )


def test_a_base_url_that_is_not_an_openai_compatible_api_is_named(project):
    server = start_http(200, "text/html", b"<html><body>Welcome to nginx</body></html>")
    try:
        result = probe_connection(judge=other_server_judge(project, server))
    finally:
        server.shutdown()
    assert not result.ok
    assert "is not an OpenAI-compatible API" in result.message and "Welcome to nginx" in result.message


def test_an_error_body_in_an_unknown_shape_is_named_in_one_sentence(project):
    server = start_http(400, "application/json", b'{"problem": "field required"}')
    try:
        result = probe_connection(judge=other_server_judge(project, server))
    finally:
        server.shutdown()
    assert not result.ok
    assert result.message == (
        'request refused (400): an error body Concord does not recognise: \'{"problem": "field required"}\''
    )


def test_a_fastapi_detail_body_is_read_as_text_or_as_its_validation_errors(project):
    """FastAPI (llama-cpp-python's server) answers {"detail": "..."} or {"detail": [{"loc", "msg"}]}."""
    server = start_http(400, "application/json", b'{"detail": "field required"}')
    try:
        result = probe_connection(judge=other_server_judge(project, server))
    finally:
        server.shutdown()
    assert result.message == "request refused (400): field required"
    body = b'{"detail": [{"type": "missing", "loc": ["body", "messages"], "msg": "Field required"}]}'
    server = start_http(422, "application/json", body)
    try:
        judge = other_server_judge(project, server)
        result = probe_connection(judge=judge)
    finally:
        server.shutdown()
    assert result.message == "request refused (422): validation error: body.messages: Field required"


def test_an_expired_key_is_named(project, serve, declare_credential):
    server = serve("openai-chat", api_key="the-current-key")
    declare_credential("OLD_KEY", "sk-expired-0000000000")
    judge = make_judge(project, server, api_key_env="OLD_KEY")
    result = probe_connection(judge=judge)
    assert not result.ok and "refused the API key" in result.message
    assert "sk-expired-0000000000" not in result.message


def test_gemini_and_anthropic_error_bodies_give_their_message(serve):
    from judges import client

    for profile, expected in (
        ("gemini-compat", "models/gemini-pro is not found"),
        ("anthropic-compat", "model: gemini-pro"),
    ):
        server = serve(profile)
        with pytest.raises(client.PermanentError, match=expected):
            client.chat(
                base_url=server.base_url,
                api_key="x",
                timeout=5,
                request={"model": "gemini-pro", "messages": [{"role": "user", "content": "hi"}]},
            )


def test_the_judge_page_shows_what_the_connection_test_found(researcher_client, project, serve):
    from django.urls import reverse

    judge = make_judge(project, serve("openai-reasoning"), model="fake-o4", temperature=0.0)
    page = researcher_client.get(reverse("judge_detail", args=[project.slug, judge.pk])).content.decode()
    assert "Not tested yet" in page
    tested = researcher_client.post(
        reverse("judge_test_connection", args=[project.slug, judge.pk])
    ).content.decode()
    assert "connected" in tested and "output limit sent as <code>max_completion_tokens</code>" in tested
    assert "temperature not sent" in tested and "logprobs no" in tested
    assert "max_tokens refused" in tested  # what the probe changed, in the endpoint's words


def test_a_person_tests_one_connection_at_a_time_in_any_project(
    researcher_client, project, researcher, serve
):
    # Each test holds a web server thread for as long as the endpoint takes (its probes bounded one by one):
    # a second one while the first runs is refused, until the first ends or its lease runs out.
    from datetime import timedelta

    from django.urls import reverse
    from django.utils import timezone

    from projects.models import Membership

    judge = make_judge(project, serve("openai-reasoning"), model="fake-o4", temperature=0.0)
    url = reverse("judge_test_connection", args=[project.slug, judge.pk])
    mine = Membership.objects.filter(project=project, user=researcher)
    mine.update(connection_test_since=timezone.now())  # a test of theirs still running
    busy = researcher_client.post(url).content.decode()
    assert "still running (one at a time)" in busy and "connected" not in busy
    mine.update(connection_test_since=timezone.now() - timedelta(minutes=10))  # a test that died long ago
    assert "connected" in researcher_client.post(url).content.decode()
    assert mine.get().connection_test_since is None  # given back when the test ended
    assert "connected" in researcher_client.post(url).content.decode()

    # Nor one in each of their projects at once: a member of ten projects would hold ten threads.
    other = factories.make_project(name="Other study", researchers=[researcher])
    Membership.objects.filter(project=other, user=researcher).update(connection_test_since=timezone.now())
    assert "in this project or another, is still running" in researcher_client.post(url).content.decode()


def test_a_connection_test_leaves_no_chat_connection_open_in_its_web_server_thread(project, serve):
    from judges import client

    judge = make_judge(project, serve("any"))
    assert probe_connection(judge=judge).ok
    assert all(getattr(endpoint.local, "pool", None) is None for endpoint in client._endpoints.values())
