"""The one boundary between Concord and an OpenAI-compatible endpoint.

The openai client's own retries are switched off (max_retries=0): retries live in exactly one layer,
`judges.calls`, which knows the run, honours Retry-After and records attempts. This module turns each
outcome into a `Reply`, a `TransientError` (worth retrying) or a `PermanentError` (stop the run).
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import http.client
import json
import logging
import os
import re
import ssl
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson
from django.conf import settings
from django.views.decorators.debug import sensitive_variables

from . import credentials, error_meanings
from .endpoint_safety import (
    AnswerTooLarge,
    CheckedHTTPConnection,
    SafeNetworkBackend,
    UnsafeEndpoint,
    bounded,
    cause_of,
)

if TYPE_CHECKING:
    import httpcore2
    import httpx2
    import openai

# The openai package's HTTP layer logs every request at INFO; one line per judge call is noise.
logging.getLogger("httpx2").setLevel(logging.WARNING)

TOP_LOGPROBS = 10
COULD_NOT_CONNECT = "could not connect to the endpoint"
# Headers the openai client fills from the server's environment (OPENAI_ORG_ID, OPENAI_PROJECT_ID).
ENVIRONMENT_HEADERS = {"openai-organization", "openai-project"}
# Shorter "keys" (vLLM's customary EMPTY, Ollama's "ollama") guard nothing, and scrubbing them would mangle
# ordinary words in replies.
MIN_SECRET_LENGTH = 8
KEY_SHAPE_RE = re.compile(r"\b(?:sk|key|api[-_]?key)[-_][A-Za-z0-9*_\-.]{3,}", re.I)
LOGPROB_TOKENS_KEPT = 16
# LiteLLM's proxy marks its answers with x-litellm-* headers; it retries a failed request itself first.
PROXY_RETRY_HEADER = "x-litellm-"
# What a URL path segment may hold unescaped (RFC 3986 pchar), as the openai client quotes a deployment.
PATH_SAFE = "!$&'()*+,;=:@"
# A chat completion's answer is kilobytes (logprobs included); more than this is not read.
MAX_REPLY_BYTES = 16 * 2**20
READ_PIECE_BYTES = 2**16
# The token counts' columns hold 32-bit integers: an endpoint's count beyond them (or below zero) is clamped,
# so that it cannot stop its call, or another run's stored in the same transaction, from being stored.
MAX_TOKEN_COUNT = 2**31 - 1
# A kept-alive connection idle longer than this is not used again (the openai client's pool keeps them as
# long): servers close theirs after a few seconds, and a request sent as one closes would be lost.
KEEPALIVE_SECONDS = 5.0


class EndpointError(Exception):
    """A call that produced no usable reply."""

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

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        overloaded: bool = False,
        proxy_retried: bool = False,
    ):
        super().__init__(message, status=status)
        self.retry_after = retry_after
        self.overloaded = overloaded  # turned away for load: fewer requests at once help (error_meanings)
        self.proxy_retried = proxy_retried  # a proxy in front (LiteLLM) already retried it itself


class PermanentError(EndpointError):
    """Wrong key, unknown model, bad request: every further call would fail the same way."""


class PromptTooLong(PermanentError):
    """This call's prompt is longer than the server's context: the call fails, the run goes on."""

    def __init__(self, message: str, *, status: int, prompt_tokens: int | None, context: int | None):
        super().__init__(message, status=status, code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.context = context


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


def preload() -> None:
    """Import the openai package and load the trust store now (a worker at start) rather than in a run's
    first call, which the run's other lanes wait for."""
    import openai  # noqa: F401

    ssl_context()


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The trust store (certifi's certificates and CONCORD_JUDGE_CA_BUNDLE's, none from the environment),
    loaded once per process and shared by every endpoint's client: loading it takes 15-85 ms of CPU, which
    a new run's first call paid while its other lanes waited."""
    import httpx2

    context = httpx2.create_ssl_context(trust_env=False)
    # HTTP/1.1 is all either client speaks: said in the TLS handshake (httpcore sets the same on every
    # connection it makes), so no server answers a chat request in HTTP/2.
    context.set_alpn_protocols(["http/1.1"])
    if settings.CONCORD_JUDGE_CA_BUNDLE:
        context.load_verify_locations(cafile=settings.CONCORD_JUDGE_CA_BUNDLE)
    return context


