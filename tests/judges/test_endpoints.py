"""Endpoint families: which family a judge gets and the request each family's builder sends."""

import pytest

from judges.endpoints import FAMILIES, build_request, family_for
from judges.parameters import RunParameters
from tests import factories


@pytest.mark.parametrize(
    ("base_url", "model", "family"),
    [
        ("https://api.openai.com/v1", "gpt-4o-mini", "openai-chat"),
        ("https://api.openai.com/v1", "o4-mini", "openai-reasoning"),
        ("https://api.openai.com/v1", "gpt-5.1", "openai-reasoning"),
        ("https://api.openai.com/v1", "gpt-5-chat-latest", "openai-chat"),
        ("https://res.openai.azure.com/?api-version=2024-10-21", "my-gpt4o", "azure"),
        ("https://res.openai.azure.com/", "o3-mini", "azure-reasoning"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "gemini-2.5-flash", "gemini"),
        ("https://api.anthropic.com/v1/", "claude-sonnet-4-5", "anthropic"),
        ("https://openrouter.ai/api/v1", "openai/gpt-4o", "openrouter"),
        ("https://api.together.xyz/v1", "meta-llama/Llama-3-70b-chat-hf", "together"),
        ("https://api.groq.com/openai/v1", "llama-3.3-70b-versatile", "groq"),
        ("http://gpu-host:8000/v1", "Qwen/Qwen2.5-7B-Instruct", "openai-compatible"),
    ],
)
def test_automatic_family_comes_from_the_host_and_model(base_url, model, family):
    assert family_for(endpoint="auto", base_url=base_url, model=model).key == family


def test_an_explicit_choice_or_the_models_owner_decides_for_self_hosted_servers():
    url = "http://gpu-host:8000/v1"
    assert family_for(endpoint="ollama", base_url=url, model="llama3").key == "ollama"
    assert family_for(endpoint="auto", base_url=url, model="m", owned_by="vllm").key == "vllm"
    assert family_for(endpoint="auto", base_url=url, model="m", owned_by="llamacpp").key == "llama-cpp"


@pytest.fixture
def likert(db):
    project = factories.make_project()
    return factories.make_rubric(project=project, name="Quality")


def params(**changes) -> RunParameters:
    base = {"base_url": "http://gpu-host:8000/v1", "credential": "none", "model": "m", "temperature": 0.0}
    return RunParameters(**{**base, "max_tokens": 300, **changes})


def test_openai_reasoning_models_get_max_completion_tokens_reasoning_effort_and_no_temperature(likert):
    request = build_request(
        params=params(endpoint="openai-reasoning", reasoning_effort="low"),
        version=likert,
        prompt="p",
        sample=0,
    )
    assert request["max_completion_tokens"] == 300 and "max_tokens" not in request
    assert "temperature" not in request and request["reasoning_effort"] == "low"


def test_chat_models_get_max_tokens_and_the_judges_temperature_and_none_means_not_sent(likert):
    request = build_request(params=params(endpoint="openai-chat"), version=likert, prompt="p", sample=3)
    assert request["max_tokens"] == 300 and request["temperature"] == 0.0 and request["seed"] == 3
    unset = build_request(
        params=params(endpoint="openai-chat", temperature=None), version=likert, prompt="p", sample=0
    )
    assert "temperature" not in unset


def test_anthropic_caps_temperature_at_one_and_asks_for_json_in_the_prompt(db):
    project = factories.make_project()
    pairwise = factories.make_rubric(project=project, name="Pref", kind="pairwise")
    request = build_request(
        params=params(endpoint="anthropic", temperature=1.5), version=pairwise, prompt="p", sample=0
    )
    assert request["temperature"] == 1.0
    assert "response_format" not in request and "seed" not in request
    assert "Reply with one JSON object" in request["messages"][0]["content"]


def test_what_a_connection_test_found_and_what_a_run_adapted_override_the_documented_defaults(likert):
    probed = params(endpoint="openai-compatible", capabilities={"token_limit": "max_completion_tokens"})
    assert "max_completion_tokens" in build_request(params=probed, version=likert, prompt="p", sample=0)
    adapted = build_request(
        params=probed, version=likert, prompt="p", sample=0, adaptations={"temperature": False}
    )
    assert "temperature" not in adapted and "max_completion_tokens" in adapted


def test_logprob_scoring_is_always_asked_for_never_dropped_quietly(likert):
    request = build_request(
        params=params(endpoint="groq", logprobs=True), version=likert, prompt="p", sample=0
    )
    assert request["logprobs"] is True


def test_every_family_names_its_documentation():
    for family in FAMILIES.values():
        assert family.doc_url.startswith("https://")
