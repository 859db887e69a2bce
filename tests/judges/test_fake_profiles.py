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


def test_chat_profile_refuses_reasoning_effort(serve):
    response = post(
        serve("openai-chat"), {"model": "fake-c", "messages": MESSAGES, "reasoning_effort": "low"}
    )
    assert response.json()["error"]["param"] == "reasoning_effort"


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
