"""The agreement report of an evaluation: read current ratings, hand arrays to agreement.statistics.

One query per rubric version reads every current rating as plain tuples (item, rater, value,
parse_failed); everything after that is NumPy. The JSON shape is documented in docs/agreement.md.

Conventions (also in docs/agreement.md):
- Parse failures and invalid values are counted per rater and never enter a figure.
- Likert: kappa, percent agreement and the confusion matrix use scale points; a judge's
  fractional score ("3.72") is rounded to the nearest scale point for those, and the human mean
  is rounded half up. Correlations, MAE, bias and within-one use the numbers as they are.
- Categorical and pairwise: the human majority is the single most frequent label on an item; an
  item whose top labels tie has no majority and is left out of the vs_majority figures.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from functools import cached_property
from operator import itemgetter
from typing import Any

import numpy as np
from django.apps import apps
from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection
from django.db.models import TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from agreement import statistics as st
from datasets.models import Item
from evaluations.models import Evaluation, Rater, Rating
from rubrics.models import RubricVersion

PAIRWISE_TIE = "SAME"
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 20230601


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
            parse_failed=self.parse_failed[keep],
            invalid=self.invalid[keep],
        )


# --- Reading ---------------------------------------------------------------------------------


def load_ratings(*, evaluation: Evaluation, version: RubricVersion) -> RubricRatings:
    """Every current rating of `version` in `evaluation`, in one values_list query."""
    ratings = Rating.objects.filter(evaluation=evaluation, rubric_version=version)
    if connection.vendor == "postgresql":
        item_ids, rater_ids, texts, text_codes, failed = _read_grouped(ratings)
    else:
        item_ids, rater_ids, texts, text_codes, failed = _read_rows(ratings)
    kind = version.rubric.kind
    labels, label_values = scale_of(version)
    values, invalid, labels, label_values = _parse_values(
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
        parse_failed=failed,
        invalid=invalid,
    )


def _read_grouped(ratings) -> tuple:
    """PostgreSQL: one row per distinct (value, parse_failed) with the item and rater ids as arrays.

    A rubric has a handful of distinct values, so this moves a few arrays instead of one Python
    tuple per rating: the same ratings, read in about half the time.
    """
    groups = list(
        ratings.values_list("value", "parse_failed")
        .annotate(items=ArrayAgg("item_id"), raters=ArrayAgg("rater_id"))
        .order_by()
    )
    sizes = [len(group[2]) for group in groups]
    empty = np.zeros(0, dtype=np.int64)
    item_ids = np.concatenate([np.array(g[2], dtype=np.int64) for g in groups]) if groups else empty
    rater_ids = np.concatenate([np.array(g[3], dtype=np.int64) for g in groups]) if groups else empty
    text_codes = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
    failed = np.repeat(np.array([bool(g[1]) for g in groups], dtype=bool), sizes)
    return item_ids, rater_ids, [g[0] for g in groups], text_codes, failed


def _read_rows(ratings) -> tuple:
    """Any database: one tuple per rating, taken apart column by column (cheaper than zip(*rows))."""
    rows = list(ratings.values_list("item_id", "rater_id", "value", "parse_failed"))
    count = len(rows)
    seen: dict[str, int] = {}
    text_codes = np.fromiter(
        (seen.setdefault(text, len(seen)) for text in map(itemgetter(2), rows)), dtype=np.int64, count=count
    )
    return (
        np.fromiter(map(itemgetter(0), rows), dtype=np.int64, count=count),
        np.fromiter(map(itemgetter(1), rows), dtype=np.int64, count=count),
        list(seen),
        text_codes,
        np.fromiter(map(itemgetter(3), rows), dtype=bool, count=count),
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
):
    """Ratings' text (distinct texts and each rating's index) as floats (likert) or codes.

    Values that do not parse are counted as invalid.
    """
    values = np.full(inverse.shape[0], np.nan)
    invalid = np.zeros(inverse.shape[0], dtype=bool)
    if not unique:
        return values, invalid, labels, label_values
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
    return values, invalid, labels, label_values


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
    queryset = Item.objects.filter(dataset_id=evaluation.dataset_id)
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
    """{rater id: {"name", "kind", "judge_run"}} for the evaluation's project."""
    raters: dict[int, dict[str, Any]] = {
        pk: {"name": name, "kind": kind, "judge_run": None}
        for pk, name, kind in Rater.objects.filter(project_id=evaluation.project_id).values_list(
            "pk", "name", "kind"
        )
    }
    try:
        judge_run = apps.get_model("judges", "JudgeRun")
    except LookupError:
        return raters
    for rater_id, run_id in judge_run.objects.filter(rater__project_id=evaluation.project_id).values_list(
        "rater_id", "pk"
    ):
        if rater_id in raters:
            raters[rater_id]["judge_run"] = run_id
    return raters


# --- Building the report ---------------------------------------------------------------------


def build_report(
    *,
    evaluation: Evaluation,
    rubric: str | None = None,
    where: dict[str, str] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    disagreements: int = 20,
) -> dict:
    """The whole report of an evaluation (optionally one rubric, optionally a metadata slice)."""
    versions = evaluation_versions(evaluation=evaluation, rubric=rubric)
    raters = rater_directory(evaluation)
    selected = items_matching(evaluation=evaluation, where=where) if where else None
    total_items = Item.objects.filter(dataset_id=evaluation.dataset_id).count() if selected is None else None
    blocks = []
    for version in versions:
        data = load_ratings(evaluation=evaluation, version=version)
        _add_unknown_raters(raters, data)
        if selected is not None:
            data = data.only_items(selected)
        n_items = total_items if selected is None else int(selected.shape[0])
        blocks.append(
            rubric_report(
                data,
                raters=raters,
                items=int(n_items or 0),
                overlap=evaluation.overlap,
                resamples=resamples,
                seed=seed,
                disagreements=disagreements,
            )
        )
    _attach_external_ids(blocks)
    report = {
        "evaluation": evaluation.name,
        "project": evaluation.project.slug,
        "where": where or {},
        "rubrics": blocks,
    }
    return finite_only(report)


