"""The one boundary between Concord and an OpenAI-compatible endpoint.

The openai client's own retries are switched off (max_retries=0): retries live in exactly one layer,
`judges.calls`, which knows the run, honours Retry-After and records attempts. This module turns each
outcome into a `Reply`, a `TransientError` (worth retrying) or a `PermanentError` (stop the run).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai

# The openai package's HTTP layer logs every request at INFO; one line per judge call is noise.
logging.getLogger("httpx2").setLevel(logging.WARNING)

TOP_LOGPROBS = 10
KEY_SHAPE_RE = re.compile(r"\b(?:sk|key|api[-_]?key)[-_][A-Za-z0-9*_\-.]{3,}", re.I)
LOGPROB_TOKENS_KEPT = 8


class EndpointError(Exception):
    """A call that produced no usable reply."""

    attempts: int = 1  # set by the retry layer to how many requests it made

    def __init__(
        self, message: str, *, status: int | None = None, code: str | None = None, param: str | None = None
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        # OpenAI's error fields: e.g. code "unsupported_parameter" with param "max_tokens".
        self.code = code
        self.param = param


class TransientError(EndpointError):
    """Rate limited, server error, timeout or broken connection: try again later."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message, status=status)
        self.retry_after = retry_after


class PermanentError(EndpointError):
    """Wrong key, unknown model, bad request: every further call would fail the same way."""