_clients: dict[tuple[str, str, float, bool], openai.OpenAI] = {}
_clients_lock = threading.Lock()
# A client or chat endpoint nobody asked for this long is forgotten (a client closed): a client's pool closes
# idle connections only when next used, so each endpoint, key and timeout ever tested or batched kept its
# sockets for the process's life, and both kept the key, a rotated or deleted one too. Longer than one
# exchange may take (the Batch API's 15 minutes): every exchange asks for its client or endpoint anew.
CLIENT_IDLE_SECONDS = 1800.0
_used: dict[tuple, float] = {}  # when each client and endpoint was last asked for (monotonic)


def _asked_for(key: tuple) -> None:
    """Note that `key`'s client or endpoint is in use, and forget those nobody asked for in
    CLIENT_IDLE_SECONDS (called under _clients_lock)."""
    now = time.monotonic()
    for idle in [idle for idle, used in _used.items() if now - used > CLIENT_IDLE_SECONDS]:
        del _used[idle]
        _endpoints.pop(idle, None)  # lanes close their own pools when their run ends
        if (idle_client := _clients.pop(idle, None)) is not None:
            idle_client.close()
    _used[key] = now


def server_secrets() -> list[str]:
    """Values no request may carry unless they are the judge's own key: Concord's own secrets and every
    declared server credential."""
    own = [settings.SECRET_KEY, *(settings.CONCORD_ENCRYPTION_KEY or [])]
    own += [value for name in settings.CONCORD_OWN_SECRETS if (value := os.environ.get(name, ""))]
    return [value for value in (*own, *credentials.declared_values()) if len(value) >= MIN_SECRET_LENGTH]


def key_problem(api_key: str) -> str | None:
    """Why `api_key` cannot go in an HTTP header (a character outside printable ASCII: a line break or a
    non-breaking space pasted with it, a letter with an accent), or None. The message never shows the key."""
    if api_key.isascii() and api_key.isprintable() and " " not in api_key:
        return None
    return (
        "the judge's API key holds a space, a line break or a character outside ASCII, which no key has "
        "and an HTTP header cannot carry: paste or set the key again"
    )


def check_key(api_key: str) -> None:
    if (problem := key_problem(api_key)) is not None:
        raise PermanentError(problem)


@sensitive_variables("api_key")
def safe_headers(headers: httpx2.Headers, api_key: str) -> None:
    """Drop every header that would carry something of the server's but the judge's own key: the openai
    client reads OPENAI_ORG_ID, OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS from the environment."""
    forbidden = [value for value in server_secrets() if value != api_key]
    for name, value in list(headers.items()):
        lowered = name.lower()
        if lowered == "authorization":
            if not api_key or value != f"Bearer {api_key}":
                del headers[name]
        elif lowered in ENVIRONMENT_HEADERS or any(secret in value for secret in forbidden):
            del headers[name]


def safe_pool() -> httpcore2.ConnectionPool:
    """A connection pool whose connections go only to allowed addresses (endpoint_safety), with the
    openai client's limits and the shared trust store."""
    import httpcore2
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    limits = DEFAULT_CONNECTION_LIMITS
    return httpcore2.ConnectionPool(
        ssl_context=ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=SafeNetworkBackend(),
    )


@sensitive_variables("api_key")
def safe_http_client(*, api_key: str) -> httpx2.Client:
    """An HTTP client that connects only to allowed addresses (endpoint_safety), follows no redirect,
    reads no proxy, certificate or .netrc setting from the environment, and sends only the judge's key."""
    import httpx2

    class SafeTransport(httpx2.HTTPTransport):
        def __init__(self) -> None:
            super().__init__(trust_env=False)
            # httpx takes no network backend: its pool is replaced by one whose backend checks addresses.
            self._pool = safe_pool()

        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            safe_headers(request.headers, api_key)
            return super().handle_request(request)

    return httpx2.Client(transport=SafeTransport(), follow_redirects=False, trust_env=False)


