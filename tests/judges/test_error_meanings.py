"""Errors are read for what they mean, not only their status: a refused parameter behind a 500 adapts the
run, a repeated server error stops retrying, a prompt too long for the server fails its call alone, an
overloaded server gets fewer requests at once, a dead endpoint stops the run early; the llama.cpp and
llama-cpp-python servers' bodies are the ones they send."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.urls import reverse

from datasets.models import Item
from evaluations.models import Rating
from judges import client, error_meanings, probing, services
from judges.endpoints import build_request, family_for
from judges.fake_llm import FakeConfig, FakeLLM
from judges.fake_profiles import PROFILES, json_schema_validation_error, too_long
from judges.models import Judge, JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import make_judge

pytestmark = pytest.mark.django_db

LLAMA_CPP_PYTHON = PROFILES["llama-cpp-python"]


def run_on(project, judge, *, kind="likert", items=4):
    version = factories.make_rubric(project=project, kind=kind)
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=items), [version])
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    return run


def status_error(status: int, body, headers=None) -> client.EndpointError:
    return client.status_error(status, body, text=json.dumps(body), headers=headers or {}, api_key="")


# -- reading the bodies ------------------------------------------------------------------------------
def test_a_500_validation_error_naming_response_format_is_a_refused_parameter_not_a_transient_error():
    error = status_error(500, json_schema_validation_error())
    assert isinstance(error, client.PermanentError) and error.param == "response_format"
    old_llama_cpp = {
        "error": {
            "code": 500,
            "message": 'response_format type must be one of "text" or "json_object", but got: json_schema',
            "type": "server_error",
        }
    }
    assert status_error(500, old_llama_cpp).param == "response_format"
    fastapi = {
        "detail": [
            {"type": "extra_forbidden", "loc": ["body", "seed"], "msg": "Extra inputs are not permitted"}
        ]
    }
    error = status_error(422, fastapi)
    assert isinstance(error, client.PermanentError) and error.param == "seed"


def test_a_server_error_that_names_no_parameter_stays_transient():
    for message in ("Context size has been exceeded.", "The server had an error", "response_format is great"):
        error = status_error(500, {"error": {"code": 500, "message": message, "type": "server_error"}})
        assert isinstance(error, client.TransientError), message
    assert error_meanings.refused_parameter(500, "Context size has been exceeded.") is None


def test_prompts_too_long_are_read_from_llama_cpp_and_llama_cpp_python_bodies():
    status, body = too_long(PROFILES["llama-cpp"], {}, 4476, 4096)
    error = status_error(status, body)
    assert isinstance(error, client.PromptTooLong) and (error.prompt_tokens, error.context) == (4476, 4096)
    status, body = too_long(LLAMA_CPP_PYTHON, {"max_tokens": 64}, 2036, 2048)
    error = status_error(status, body)
    assert isinstance(error, client.PromptTooLong) and (error.prompt_tokens, error.context) == (2036, 2048)
    openai = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    error = status_error(400, openai)
    assert isinstance(error, client.PromptTooLong) and (error.prompt_tokens, error.context) == (9000, 8192)


def test_overload_answers_and_a_retrying_proxy_are_recognised():
    busy = status_error(
        500, {"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}
    )
    assert isinstance(busy, client.TransientError) and busy.overloaded and not busy.proxy_retried
    assert status_error(503, {"error": {"message": "Service Unavailable"}}).overloaded
    proxied = status_error(500, {"error": {"message": "boom"}}, headers={"x-litellm-call-id": "abc"})
    assert isinstance(proxied, client.TransientError) and proxied.proxy_retried and not proxied.overloaded


def test_llama_cpp_python_is_its_own_family_sending_json_object_with_a_schema(project):
    family = family_for(endpoint="auto", base_url="http://127.0.0.1:8000/v1", model="tiny", owned_by="me")
    assert family.key == "llama-cpp-python"
    judge = Judge(
        project=project, name="j", base_url="http://127.0.0.1:8000/v1", model="tiny", endpoint=family.key
    )
    version = factories.make_rubric(project=project, kind="pairwise")
    request = build_request(params=judge.parameters(), version=version, prompt="Which?", sample=0)
    assert request["response_format"]["type"] == "json_object"
    assert request["response_format"]["schema"]["required"] == ["pairwise_choice", "explanation"]
    assert "Reply with one JSON object" in request["messages"][0]["content"]


# -- runs --------------------------------------------------------------------------------------------
@pytest.fixture
def llama_cpp_python():
    server = FakeLLM(FakeConfig(latency_ms=0, profile="llama-cpp-python")).start(stop_after=120)
    yield server
    server.stop()


def test_a_run_on_llama_cpp_python_adapts_to_its_500_on_json_schema_once_and_finishes(
    project, llama_cpp_python
):
    judge = make_judge(project, llama_cpp_python)  # untested: sends json_schema first
    run = run_on(project, judge, kind="pairwise", items=4)
    assert run.status == JudgeRun.Status.DONE, run.error
    assert [a["parameter"] for a in run.adaptations] == ["response_format"]
    assert "structured output is replaced by a format instruction" in run.adaptations[0]["what"]
    assert llama_cpp_python.stats.requests == run.total_calls + 1  # one refused request, not six per call
    assert Rating.objects.filter(rater=run.rater).count() == 4


def test_the_connection_test_records_each_probe_and_does_not_abort_on_the_refused_one(
    project, llama_cpp_python
):
    judge = make_judge(project, llama_cpp_python)
    result = probing.test_connection(judge=judge)
    assert result.ok, result.message
    probes = result.capabilities["probes"]
    assert probes["JSON schema output"]["result"] == "refused"
    assert "response_format" in probes["JSON schema output"]["message"]
    assert probes["logprobs"] == {"result": "supported"} and probes["n=2"] == {"result": "supported"}
    assert result.capabilities["json_schema"] is False and result.capabilities["logprobs"] is True


def test_the_same_server_error_three_times_in_a_row_stops_retrying_the_call_and_twice_the_run(
    project, fake_llm
):
    judge = make_judge(project, fake_llm, model="fake-judge?fault=500&fault_attempts=0")
    before = fake_llm.stats.requests
    run = run_on(project, judge, items=4)
    assert run.status == JudgeRun.Status.FAILED
    assert "same answer 3 times in a row" in run.error and "The server had an error (simulated)" in run.error
    given_up = run.calls.filter(status=JudgeCall.Status.FAILED)
    assert list(given_up.values_list("attempts", flat=True)) == [3, 3]
    assert fake_llm.stats.requests - before <= 4 * 3  # not 4 calls x 6 attempts


def test_a_server_error_that_clears_on_the_next_attempt_is_still_retried(project, fake_llm):
    judge = make_judge(project, fake_llm, model="fake-judge?fault=500&fault_attempts=2")
    run = run_on(project, judge, items=4)
    assert run.status == JudgeRun.Status.DONE, run.error


def test_a_prompt_too_long_for_the_server_fails_that_call_alone_and_the_run_page_lists_it(
    researcher_client, project, serve
):
    server = serve("llama-cpp", context_tokens=100)
    version = factories.make_rubric(project=project)
    dataset = factories.make_dataset(project, items=4)
    Item.objects.filter(dataset=dataset, external_id="d-2").update(
        response={"speaker": "BOT", "text": "long " * 200}
    )
    evaluation = factories.make_evaluation(project, dataset, [version])
    run = services.launch_run(
        judge=make_judge(project, server), evaluation=evaluation, rubric_version=version
    )
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    failed = run.calls.get(status=JudgeCall.Status.FAILED)
    assert failed.item.external_id == "d-2" and failed.attempts == 1
    assert (
        "item d-2: the prompt is too long" in failed.error
        and "the server's context of 100 tokens" in failed.error
    )
    assert failed.details["too_long"]["context"] == 100 and failed.details["too_long"]["prompt_tokens"] > 100
    assert Rating.objects.filter(rater=run.rater).count() == 3  # the others went on
    assert "resuming cannot help" in run.error and "after retries" not in run.error
    page = researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode()
    assert 'id="run-too-long"' in page and "item d-2" in page


def test_an_overloaded_server_gets_fewer_requests_at_once_without_using_up_attempts(project, serve, settings):
    settings.LLM_MAX_ATTEMPTS = 2
    server = serve("llama-cpp", retry_after=0.01)
    judge = make_judge(project, server, model="fake-judge?fault=busy&fault_attempts=3")
    run = run_on(project, judge, items=2)
    assert run.status == JudgeRun.Status.DONE, run.error
    assert list(run.calls.values_list("attempts", flat=True)) == [
        4,
        4,
    ]  # 3 turned away + 1, over a limit of 2
    noted = [a for a in run.adaptations if a["parameter"] == "concurrency"]
    assert len(noted) == 1 and "Context size has been exceeded" in noted[0]["reason"]


def test_a_run_whose_first_requests_all_fail_to_connect_stops_naming_the_host_and_port(project, monkeypatch):
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]  # closed once the block ends: nothing listens there
    judge = Judge.objects.create(
        project=project,
        name="gone",
        base_url=f"http://127.0.0.1:{port}/v1",
        model="fake-judge",
        request_timeout=2,
    )
    sent = []
    chat = client.chat
    monkeypatch.setattr(client, "chat", lambda **request: sent.append(1) or chat(**request))
    started = time.monotonic()
    run = run_on(project, judge, items=12)
    assert run.status == JudgeRun.Status.FAILED
    assert run.error.startswith(f"could not connect to 127.0.0.1:{port}")
    assert len(sent) == 20  # not 12 calls x 6 attempts
    assert time.monotonic() - started < 30


def test_create_judge_can_turn_structured_output_off(project, fake_llm):
    call_command(
        "create_judge",
        *(
            "--project",
            project.slug,
            "--name",
            "plain",
            "--base-url",
            fake_llm.base_url,
            "--model",
            "fake-judge",
        ),
        "--no-structured-output",
        stdout=open("/dev/null", "w"),  # noqa: SIM115
    )
    assert Judge.objects.get(name="plain").structured_output is False


# -- fitting the server ------------------------------------------------------------------------------
def test_the_connection_test_caps_concurrency_at_llama_cpps_slots_and_learns_its_context(project, serve):
    server = serve("llama-cpp", slots=2, context_tokens=50)
    judge = make_judge(project, server, concurrency=8)
    result = probing.test_connection(judge=judge)
    assert result.ok, result.message
    judge.refresh_from_db()
    assert judge.concurrency == 2
    assert (judge.capabilities["slots"], judge.capabilities["context_tokens"]) == (2, 50)
    assert any("concurrency lowered from 8 to 2" in note for note in result.notes)


def test_the_estimate_counts_items_too_long_for_the_context_the_probe_learnt(project, serve):
    server = serve("llama-cpp", context_tokens=50)
    judge = make_judge(project, server)
    assert probing.test_connection(judge=judge).ok
    judge.refresh_from_db()
    version = factories.make_rubric(project=project)
    dataset = factories.make_dataset(project, items=3)
    Item.objects.filter(dataset=dataset, external_id="d-1").update(
        response={"speaker": "BOT", "text": "long " * 200}
    )
    evaluation = factories.make_evaluation(project, dataset, [version])
    estimate = services.estimate_run(judge=judge, evaluation=evaluation, rubric_version=version)
    assert (estimate.too_long_sampled, estimate.sampled, estimate.context_tokens) == (1, 3, 50)


def test_other_servers_keep_their_concurrency_and_have_no_context_learnt(project, fake_llm):
    judge = make_judge(project, fake_llm, concurrency=8)
    assert probing.test_connection(judge=judge).ok
    judge.refresh_from_db()
    assert judge.concurrency == 8 and "slots" not in judge.capabilities


def test_behind_a_proxy_that_retries_itself_a_call_is_sent_twice_at_most(project):
    """LiteLLM's proxy retries a failing backend itself and marks its answers with x-litellm-* headers."""
    sent = []

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            sent.append(self.path)
            body = json.dumps(
                {"error": {"message": f"backend failed ({len(sent)})", "type": "None"}}
            ).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("x-litellm-call-id", "c-1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        judge = Judge.objects.create(
            project=project, name="proxied", base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m"
        )
        run = run_on(project, judge, items=2)
    finally:
        server.shutdown()
    assert run.status == JudgeRun.Status.FAILED
    assert list(run.calls.values_list("attempts", flat=True)) == [2, 2] and len(sent) == 4
    assert all("gave up after 2 attempts" in error for error in run.calls.values_list("error", flat=True))
