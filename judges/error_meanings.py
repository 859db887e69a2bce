"""What an endpoint's error answer means, read from its body rather than its status alone.

Real servers say the same thing with different statuses: llama-cpp-python answers a `response_format` it
cannot take with HTTP 500 and a validation error, older llama.cpp with 500 "response_format type must be
one of ...", FastAPI with 422 and a `detail` list; a prompt longer than the server's context comes back as
400 `exceed_context_size_error` (llama.cpp), 400 `context_length_exceeded` (llama-cpp-python, OpenAI);
an overloaded server as 429, 503 or llama.cpp's 500 "Context size has been exceeded." (its slots share one
KV cache). Pure functions over the status and the error text, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Request parameters Concord sends that an endpoint may refuse (`adapting.CHANGES`, and the scoring ones).
PARAMETERS = (
    "response_format",
    "max_completion_tokens",
    "max_tokens",
    "reasoning_effort",
    "top_logprobs",
    "logprobs",
    "temperature",
    "seed",
    "n",
)
# FastAPI / pydantic: a location such as ('body', 'response_format', 'type') or ["body", "seed"].
LOCATION_RE = re.compile(r"""['"]loc['"]\s*:\s*[\[(]\s*['"]body['"]\s*,\s*['"](\w+)['"]""")
# Words that make a named parameter a refusal, not a mention ("validation error", "must be one of", ...).
REFUSAL_WORDS_RE = re.compile(
    r"validation error|literal_error|extra_forbidden|input should be|must be one of|not supported|"
    r"unsupported|unrecognized|not allowed|invalid value|is invalid|unknown (?:field|parameter)",
    re.I,
)
TOO_LONG_RE = re.compile(
    r"exceed_context_size_error|context_length_exceeded|exceeds the available context size|"
    r"maximum context length is|prompt is too long|input is too long for",
    re.I,
)
# (prompt tokens, context size) as llama.cpp, llama-cpp-python and OpenAI word them.
TOO_LONG_NUMBERS = (
    re.compile(
        r"request \((?P<prompt>\d+) tokens\) exceeds the available context size \((?P<context>\d+) tokens"
    ),
    re.compile(
        r"maximum context length is (?P<context>\d+) tokens.*?\((?P<prompt>\d+) in the messages", re.S
    ),
    re.compile(
        r"maximum context length is (?P<context>\d+) tokens.*?resulted in (?P<prompt>\d+) tokens", re.S
    ),
)
# llama.cpp's slots share one KV cache: a 500 saying it is full comes from concurrency, not this request.
OVERLOAD_RE = re.compile(r"context size has been exceeded|server is busy|overloaded|no slot available", re.I)


@dataclass(frozen=True)
class TooLong:
    prompt_tokens: int | None
    context: int | None


def refused_parameter(status: int, message: str) -> str | None:
    """The request parameter an error answer (4xx or 5xx) refuses as invalid or unsupported, or None."""
    if status < 400:
        return None
    located = LOCATION_RE.search(message)
    if located and located.group(1) in PARAMETERS:
        return located.group(1)
    if not REFUSAL_WORDS_RE.search(message) or too_long(status, message) is not None:
        return None
    named = [(match.start(), name) for name in PARAMETERS if (match := re.search(rf"\b{name}\b", message))]
    return min(named)[1] if named else None


def too_long(
    status: int, message: str, *, n_prompt_tokens: object = None, n_ctx: object = None
) -> TooLong | None:
    """The prompt was longer than the server's context (and how long, where the answer says), or None."""
    if status not in (400, 413, 422) or not TOO_LONG_RE.search(message):
        return None
    prompt, context = _whole(n_prompt_tokens), _whole(n_ctx)
    for pattern in TOO_LONG_NUMBERS:
        if (match := pattern.search(message)) is not None:
            prompt = prompt or int(match.group("prompt"))
            context = context or int(match.group("context"))
            break
    return TooLong(prompt, context)


def overloaded(status: int, message: str) -> bool:
    """The server turned the request away for load (429, 503, llama.cpp's full KV cache): fewer requests
    at once help, sending the same again at once does not."""
    return status in (429, 503) or (status >= 500 and bool(OVERLOAD_RE.search(message)))


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