@sensitive_variables("api_key")  # never in an error report
def get_client(*, base_url: str, api_key: str, timeout: float, azure: bool = False) -> openai.OpenAI:
    """One client (and connection pool) per endpoint, key and timeout, shared by a worker's threads.

    Azure's client sends the key in the api-key header, adds the api-version query and turns
    /chat/completions into /openai/deployments/{model}/chat/completions."""
    import openai  # imported on first use: it costs about a second at every process start

    from .endpoints import azure_endpoint

    cache_key = (base_url, api_key, timeout, azure)
    with _clients_lock:
        _asked_for(cache_key)
        client = _clients.get(cache_key)
        if client is None:
            check_key(api_key)
            # The key is given explicitly, so the client never falls back to OPENAI_API_KEY (or Azure's
            # variables); with no key the transport sends no Authorization header at all.
            key, http_client = api_key or "no-key", safe_http_client(api_key=api_key)
            if azure:
                endpoint, version = azure_endpoint(base_url)
                client = openai.AzureOpenAI(
                    azure_endpoint=endpoint,
                    api_version=version,
                    api_key=key,
                    timeout=timeout,
                    max_retries=0,
                    http_client=http_client,
                )
            else:
                client = openai.OpenAI(
                    base_url=base_url,
                    api_key=key,
                    admin_api_key="",
                    webhook_secret="",
                    timeout=timeout,
                    max_retries=0,
                    http_client=http_client,
                )
            _clients[cache_key] = client
        return client


def connection_error(error: Exception) -> EndpointError:
    """A refused address says why (it is our rule, not the network's), and so does a TLS certificate the
    trust store does not accept (self-signed, expired, another host's: sending again cannot help); any
    other connection failure says only that it failed, so the judge's connection test is no port scanner."""
    unsafe = cause_of(error, UnsafeEndpoint)
    if unsafe is not None:
        return PermanentError(str(unsafe))
    too_large = cause_of(error, AnswerTooLarge)
    if too_large is not None:
        return _too_large(too_large.limit)
    certificate = cause_of(error, ssl.SSLCertVerificationError)
    if certificate is not None:
        trusted = (
            "the public certificate authorities and those in CONCORD_JUDGE_CA_BUNDLE"
            if settings.CONCORD_JUDGE_CA_BUNDLE
            else "the public certificate authorities only (the server's operator can add a lab's own with "
            "CONCORD_JUDGE_CA_BUNDLE)"
        )
        return PermanentError(
            f"the endpoint's TLS certificate was not accepted ({certificate.verify_message}): Concord "
            f"trusts {trusted}; serve it with a certificate one of them issued"
        )
    return TransientError(COULD_NOT_CONNECT)


@dataclass(frozen=True)
class ChatEndpoint:
    """Where one judge's chat completions are posted: the URL and headers the openai client would send
    (Azure: /openai/deployments/{model}/chat/completions?api-version=..., the key in api-key), made once,
    and each thread's connection."""

    host: str  # as looked up and verified by TLS: IDNA, an IPv6 address without brackets
    port: int
    tls: bool
    target: str  # path and query
    headers: list[tuple[bytes, bytes]]  # Host included; Content-Length is the body's
    timeout: float
    local: threading.local = field(default_factory=threading.local, compare=False, repr=False)

    def connection(self) -> CheckedHTTPConnection:
        """This thread's connection, kept alive between requests (a lane sends one at a time) unless it
        idled longer than KEEPALIVE_SECONDS or the endpoint closed it meanwhile."""
        connection = getattr(self.local, "connection", None)
        if connection is None:
            tls = ssl_context() if self.tls else None
            connection = self.local.connection = CheckedHTTPConnection(
                self.host, self.port, timeout=self.timeout, tls=tls
            )
        elif not connection.reusable(KEEPALIVE_SECONDS):
            connection.close()  # http.client connects anew for the next request
        return connection


_endpoints: dict[tuple[str, str, float, bool, str], ChatEndpoint] = {}


def close_thread_connections() -> None:
    """Close this thread's connection to every endpoint (a lane whose run is over): a worker thread may not
    send to that endpoint again for days, and each socket the endpoint closed meanwhile would stay open
    here, one per thread and endpoint, until the worker ran out of file descriptors. The next run's lanes
    connect anew."""
    with _clients_lock:
        endpoints = list(_endpoints.values())
    for endpoint in endpoints:
        connection = getattr(endpoint.local, "connection", None)
        if connection is not None:
            endpoint.local.connection = None
            connection.close()


