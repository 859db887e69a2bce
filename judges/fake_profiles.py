"""Provider profiles of the simulated model: each reproduces what one endpoint family is documented to do
with a chat completion request (refusals with the provider's own error bodies, parameters it ignores,
reasoning tokens), so the suite meets the providers' strictness without the network.

Sources (see judges/endpoints.py for the same table): OpenAI's reasoning guide and API reference, Azure
OpenAI's REST reference, the vLLM, Ollama, Anthropic OpenAI-SDK and Gemini OpenAI-compatibility pages.
Every profile, the default ("any") included, first checks the request itself as OpenAI does
(`invalid_request`: unknown arguments, types and ranges, messages, strict JSON schemas), so a request
Concord builds wrong fails in the suite as it would against the strictest provider.
"""

from __future__ import annotations

import json
import re
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
    owned_by: str = "concord-fake"  # in the model list
    # llama-cpp-python's server: response_format takes "text" and "json_object" (with an optional "schema")
    # only; "json_schema" fails its request validation, which its error handler answers with a 500.
    refuses_json_schema_with_500: bool = False


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
        Profile("llama-cpp", error_shape="llama-cpp", owned_by="llamacpp"),
        Profile("llama-cpp-python", error_shape="fastapi", owned_by="me", refuses_json_schema_with_500=True),
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
    if profile.error_shape == "fastapi" and status in (401, 404):
        return {"detail": message}  # FastAPI's HTTPException, outside llama-cpp-python's error handler
    if profile.error_shape == "llama-cpp":
        return {"error": {"code": status, "message": message, "type": kind}}
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


# What OpenAI's chat completions endpoint recognises; anything else is refused by every profile, as OpenAI
# refuses it ("Unrecognized request argument supplied: ..."), the strictest of the providers.
KNOWN_ARGUMENTS = frozenset({
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier",
    "seed", "service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice",
    "tools", "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
})  # fmt: skip
# name -> (type, minimum, maximum) as OpenAI's API reference gives them
RANGES: dict[str, tuple[type, float, float]] = {
    "temperature": (float, 0, 2),
    "top_p": (float, 0, 1),
    "max_tokens": (int, 1, 10**9),
    "max_completion_tokens": (int, 1, 10**9),
    "n": (int, 1, 128),
    "top_logprobs": (int, 0, 20),
    "seed": (int, -(2**63), 2**63 - 1),
}
ROLES = ("system", "assistant", "user", "function", "tool", "developer")


def invalid_request(profile: Profile, request: dict[str, Any]) -> tuple[int, Any] | None:
    """(400, body) for a request OpenAI would refuse whatever the model: an argument it does not know, a
    value of the wrong type or out of range, malformed messages, a strict JSON schema that is not strict."""
    unknown = sorted(set(request) - KNOWN_ARGUMENTS - profile.ignores)
    if unknown:
        return _invalid(profile, f"Unrecognized request argument supplied: {', '.join(unknown)}", None, None)
    for name, (kind, low, high) in RANGES.items():
        value = request.get(name)
        if value is None:
            continue
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or (kind is int and not isinstance(value, int)):
            what = "an integer" if kind is int else "a number"
            message = f"Invalid type for '{name}': expected {what}, but got {value!r} instead."
            return _invalid(profile, message, name, "invalid_type")
        word = "integer" if kind is int else "decimal"
        if value < low:
            message = (
                f"Invalid '{name}': {word} below minimum value. Expected a value >= {low}, but got {value}"
            )
            message += " instead."
            return _invalid(profile, message, name, f"{word}_below_min_value")
        if value > high:
            message = (
                f"Invalid '{name}': {word} above maximum value. Expected a value <= {high}, but got {value}"
            )
            message += " instead."
            return _invalid(profile, message, name, f"{word}_above_max_value")
    if request.get("top_logprobs") is not None and not request.get("logprobs"):
        message = (
            "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used."
        )
        return _invalid(profile, message, "top_logprobs", "invalid_value")
    messages = request["messages"]
    if not messages:
        return _invalid(profile, "[] is too short - 'messages'", "messages", "empty_array")
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            supported = ", ".join(f"'{r}'" for r in ROLES)
            return _invalid(profile, f"Invalid value: {role!r}. Supported values are: {supported}.",
                            f"messages[{index}].role", "invalid_value")  # fmt: skip
        if not isinstance(message.get("content"), str | list):
            where = f"messages[{index}].content"
            message = f"Invalid type for '{where}': expected a string or an array of content parts."
            return _invalid(profile, message, where, "invalid_type")
    return _invalid_schema(profile, request.get("response_format"), messages)


