import json
import urllib.error
import urllib.request

import pytest

from judges.fake_llm import FakeConfig, FakeLLM
from judges.parsing import parse_reply


def post(server, body: dict, headers: dict | None = None, key: str = "k"):
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def chat(prompt: str, **extra) -> dict:
    return {"model": "fake-judge", "messages": [{"role": "user", "content": prompt}], **extra}


def test_answers_are_deterministic_per_prompt_and_parse_on_the_scale(fake_llm):
    first = post(fake_llm, chat("Rate it (1-5). Dialog A"))[2]
    again = post(fake_llm, chat("Rate it (1-5). Dialog A"))[2]
    assert first["choices"][0]["message"] == again["choices"][0]["message"]
    for n in range(12):
        content = post(fake_llm, chat(f"Rate it (1-5). Dialog {n}"))[2]["choices"][0]["message"]["content"]
        assert parse_reply(content, kind="likert", scale_values=["1", "2", "3", "4", "5"]).ok, content


def test_n_choices_usage_and_logprobs_over_the_scale(fake_llm):
    status, _, body = post(fake_llm, chat("Rate (1-5): x", n=3, logprobs=True, top_logprobs=6))
    assert status == 200
    assert len(body["choices"]) == 3
    assert (
        body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )
    first = body["choices"][0]["logprobs"]["content"][0]
    assert first["token"] in {"1", "2", "3", "4", "5"}
    assert {alt["token"] for alt in first["top_logprobs"]} == {"1", "2", "3", "4", "5", " "}


def test_json_schema_response_format_answers_from_the_enum(fake_llm):
    schema = {
        "type": "object",
        "properties": {
            "pairwise_choice": {"type": "string", "enum": ["A", "SAME", "B"]},
            "explanation": {"type": "string"},
        },
    }
    body = post(
        fake_llm,
        chat(
            "compare", response_format={"type": "json_schema", "json_schema": {"name": "j", "schema": schema}}
        ),
    )[2]
    answer = json.loads(body["choices"][0]["message"]["content"])
    assert answer["pairwise_choice"] in {"A", "SAME", "B"} and answer["explanation"]


def test_unknown_model_is_404_and_models_are_listed_as_concord_fake(fake_llm):
    status, _, body = post(fake_llm, {**chat("x"), "model": "gpt-4o"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    with urllib.request.urlopen(f"{fake_llm.base_url}/models", timeout=5) as response:
        models = json.loads(response.read())["data"]
    assert {m["owned_by"] for m in models} == {"concord-fake"}


def test_wrong_key_is_401_when_the_server_requires_one():
    server = FakeLLM(FakeConfig(latency_ms=0, api_key="right")).start(stop_after=60)
    try:
        assert post(server, chat("x"), key="wrong")[0] == 401
        assert post(server, chat("x"), key="right")[0] == 200
    finally:
        server.stop()


def test_faulted_request_fails_once_with_retry_after_then_succeeds(fake_llm):
    body = chat("unique prompt for 429", model="fake-judge?fault=429&retry_after=2")
    status, headers, _ = post(fake_llm, body)
    assert status == 429 and headers["Retry-After"] == "2"
    assert post(fake_llm, body)[0] == 200


@pytest.mark.parametrize("fault", ["500", "empty", "refusal", "truncated_json"])
def test_faults_can_be_picked_per_request_by_header(fake_llm, fault):
    status, _, body = post(fake_llm, chat(f"header fault {fault}"), headers={"X-Fake-Fault": fault})
    if fault == "500":
        assert status == 500
    else:
        message = body["choices"][0]["message"]
        assert {
            "empty": message["content"] == "",
            "refusal": bool(message["refusal"]),
            "truncated_json": body["choices"][0]["finish_reason"] == "length",
        }[fault]


def test_forty_concurrent_requests_at_1_s_take_about_1_s_not_forty():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    # The 40 threads send together, and each answer takes 1 s: at 200 ms on a busy machine the first answers
    # came back before the last thread had sent (30 in flight at once, seen in CI).
    together = threading.Barrier(40)

    def send(n: int) -> int:
        together.wait(timeout=10)
        return post(server, chat(f"concurrent {n}"))[0]

    server = FakeLLM(FakeConfig(latency_ms=1000)).start(stop_after=60)
    try:
        with ThreadPoolExecutor(max_workers=40) as pool:
            started = time.monotonic()
            statuses = list(pool.map(send, range(40)))
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    assert statuses == [200] * 40
    assert server.stats.max_in_flight >= 32
    assert elapsed < 4.0