@sensitive_variables("api_key")  # never in an error report
def chat_endpoint(*, base_url: str, api_key: str, timeout: float, azure: bool, model: str) -> ChatEndpoint:
    """One per endpoint, key, timeout and model, shared by a worker's threads."""
    import httpx2
    import openai

    from .endpoints import azure_endpoint

    key = (base_url, api_key, timeout, azure, model)
    with _clients_lock:
        _asked_for(key)
        endpoint = _endpoints.get(key)
        if endpoint is None:
            check_key(api_key)
            headers = {
                "Accept": "application/json",
                "Accept-Encoding": "identity",
                "Content-Type": "application/json",
                "User-Agent": f"OpenAI/Python {openai.__version__}",
            }
            if azure:
                resource, version = azure_endpoint(base_url)
                deployment = quote(model, safe=PATH_SAFE)
                query = urlencode({"api-version": version})
                url = f"{resource}/openai/deployments/{deployment}/chat/completions?{query}"
                headers.update({"api-key": api_key} if api_key else {})
            else:
                url = f"{base_url.rstrip('/')}/chat/completions"
                headers.update({"Authorization": f"Bearer {api_key}"} if api_key else {})
            sample = httpx2.Request("POST", url, headers=headers)  # httpx's Host header for the URL
            safe_headers(sample.headers, api_key)
            sent = [(name, value) for name, value in sample.headers.raw if name.lower() != b"content-length"]
            parsed = sample.url
            endpoint = ChatEndpoint(
                host=parsed.raw_host.decode("ascii"),
                port=parsed.port or (443 if parsed.scheme == "https" else 80),
                tls=parsed.scheme == "https",
                target=parsed.raw_path.decode("ascii"),
                headers=sent,
                timeout=timeout,
            )
            _endpoints[key] = endpoint
        return endpoint


@sensitive_variables("api_key")
def chat(*, base_url: str, api_key: str, timeout: float, request: dict, azure: bool = False) -> Reply:
    """Send one chat completion request (`request` holds model, messages and parameters).

    Posted with the safe HTTP client directly rather than through the openai client, whose per-request
    machinery (options, headers, retry and auth wrappers, response classes) cost more worker CPU than the
    rest of a judge call; the URL, headers, errors and their messages are the same."""
    endpoint = chat_endpoint(
        base_url=base_url, api_key=api_key, timeout=timeout, azure=azure, model=str(request.get("model", ""))
    )
    started = time.monotonic()
    completion = _post(endpoint, orjson.dumps(request), api_key=api_key, timeout=timeout)
    latency_ms = (time.monotonic() - started) * 1000
    if not isinstance(completion, dict):
        # Not JSON (the text is handed back, as the openai client does): a web page or another API here.
        raise PermanentError(
            f"{base_url} is not an OpenAI-compatible API: /chat/completions answered "
            f"{_shape(completion, api_key)} instead of a chat.completion JSON object"
        )
    return reply_from(completion, api_key=api_key, latency_ms=latency_ms)


