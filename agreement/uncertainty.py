"""How unsure the judges are about each item, for the rating queue's "judge least sure first" order.

Three signals, each from 0 (sure) to 1, from the current model ratings of the evaluation:

- sample disagreement: the share of a rating's samples (and swapped orders) whose value is not
  the most common one;
- logprob spread: for a likert score from logprobs, the distance between the expected score and
  the most probable scale point, over half the scale's step count (0 when the mass is on one point);
- judges disagreeing: the share of the model raters of an item (one rubric version) whose label
  (likert: nearest scale point) is not the most common one.

An item's uncertainty is the largest signal over its rubric versions. People then rate the items
the judges are least sure about first: a label there teaches the most about the judge.
"""

from __future__ import annotations

from collections import Counter

from evaluations.models import Evaluation, Rater, Rating

# The rank packs (1 - uncertainty) in millionths above 40 bits of the shuffled order (ties broken
# by the evaluation's fixed shuffle), so a smaller rank is a less sure item; all within 60 bits.
_STEPS = 1_000_000
_TIE_BITS = 40


def off_mode(labels: list[str]) -> float:
    """Share of the labels that are not the most common one (0 for fewer than two)."""
    if len(labels) < 2:
        return 0.0
    return 1.0 - Counter(labels).most_common(1)[0][1] / len(labels)


def _nearest(value: str, scale: list[float]) -> str:
    try:
        number = float(value)
    except ValueError:
        return value
    return str(min(scale, key=lambda point: (abs(point - number), -point))) if scale else value


def rating_uncertainty(details: dict, scale: list[float]) -> float:
    """Sample disagreement and logprob spread of one judge rating (its `details`)."""
    samples = [s.get("value") for s in details.get("samples") or [] if s.get("value")]
    signals = [off_mode([_nearest(v, scale) for v in samples])]
    steps = (len(scale) - 1) / 2 if len(scale) > 1 else 0
    for sample in details.get("samples") or []:
        if steps and isinstance(sample.get("score"), int | float) and sample.get("argmax") is not None:
            try:
                spread = abs(float(sample["score"]) - float(sample["argmax"]))
            except ValueError:
                continue
            signals.append(min(1.0, spread / steps))
    return max(signals)


def item_uncertainty(evaluation: Evaluation) -> dict[int, float]:
    """{item id: uncertainty} over the evaluation's current model ratings (items without any: absent)."""
    scales: dict[int, list[float]] = {}
    for version in evaluation.judge_versions().select_related("rubric"):
        try:
            likert = version.kind == "likert"
            scales[version.pk] = sorted(float(v) for v in version.scale_values) if likert else []
        except ValueError:
            scales[version.pk] = []
    ratings = Rating.objects.filter(evaluation=evaluation, rater__kind=Rater.Kind.MODEL, parse_failed=False)
    labels: dict[tuple[int, int], list[str]] = {}
    out: dict[int, float] = {}
    rows = ratings.values_list("item_id", "rubric_version_id", "value", "details")
    for item, version_id, value, details in rows.iterator(chunk_size=5000):
        scale = scales.get(version_id, [])
        labels.setdefault((item, version_id), []).append(_nearest(value, scale))
        out[item] = max(out.get(item, 0.0), rating_uncertainty(details or {}, scale))
    for (item, _), given in labels.items():
        out[item] = max(out[item], off_mode(given))
    return out


def unsure_first_rank(uncertainty: float, shuffled: int) -> int:
    """Queue rank: less sure first, then the evaluation's fixed shuffle (60-bit `shuffled`)."""
    sure = round((1.0 - min(1.0, max(0.0, uncertainty))) * _STEPS)
    return (sure << _TIE_BITS) | (shuffled >> (60 - _TIE_BITS))
