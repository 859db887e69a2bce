"""Reading one rubric's current ratings (one values_list query) and the items' metadata for slices."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from django.apps import apps
from django.db.models import TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from datasets.models import Item
from evaluations.models import Evaluation, Rater, Rating
from rubrics.models import RubricVersion

from . import db


@dataclass(frozen=True)
class RubricRatings:
    """Every current rating of one rubric version in an evaluation, as parallel arrays."""

    version: RubricVersion
    kind: str
    labels: list[str]  # category labels in scale order (kappa codes index these)
    label_values: np.ndarray  # numeric value of each label (likert), else positions
    item_ids: np.ndarray
    rater_ids: np.ndarray
    values: np.ndarray  # float value (likert) or category code (categorical, pairwise); NaN if unusable
    levels: np.ndarray  # the distinct usable values, sorted (some may be left out by only_items)
    value_codes: np.ndarray  # each rating's index into levels; -1 where values is NaN
    parse_failed: np.ndarray
    invalid: np.ndarray

    @property
    def is_likert(self) -> bool:
        return self.kind == "likert"

    def only_items(self, item_ids: np.ndarray) -> RubricRatings:
        keep = np.isin(self.item_ids, item_ids)
        return replace(
            self,
            item_ids=self.item_ids[keep],
            rater_ids=self.rater_ids[keep],
            values=self.values[keep],
            value_codes=self.value_codes[keep],
            parse_failed=self.parse_failed[keep],
            invalid=self.invalid[keep],
        )


def load_ratings(
    *, evaluation: Evaluation, version: RubricVersion, raters: list[int] | None = None
) -> RubricRatings:
    """Every current rating of `version` in `evaluation` (`db.read_ratings`); `raters`: the project's rater
    ids, when the caller has them already (else read here)."""
    ratings = Rating.objects.filter(evaluation=evaluation, rubric_version=version)
    if raters is None:
        raters = list(Rater.objects.filter(project_id=evaluation.project_id).values_list("pk", flat=True))
    item_ids, rater_ids, texts, text_codes, failed = db.read_ratings(ratings, raters=raters)
    kind = version.rubric.kind
    labels, label_values = scale_of(version)
    values, levels, value_codes, invalid, labels, label_values = _parse_values(
        texts, text_codes, failed, kind, labels, label_values
    )
    return RubricRatings(
        version=version,
        kind=kind,
        labels=labels,
        label_values=label_values,
        item_ids=item_ids,
        rater_ids=rater_ids,
        values=values,
        levels=levels,
        value_codes=value_codes,
        parse_failed=failed,
        invalid=invalid,
    )


def scale_of(version: RubricVersion) -> tuple[list[str], np.ndarray]:
    labels = [str(value) for value in version.scale_values]
    if version.rubric.kind == "likert":
        try:
            numbers = np.array([float(label) for label in labels])
        except ValueError:
            numbers = np.arange(len(labels), dtype=np.float64)
        order = np.argsort(numbers, kind="stable")
        return [labels[n] for n in order], numbers[order]
    return labels, np.arange(len(labels), dtype=np.float64)


def _parse_values(
    unique: list[str],
    inverse: np.ndarray,
    failed: np.ndarray,
    kind: str,
    labels: list[str],
    label_values: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Ratings' text (distinct texts and each rating's index) as floats (likert) or codes: (values, their
    distinct usable levels, each rating's index into them or -1, invalid, labels, label values), each
    distinct text parsed and placed once.

    Values that do not parse are counted as invalid.
    """
    values = np.full(inverse.shape[0], np.nan)
    invalid = np.zeros(inverse.shape[0], dtype=bool)
    if not unique:
        return values, np.zeros(0), np.full(inverse.shape[0], -1), invalid, labels, label_values
    mapped = np.full(len(unique), np.nan)
    if kind == "likert":
        for n, text in enumerate(unique):
            mapped[n] = _number(text)
    else:
        index = {label: n for n, label in enumerate(labels)}
        extra = sorted({str(t) for t in unique if t and t not in index})
        for label in extra:  # a label outside the scale is shown as its own category, never dropped
            index[label] = len(labels)
            labels = [*labels, label]
        label_values = np.arange(len(labels), dtype=np.float64)
        mapped = np.array([index.get(str(t), np.nan) if t else np.nan for t in unique], dtype=np.float64)
    values = mapped[inverse]
    bad = ~np.isfinite(values) & ~failed
    invalid[bad] = True
    values[failed] = np.nan
    usable = np.isfinite(mapped)
    levels = np.unique(mapped[usable])
    text_codes = np.full(len(unique), -1, dtype=np.int64)
    text_codes[usable] = np.searchsorted(levels, mapped[usable])
    value_codes = text_codes[inverse]
    value_codes[failed] = -1
    return values, levels, value_codes, invalid, labels, label_values


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return np.nan


def _metadata_text(key: str) -> Cast:
    # Cast to text so `=` compares text on every backend (SQLite would otherwise parse the value as JSON).
    return Cast(KeyTextTransform(key, "metadata"), output_field=TextField())


def items_matching(*, evaluation: Evaluation, where: dict[str, str]) -> np.ndarray:
    """Ids of the evaluation's items whose metadata has key = value for every pair in `where`."""
    queryset = evaluation.items()
    for n, (key, value) in enumerate(sorted(where.items())):
        alias = f"meta_value_{n}"
        queryset = queryset.annotate(**{alias: _metadata_text(key)}).filter(**{alias: value})
    return np.array(list(queryset.values_list("id", flat=True)), dtype=np.int64)


def metadata_values(*, evaluation: Evaluation, key: str) -> dict[str, np.ndarray]:
    """{value: item ids} for one metadata key over the evaluation's items (items without it left out)."""
    rows = (
        Item.objects.filter(dataset_id=evaluation.dataset_id)
        .annotate(meta_value=_metadata_text(key))
        .exclude(meta_value=None)
        .values_list("meta_value", "id")
    )
    groups: dict[str, list[int]] = {}
    for value, item_id in rows:
        groups.setdefault(str(value), []).append(item_id)
    return {value: np.array(ids, dtype=np.int64) for value, ids in sorted(groups.items())}


def metadata_keys(*, evaluation: Evaluation, sample: int = 200) -> list[str]:
    """Metadata keys seen on the first items of the dataset, for the page's filter."""
    keys: set[str] = set()
    for metadata in Item.objects.filter(dataset_id=evaluation.dataset_id).values_list("metadata", flat=True)[
        :sample
    ]:
        if isinstance(metadata, dict):
            keys.update(k for k, v in metadata.items() if isinstance(v, str | int | float | bool))
    return sorted(keys)


def rater_directory(evaluation: Evaluation) -> dict[int, dict]:
    """{rater id: {"name", "kind", "judge_run", "simulated"}} for the evaluation's project."""
    raters: dict[int, dict[str, Any]] = {
        pk: {"name": name, "kind": kind, "judge_run": None, "simulated": False}
        for pk, name, kind in Rater.objects.filter(project_id=evaluation.project_id).values_list(
            "pk", "name", "kind"
        )
    }
    try:
        judge_run = apps.get_model("judges", "JudgeRun")
    except LookupError:
        return raters
    runs = judge_run.objects.filter(rater__project_id=evaluation.project_id)
    for rater_id, run_id, simulated in runs.values_list("rater_id", "pk", "parameters__simulated"):
        if rater_id in raters:
            # A run against Concord's simulated model is labelled so wherever its figures appear.
            raters[rater_id].update(judge_run=run_id, simulated=bool(simulated))
    return raters
