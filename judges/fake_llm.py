"""Concord's own OpenAI-compatible test server: a simulated model for tests, benchmarks and the offline demo.

One asyncio loop serves HTTP/1.1 with keep-alive, so hundreds of requests can wait out their latency at
once for almost no CPU. Answers are deterministic per request: the choice is seeded by a hash of the
model, messages, `seed` and choice index, and always parses as the rubric's scale (a likert digit in one
of the formats judges really write, a label from a JSON schema enum, or pairwise JSON).

Faults are configured at start (`faults`, `fail_rate`) and can be overridden per request, either
by a query suffix on the model name (``fake-judge?fault=429&fail_rate=1&latency_ms=10``,
``fake-judge?logprobs=0``) or by headers (``X-Fake-Fault``, ``X-Fake-Fail-Rate``,
``X-Fake-Latency-Ms``). Whether a request is faulted is decided by a hash of its body, and a faulted
request fails only on its first `fault_attempts` attempts (0 = always), so transient faults are
retryable and runs stay reproducible.

Served models are named ``fake-*`` and listed with ``owned_by: "concord-fake"``: Concord labels any judge
whose model starts with ``fake-`` as simulated.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl

from .fake_batch import FakeBatches
from .fake_profiles import (
    PROFILES,
    Profile,
    as_received,
    error_body,
    invalid_request,
    refusal,
    spend_reasoning,
    too_long,
    unknown_model,
)

# (status, extra headers, body: JSON-able or raw bytes) of one HTTP answer
Answer = tuple[int, dict[str, str], Any]

OWNED_BY = "concord-fake"
AZURE_API_VERSION = "2024-10-21"
MODEL_PREFIX = "fake-"
LISTED_MODELS = ["fake-judge", "fake-gpt"]
# "busy": llama.cpp's 500 when its slots' shared KV cache is full (too many requests at once)
TRANSIENT_FAULTS = {"429", "500", "busy", "timeout", "malformed"}
CONTENT_FAULTS = {"empty", "refusal", "truncated_json"}
FAULTS = TRANSIENT_FAULTS | CONTENT_FAULTS
REFUSAL_TEXT = "I'm sorry, but I can't help with rating this conversation."
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    413: "Content Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


@dataclass(frozen=True)
class FakeConfig:
    latency_ms: float = 200.0
    fail_rate: float = 0.0
    faults: tuple[str, ...] = ()
    fault_attempts: int = 1
    logprobs: bool = True
    api_key: str | None = None
    retry_after: float = 1.0
    timeout_sleep: float = 60.0
    profile: str = "any"  # a provider profile of judges.fake_profiles
    batch_concurrency: int = 8  # Batch API requests answered at once
    batch_expire_after: int = 0  # a batch expires after this many answered requests (0: never)
    context_tokens: int = 0  # the server's context (n_ctx): a longer request is refused; 0: no limit
    slots: int = 4  # llama.cpp's parallel slots, as its /props says (llama-cpp profile)


@dataclass
class FakeStats:
    requests: int = 0
    completions: int = 0
    faults: Counter = field(default_factory=Counter)
    in_flight: int = 0
    max_in_flight: int = 0


class FakeLLM:
    """The server. `start()` runs it in a daemon thread (tests), `serve()` in the current one (command)."""

    def __init__(self, config: FakeConfig | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or FakeConfig()
        self.host = host
        self.port = port
        self.stats = FakeStats()
        self._attempts: Counter = Counter()
        self.batches = FakeBatches(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def base_url(self) -> str:
        if PROFILES[self.config.profile].azure:
            return f"http://{self.host}:{self.port}/?api-version={AZURE_API_VERSION}"
        return f"http://{self.host}:{self.port}/v1"

    # -- running -------------------------------------------------------------------------------
    async def _main(self, stop_after: float | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            if stop_after is None:
                await self._server.serve_forever()
            else:
                await asyncio.sleep(stop_after)

    def serve(self, *, stop_after: float | None = None) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(self._main(stop_after))

    def start(self, *, stop_after: float | None = 3600.0) -> FakeLLM:
        """Serve in a daemon thread; it stops by itself after `stop_after` seconds."""
        self._thread = threading.Thread(target=self.serve, kwargs={"stop_after": stop_after}, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake LLM server did not start")
        return self

    def stop(self) -> None:
        if self._loop and self._server:
            loop, server = self._loop, self._server

            def close() -> None:
                server.close()
                for task in asyncio.all_tasks(loop):
                    task.cancel()

            loop.call_soon_threadsafe(close)
        if self._thread:
            self._thread.join(5)

    # -- HTTP ----------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                arrived = asyncio.get_running_loop().time()
                status, extra_headers, payload = await self._route(method, path, headers, body, arrived)
                _write_response(writer, status, extra_headers, payload)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, arrived: float
    ) -> Answer:
        self.stats.requests += 1
        profile = PROFILES[self.config.profile]
        path, _, query = path.partition("?")
        path = path.rstrip("/")
        refused = self._refused_key(profile, headers)
        if refused:
            return refused
        if profile.azure:
            deployment = re.fullmatch(r"/openai/deployments/([^/]+)/chat/completions", path)
            if "api-version" not in dict(parse_qsl(query)):
                return 404, {}, {"error": {"code": "404", "message": "Resource not found"}}
            if method == "GET" and path == "/openai/models":
                return 200, {}, _model_list(profile.owned_by)
            if method == "POST" and deployment:
                return await self._completions(headers, body, deployment=deployment.group(1), arrived=arrived)
        elif method == "GET" and path == "/v1/models":
            return 200, {}, _model_list(profile.owned_by)
        elif method == "GET" and path == "/props" and profile.error_shape == "llama-cpp":
            settings = {"n_ctx": self.config.context_tokens or 4096, "n_predict": -1}
            return 200, {}, {"default_generation_settings": settings, "total_slots": self.config.slots}
        elif method == "POST" and path == "/v1/chat/completions":
            return await self._completions(headers, body, arrived=arrived)
        elif profile.batch and (handled := await self.batches.route(method, path, headers, body, query)):
            return handled
        message = f"Unknown path {method} {path}."
        return 404, {}, error_body(profile, 404, message, "invalid_request_error", "not_found")

    def _refused_key(self, profile: Profile, headers: dict[str, str]) -> Answer | None:
        """A 401 unless the configured key came in the profile's header (Azure: api-key)."""
        if self.config.api_key is None:
            return None
        if profile.azure:
            sent = headers.get("api-key", "")
        else:
            sent = headers.get("authorization", "").removeprefix("Bearer ")
        if sent == self.config.api_key:
            return None
        masked = f"{sent[:6]}****{sent[-4:]}" if len(sent) >= 12 else "****"
        message = f"Incorrect API key provided: {masked}."
        return 401, {}, error_body(profile, 401, message, "invalid_request_error", "invalid_api_key")

    async def _completions(
        self,
        headers: dict[str, str],
        body: bytes,
        *,
        deployment: str | None = None,
        arrived: float | None = None,
    ) -> Answer:
        """A chat completion (or its fault) `latency_ms` after the request arrived (`arrived`, the loop's
        clock; default now): the answer is made first and the wait is what is left of the latency, so the
        simulated model's own work does not add to it."""
        loop = asyncio.get_running_loop()
        arrived = loop.time() if arrived is None else arrived
        try:
            request = json.loads(body)
            model = str(request["model"])
            if not isinstance(request["messages"], list):
                raise TypeError("messages must be a list")
        except (ValueError, KeyError, TypeError):
            return (
                400,
                {},
                _error("Body must be JSON with model and messages.", "invalid_request_error", None),
            )
        base_model, config = self._request_config(deployment or model, headers)
        profile = PROFILES[config.profile]
        if not base_model.startswith(MODEL_PREFIX):
            status, error = unknown_model(profile, base_model)
            return status, {}, error
        refused = (
            invalid_request(profile, request)
            or refusal(profile, request)
            or _too_long(profile, request, config)
        )
        if refused:
            return refused[0], {}, refused[1]
        request = as_received(profile, request)
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            fault = self._fault_for(body, config)
            if fault:
                self.stats.faults[fault] += 1
            answer = self._answer(profile, request, base_model, config, fault)
            wait = config.timeout_sleep if fault == "timeout" else config.latency_ms / 1000
            await asyncio.sleep(max(0.0, arrived + wait - loop.time()))
            if answer[0] == 200 and fault != "malformed":
                self.stats.completions += 1
            return answer
        finally:
            self.stats.in_flight -= 1

    def _answer(
        self, profile: Profile, request: dict, base_model: str, config: FakeConfig, fault: str | None
    ) -> Answer:
        if fault == "429":
            headers_out = {
                "Retry-After": _seconds(config.retry_after),
                "retry-after-ms": str(int(config.retry_after * 1000)),
            }
            return (
                429,
                headers_out,
                _error("Rate limit reached (simulated).", "requests", "rate_limit_exceeded"),
            )
        if fault == "500":
            return 500, {}, _error("The server had an error (simulated).", "server_error", None)
        if fault == "busy":
            return (
                500,
                {},
                {
                    "error": {
                        "code": 500,
                        "message": "Context size has been exceeded.",
                        "type": "server_error",
                    }
                },
            )
        if fault == "malformed":
            return 200, {}, b'{"id": "chatcmpl-broken", "choices": [{"message": '
        answer = completion(request, base_model=base_model, fault=fault, logprobs=config.logprobs)
        return 200, {}, spend_reasoning(profile, request, answer)

    def _request_config(self, model: str, headers: dict[str, str]) -> tuple[str, FakeConfig]:
        base_model, _, query = model.partition("?")
        options = dict(parse_qsl(query))
        for name in ("fault", "fail-rate", "latency-ms", "fault-attempts"):
            if f"x-fake-{name}" in headers:
                options.setdefault(name.replace("-", "_"), headers[f"x-fake-{name}"])
        config = self.config
        if "fault" in options:
            faults = tuple(f for f in options["fault"].split(",") if f in FAULTS)
            config = replace(config, faults=faults, fail_rate=1.0)
        if options.get("profile") in PROFILES:
            config = replace(config, profile=options["profile"])
        if options.get("logprobs") in ("0", "false", "no"):
            config = replace(config, logprobs=False)
        if options.get("n_ctx", "").isdigit():
            config = replace(config, context_tokens=int(options["n_ctx"]))
        for key, cast in (
            ("fail_rate", float),
            ("latency_ms", float),
            ("fault_attempts", int),
            ("retry_after", float),
        ):
            if key in options:
                updates: dict[str, Any] = {key: cast(options[key])}
                config = replace(config, **updates)
        return base_model, config

    def _fault_for(self, body: bytes, config: FakeConfig) -> str | None:
        if not config.faults or config.fail_rate <= 0:
            return None
        digest = hashlib.sha256(body).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 >= config.fail_rate:
            return None
        self._attempts[digest] += 1
        if config.fault_attempts and self._attempts[digest] > config.fault_attempts:
            return None
        return config.faults[digest[8] % len(config.faults)]


