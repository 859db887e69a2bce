"""Canonical rating values: what an imported (or typed) answer means under a rubric version's scale.

- likert: a number equal to one of the scale's values ("4", "4.0", " 4 " -> "4"). A model rater
  (a judge) may also give any number inside the scale's range, e.g. a probability-weighted "3.72",
  which Rating stores as the number's shortest text; people must pick a scale value.
- categorical: one of the scale's values or labels, case-insensitively -> the value.
- pairwise: A = baseline better, B = response better, SAME = comparable. Accepted spellings, in any
  case: a / model_a / response a; b / model_b / response b; same / tie / tied / equal / draw / = /
  tie (bothbad). Numbers (0, 1, 2) are refused: which response "1" means differs between studies,
  so the file must say A, SAME or B in Concord's orientation.
"""

from __future__ import annotations

import math

from rubrics.models import Rubric, RubricVersion

PAIRWISE_SPELLINGS = {
    "a": "A", "model_a": "A", "response a": "A",
    "b": "B", "model_b": "B", "response b": "B",
    "same": "SAME", "tie": "SAME", "tied": "SAME", "equal": "SAME", "draw": "SAME", "=": "SAME",
    "tie (bothbad)": "SAME",
}  # fmt: skip


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _likert(version: RubricVersion, raw: str, *, fractional: bool) -> str:
    values = version.scale_values
    if raw in values:
        return raw
    number = _number(raw)
    if number is None:
        raise ValueError(f"'{raw}' is not a number on the scale {', '.join(values)}")
    numeric = [(value, _number(value)) for value in values]
    for value, scale_number in numeric:
        if scale_number is not None and scale_number == number:
            return value
    bounds = [scale_number for _, scale_number in numeric if scale_number is not None]
    if fractional and bounds and min(bounds) <= number <= max(bounds):
        return str(number)
    allowed = f"one of {', '.join(values)}"
    if fractional and bounds:
        allowed += f" or a number from {values[0]} to {values[-1]}"
    raise ValueError(f"'{raw}' is outside the scale: expected {allowed}")


def _categorical(version: RubricVersion, raw: str) -> str:
    lowered = raw.lower()
    for option in version.scale:
        if lowered in {str(option["value"]).lower(), str(option.get("label", "")).lower()}:
            return str(option["value"])
    raise ValueError(f"'{raw}' is not on the scale: expected one of {', '.join(version.scale_values)}")


def _pairwise(version: RubricVersion, raw: str) -> str:
    values = version.scale_values
    if raw in values:
        return raw
    canonical = PAIRWISE_SPELLINGS.get(raw.lower())
    if canonical in values:
        return canonical
    hint = (
        " (numbers are ambiguous: write A for the baseline, B for the response)"
        if _number(raw) is not None
        else ""
    )
    raise ValueError(f"'{raw}' is not a pairwise choice: expected one of {', '.join(values)}{hint}")


def canonical_value(version: RubricVersion, raw: object, *, rater_kind: str = "human") -> str:
    """The canonical text of `raw` under `version`'s scale; ValueError says why it does not fit."""
    text = "" if raw is None else str(raw).strip()
    if not text:
        raise ValueError("the value is empty")
    kind = version.rubric.kind
    if kind == Rubric.Kind.LIKERT:
        return _likert(version, text, fractional=rater_kind == "model")
    if kind == Rubric.Kind.PAIRWISE:
        return _pairwise(version, text)
    return _categorical(version, text)


def swap_sides(value: str) -> str:
    """A pairwise value read from the other side: A <-> B; SAME and anything else unchanged."""
    return {"A": "B", "B": "A"}.get(value, value)


def value_as_shown(value: str, left_was: str) -> str:
    """A canonical pairwise value (A = baseline) in the letters the rater saw (A = their left card).

    `left_was` is what the rater saw on the left ("baseline" or "response"; empty when unknown or
    not pairwise): with the response on the left the letters swap, otherwise they are the same.
    """
    return swap_sides(value) if left_was == "response" else value


def value_from_shown(shown: str, left_was: str) -> str:
    """The canonical value of a pairwise choice made in on-screen letters (the inverse of value_as_shown)."""
    return swap_sides(shown) if left_was == "response" else shown
