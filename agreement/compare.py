"""Two model runs side by side on the same items: each against the people, the difference, its paired CI.

A run is a model rater under one rubric version (two judges, or one judge on two versions of a
rubric, e.g. a prompt with examples from disagreements). The people's ratings of the same rubric in
the evaluation are the reference: their majority label (an item whose top labels tie is left out)
or, for likert, their mean. Per item each run scores 1 / 0 for matching the majority, or its
absolute error from the mean; the difference B - A of the means gets a 95% bootstrap interval over
the items both runs rated, resampled together (paired), with the report's fixed seed. Figures are
given on all items, the tune items and the held-out items (agreement.split).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agreement import bootstrap as bs
from agreement import statistics as st
from agreement.reading import RubricRatings, load_ratings
from agreement.split import HELD_OUT, TUNE, held_out
from evaluations.models import Evaluation, Rater, Rating
from rubrics.models import RubricVersion

SEED = 20230601


@dataclass(frozen=True)
class Run:
    version: RubricVersion
    rater: Rater

    @property
    def key(self) -> str:
        return f"{self.version.pk}:{self.rater.pk}"

    def __str__(self) -> str:
        # A judge run's rater name carries its version's label already.
        if self.version.label in self.rater.name:
            return self.rater.name
        return f"{self.rater.name} on {self.version.label}"


def runs_of(evaluation: Evaluation) -> list[Run]:
    """Every (rubric version, model rater) with ratings in the evaluation."""
    pairs: list[tuple[int, int]] = list(
        Rating.objects.filter(evaluation=evaluation, rater__kind=Rater.Kind.MODEL)
        .values_list("rubric_version_id", "rater_id")
        .distinct()
        .order_by()
    )
    versions = RubricVersion.objects.select_related("rubric").in_bulk({v for v, _ in pairs})
    raters = Rater.objects.in_bulk({r for _, r in pairs})
    runs = [Run(versions[v], raters[r]) for v, r in pairs]
    return sorted(runs, key=lambda run: (run.version.rubric.name, run.version.number, run.rater.name))


def find_run(runs: list[Run], key: str) -> Run:
    for run in runs:
        if run.key == key:
            return run
    raise ValueError(f"no model run {key!r} in this evaluation")


def _values(data: RubricRatings, rater_ids: set[int]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    mine = np.isin(data.rater_ids, list(rater_ids)) & np.isfinite(data.values)
    for item, value in zip(data.item_ids[mine].tolist(), data.values[mine].tolist(), strict=True):
        out.setdefault(item, []).append(value)
    return out


def human_raters(data: RubricRatings) -> set[int]:
    """Ids of the people among the raters of `data`."""
    present = set(data.rater_ids.tolist())
    return set(Rater.objects.filter(pk__in=present, kind=Rater.Kind.HUMAN).values_list("pk", flat=True))


def reference_versions(evaluation: Evaluation, version: RubricVersion) -> list[RubricVersion]:
    """The evaluation's own versions of `version`'s rubric (by name: a built-in's project copy counts)."""
    return list(evaluation.rubric_versions.select_related("rubric").filter(rubric__name=version.rubric.name))


def reference(evaluation: Evaluation, version: RubricVersion) -> tuple[RubricRatings, dict[int, float]]:
    """The people's majority code (or likert mean) per item, over the rubric's versions in the evaluation."""
    people: dict[int, list[float]] = {}
    data = None
    for own in reference_versions(evaluation, version):
        data = load_ratings(evaluation=evaluation, version=own)
        humans = human_raters(data)
        for item, values in _values(data, humans).items():
            people.setdefault(item, []).extend(values)
    if data is None:
        raise ValueError(f"the evaluation has no version of rubric {version.rubric.name} for people to rate")
    if data.is_likert:
        return data, {item: float(np.mean(v)) for item, v in people.items()}
    majority = {}
    for item, values in people.items():
        labels, counts = np.unique(values, return_counts=True)
        if (counts == counts.max()).sum() == 1:
            majority[item] = float(labels[counts.argmax()])
    return data, majority


def compare_runs(*, evaluation: Evaluation, a: Run, b: Run, resamples: int = 1000, seed: int = SEED) -> dict:
    if a.version.rubric.name != b.version.rubric.name:
        raise ValueError(f"{a} and {b} rate different rubrics; compare runs of one rubric")
    people_data, truth = reference(evaluation, a.version)
    sides = []
    for run in (a, b):
        data = load_ratings(evaluation=evaluation, version=run.version)
        if data.labels != people_data.labels:
            raise ValueError(f"{run.version} has another scale than the people's {people_data.version}")
        sides.append({item: v[0] for item, v in _values(data, {run.rater.pk}).items()})
    items = np.array(sorted(set(truth) & set(sides[0]) & set(sides[1])), dtype=np.int64)
    ref = np.array([truth[i] for i in items])
    scores = []
    for side in sides:
        values = np.array([side[i] for i in items])
        scores.append(np.abs(values - ref) if people_data.is_likert else (values == ref).astype(np.float64))
    held = held_out(evaluation.pk, items)
    parts = {"all": np.ones(items.shape[0], dtype=bool), TUNE: ~held, HELD_OUT: held}
    result = {
        "rubric": a.version.rubric.name,
        "kind": people_data.kind,
        "metric": "mae" if people_data.is_likert else "agreement_with_majority",
        "a": str(a),
        "b": str(b),
        "parts": {
            name: paired_difference(scores[0][mask], scores[1][mask], resamples=resamples, seed=seed)
            for name, mask in parts.items()
        },
    }
    return {**result, "verdict": verdict(result)}


def verdict(result: dict) -> str:
    """One plain sentence: which run agrees better with the people, on the held-out items when there are
    any (the tune items may have taught a prompt its answers), and whether the paired interval of the
    difference leaves out 0 (beyond the uncertainty) or not (it may be chance)."""
    name = HELD_OUT if result["parts"][HELD_OUT]["items"] else "all"
    part = result["parts"][name]
    n = part["items"]
    where = f"on the {n} held-out item{'s' if n != 1 else ''}" if name == HELD_OUT else f"on all {n} items"
    if not n:
        return "No item has ratings from both runs and the people, so the runs cannot be compared yet."
    mae = result["metric"] == "mae"
    if part["difference"] == 0:
        return f"Both runs agree equally well with the people {where}."
    b_better = part["difference"] < 0 if mae else part["difference"] > 0
    winner, loser = ("b", "a") if b_better else ("a", "b")
    won, lost = part[winner], part[loser]
    figures = (
        f"mean absolute error {won:.3f} against {lost:.3f}"
        if mae
        else f"matches the people's majority on {won:.0%} of them against {lost:.0%}"
    )
    better = f"{result[winner]} agrees better with the people than {result[loser]} {where} ({figures})"
    ci = part["difference_ci"]
    if ci is None:
        return f"{better}; too few items for an interval."
    interval = f"the 95% interval of B − A, {ci[0]:.3f} to {ci[1]:.3f}"
    if ci[0] <= 0 <= ci[1]:
        return (
            f"{better}, but the difference is within the uncertainty ({interval}, includes 0): maybe chance."
        )
    return f"{better}, beyond the uncertainty ({interval}, leaves out 0)."


def paired_difference(a: np.ndarray, b: np.ndarray, *, resamples: int, seed: int) -> dict:
    """Means of per-item scores a and b, and b - a with a bootstrap CI resampling the items together."""
    n = int(a.shape[0])
    if n == 0:
        return {"items": 0, "a": None, "b": None, "difference": None, "difference_ci": None}
    levels, codes = np.unique(np.concatenate([a, b]), return_inverse=True)
    rows = codes.reshape(2, n).T

    def figures(unique: np.ndarray, w: np.ndarray) -> np.ndarray:
        mean_a, mean_b = st.w_mean(levels[unique[:, 0]], w), st.w_mean(levels[unique[:, 1]], w)
        return np.stack([mean_a, mean_b, mean_b - mean_a], axis=1)

    point, ci = bs.bootstrap(rows, figures, resamples=resamples, seed=seed)
    return {
        "items": n,
        "a": float(point[0]),
        "b": float(point[1]),
        "difference": float(point[2]),
        "difference_ci": None if ci is None else [float(ci[2][0]), float(ci[2][1])],
    }