# -- answers ------------------------------------------------------------------------------------
def completion(request: dict, *, base_model: str, fault: str | None = None, logprobs: bool = True) -> dict:
    """A chat.completion object for `request`, deterministic in its model, messages, seed and n."""
    prompt = "\n".join(str(m.get("content") or "") for m in request["messages"])
    n = max(1, int(request.get("n") or 1))
    want_logprobs = bool(request.get("logprobs")) and logprobs
    top = int(request.get("top_logprobs") or 0)
    choices = []
    for index in range(n):
        seed = _seed(base_model, request["messages"], request.get("seed"), index)
        content, distribution = answer(prompt, request.get("response_format"), seed, plain=want_logprobs)
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        finish = "stop"
        if fault == "empty":
            message["content"] = ""
        elif fault == "refusal":
            message.update(content=None, refusal=REFUSAL_TEXT)
        elif fault == "truncated_json":
            message["content"] = '{"pairwise_choice": "A", "explanation": "Response A is more spec'
            finish = "length"
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": finish,
            "logprobs": None,
        }
        if want_logprobs and message["content"]:
            choice["logprobs"] = {"content": _token_logprobs(message["content"], distribution, top)}
        choices.append(choice)
    completion_tokens = sum(
        _tokens(c["message"]["content"] or c["message"]["refusal"] or "") for c in choices
    )
    prompt_tokens = _tokens(prompt)
    return {
        "id": f"chatcmpl-fake-{_seed(base_model, request['messages'], request.get('seed'), -1) % 10**12}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": base_model,
        "system_fingerprint": OWNED_BY,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def answer(
    prompt: str, response_format: dict[str, Any] | None, seed: int, *, plain: bool = False
) -> tuple[str, dict[str, float] | None]:
    """(content, distribution over score tokens or None) for one choice."""
    kind = (response_format or {}).get("type")
    if kind == "json_schema":
        schema = response_format["json_schema"].get("schema") or {}  # type: ignore[index]
        return json.dumps(_from_schema(schema, prompt, seed)), None
    pairwise = "pairwise_choice" in prompt
    if kind == "json_object":
        if pairwise:
            return json.dumps(_pairwise(seed)), None
        return json.dumps({"score": int(_pick_scale(prompt, seed)), "explanation": _explanation(seed)}), None
    if pairwise:
        data = json.dumps(_pairwise(seed), indent=1)
        return (f"```json\n{data}\n```" if seed % 3 == 0 else data), None
    labels = _labels(prompt)
    if labels:
        return labels[seed % len(labels)], None
    low, high = _scale_range(prompt)
    distribution = _distribution(low, high, seed)
    value = max(distribution, key=lambda v: distribution[v])
    if plain:
        return value, distribution
    styles = [
        value,
        f"Score: {value}",
        f"**{value}**",
        f"{value}/{high}",
        f"{value} - because {_explanation(seed)}",
    ]
    return styles[(seed >> 8) % len(styles)], distribution


def _from_schema(schema: dict, prompt: str, seed: int) -> dict:
    result: dict[str, Any] = {}
    for offset, (name, spec) in enumerate((schema.get("properties") or {}).items()):
        if "enum" in spec:
            result[name] = spec["enum"][(seed >> offset) % len(spec["enum"])]
        elif spec.get("type") in ("integer", "number"):
            result[name] = int(_pick_scale(prompt, seed))
        else:
            result[name] = _explanation(seed)
    return result


def _pairwise(seed: int) -> dict:
    return {"pairwise_choice": ["A", "SAME", "B"][seed % 3], "explanation": _explanation(seed)}


def _explanation(seed: int) -> str:
    reasons = [
        "it stays on topic",
        "it answers the question directly",
        "it repeats an earlier turn",
        "it acknowledges the user's feelings",
        "it is vague",
    ]
    return f"the response is simulated; {reasons[seed % len(reasons)]}."


def _labels(prompt: str) -> list[str]:
    match = re.search(r"one of:\s*(.+)", prompt)
    if not match:
        return []
    return [label.strip(" .\"'") for label in match.group(1).split(",") if label.strip(" .\"'")]


def _scale_range(prompt: str) -> tuple[int, int]:
    match = re.search(r"\((\d+)\s*-\s*(\d+)\)", prompt) or re.search(r"from (\d+) to (\d+)", prompt)
    if match and int(match.group(1)) < int(match.group(2)) <= int(match.group(1)) + 9:
        return int(match.group(1)), int(match.group(2))
    return 1, 5


def _pick_scale(prompt: str, seed: int) -> str:
    low, high = _scale_range(prompt)
    distribution = _distribution(low, high, seed)
    return max(distribution, key=lambda v: distribution[v])


def _distribution(low: int, high: int, seed: int) -> dict[str, float]:
    """A peaked distribution over the scale's values, centred on a hash-chosen value."""
    centre = low + seed % (high - low + 1)
    weights = {str(v): math.exp(-1.5 * abs(v - centre)) for v in range(low, high + 1)}
    total = sum(weights.values())
    return {value: weight / total * 0.95 for value, weight in weights.items()}  # 5% goes to other tokens


def _token_logprobs(content: str, distribution: dict[str, float] | None, top: int) -> list[dict]:
    tokens = re.findall(r"\d|\w+|\s+|[^\w\s]", content) or [content]
    entries = []
    for position, token in enumerate(tokens):
        if position == 0 and distribution and token in distribution:
            alternatives = sorted(distribution.items(), key=lambda kv: -kv[1]) + [(" ", 0.05)]
        else:
            alternatives = [(token, 1.0)]
        tops = [
            {"token": t, "logprob": math.log(p), "bytes": list(t.encode())} for t, p in alternatives[:top]
        ]
        entries.append(
            {
                "token": token,
                "logprob": math.log(dict(alternatives).get(token, 1.0)),
                "bytes": list(token.encode()),
                "top_logprobs": tops,
            }
        )
    return entries


def _seed(model: str, messages: Any, seed: Any, index: int) -> int:
    digest = hashlib.sha256(json.dumps([model, messages, seed, index], sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _too_long(profile: Profile, request: dict, config: FakeConfig) -> tuple[int, Any] | None:
    """The server's refusal of a request longer than its context (`context_tokens`, or ?n_ctx=)."""
    if not config.context_tokens:
        return None
    prompt_tokens = _tokens("\n".join(str(m.get("content") or "") for m in request["messages"]))
    counted = prompt_tokens
    if profile.error_shape != "llama-cpp":  # llama-cpp-python counts the completion's tokens too
        counted += int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)
    return (
        too_long(profile, request, prompt_tokens, config.context_tokens)
        if counted > config.context_tokens
        else None
    )


def _model_list(owned_by: str = OWNED_BY) -> dict:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": owned_by} for name in LISTED_MODELS]
    return {"object": "list", "data": data}


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _error(message: str, kind: str, code: str | None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


def _write_response(writer: asyncio.StreamWriter, status: int, headers: dict[str, str], payload: Any) -> None:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    content_type = headers.pop("Content-Type", "application/json")
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: keep-alive",
    ]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