@sensitive_variables("api_key")
def _post(endpoint: ChatEndpoint, body: bytes, *, api_key: str, timeout: float) -> Any:
    """The JSON an endpoint answered (or its text, when it is not JSON); the errors that the openai
    client's exceptions become in `endpoint_errors`. Sent on this thread's kept-alive connection with
    http.client: the openai client's layers (httpx, httpcore, h11) do nothing for this request and
    nearly doubled its CPU (0.93 against 0.49 ms an exchange, the reply's reading included). The whole
    exchange ends by the judge's timeout, and an answer over MAX_REPLY_BYTES is not read further
    (`bounded`)."""
    connection = endpoint.connection()
    status = None
    try:
        with bounded(seconds=timeout, max_bytes=MAX_REPLY_BYTES):
            connection.putrequest("POST", endpoint.target, skip_host=True, skip_accept_encoding=True)
            for name, value in endpoint.headers:
                connection.putheader(name, value)
            connection.putheader(b"Content-Length", str(len(body)).encode())
            connection.endheaders(body)
            response = connection.getresponse()
            status = response.status
            fields = {name.lower(): value for name, value in response.getheaders()}
            content = _read_body(response)
    except TimeoutError:
        connection.close()
        still = "" if status is None else ": the answer was still arriving"
        raise TransientError(f"timed out after {timeout:g} s{still}") from None
    except (OSError, http.client.HTTPException, AnswerTooLarge, UnsafeEndpoint) as error:
        connection.close()
        raise connection_error(error) from None
    connection.answered_at = time.monotonic()
    content = _decoded(content, fields.get("content-encoding", ""))
    if not 200 <= status < 300:
        text = content.decode("utf-8", "replace")
        raise status_error(status, _body(text), text=text, headers=fields, api_key=api_key)
    if not fields.get("content-type", "*").split(";")[0].strip().endswith("json"):
        return content.decode("utf-8", "replace")
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        try:  # json's value where orjson is stricter (NaN), or json's error
            return json.loads(content.decode("utf-8", "replace"))
        except ValueError as error:
            raise TransientError(
                f"malformed response from the endpoint: {redact(str(error), api_key)}"
            ) from None


def _read_body(response: http.client.HTTPResponse) -> bytes:
    """The answer's body, read a piece at a time: the length an endpoint claims (Content-Length, a chunk's
    size) is never asked of memory at once, which raised MemoryError for a claim of terabytes. A claim over
    MAX_REPLY_BYTES is refused before reading; `bounded` stops a body that grows past it."""
    if response.length is not None and response.length > MAX_REPLY_BYTES:
        raise AnswerTooLarge(MAX_REPLY_BYTES)
    pieces = []
    while piece := response.read(READ_PIECE_BYTES):
        pieces.append(piece)
    return b"".join(pieces)


def _too_large(limit: int | None = None) -> PermanentError:
    megabytes = (MAX_REPLY_BYTES if limit is None else limit) // 2**20
    return PermanentError(
        f"the endpoint's answer is larger than {megabytes} MB, more than Concord reads of one answer: "
        "check the judge's base URL"
    )


def _decoded(content: bytes, encoding: str) -> bytes:
    """The body without its content coding: none is asked for (Accept-Encoding: identity), but a proxy may
    still compress; gzip and deflate are undone (to MAX_REPLY_BYTES at most), anything else is said."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return content
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise PermanentError(
            f"the endpoint compressed its answer with {encoding!r}, which Concord did not ask for and "
            "cannot read"
        )
    # gzip; deflate as zlib data, else raw deflate, as some servers send it
    for wbits in (31,) if "gzip" in encoding else (15, -15):
        inflater = zlib.decompressobj(wbits)
        try:
            plain = inflater.decompress(content, MAX_REPLY_BYTES + 1)
        except zlib.error:
            continue
        if len(plain) > MAX_REPLY_BYTES or inflater.unconsumed_tail:
            raise _too_large()
        return plain
    raise TransientError(f"malformed response from the endpoint: its {encoding} body is corrupt")


def _body(text: str) -> Any:
    """An error response's body as the openai client reads it: its JSON, else its text."""
    try:
        return json.loads(text.strip())
    except ValueError:
        return text.strip()


@sensitive_variables("api_key")
def reply_from(completion: Any, *, api_key: str, latency_ms: float = 0.0) -> Reply:
    """A Reply from a chat.completion object (a live reply, or a line of a batch's output file);
    TransientError when it is not one."""
    try:
        return scrubbed(_reply(completion, latency_ms), api_key)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
        raise TransientError(
            f"malformed response from the endpoint: {redact(repr(error), api_key)}"
        ) from None