def _invalid_schema(profile: Profile, response_format: Any, messages: list) -> tuple[int, Any] | None:
    if response_format is None or "response_format" in profile.ignores:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        if "json" not in json.dumps(messages).lower():
            message = "'messages' must contain the word 'json' in some form, to use 'response_format' of type"
            message += " 'json_object'."
            return _invalid(profile, message, "messages", None)
        return None
    if kind == "text":
        return None
    if kind != "json_schema":
        message = f"Invalid value: {kind!r}. Supported values are: 'text', 'json_object', and 'json_schema'."
        return _invalid(profile, message, "response_format.type", "invalid_value")
    spec = response_format.get("json_schema") or {}
    name = str(spec.get("name", ""))
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        message = (
            "Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string"
        )
        message += " that matches the pattern '^[a-zA-Z0-9_-]+$'."
        return _invalid(profile, message, "response_format.json_schema.name", "invalid_value")
    if spec.get("strict"):
        problem = _not_strict(spec.get("schema") or {}, ())
        if problem:
            return _invalid(
                profile, f"Invalid schema for response_format '{name}': {problem}", "response_format", None
            )
    return None


def _not_strict(schema: dict, context: tuple[str, ...]) -> str | None:
    """What OpenAI's strict structured outputs refuse in a schema: an object without additionalProperties
    false, or one whose properties are not all required."""
    if schema.get("type") == "object":
        where = f"In context={context!r}"
        if schema.get("additionalProperties") is not False:
            return f"{where}, 'additionalProperties' is required to be supplied and to be false."
        properties = schema.get("properties") or {}
        missing = [key for key in properties if key not in (schema.get("required") or [])]
        if missing:
            return (
                f"{where}, 'required' is required to be supplied and to be an array including every key in "
                f"properties. Missing '{missing[0]}'."
            )
        for key, inner in properties.items():
            problem = _not_strict(inner, (*context, "properties", key)) if isinstance(inner, dict) else None
            if problem:
                return problem
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return _not_strict(schema["items"], (*context, "items"))
    return None


def _invalid(profile: Profile, message: str, param: str | None, code: str | None) -> tuple[int, Any]:
    return 400, error_body(profile, 400, message, "invalid_request_error", code, param)


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
        # OpenAI's chat models answer as for an argument they do not know: no param, no code
        message = "Unrecognized request argument supplied: reasoning_effort"
        return _invalid(profile, message, None, None)
    if (
        profile.refuses_json_schema_with_500
        and (request.get("response_format") or {}).get("type") == "json_schema"
    ):
        return 500, json_schema_validation_error()
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


def json_schema_validation_error() -> dict[str, Any]:
    """llama-cpp-python's answer to response_format "json_schema": its route's error handler turns the
    request's validation error into a 500 whose message is the validation error's text."""
    error = {
        "type": "literal_error",
        "loc": ("body", "response_format", "type"),
        "msg": "Input should be 'text' or 'json_object'",
        "input": "json_schema",
        "ctx": {"expected": "'text' or 'json_object'"},
    }
    message = f"1 validation error:\n  {error}\n"
    return {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}


def too_long(profile: Profile, request: dict[str, Any], prompt_tokens: int, context: int) -> tuple[int, Any]:
    """The 400 of a request whose prompt and completion do not fit the server's context, in the words of
    llama.cpp's server (which counts the prompt alone) or llama-cpp-python's (prompt plus max_tokens)."""
    if profile.error_shape == "llama-cpp":
        message = (
            f"request ({prompt_tokens} tokens) exceeds the available context size ({context} tokens), "
            "try increasing it"
        )
        body = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return 400, {"error": {**body, "n_prompt_tokens": prompt_tokens, "n_ctx": context}}
    completion = int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)
    message = (
        f"This model's maximum context length is {context} tokens. However, you requested "
        f"{prompt_tokens + completion} tokens ({prompt_tokens} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion."
    )
    return 400, error_body(
        profile, 400, message, "invalid_request_error", "context_length_exceeded", "messages"
    )
