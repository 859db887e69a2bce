"""A run that meets a 400 "unsupported parameter" or "unsupported value" adapts once, for all its later
calls: the change is recorded on the run (its page lists it) and every lane builds its requests with it.
What a run may never do is change how it scores: an endpoint that refuses logprobs stops a run that asked
for logprob scoring, with that reason."""

from __future__ import annotations

import re

from django.db import transaction
from django.utils import timezone

from .client import EndpointError
from .models import JudgeRun

# The parameter an endpoint refused -> what the request builder does instead (an `Accepts` change).
CHANGES: dict[str, dict] = {
    "max_tokens": {"token_limit": "max_completion_tokens"},
    "max_completion_tokens": {"token_limit": "max_tokens"},
    "temperature": {"temperature": False},
    "seed": {"seed": False},
    "response_format": {"json_schema": False, "json_object_schema": False},
    "n": {"n": False},
    "reasoning_effort": {"reasoning": False},
}
SCORING_PARAMETERS = {"logprobs", "top_logprobs"}
UNSUPPORTED_CODES = {"unsupported_parameter", "unsupported_value"}
# Providers that send no `param` still name it in the message: "Unsupported parameter: 'max_tokens' ...",
# or, OpenAI's chat models for reasoning_effort, "Unrecognized request argument supplied: reasoning_effort".
MESSAGE_RE = re.compile(
    r"(?:unsupported (?:parameter|value)|unrecognized request arguments? supplied)\W+'?(\w+)'?", re.I
)
CHANGE_WORDS = {
    "token_limit": "the output-token limit is sent as {value}",
    "temperature": "temperature is no longer sent (the endpoint's default applies)",
    "seed": "seed is no longer sent",
    "json_schema": "structured output is replaced by a format instruction in the prompt",
    "json_object_schema": "",  # said with json_schema
    "n": "one reply per request",
    "reasoning": "reasoning_effort is no longer sent",
}


def refused_parameter(error: EndpointError) -> str | None:
    """The request parameter an error refused as unsupported or invalid (a 400 or 422, or a 5xx whose body
    names it: `client.status_error`), or None for any other error."""
    if error.param and error.code in UNSUPPORTED_CODES:
        return error.param
    if error.status not in (400, 422):
        return None
    if error.param and error.code in (None, "invalid_value"):
        return error.param
    match = MESSAGE_RE.search(error.message)
    return match.group(1) if match else None


def describe(change: dict) -> str:
    return "; ".join(
        CHANGE_WORDS[name].format(value=value) for name, value in change.items() if CHANGE_WORDS[name]
    )


def merged(adaptations: list[dict]) -> dict:
    """The `Accepts` changes of a run's recorded adaptations, in order."""
    changes: dict = {}
    for adaptation in adaptations:
        changes.update(adaptation["change"])
    return changes


def record(*, run_id: int, parameter: str, error: EndpointError) -> dict | None:
    """Record that the run stops sending `parameter`; returns the run's merged changes, or None when
    there is nothing to change (a scoring parameter, or one already adapted that failed again)."""
    change = CHANGES.get(parameter)
    if change is None:
        return None
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().only("adaptations").get(pk=run_id)
        if any(a["parameter"] == parameter for a in run.adaptations):
            return merged(run.adaptations)  # another lane got there first: use its change
        if any(a["change"] == change for a in run.adaptations):
            return None  # its replacement was refused too: nothing left to try
        run.adaptations = [
            *run.adaptations,
            {
                "parameter": parameter,
                "change": change,
                "reason": error.message[:300],
                "what": describe(change),
                "at": timezone.now().isoformat(timespec="seconds"),
            },
        ]
        run.save(update_fields=["adaptations"])
    return merged(run.adaptations)


def scoring_refused_message(parameter: str) -> str:
    return (
        f"the endpoint refuses {parameter}, which this run's logprob scoring needs: turn logprob scoring "
        "off on the judge (its score becomes the model's written answer) and launch a new run"
    )


def note_overload(*, run_id: int, cap: int, seconds: float, error: EndpointError) -> None:
    """Say on the run that the endpoint was overloaded and how many requests at once it gets meanwhile
    (the latest cap, in one entry: it changes no request, so `merged` reads nothing from it)."""
    with transaction.atomic():
        run = JudgeRun.objects.select_for_update().only("adaptations").get(pk=run_id)
        kept = [a for a in run.adaptations if a["parameter"] != "concurrency"]
        run.adaptations = [
            *kept,
            {
                "parameter": "concurrency",
                "change": {},
                "reason": error.message[:300],
                "what": f"the endpoint was overloaded: at most {cap} request(s) at once from a worker for "
                f"{seconds:g} s after each such answer (the call it turned away is sent again)",
                "at": timezone.now().isoformat(timespec="seconds"),
            },
        ]
        run.save(update_fields=["adaptations"])
