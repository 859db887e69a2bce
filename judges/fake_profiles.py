"""Provider profiles of the simulated model: each reproduces what one endpoint family is documented to do
with a chat completion request (refusals with the provider's own error bodies, parameters it ignores,
reasoning tokens), so the suite meets the providers' strictness without the network.

Sources (see judges/endpoints.py for the same table): OpenAI's reasoning guide and API reference, Azure
OpenAI's REST reference, the vLLM, Ollama, Anthropic OpenAI-SDK and Gemini OpenAI-compatibility pages.
The default profile ("any") accepts everything, as the simulated model always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REASONING_TOKENS = {"minimal": 16, "low": 64, "medium": 160, "high": 480}


@dataclass(frozen=True)
class Profile:
    name: str
    error_shape: str = "openai"  # openai | azure | vllm | ollama | anthropic | gemini
    reasoning: bool = False
    azure: bool = False
    refuses_reasoning_effort: bool = False
    ignores: frozenset[str] = frozenset()  # accepted and silently ignored
    single_choice: str = ""  # "refuse": n > 1 is a 400; "ignore": one choice whatever n says
    temperature_max: float | None = None  # values above are capped
    refuses_logprobs: bool = False
    batch: bool = False  # serves OpenAI's Batch API (files + batches), judges.fake_batch


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("any", batch=True),
        Profile("openai-chat", refuses_reasoning_effort=True, batch=True),
        Profile("openai-reasoning", reasoning=True, refuses_logprobs=True, batch=True),
        Profile("azure", error_shape="azure", azure=True, refuses_reasoning_effort=True),
        Profile("vllm", error_shape="vllm"),
        Profile("ollama", error_shape="ollama", single_choice="ignore"),
        Profile(
            "anthropic-compat",
            error_shape="anthropic",
            ignores=frozenset({"logprobs", "top_logprobs", "response_format", "seed", "reasoning_effort"}),
            single_choice="refuse",
            temperature_max=1.0,
        ),
        Profile("gemini-compat", error_shape="gemini", refuses_logprobs=True),
    )
}
PROFILE_NAMES = tuple(PROFILES)


def error_body(
    profile: Profile, status: int, message: str, kind: str, code: Any, param: str | None = None
) -> dict[str, Any] | list[dict[str, Any]]:
    """The provider's own error body for a refusal."""
    if profile.error_shape == "anthropic":
        kinds = {404: "not_found_error", 401: "authentication_error"}
        return {
            "type": "error",
            "error": {"type": kinds.get(status, "invalid_request_error"), "message": message},
        }
    if profile.error_shape == "gemini":
        statuses = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND"}
        return [{"error": {"code": status, "message": message, "status": statuses.get(status, "UNKNOWN")}}]
    if profile.error_shape == "vllm":
        kinds = {400: "BadRequestError", 404: "NotFoundError", 401: "Unauthorized"}
        return {
            "object": "error",
            "message": message,
            "type": kinds.get(status, "Error"),
            "param": param,
            "code": status,
        }
    if profile.error_shape == "azure" and status == 404:
        return {"error": {"code": "DeploymentNotFound", "message": message}}
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def unknown_model(profile: Profile, model: str) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
    messages = {
        "azure": "The API deployment for this resource does not exist. If you created the deployment within "
        "the last 5 minutes, please wait a moment and try again.",
        "ollama": f'model "{model}" not found, try pulling it first',
        "anthropic": f"model: {model}",
        "gemini": f"models/{model} is not found for API version v1main, "
        "or is not supported for generateContent.",
    }
    message = messages.get(profile.error_shape, f"The model `{model}` does not exist.")
    return 404, error_body(profile, 404, message, "invalid_request_error", "model_not_found", "model")


def refusal(
    profile: Profile, request: dict[str, Any]
) -> tuple[int, dict[str, Any] | list[dict[str, Any]]] | None:
    """(400, body) when the profile refuses the request, else None."""
    if profile.reasoning:
        if "max_tokens" in request:
            return _unsupported(
                profile,
                "max_tokens",
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
            )
        for name in ("temperature", "top_p"):
            if name in request and request[name] != 1:
                return 400, error_body(
                    profile,
                    400,
                    f"Unsupported value: '{name}' does not support {request[name]} with this model. "
                    "Only the default (1) value is supported.",
                    "invalid_request_error",
                    "unsupported_value",
                    name,
                )
    if profile.refuses_logprobs:
        for name in ("logprobs", "top_logprobs"):
            if request.get(name):
                return _unsupported(
                    profile, name, f"Unsupported parameter: '{name}' is not supported with this model."
                )
    if profile.refuses_reasoning_effort and "reasoning_effort" in request:
        return _unsupported(
            profile,
            "reasoning_effort",
            "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
        )
    if profile.single_choice == "refuse" and int(request.get("n") or 1) != 1:
        return 400, error_body(profile, 400, "n: only n=1 is supported", "invalid_request_error", None, "n")
    return None


def _unsupported(
    profile: Profile, name: str, message: str
) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
    return 400, error_body(profile, 400, message, "invalid_request_error", "unsupported_parameter", name)


def as_received(profile: Profile, request: dict) -> dict:
    """The request as the provider acts on it: ignored fields dropped, capped values capped."""
    request = {k: v for k, v in request.items() if k not in profile.ignores}
    if profile.temperature_max is not None and "temperature" in request:
        request["temperature"] = min(float(request["temperature"]), profile.temperature_max)
    if profile.single_choice == "ignore":
        request.pop("n", None)
    return request


def spend_reasoning(profile: Profile, request: dict, completion: dict) -> dict:
    """Reasoning models think before they answer: the thinking counts against max_completion_tokens and is
    billed as output; when the limit runs out first, the reply is empty with finish_reason "length"."""
    if not profile.reasoning:
        return completion
    thinking = REASONING_TOKENS.get(request.get("reasoning_effort") or "medium", REASONING_TOKENS["medium"])
    limit = int(request.get("max_completion_tokens") or 100_000)
    usage = completion["usage"]
    answer_tokens = usage["completion_tokens"] // max(1, len(completion["choices"]))
    for choice in completion["choices"]:
        if thinking + answer_tokens > limit:
            choice["message"]["content"] = ""
            choice["finish_reason"] = "length"
    spent = min(limit, thinking + answer_tokens) * len(completion["choices"])
    used_thinking = min(limit, thinking) * len(completion["choices"])
    usage["completion_tokens"] = spent
    usage["total_tokens"] = usage["prompt_tokens"] + spent
    usage["completion_tokens_details"] = {"reasoning_tokens": used_thinking}
    return completion