def build_reports_by(
    *,
    evaluation: Evaluation,
    by: str,
    rubric: str | None = None,
    where: dict[str, str] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict:
    """One report per value of metadata key `by`, reading each rubric's ratings once."""
    versions = evaluation_versions(evaluation=evaluation, rubric=rubric)
    raters = rater_directory(evaluation)
    groups = metadata_values(evaluation=evaluation, key=by)
    if where:
        allowed = items_matching(evaluation=evaluation, where=where)
        groups = {value: ids[np.isin(ids, allowed)] for value, ids in groups.items()}
    slices: dict[str, list[dict]] = {value: [] for value in groups}
    for version in versions:
        data = load_ratings(evaluation=evaluation, version=version)
        _add_unknown_raters(raters, data)
        for value, ids in groups.items():
            slices[value].append(
                rubric_report(
                    data.only_items(ids),
                    raters=raters,
                    items=int(ids.shape[0]),
                    overlap=evaluation.overlap,
                    resamples=resamples,
                    seed=seed,
                    disagreements=0,
                )
            )
    return finite_only(
        {
            "evaluation": evaluation.name,
            "project": evaluation.project.slug,
            "where": where or {},
            "by": by,
            "slices": [
                {"value": value, "where": {**(where or {}), by: value}, "rubrics": blocks}
                for value, blocks in slices.items()
            ],
        }
    )


def _add_unknown_raters(raters: dict[int, dict], data: RubricRatings) -> None:
    """Raters of another project can only appear through odd imports; name them rather than fail."""
    unknown = set(np.unique(data.rater_ids).tolist()) - raters.keys()
    for pk, name, kind in Rater.objects.filter(pk__in=unknown).values_list("pk", "name", "kind"):
        raters[pk] = {"name": name, "kind": kind, "judge_run": None}


def finite_only(value):
    """The report with every NaN or infinity replaced by None, so it is valid JSON everywhere."""
    if isinstance(value, dict):
        return {key: finite_only(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_only(item) for item in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def evaluation_versions(*, evaluation: Evaluation, rubric: str | None) -> list[RubricVersion]:
    versions = list(evaluation.rubric_versions.select_related("rubric").order_by("rubric__name", "number"))
    if rubric is None:
        return versions
    chosen = [v for v in versions if v.rubric.name == rubric or str(v) == rubric]
    if not chosen:
        names = ", ".join(str(v) for v in versions) or "none"
        raise ValueError(f"evaluation {evaluation.name!r} has no rubric {rubric!r} (it has: {names})")
    return chosen


def _attach_external_ids(blocks: list[dict]) -> None:
    wanted = {entry["item_id"] for block in blocks for entry in block["disagreements"]}
    if not wanted:
        return
    names = dict(Item.objects.filter(pk__in=wanted).values_list("pk", "external_id"))
    for block in blocks:
        for entry in block["disagreements"]:
            entry["external_id"] = names.get(entry["item_id"], "")


# --- One rubric ------------------------------------------------------------------------------


@dataclass
class Matrix:
    """Ratings of one rubric as an (items, raters) matrix: numeric values and category codes."""

    item_ids: np.ndarray
    rater_ids: list[int]
    values: np.ndarray  # float, NaN where missing (likert numbers, or category codes)
    codes: np.ndarray  # int category code (likert: nearest scale point), -1 where missing
    levels: np.ndarray  # the distinct values, sorted
    value_codes: np.ndarray  # int index into levels, -1 where missing


def to_matrix(data: RubricRatings, rater_ids: list[int]) -> Matrix:
    usable = np.isfinite(data.values)
    item_ids, rows = np.unique(data.item_ids[usable], return_inverse=True)
    order = np.argsort(np.array(rater_ids, dtype=np.int64))
    ordered = np.array(rater_ids, dtype=np.int64)[order]
    cols = order[np.searchsorted(ordered, data.rater_ids[usable])]
    values = np.full((item_ids.shape[0], len(rater_ids)), np.nan)
    values[rows, cols] = data.values[usable]
    levels, inverse = np.unique(data.values[usable], return_inverse=True)
    value_codes = np.full(values.shape, -1, dtype=np.int64)
    value_codes[rows, cols] = inverse
    return Matrix(item_ids, rater_ids, values, category_codes(values, data), levels, value_codes)


def category_codes(values: np.ndarray, data: RubricRatings) -> np.ndarray:
    """Category code of each value: the label itself, or for likert the nearest scale point (half up)."""
    codes = np.full(values.shape, -1, dtype=np.int64)
    present = np.isfinite(values)
    if not data.is_likert:
        codes[present] = values[present].astype(np.int64)
        return codes
    points = data.label_values
    if points.shape[0] == 0:
        return codes
    if points.shape[0] == 1:
        codes[present] = 0
        return codes
    v = values[present]
    upper = np.clip(np.searchsorted(points, v, side="left"), 1, points.shape[0] - 1)
    # The nearer of the two neighbouring points; exactly half-way goes to the higher one.
    codes[present] = np.where(v - points[upper - 1] >= points[upper] - v, upper, upper - 1)
    return codes


def rubric_report(
    data: RubricRatings,
    *,
    raters: dict[int, dict],
    items: int,
    overlap: int,
    resamples: int,
    seed: int,
    disagreements: int,
) -> dict:
    version = data.version
    present = sorted(set(data.rater_ids.tolist()), key=lambda r: (raters[r]["kind"], raters[r]["name"]))
    humans = [r for r in present if raters[r]["kind"] == "human"]
    models = [r for r in present if raters[r]["kind"] != "human"]
    matrix = to_matrix(data, humans + models)
    human_cols = list(range(len(humans)))
    context = Context(data=data, matrix=matrix, human_cols=human_cols, resamples=resamples, seed=seed)
    human_ratings = int(np.isfinite(matrix.values[:, human_cols]).sum()) if humans else 0
    block: dict[str, Any] = {
        "rubric": version.rubric.name,
        "version": version.number,
        "kind": data.kind,
        "items": items,
        "labels": data.labels,
        "ratings": {
            "human": human_ratings,
            "model": int(np.isfinite(matrix.values[:, len(humans) :]).sum()),
            "parse_failures": int(data.parse_failed.sum()),
            "invalid": int(data.invalid.sum()),
        },
        "missing": {
            "human_ratings": max(0, items * overlap - human_ratings),
            "items_without_human_rating": max(0, items - _items_with(matrix, human_cols, 1)),
            "items_with_one_human_rating": _items_exactly(matrix, human_cols, 1),
        },
        "human_human": human_human(context, [raters[r]["name"] for r in humans]),
        "humans": human_summaries(context, [raters[r]["name"] for r in humans]),
        "raters": [],
        "distribution": {"human": distribution(matrix.codes[:, human_cols], len(data.labels))},
        "disagreements": [],
    }
    for offset, rater_id in enumerate(models):
        col = len(humans) + offset
        info = raters[rater_id]
        mine = data.rater_ids == rater_id
        entry = model_report(context, col)
        entry = {
            "rater": info["name"],
            "kind": "model",
            "judge_run": info["judge_run"],
            "rated": int(np.isfinite(matrix.values[:, col]).sum()),
            "parse_failures": int((data.parse_failed & mine).sum()),
            "invalid": int((data.invalid & mine).sum()),
            "missing": max(0, items - int(mine.sum())),
            **entry,
        }
        block["raters"].append(entry)
        block["distribution"][info["name"]] = distribution(matrix.codes[:, [col]], len(data.labels))
        if disagreements:
            block["disagreements"].extend(
                disagreement_list(
                    context, col, info["name"], [raters[r]["name"] for r in humans], disagreements
                )
            )
    block["disagreements"].sort(key=lambda e: (-e["distance"], e["rater"], e["item_id"]))
    return block


def _items_with(matrix: Matrix, cols: list[int], at_least: int) -> int:
    return int((np.isfinite(matrix.values[:, cols]).sum(axis=1) >= at_least).sum()) if cols else 0


def _items_exactly(matrix: Matrix, cols: list[int], count: int) -> int:
    return int((np.isfinite(matrix.values[:, cols]).sum(axis=1) == count).sum()) if cols else 0


def distribution(codes: np.ndarray, levels: int) -> list[int]:
    """How many ratings fell on each label (likert: nearest scale point)."""
    flat = codes[codes >= 0]
    return np.bincount(flat, minlength=levels).astype(int).tolist() if levels else []


@dataclass
class Context:
    data: RubricRatings
    matrix: Matrix
    human_cols: list[int]
    resamples: int
    seed: int
    plans: dict = field(default_factory=dict)

    @property
    def levels(self) -> int:
        return len(self.data.labels)

    @property
    def kappa_weights(self) -> str | None:
        return "quadratic" if self.data.is_likert else None

    @property
    def tie(self) -> int | None:
        if self.data.kind == "pairwise" and PAIRWISE_TIE in self.data.labels:
            return self.data.labels.index(PAIRWISE_TIE)
        return None

    def rows(self, mask: np.ndarray, cols: list[int]) -> np.ndarray:
        """Bootstrap rows: (items, cols, 2) int codes and value codes (-1 missing) for the chosen items."""
        return encode_rows(self.matrix, mask, cols)

    def numbers(self, value_codes: np.ndarray) -> np.ndarray:
        return decode_values(value_codes, self.value_levels)

    @cached_property
    def reference(self) -> tuple[np.ndarray, np.ndarray]:
        """The people's majority (or mean) on each item and its category code, shared by every model."""
        return human_reference(self, self.human_cols)

    @cached_property
    def value_levels(self) -> np.ndarray:
        return self.matrix.levels


def encode_rows(matrix: Matrix, mask: np.ndarray, cols: list[int]) -> np.ndarray:
    index = np.ix_(mask, cols)
    return np.stack([matrix.codes[index], matrix.value_codes[index]], axis=2)


def decode_values(value_codes: np.ndarray, levels: np.ndarray) -> np.ndarray:
    out = np.full(value_codes.shape, np.nan)
    present = value_codes >= 0
    out[present] = levels[value_codes[present]]
    return out


def _figure(value: float, why: str) -> tuple[float | None, str]:
    stat = st.Stat.of(value, why)
    return stat.value, stat.why


def _interval(ci: np.ndarray | None, k: int) -> list[float] | None:
    if ci is None or not np.all(np.isfinite(ci[k])):
        return None
    return [round(float(ci[k][0]), 6), round(float(ci[k][1]), 6)]


# --- Human-human -----------------------------------------------------------------------------


def human_human(ctx: Context, names: list[str]) -> dict:
    cols = ctx.human_cols
    out: dict = {"raters": len(cols), "items": _items_with(ctx.matrix, cols, 2), "why": {}, "ci": {}}
    metrics = ["krippendorff_alpha", "percent_agreement", "cohen_kappa", "fleiss_kappa"]
    if ctx.data.kind == "pairwise":
        metrics += ["agreement_with_ties", "agreement_without_ties"]
    if ctx.data.is_likert:
        metrics.append("spearman")
    if out["items"] == 0:
        why = "one rater" if len(cols) < 2 else "no item has two human ratings"
        for metric in metrics:
            out[metric] = None
            out["why"][metric] = f"{why}: nothing to compare"
        out["pairs"] = []
        return out
    mask = np.isfinite(ctx.matrix.values[:, cols]).sum(axis=1) >= 2
    rows = ctx.rows(mask, cols)
    # Only the values people gave: a judge's fractional scores must not widen the people's table.
    present = rows[:, :, 1] >= 0
    used, compact = np.unique(rows[:, :, 1][present], return_inverse=True)
    rows[:, :, 1][present] = compact
    levels = ctx.value_levels[used]
    headline = ["krippendorff_alpha", "percent_agreement", "cohen_kappa"]
    if ctx.tie is not None:
        headline += ["agreement_with_ties", "agreement_without_ties"]
    point, ci = st.bootstrap(
        rows,
        lambda u, w: _human_figures(ctx, u, w, headline, levels),
        resamples=ctx.resamples,
        seed=ctx.seed,
    )
    whys = {
        "krippendorff_alpha": f"{st.ALL_IDENTICAL}: alpha undefined",
        "percent_agreement": "no pairs of ratings",
        "cohen_kappa": f"{st.ALL_IDENTICAL} for every pair of people: kappa undefined",
        "agreement_with_ties": "no pairs of ratings",
        "agreement_without_ties": "every pair of ratings includes a tie (SAME)",
    }
    for k, metric in enumerate(headline):
        out[metric], why = _figure(point[k], whys[metric])
        if why:
            out["why"][metric] = why
        if _interval(ci, k):
            out["ci"][metric] = _interval(ci, k)
    counts = st.category_counts(ctx.matrix.codes[np.ix_(mask, cols)], ctx.levels)
    fleiss = st.fleiss_from_counts(counts)
    out["fleiss_kappa"] = fleiss.value
    if fleiss.why:
        out["why"]["fleiss_kappa"] = fleiss.why
    out["pairs"] = human_pairs(ctx, names)
    if ctx.data.is_likert:
        out["spearman"], why = _weighted_mean(out["pairs"], "spearman")
        if why:
            out["why"]["spearman"] = why
    return out


def _human_figures(
    ctx: Context, unique: np.ndarray, w: np.ndarray, headline: list[str], levels: np.ndarray
) -> np.ndarray:
    codes, value_codes = unique[:, :, 0], unique[:, :, 1]
    counts = st.category_counts(codes, ctx.levels)
    out = []
    for metric in headline:
        if metric == "krippendorff_alpha":
            level = "ordinal" if ctx.data.is_likert else "nominal"
            if ctx.data.is_likert:
                alpha_counts = st.category_counts(value_codes, levels.shape[0])
                out.append(st.w_alpha(alpha_counts, w, level=level, values=levels))
            else:
                out.append(st.w_alpha(counts, w, level=level))
        elif metric in ("percent_agreement", "agreement_with_ties"):
            agree, pairs = st.w_pair_agreement(counts, w)
            out.append(st._divide(agree, pairs))
        elif metric == "agreement_without_ties":
            agree, pairs = st.w_pair_agreement(counts, w, exclude=ctx.tie)
            out.append(st._divide(agree, pairs))
        elif metric == "cohen_kappa":
            combinations = list(itertools.combinations(range(codes.shape[1]), 2))
            out.append(_mean_pair_kappa(ctx, codes, w, combinations, anchor=unique))
    return np.stack(out, axis=1)


def _mean_pair_kappa(
    ctx: Context, codes: np.ndarray, w: np.ndarray, pairs: list[tuple[int, int]], *, anchor=None
) -> np.ndarray:
    """Mean of Cohen's kappa over pairs of columns, weighted by the (resampled) items each pair shares.

    Each pair only touches the rows it shares, sorted by (x, y) cell once per set of distinct
    rows (`anchor`, the array the bootstrap passes to every chunk) and reused for every chunk.
    """
    total = np.zeros(w.shape[0])
    weight = np.zeros(w.shape[0])
    size = ctx.levels * ctx.levels
    for rows, starts, cells in _pair_plans(ctx, codes, pairs, anchor):
        sums = np.add.reduceat(w[:, rows], starts, axis=1)
        confusion = np.zeros((w.shape[0], size))
        confusion[:, cells] = sums
        kappa = st.kappa_from_confusion(
            confusion.reshape(w.shape[0], ctx.levels, ctx.levels), weights=ctx.kappa_weights
        )
        items = sums.sum(axis=1)
        ok = np.isfinite(kappa)
        total += np.where(ok, kappa * items, 0.0)
        weight += np.where(ok, items, 0.0)
    return st._divide(total, weight)


def _pair_plans(ctx: Context, codes: np.ndarray, pairs: list[tuple[int, int]], anchor) -> list[tuple]:
    """Per pair of columns: its shared rows sorted by cell, where each cell starts, and the cell ids."""
    key = (id(anchor), tuple(pairs)) if anchor is not None else None
    if key is not None and key in ctx.plans and ctx.plans[key][0] is anchor:
        return ctx.plans[key][1]
    plans = []
    for a, b in pairs:
        shared = np.nonzero((codes[:, a] >= 0) & (codes[:, b] >= 0))[0]
        if shared.size == 0:
            continue
        cell = codes[shared, a] * ctx.levels + codes[shared, b]
        order = np.argsort(cell, kind="stable")
        ordered = cell[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        plans.append((shared[order], starts, ordered[starts]))
    if key is not None:
        ctx.plans[key] = (anchor, plans)
    return plans


def human_pairs(ctx: Context, names: list[str]) -> list[dict]:
    pairs = []
    for a, b in itertools.combinations(range(len(ctx.human_cols)), 2):
        x, y = ctx.matrix.values[:, a], ctx.matrix.values[:, b]
        shared = np.isfinite(x) & np.isfinite(y)
        if not shared.any():
            continue
        entry = {"a": names[a], "b": names[b], "items": int(shared.sum())}
        entry.update(
            _two_raters(
                ctx,
                ctx.matrix.codes[shared, a],
                ctx.matrix.codes[shared, b],
                x[shared],
                y[shared],
                value_codes=(ctx.matrix.value_codes[shared, a], ctx.matrix.value_codes[shared, b]),
            )
        )
        pairs.append(entry)
    return pairs


def human_summaries(ctx: Context, names: list[str]) -> list[dict]:
    """Each person's pooled agreement with the other people on the items they share: weak raters stand out."""
    codes = ctx.matrix.codes[:, ctx.human_cols]
    out = []
    for n, name in enumerate(names):
        mine = codes[:, n]
        others = np.delete(codes, n, axis=1)
        valid = (mine[:, None] >= 0) & (others >= 0)
        pairs = int(valid.sum())
        agree = int(((others == mine[:, None]) & valid).sum())
        out.append(
            {
                "rater": name,
                "rated": int((mine >= 0).sum()),
                "pairs": pairs,
                "percent_agreement": agree / pairs if pairs else None,
            }
        )
    return out


def _two_raters(
    ctx: Context,
    ca: np.ndarray,
    cb: np.ndarray,
    va: np.ndarray,
    vb: np.ndarray,
    *,
    value_codes: tuple[np.ndarray, np.ndarray | None] | None = None,
) -> dict:
    """Figures of one rater against another on shared items (codes and numbers, no missing).

    `value_codes` (index of each number in ctx.value_levels; None for a side that is not a
    rater's own values, such as the people's mean) saves looking the numbers up again.
    """
    out: dict = {"why": {}}
    stats = {
        "percent_agreement": st.Stat(float((ca == cb).mean()))
        if ca.shape[0]
        else st.Stat(None, "no shared items"),
        "cohen_kappa": _kappa(ctx, ca, cb),
    }
    if ctx.data.is_likert:
        a_codes, b_codes = value_codes or (None, None)
        a = (a_codes, ctx.value_levels) if a_codes is not None else _level_codes(ctx, va)
        b = (b_codes, ctx.value_levels) if b_codes is not None else _level_codes(ctx, vb)
        stats.update(st.numeric_figures_from_codes(*a, *b))
    elif ctx.data.kind == "categorical":
        f1 = st.f1_from_confusion(st.w_confusion(ca, cb, st._ones(ca.shape[0]), ctx.levels))[0]
        for n, label in enumerate(ctx.data.labels):
            stats[f"f1_{label}"] = st.Stat.of(f1[n], f"label {label!r} never given by either: F1 undefined")
        stats["accuracy"] = stats["percent_agreement"]
    if ctx.tie is not None:
        stats["agreement_with_ties"] = stats["percent_agreement"]
        no_tie = (ca != ctx.tie) & (cb != ctx.tie)
        stats["agreement_without_ties"] = (
            st.Stat(float((ca[no_tie] == cb[no_tie]).mean()))
            if no_tie.any()
            else st.Stat(None, "every comparison includes a tie (SAME)")
        )
    for metric, stat in stats.items():
        out[metric] = stat.value
        if stat.why:
            out["why"][metric] = stat.why
    return out


def _level_codes(ctx: Context, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values as codes into the ratings' distinct values, or into their own when they are not among them."""
    levels = ctx.value_levels
    if levels.shape[0]:
        codes = np.clip(np.searchsorted(levels, values), 0, levels.shape[0] - 1)
        if np.array_equal(levels[codes], values):
            return codes, levels
    own, codes = np.unique(values, return_inverse=True)
    return codes, own


def _kappa(ctx: Context, ca: np.ndarray, cb: np.ndarray) -> st.Stat:
    if ca.shape[0] == 0:
        return st.Stat(None, "no shared items: kappa undefined")
    confusion = st.w_confusion(ca, cb, st._ones(ca.shape[0]), ctx.levels)
    return st.Stat.of(
        st.kappa_from_confusion(confusion, weights=ctx.kappa_weights)[0],
        f"{st.ALL_IDENTICAL}: kappa undefined",
    )


def _weighted_mean(entries: list[dict], metric: str) -> tuple[float | None, str]:
    pairs = [(e[metric], e["items"]) for e in entries if e.get(metric) is not None]
    if not pairs:
        return None, f"{metric} undefined for every pair"
    values, weights = zip(*pairs, strict=True)
    return float(np.average(values, weights=weights)), ""


# --- Model against people --------------------------------------------------------------------


def human_reference(
    ctx: Context, cols: list[int], rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the people's majority code (categorical, pairwise) or mean (likert) and its rounded code."""
    values = ctx.matrix.values[:, cols] if rows is None else rows
    if ctx.data.is_likert:
        mean = _row_means(values)
        return mean, category_codes(mean[:, None], ctx.data)[:, 0]
    codes = (
        ctx.matrix.codes[:, cols]
        if rows is None
        else np.where(np.isfinite(values), values, -1).astype(np.int64)
    )
    counts = st.category_counts(codes, ctx.levels)
    top = counts.max(axis=1) if ctx.levels else np.zeros(codes.shape[0])
    unique_top = (counts == top[:, None]).sum(axis=1) == 1
    majority = np.where((top > 0) & unique_top, counts.argmax(axis=1) if ctx.levels else -1, -1)
    return majority.astype(np.float64), majority


def _row_means(values: np.ndarray) -> np.ndarray:
    """Mean of each row's finite values; NaN for a row without any."""
    present = np.isfinite(values)
    count = present.sum(axis=1)
    total = np.where(present, values, 0.0).sum(axis=1)
    return st._divide(total, count.astype(np.float64))


def model_report(ctx: Context, col: int) -> dict:
    cols = ctx.human_cols
    values = ctx.matrix.values
    model_ok = np.isfinite(values[:, col])
    humans_n = np.isfinite(values[:, cols]).sum(axis=1) if cols else np.zeros(values.shape[0])
    usable = model_ok & (humans_n >= 1)
    out: dict = {
        "items": int(usable.sum()),
        "vs_each_human": vs_each_human(ctx, col, usable),
        "vs_majority": vs_majority(ctx, col, usable),
    }
    out["ci"], out["ci_vs_each_human"], out["verdict"] = headline_intervals(ctx, col, usable, humans_n)
    out["confusion"] = confusion_matrix(ctx, col, usable)
    return out


def vs_each_human(ctx: Context, col: int, usable: np.ndarray) -> dict:
    """Pooled percent agreement over (model, person) pairs; other figures per person, weighted by items."""
    values, codes = ctx.matrix.values, ctx.matrix.codes
    per_person = []
    for h in ctx.human_cols:
        shared = usable & np.isfinite(values[:, h])
        if shared.any():
            vc = ctx.matrix.value_codes
            entry = _two_raters(
                ctx,
                codes[shared, col],
                codes[shared, h],
                values[shared, col],
                values[shared, h],
                value_codes=(vc[shared, col], vc[shared, h]),
            )
            entry["items"] = int(shared.sum())
            per_person.append(entry)
    if not per_person:
        return {"items": 0, "why": {"all": "no item rated by both the model and a person"}}
    out: dict = {"items": int(usable.sum()), "why": {}}
    metrics = [m for m in per_person[0] if m not in ("why", "items")]
    for metric in metrics:
        if metric in ("percent_agreement", "agreement_with_ties", "accuracy", "agreement_without_ties"):
            continue
        out[metric], why = _weighted_mean(per_person, metric)
        if why:
            out["why"][metric] = why
    cm, ch = codes[usable, col], codes[usable][:, ctx.human_cols]
    valid = ch >= 0
    pooled = _pooled(cm, ch, valid)
    out["percent_agreement"] = pooled
    if ctx.data.kind == "categorical":
        out["accuracy"] = pooled
    if ctx.tie is not None:
        out["agreement_with_ties"] = pooled
        no_tie = valid & (ch != ctx.tie) & (cm[:, None] != ctx.tie)
        out["agreement_without_ties"] = _pooled(cm, ch, no_tie)
        if out["agreement_without_ties"] is None:
            out["why"]["agreement_without_ties"] = "every comparison includes a tie (SAME)"
    return out


def _pooled(model: np.ndarray, humans: np.ndarray, valid: np.ndarray) -> float | None:
    pairs = int(valid.sum())
    return float(((humans == model[:, None]) & valid).sum() / pairs) if pairs else None


def vs_majority(ctx: Context, col: int, usable: np.ndarray) -> dict:
    reference, ref_codes = ctx.reference
    ok = usable & (ref_codes >= 0)
    out: dict = {"items": int(ok.sum()), "why": {}}
    if not ctx.data.is_likert:
        out["items_without_majority"] = int((usable & (ref_codes < 0)).sum())
    if not ok.any():
        out["why"]["all"] = "no item has both a model rating and a human majority"
        return out
    values, codes = ctx.matrix.values, ctx.matrix.codes
    entry = _two_raters(
        ctx,
        codes[ok, col],
        ref_codes[ok],
        values[ok, col],
        reference[ok],
        value_codes=(ctx.matrix.value_codes[ok, col], None),
    )
    out["why"].update(entry.pop("why"))
    out.update(entry)
    return out


def confusion_matrix(ctx: Context, col: int, usable: np.ndarray) -> dict:
    """Counts of (people's majority or rounded mean, model) pairs: rows people, columns model."""
    _, ref_codes = ctx.reference
    ok = usable & (ref_codes >= 0)
    matrix = st.w_confusion(ref_codes[ok], ctx.matrix.codes[ok, col], st._ones(int(ok.sum())), ctx.levels)[0]
    return {
        "labels": ctx.data.labels,
        "rows": "people",
        "columns": "model",
        "matrix": matrix.astype(int).tolist(),
    }


def headline_intervals(ctx: Context, col: int, usable: np.ndarray, humans_n: np.ndarray) -> tuple:
    """Bootstrap CIs of the headline figures, and the verdict.

    Agreement, kappa and the verdict come from one set of resamples (rows: the people's ratings,
    the model's category, whether two or more people rated); for likert, Spearman, MAE and bias
    from a second (rows: the model's exact score and the people's mean), so a judge's fractional
    scores do not multiply the distinct rows of the first.
    """
    cols = ctx.human_cols
    if not usable.any():
        return {}, {}, _verdict_undefined("the model has no usable rating on an item a person rated")
    people = ctx.rows(usable, cols)
    comparable = humans_n[usable] >= 2
    rows = np.concatenate(
        [
            people.reshape(people.shape[0], -1),
            ctx.matrix.codes[usable, col][:, None],
            comparable[:, None].astype(np.int64),
        ],
        axis=1,
    )
    names = _headline_names(ctx)
    point, ci = st.bootstrap(
        rows, lambda u, w: _headline_figures(ctx, u, w, names), resamples=ctx.resamples, seed=ctx.seed
    )
    intervals = {name: _interval(ci, k) for k, name in enumerate(names)}
    if ctx.data.is_likert:
        mean_levels, mean_codes = np.unique(ctx.reference[0][usable], return_inverse=True)
        numeric = np.stack([ctx.matrix.value_codes[usable, col], mean_codes], axis=1)
        numeric_names = ["maj:spearman", "maj:mae", "maj:bias"]
        _, numeric_ci = st.bootstrap(
            numeric,
            lambda u, w: _numeric_headline(ctx, u, w, mean_levels),
            resamples=ctx.resamples,
            seed=ctx.seed,
        )
        intervals.update({name: _interval(numeric_ci, k) for k, name in enumerate(numeric_names)})
    verdict = make_verdict(ctx, point, ci, names, int(comparable.sum()))
    major = {m.split(":", 1)[1]: v for m, v in intervals.items() if m.startswith("maj:") and v}
    each = {m.split(":", 1)[1]: v for m, v in intervals.items() if m.startswith("each:") and v}
    return major, each, verdict


def _numeric_headline(ctx: Context, unique: np.ndarray, w: np.ndarray, mean_levels: np.ndarray) -> np.ndarray:
    model_value = ctx.value_levels[unique[:, 0]]
    mean = mean_levels[unique[:, 1]]
    difference = model_value - mean
    return np.stack(
        [st.w_spearman(model_value, mean, w), st.w_mean(np.abs(difference), w), st.w_mean(difference, w)],
        axis=1,
    )


def _headline_names(ctx: Context) -> list[str]:
    names = ["maj:percent_agreement", "maj:cohen_kappa", "each:percent_agreement", "each:cohen_kappa"]
    if ctx.tie is not None:
        names += ["each:agreement_with_ties", "each:agreement_without_ties"]
        names += ["maj:agreement_with_ties", "maj:agreement_without_ties"]
    verdict = ["kappa_model", "kappa_humans", "kappa_diff", "pa_model", "pa_humans", "pa_diff"]
    return [*names, *(f"verdict:{name}" for name in verdict)]


def _headline_figures(ctx: Context, unique: np.ndarray, w: np.ndarray, names: list[str]) -> np.ndarray:
    k = len(ctx.human_cols)
    comparable = unique[:, -1] == 1
    model_code = unique[:, -2]
    people = unique[:, :-2].reshape(unique.shape[0], k, 2)
    human_codes = people[:, :, 0]
    codes = np.concatenate([human_codes, model_code[:, None]], axis=1)
    if ctx.data.is_likert:
        mean = _row_means(ctx.numbers(people[:, :, 1]))
        ref_code = category_codes(mean[:, None], ctx.data)[:, 0]
    else:
        _, ref_code = human_reference(
            ctx, list(range(k)), rows=np.where(human_codes >= 0, human_codes, np.nan)
        )
    results = {}
    ok = ref_code >= 0
    confusion = st.w_confusion(np.where(ok, model_code, -1), ref_code, w, ctx.levels)
    results["maj:percent_agreement"] = st._divide(
        np.trace(confusion, axis1=1, axis2=2), confusion.sum(axis=(1, 2))
    )
    results["maj:cohen_kappa"] = st.kappa_from_confusion(confusion, weights=ctx.kappa_weights)
    if ctx.tie is not None:
        results["maj:agreement_with_ties"] = results["maj:percent_agreement"]
        kept = np.delete(np.delete(confusion, ctx.tie, axis=1), ctx.tie, axis=2)
        results["maj:agreement_without_ties"] = st._divide(
            np.trace(kept, axis1=1, axis2=2), kept.sum(axis=(1, 2))
        )
    valid = human_codes >= 0
    agree = ((human_codes == model_code[:, None]) & valid).sum(axis=1).astype(np.float64)
    results["each:percent_agreement"] = st._divide(w @ agree, w @ valid.sum(axis=1).astype(np.float64))
    if ctx.tie is not None:
        results["each:agreement_with_ties"] = results["each:percent_agreement"]
        no_tie = valid & (human_codes != ctx.tie) & (model_code[:, None] != ctx.tie)
        agree_nt = ((human_codes == model_code[:, None]) & no_tie).sum(axis=1).astype(np.float64)
        results["each:agreement_without_ties"] = st._divide(
            w @ agree_nt, w @ no_tie.sum(axis=1).astype(np.float64)
        )
    all_pairs = [(h, k) for h in range(k)]
    results["each:cohen_kappa"] = _mean_pair_kappa(ctx, codes, w, all_pairs, anchor=unique)
    # The verdict compares, on items with two or more people, the model against each person with
    # the people against each other.
    wc = w * comparable[None, :]
    human_pairs_ = list(itertools.combinations(range(k), 2))
    results["verdict:kappa_model"] = _mean_pair_kappa(ctx, codes, wc, all_pairs, anchor=unique)
    results["verdict:kappa_humans"] = _mean_pair_kappa(ctx, codes, wc, human_pairs_, anchor=unique)
    results["verdict:pa_model"] = st._divide(wc @ agree, wc @ valid.sum(axis=1).astype(np.float64))
    counts = st.category_counts(human_codes, ctx.levels)
    pa_agree, pa_pairs = st.w_pair_agreement(counts, wc)
    results["verdict:pa_humans"] = st._divide(pa_agree, pa_pairs)
    results["verdict:kappa_diff"] = results["verdict:kappa_model"] - results["verdict:kappa_humans"]
    results["verdict:pa_diff"] = results["verdict:pa_model"] - results["verdict:pa_humans"]
    return np.stack([results[name] for name in names], axis=1)


def _verdict_undefined(why: str) -> dict:
    return {"label": "undefined", "text": f"No verdict: {why}.", "why": why}


def make_verdict(ctx: Context, point: np.ndarray, ci, names: list[str], items: int) -> dict:
    """Does the model agree with people at least as well as people agree with each other?"""
    if items == 0:
        return _verdict_undefined("no item the model rated has two or more human ratings")
    index = {name: k for k, name in enumerate(names)}
    metric, prefix = "cohen_kappa", "verdict:kappa"
    if not np.isfinite(point[index["verdict:kappa_diff"]]):
        metric, prefix = "percent_agreement", "verdict:pa"
    model_key, human_key = f"{prefix}_model", f"{prefix}_humans"
    model, humans = point[index[model_key]], point[index[human_key]]
    if not (np.isfinite(model) and np.isfinite(humans)):
        return _verdict_undefined(f"{st.ALL_IDENTICAL}: neither kappa nor percent agreement is defined")
    diff_ci = _interval(ci, index[f"{prefix}_diff"])
    verdict = {
        "metric": metric,
        "items": items,
        "model": round(float(model), 6),
        "model_ci": _interval(ci, index[model_key]),
        "humans": round(float(humans), 6),
        "humans_ci": _interval(ci, index[human_key]),
        "difference": round(float(model - humans), 6),
        "difference_ci": diff_ci,
    }
    label = "comparable"
    if diff_ci is not None and diff_ci[0] > 0:
        label = "better"
    elif diff_ci is not None and diff_ci[1] < 0:
        label = "worse"
    verdict["label"] = label
    verdict["text"] = verdict_text(verdict)
    return verdict


def verdict_text(v: dict) -> str:
    name = "Cohen's kappa" if v["metric"] == "cohen_kappa" else "percent agreement"
    around = {
        "better": "agrees with people better than people agree with each other",
        "worse": "agrees with people less than people agree with each other",
        "comparable": "agrees with people about as well as people agree with each other",
    }[v["label"]]
    ci = v["difference_ci"]
    spread = f" (95% CI {ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ""
    return (
        f"It {around}: {name} {v['model']:.3f} against each person vs {v['humans']:.3f} between people "
        f"on the same {v['items']} items, a difference of {v['difference']:+.3f}{spread}."
    )


# --- Disagreements ---------------------------------------------------------------------------


def disagreement_list(
    ctx: Context, col: int, model_name: str, human_names: list[str], limit: int
) -> list[dict]:
    """Items where the model is furthest from the people.

    Likert: |model - human mean|; otherwise the share of people whose label the model contradicts.
    """
    values, codes = ctx.matrix.values, ctx.matrix.codes
    cols = ctx.human_cols
    human_vals = values[:, cols]
    present = np.isfinite(human_vals)
    usable = np.isfinite(values[:, col]) & present.any(axis=1)
    if not usable.any():
        return []
    reference, _ = ctx.reference
    differ = (codes[:, cols] != codes[:, [col]]) & present
    if ctx.data.is_likert:
        distance = np.abs(values[:, col] - reference)
    else:
        distance = differ.sum(axis=1) / np.maximum(present.sum(axis=1), 1)
    distance = np.where(usable, distance, -1.0)
    order = np.lexsort((ctx.matrix.item_ids, -present.sum(axis=1), -distance))
    chosen = [n for n in order[:limit] if distance[n] > 0]
    return [
        {
            "item_id": int(ctx.matrix.item_ids[n]),
            "rater": model_name,
            "value": _label(ctx, values[n, col]),
            "humans": {
                human_names[h]: _label(ctx, human_vals[n, h]) for h in range(len(cols)) if present[n, h]
            },
            "distance": round(float(distance[n]), 4),
            "people": int(present[n].sum()),
            "contradicts": int(differ[n].sum()),
            "people_mean": round(float(reference[n]), 4) if ctx.data.is_likert else None,
        }
        for n in chosen
    ]


def _label(ctx: Context, value: float) -> str:
    if ctx.data.is_likert:
        return f"{value:g}"
    return ctx.data.labels[int(value)]