@dataclass
class Reply:
    content: str | None
    refusal: str = ""
    finish_reason: str = ""
    # [(token, [(alternative, logprob), ...]), ...] for the first tokens; None: the endpoint sent none.
    logprobs: list[Any] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0  # includes reasoning tokens, as OpenAI counts (and bills) them
    latency_ms: float = 0.0
    reasoning_tokens: int = 0
    choices: int = 1
    extra: dict = field(default_factory=dict)

    def as_cache(self) -> dict:
        return {
            "content": self.content or "",
            "refusal": self.refusal,
            "finish_reason": self.finish_reason,
            "logprobs": self.logprobs,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


_clients: dict[tuple, openai.OpenAI] = {}
_clients_lock = threading.Lock()


def api_key_from_env(variable: str) -> str:
    key = os.environ.get(variable, "")
    if not key:
        raise PermanentError(f"authentication failed: the environment variable {variable} is not set")
    return key


def get_client(*, base_url: str, api_key: str, timeout: float, azure: bool = False) -> openai.OpenAI:
    """One client (and connection pool) per endpoint, key and timeout, shared by a worker's threads.

    Azure's client sends the key in the api-key header, adds the api-version query and turns
    /chat/completions into /openai/deployments/{model}/chat/completions."""
    import openai  # imported on first use: it costs about a second at every process start

    from .endpoints import azure_endpoint

    cache_key = (base_url, api_key, timeout, azure)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            if azure:
                endpoint, version = azure_endpoint(base_url)
                client = openai.AzureOpenAI(
                    azure_endpoint=endpoint,
                    api_version=version,
                    api_key=api_key,
                    timeout=timeout,
                    max_retries=0,
                )
            else:
                client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
            _clients[cache_key] = client
        return client


def chat(*, base_url: str, api_key_env: str, timeout: float, request: dict, azure: bool = False) -> Reply:
    """Send one chat completion request (`request` holds model, messages and parameters)."""
    import openai  # imported on first use: it costs about a second at every process start

    client = get_client(
        base_url=base_url, api_key=api_key_from_env(api_key_env), timeout=timeout, azure=azure
    )
    started = time.monotonic()
    try:
        # The client's low-level post, as its docs show for any endpoint: same HTTP layer, errors and
        # auth, without validating the request against the typed params and the reply into pydantic
        # models, which cost more CPU than everything else a judge call does.
        completion = client.post("/chat/completions", body=request, cast_to=object)
    except openai.APIStatusError as error:
        raise _status_error(error, client.api_key) from None
    except openai.APITimeoutError:
        raise TransientError(f"timed out after {timeout:g} s") from None
    except openai.APIConnectionError as error:
        raise TransientError(f"connection error: {error.__cause__ or error}") from None
    except (openai.APIResponseValidationError, json.JSONDecodeError, ValueError) as error:
        raise TransientError(f"malformed response from the endpoint: {error}") from None
    latency_ms = (time.monotonic() - started) * 1000
    if not isinstance(completion, dict):
        # Not JSON (the client hands back the text): a web page or another API at this URL.
        raise PermanentError(
            f"{base_url} is not an OpenAI-compatible API: /chat/completions answered "
            f"{_shape(completion)} instead of a chat.completion JSON object"
        )
    try:
        return _reply(completion, latency_ms)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
        raise TransientError(f"malformed response from the endpoint: {error!r}") from None


def _reply(completion: Any, latency_ms: float) -> Reply:
    """A Reply from the chat.completion JSON object."""
    choice = completion["choices"][0]
    message = choice["message"]
    usage = completion.get("usage") or {}
    logprobs = None
    content_logprobs = (choice.get("logprobs") or {}).get("content")
    if content_logprobs:
        logprobs = [
            [
                entry["token"],
                [[alt["token"], float(alt["logprob"])] for alt in (entry.get("top_logprobs") or [])],
            ]
            for entry in content_logprobs[:LOGPROB_TOKENS_KEPT]
        ]
    content = message.get("content")
    details = usage.get("completion_tokens_details") or {}
    return Reply(
        content=content if content is None else str(content),
        refusal=message.get("refusal") or "",
        finish_reason=choice.get("finish_reason") or "",
        logprobs=logprobs,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        latency_ms=latency_ms,
        reasoning_tokens=int(details.get("reasoning_tokens") or 0),
        choices=len(completion["choices"]),
    )


def _shape(value: Any) -> str:
    text = str(value).strip().replace("\n", " ")
    return f"{type(value).__name__} {text[:60]!r}"


def redact(text: str, api_key: str) -> str:
    """The endpoint's message without the key or anything shaped like one (some echo part of it)."""
    if api_key:
        text = text.replace(api_key, "***")
        if len(api_key) >= 12:  # masked echoes such as "sk-proj-****abcd"
            text = text.replace(api_key[:6], "***").replace(api_key[-4:], "***")
    return KEY_SHAPE_RE.sub("***", text)


def _status_error(error: openai.APIStatusError, api_key: str) -> EndpointError:
    status = error.status_code
    detail = redact(_error_message(error), api_key)
    code, param = _error_fields(error.body)
    if status == 429:
        return TransientError(f"rate limited (429): {detail}", status=status, retry_after=_retry_after(error))
    if status >= 500 or status in (408, 409):
        return TransientError(
            f"server error ({status}): {detail}", status=status, retry_after=_retry_after(error)
        )
    if status in (401, 403):
        return PermanentError(
            f"authentication failed ({status}): the endpoint refused the API key (wrong, expired or "
            f"revoked?): {detail}",
            status=status,
        )
    if status == 404:
        return PermanentError(f"model or endpoint not found (404): {detail}", status=status, code=code)
    return PermanentError(f"request refused ({status}): {detail}", status=status, code=code, param=param)


def _error_body(body: Any) -> dict | None:
    """The error object of the shapes providers send: OpenAI's {"error": {...}}, Anthropic's
    {"type": "error", "error": {...}}, vLLM's flat {"object": "error", "message": ...} and Gemini's
    [{"error": {...}}]; None for anything else."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]
    if not isinstance(body, dict):
        return None
    inner = body.get("error", body)
    if isinstance(inner, dict) and inner.get("message"):
        return inner
    return None


def _error_fields(body: Any) -> tuple[str | None, str | None]:
    inner = _error_body(body) or {}
    code, param = inner.get("code"), inner.get("param")
    return (str(code) if code else None), (str(param) if param else None)


def _error_message(error: openai.APIStatusError) -> str:
    inner = _error_body(error.body)
    if inner is not None:
        return str(inner["message"])
    raw = error.response.text.strip().replace("\n", " ")
    return f"an error body Concord does not recognise: {raw[:200]!r}"


def _retry_after(error: openai.APIStatusError) -> float | None:
    headers = error.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw:
            try:
                return max(0.0, float(raw) * scale)
            except ValueError:
                continue  # an HTTP date: fall back to our own backoff
    return None


def list_models(*, base_url: str, api_key_env: str, timeout: float = 10.0, azure: bool = False) -> list[dict]:
    """The endpoint's models as [{"id", "owned_by"}]."""
    import openai  # imported on first use: it costs about a second at every process start

    client = get_client(
        base_url=base_url, api_key=api_key_from_env(api_key_env), timeout=timeout, azure=azure
    )
    try:
        page = client.models.list()
    except openai.APIStatusError as error:
        raise _status_error(error, client.api_key) from None
    except openai.APIConnectionError as error:
        raise TransientError(f"connection error: {error.__cause__ or error}") from None
    except (AttributeError, TypeError, ValueError) as error:  # not a model list: some other kind of server
        raise PermanentError(f"{base_url}/models is not an OpenAI model list ({error})") from None
    return [{"id": model.id, "owned_by": getattr(model, "owned_by", "")} for model in page.data]
