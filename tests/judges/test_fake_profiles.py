"""The simulated model's provider profiles reproduce each provider's documented behaviour over HTTP."""

import httpx
import pytest

from judges.fake_llm import FakeLLM

MESSAGES = [{"role": "user", "content": "Rate it (1-5). Score:"}]


def post(server: FakeLLM, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"http://{server.host}:{server.port}/v1/chat/completions", json=body, **kwargs)


def test_reasoning_profile_refuses_max_tokens_with_openais_error_body(serve):
    server = serve("openai-reasoning")
    response = post(server, {"model": "fake-o", "messages": MESSAGES, "max_tokens": 50})
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }


def test_reasoning_profile_refuses_temperature_but_one_and_refuses_logprobs(serve):
    server = serve("openai-reasoning")
    base = {"model": "fake-o", "messages": MESSAGES, "max_completion_tokens": 500}
    cold = post(server, {**base, "temperature": 0}).json()["error"]
    assert (cold["code"], cold["param"]) == ("unsupported_value", "temperature")
    assert post(server, {**base, "temperature": 1}).status_code == 200
    refused = post(server, {**base, "logprobs": True, "top_logprobs": 5}).json()["error"]
    assert (refused["code"], refused["param"]) == ("unsupported_parameter", "logprobs")


def test_reasoning_tokens_are_in_usage_and_a_small_limit_leaves_an_empty_reply_cut_by_length(serve):
    server = serve("openai-reasoning")
    roomy = post(server, {"model": "fake-o", "messages": MESSAGES, "max_completion_tokens": 1000}).json()
    assert roomy["usage"]["completion_tokens_details"]["reasoning_tokens"] == 160
    assert roomy["choices"][0]["message"]["content"]
    tight = post(server, {"model": "fake-o", "messages": MESSAGES, "max_completion_tokens": 100}).json()
    assert tight["choices"][0] == {**tight["choices"][0], "finish_reason": "length"}
    assert tight["choices"][0]["message"]["content"] == ""
    assert tight["usage"]["completion_tokens"] == 100


def test_chat_profile_refuses_reasoning_effort_as_an_unrecognized_argument(serve):
    response = post(
        serve("openai-chat"), {"model": "fake-c", "messages": MESSAGES, "reasoning_effort": "low"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "Unrecognized request argument supplied: reasoning_effort",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


STRICT_SCHEMA = {"type": "object", "properties": {"score": {"type": "string"}}, "required": ["score"]}


@pytest.mark.parametrize("profile", ["any", "openai-chat", "vllm"])
@pytest.mark.parametrize(
    ("extra", "param", "code", "words"),
    [
        ({"top_k": 5}, None, None, "Unrecognized request argument supplied: top_k"),
        ({"temperature": 2.5}, "temperature", "decimal_above_max_value", "Expected a value <= 2"),
        ({"temperature": "0.2"}, "temperature", "invalid_type", "expected a number"),
        ({"max_tokens": 0}, "max_tokens", "integer_below_min_value", "Expected a value >= 1"),
        ({"max_tokens": 2.5}, "max_tokens", "invalid_type", "expected an integer"),
        ({"top_logprobs": 5}, "top_logprobs", "invalid_value", "'logprobs' must be set to true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "integer_above_max_value", "<= 20"),
        ({"messages": []}, "messages", "empty_array", "too short"),
        ({"messages": [{"role": "judge", "content": "hi"}]}, "messages[0].role", "invalid_value", "'judge'"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "j", "strict": True,
                                                                    "schema": STRICT_SCHEMA}}},
            "response_format", None, "'additionalProperties' is required to be supplied and to be false",
        ),
        (
            {"response_format": {"type": "json_object"}},
            "messages", None, "must contain the word 'json'",
        ),
    ],
)  # fmt: skip
def test_every_profile_refuses_what_openai_refuses_naming_the_parameter(
    serve, profile, extra, param, code, words
):
    """The simulated model is as strict as OpenAI about the request itself, whatever the profile."""
    response = post(serve(profile), {"model": "fake-judge", "messages": MESSAGES, **extra})
    assert response.status_code == 400
    body = response.json()
    error = body if profile == "vllm" else body["error"]
    assert words in error["message"] and error["param"] == param
    if profile != "vllm":
        assert error["code"] == code


def test_concords_own_requests_pass_the_strict_checks(serve, project):
    """What Concord sends for a JSON rubric (strict schema, logprobs) is accepted as OpenAI accepts it."""
    from judges.endpoints import response_schema
    from tests import factories

    version = factories.make_rubric(project=project, name="Quality")
    schema = {"name": "judgement", "strict": True, "schema": response_schema(version)}
    body = {
        "model": "fake-judge", "messages": MESSAGES, "max_tokens": 50, "temperature": 0, "seed": 1,
        "logprobs": True, "top_logprobs": 10,
        "response_format": {"type": "json_schema", "json_schema": schema},
    }  # fmt: skip
    assert post(serve("openai-chat"), body).status_code == 200


def test_azure_profile_wants_deployment_urls_api_version_and_the_api_key_header(serve):
    server = serve("azure", api_key="azure-secret")
    url = f"http://{server.host}:{server.port}/openai/deployments/fake-dep/chat/completions"
    body = {"model": "fake-dep", "messages": MESSAGES, "max_tokens": 20}
    assert (
        httpx.post(url, json=body, headers={"api-key": "azure-secret"}).status_code == 404
    )  # no api-version
    ok = httpx.post(url, params={"api-version": "2024-10-21"}, json=body, headers={"api-key": "azure-secret"})
    assert ok.status_code == 200
    bearer = httpx.post(
        url, params={"api-version": "2024-10-21"}, json=body, headers={"Authorization": "Bearer azure-secret"}
    )
    assert bearer.status_code == 401
    missing = httpx.post(
        url.replace("fake-dep", "gpt-4o"),
        params={"api-version": "1"},
        json=body,
        headers={"api-key": "azure-secret"},
    )
    assert missing.json()["error"]["code"] == "DeploymentNotFound"


def test_anthropic_profile_ignores_logprobs_and_response_format_and_refuses_n_above_one(serve):
    server = serve("anthropic-compat")
    schema = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object", "properties": {}}},
    }
    reply = post(
        server, {"model": "fake-claude", "messages": MESSAGES, "logprobs": True, "response_format": schema}
    ).json()
    assert reply["choices"][0]["logprobs"] is None and not reply["choices"][0]["message"][
        "content"
    ].startswith("{")
    refused = post(server, {"model": "fake-claude", "messages": MESSAGES, "n": 2}).json()
    assert refused["type"] == "error" and refused["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("profile", "shape"),
    [
        ("vllm", lambda body: body["object"] == "error" and body["type"] == "NotFoundError"),
        ("ollama", lambda body: "try pulling it first" in body["error"]["message"]),
        ("anthropic-compat", lambda body: body["error"]["type"] == "not_found_error"),
        ("gemini-compat", lambda body: body[0]["error"]["status"] == "NOT_FOUND"),
    ],
)
def test_unknown_models_get_each_providers_own_error_body(serve, profile, shape):
    response = post(serve(profile), {"model": "llama-9000", "messages": MESSAGES})
    assert response.status_code == 404 and shape(response.json())


def test_ollama_profile_answers_one_choice_whatever_n_says(serve):
    reply = post(serve("ollama"), {"model": "fake-llama", "messages": MESSAGES, "n": 3}).json()
    assert len(reply["choices"]) == 1
