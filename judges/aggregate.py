"""One rating from an item's judge calls: pure functions over the calls' values, no database access."""

from __future__ import annotations

from collections import Counter

from .models import JudgeCall
from .parsing import format_score


def aggregate_calls(calls: list[JudgeCall], *, kind: str, scale_values: list[str]) -> dict:
    """One rating from an item's calls: mean (likert) or majority (categorical, pairwise) of the samples;
    for pairwise with swapped calls, each sample's two verdicts must agree or it counts as SAME."""
    samples = [_sample_detail(call) for call in calls]
    parsed = [call for call in calls if not call.parse_failed and call.value]
    details: dict = {
        "samples": samples,
        "prompt_tokens": sum(c.prompt_tokens for c in calls),
        "completion_tokens": sum(c.completion_tokens for c in calls),
        "latency_ms": round(sum(c.latency_ms or 0 for c in calls), 1),
        "attempts": sum(c.attempts for c in calls),
        "cached": sum(c.cached for c in calls),
    }
    raw = _raw_output(calls)
    if not parsed:
        errors = "; ".join(sorted({c.details.get("parse_error", "unparseable") for c in calls}))
        return {
            "value": "",
            "parse_failed": True,
            "explanation": "",
            "raw_output": raw,
            "details": {**details, "parse_error": errors},
        }
    if kind == "likert":
        scores = [float(c.value) for c in parsed]
        value = format_score(sum(scores) / len(scores))
        argmaxes = Counter(c.details.get("argmax") or c.value for c in parsed)
        details["argmax"] = _majority(argmaxes, scale_values)
    elif kind == "pairwise":
        verdicts, pairs, consistent = _pairwise_verdicts(parsed)
        value = _majority(Counter(verdicts), ["SAME", *scale_values])
        details.update(consistency_pairs=pairs, consistent_pairs=consistent)
    else:
        value = _majority(Counter(c.value for c in parsed), scale_values)
    return {
        "value": value,
        "parse_failed": False,
        "explanation": parsed[0].explanation,
        "raw_output": raw,
        "details": details,
    }


def _pairwise_verdicts(parsed: list[JudgeCall]) -> tuple[list[str], int, int]:
    by_sample: dict[int, dict[bool, str]] = {}
    for call in parsed:
        by_sample.setdefault(call.sample, {})[call.swapped] = call.value
    verdicts, pairs, consistent = [], 0, 0
    for orders in by_sample.values():
        if len(orders) == 2:
            pairs += 1
            if orders[False] == orders[True]:
                consistent += 1
                verdicts.append(orders[False])
            else:
                verdicts.append("SAME")
        else:
            verdicts.extend(orders.values())
    return verdicts, pairs, consistent


def _majority(counts: Counter, order: list[str]) -> str:
    """The most frequent value; a tie goes to the first of the tied values in `order` (SAME for pairwise)."""
    best = max(counts.values())
    tied = [value for value, count in counts.items() if count == best]
    return min(tied, key=lambda v: order.index(v) if v in order else len(order))


def _sample_detail(call: JudgeCall) -> dict:
    detail = {
        "sample": call.sample,
        "swapped": call.swapped,
        "value": call.value or None,
        "parse_failed": call.parse_failed,
        "tokens": call.prompt_tokens + call.completion_tokens,
        "latency_ms": call.latency_ms,
        "attempts": call.attempts,
        "cached": call.cached,
    }
    for key in ("score", "argmax", "parse_error", "logprobs"):
        if key in call.details:
            detail[key] = call.details[key]
    return detail


def _raw_output(calls: list[JudgeCall]) -> str:
    if len(calls) == 1:
        return calls[0].raw_output
    parts = []
    for call in calls:
        order = "swapped" if call.swapped else "original"
        parts.append(f"[sample {call.sample}, {order} order]\n{call.raw_output}")
    return "\n\n".join(parts)