@contextmanager
@sensitive_variables("api_key")
def endpoint_errors(
    api_key: str, timeout: float, *, seconds: float | None = None, max_bytes: int | None = None
) -> Iterator[None]:
    """An exchange through the openai client (the model list, the Batch API's files and batches): within
    `bounded` (`seconds`, default the timeout; `max_bytes`, default MAX_REPLY_BYTES), its exceptions as
    EndpointErrors."""
    import httpx2
    import openai  # imported on first use: it costs about a second at every process start

    try:
        with bounded(
            seconds=timeout if seconds is None else seconds,
            max_bytes=MAX_REPLY_BYTES if max_bytes is None else max_bytes,
        ):
            yield
    except openai.APIStatusError as error:
        raise _status_error(error, api_key) from None
    except (openai.APITimeoutError, httpx2.TimeoutException):  # a body is read outside the client's own try
        raise TransientError(f"timed out after {timeout:g} s") from None
    except (openai.APIConnectionError, httpx2.TransportError, AnswerTooLarge) as error:
        raise connection_error(error) from None
    except (openai.APIResponseValidationError, json.JSONDecodeError, ValueError) as error:
        raise TransientError(f"malformed response from the endpoint: {redact(str(error), api_key)}") from None


def scrubbed(reply: Reply, api_key: str) -> Reply:
    """The reply without the key or any server secret in its text, before it is cached, stored or shown,
    and storable (`storable`)."""
    if reply.content is not None:
        reply.content = storable(without_secrets(reply.content, api_key))
    reply.refusal = storable(without_secrets(reply.refusal, api_key))
    return reply


def storable(text: str) -> str:
    """The text with any NUL character replaced (U+FFFD): PostgreSQL's text cannot hold one, so an
    endpoint that sends one would otherwise stop its call from being stored."""
    return text.replace("\x00", "\ufffd")


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
        prompt_tokens=token_count(usage.get("prompt_tokens")),
        completion_tokens=token_count(usage.get("completion_tokens")),
        latency_ms=latency_ms,
        reasoning_tokens=token_count(details.get("reasoning_tokens")),
        choices=len(completion["choices"]),
    )


def token_count(value: Any) -> int:
    """A usage count as the columns can hold it: a whole number from 0 to MAX_TOKEN_COUNT (a missing,
    broken or absurd count gives 0 or the bound)."""
    try:
        return min(max(int(value or 0), 0), MAX_TOKEN_COUNT)
    except (TypeError, ValueError, OverflowError):
        return 0


def without_secrets(text: str, api_key: str) -> str:
    """The text with the key and every server secret replaced by ***."""
    if not text:
        return text
    own = {api_key} if len(api_key) >= MIN_SECRET_LENGTH else set()
    for secret in sorted(own | set(server_secrets()), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


@sensitive_variables("api_key")
def _shape(value: Any, api_key: str) -> str:
    """What an answer was, for an error text: its type and start, the key taken out before it is cut (a
    cut through the key would leave most of it)."""
    text = redact(str(value), api_key).strip().replace("\n", " ")
    return f"{type(value).__name__} {text[:60]!r}"


def redact(text: str, api_key: str) -> str:
    """An error text without the key, any server secret, or anything shaped like a key (some endpoints
    echo part of the key they were sent)."""
    text = storable(without_secrets(text, api_key))
    if len(api_key) >= 12:  # masked echoes such as "sk-proj-****abcd"
        text = text.replace(api_key[:6], "***").replace(api_key[-4:], "***")
    return KEY_SHAPE_RE.sub("***", text)


def _status_error(error: openai.APIStatusError, api_key: str) -> EndpointError:
    return status_error(
        error.status_code,
        error.body,
        text=error.response.text,
        headers=error.response.headers,
        api_key=api_key,
    )


def status_error(
    status: int, body: Any, *, text: str, headers: Mapping[str, str], api_key: str
) -> EndpointError:
    """The EndpointError for an HTTP error answer: its status, error body (any provider's shape; `text`
    when none is recognised) and Retry-After headers; nothing of the key or a server secret in it."""
    detail = redact(_error_message(body, text), api_key)
    code, param = _error_fields(body)
    inner = _error_body(body) or {}
    too_long = error_meanings.too_long(
        status,
        f"{code} {inner.get('type')} {detail}",
        n_prompt_tokens=inner.get("n_prompt_tokens"),
        n_ctx=inner.get("n_ctx"),
    )
    if too_long is not None:
        return PromptTooLong(
            f"the prompt is longer than the endpoint's context ({status}): {detail}",
            status=status,
            prompt_tokens=too_long.prompt_tokens,
            context=too_long.context,
        )
    refused = error_meanings.refused_parameter(status, detail) if status not in (401, 403, 404) else None
    if refused is not None and status != 400:
        # A 500 or 422 naming a parameter will repeat: the run adapts or stops, it does not retry.
        return PermanentError(
            f"request refused ({status}): {detail}", status=status, code="unsupported_value", param=refused
        )
    if refused is not None and param is None:
        code, param = "unsupported_value", refused
    load = {
        "overloaded": error_meanings.overloaded(status, detail),
        "proxy_retried": any(name.lower().startswith(PROXY_RETRY_HEADER) for name in headers),
    }
    if status == 429:
        return TransientError(
            f"rate limited (429): {detail}", status=status, retry_after=_retry_after(headers), **load
        )
    if status >= 500 or status in (408, 409):
        return TransientError(
            f"server error ({status}): {detail}", status=status, retry_after=_retry_after(headers), **load
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
    {"type": "error", "error": {...}}, vLLM's flat {"object": "error", "message": ...}, Gemini's
    [{"error": {...}}] and FastAPI's {"detail": "..."} or {"detail": [{"loc": [...], "msg": ...}]}
    (llama-cpp-python's server); None for anything else."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]
    if not isinstance(body, dict):
        return None
    inner = body.get("error", body)
    if isinstance(inner, dict) and inner.get("message"):
        return inner
    if isinstance(body.get("error"), str) and body["error"]:
        return {"message": body["error"]}
    return _fastapi_detail(body.get("detail"))


def _fastapi_detail(detail: Any) -> dict | None:
    """FastAPI's error body as an error object: its text, or each validation error's place and message
    (the first one's place in the request body as `param`)."""
    if isinstance(detail, str) and detail:
        return {"message": detail}
    if not isinstance(detail, list) or not detail:
        return None
    parts, param = [], None
    for entry in detail[:5]:
        if not isinstance(entry, dict):
            continue
        place = [str(part) for part in entry.get("loc") or []]
        if param is None and len(place) > 1 and place[0] == "body":
            param = place[1]
        parts.append(f"{'.'.join(place)}: {entry.get('msg', '')}".strip(": "))
    if not parts:
        return None
    return {"message": "validation error: " + "; ".join(parts), "param": param, "code": "invalid_value"}


def _error_fields(body: Any) -> tuple[str | None, str | None]:
    inner = _error_body(body) or {}
    code, param = inner.get("code"), inner.get("param")
    return (str(code) if code else None), (str(param) if param else None)


def _error_message(body: Any, text: str) -> str:
    inner = _error_body(body)
    if inner is not None:
        return str(inner["message"])
    raw = text.strip().replace("\n", " ")
    return f"an error body Concord does not recognise: {raw[:200]!r}"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the endpoint asks us to wait: `retry-after-ms` (OpenAI, Azure), else `Retry-After` as
    seconds or as an HTTP date (RFC 9110); None when neither says anything usable."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if not raw:
            continue
        try:
            return max(0.0, float(raw) * scale)
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            continue  # neither: our own backoff
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())
    return None


@sensitive_variables("api_key")
def server_props(*, base_url: str, api_key: str, timeout: float = 10.0) -> dict:
    """llama.cpp's GET /props (at the server's root, beside /v1): its slots and each slot's context; {} from
    a server that has none or answers something else."""
    root = base_url.split("?")[0].rstrip("/").removesuffix("/v1")
    client = get_client(base_url=base_url, api_key=api_key, timeout=timeout)
    try:
        with endpoint_errors(api_key, timeout):
            props = client.get(f"{root}/props", cast_to=object)
    except EndpointError:
        return {}
    return props if isinstance(props, dict) else {}


@sensitive_variables("api_key")
def list_models(*, base_url: str, api_key: str, timeout: float = 10.0, azure: bool = False) -> list[dict]:
    """The endpoint's models as [{"id", "owned_by"}]."""
    client = get_client(base_url=base_url, api_key=api_key, timeout=timeout, azure=azure)
    with endpoint_errors(api_key, timeout):
        try:
            page = client.models.list()
        except (AttributeError, TypeError, ValueError) as error:  # some other kind of server
            raise PermanentError(
                f"{base_url}/models is not an OpenAI model list ({redact(str(error), api_key)})"
            ) from None
    return [{"id": model.id, "owned_by": getattr(model, "owned_by", "")} for model in page.data]
