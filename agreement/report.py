"""The agreement report of an evaluation: read current ratings, hand arrays to agreement.statistics.

One query per rubric version reads every current rating as arrays of (item, rater, value, parse_failed)
(agreement.db); everything after that is NumPy. The JSON shape is documented in docs/agreement.md.

Conventions (also in docs/agreement.md):
- Parse failures and invalid values are counted per rater and never enter a figure.
- Likert: kappa, percent agreement and the confusion matrix use scale points; a judge's
  fractional score ("3.72") is rounded to the nearest scale point for those, and the human mean
  is rounded half up. Correlations, MAE, bias and within-one use the numbers as they are.
- Categorical and pairwise: the human majority is the single most frequent label on an item; an
  item whose top labels tie has no majority and is left out of the vs_majority figures.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from agreement import cost
from agreement import statistics as st
from agreement.against_people import ModelFigures, disagreement_list, model_report
from agreement.estimates import ppi_entry
from agreement.people import human_human, human_summaries
from agreement.reading import RubricRatings, items_matching, load_ratings, metadata_values, rater_directory
from agreement.split import growth_entry, growth_order, held_out, split_entry
from agreement.stand_in import AltTestSettings, alt_test_entry
from agreement.tables import Context, distribution, to_matrix
from datasets.models import Item
from evaluations.models import Evaluation, Rater

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 20230601

# A group of figures keyed by metric ("cohen_kappa": 0.71, ...), with "why" for those undefined.
Figures = dict[str, Any]


@dataclass
class RaterAgreement:
    """One model rater of a rubric against the people: every figure, interval, verdict and estimate."""

    rater: str
    judge_run: int | None
    simulated: bool
    rated: int
    parse_failures: int
    invalid: int
    missing: int
    against_people: ModelFigures
    alt_test: Figures
    ppi: Figures
    split: Figures | None = None  # tune / held-out figures (whole-evaluation reports only)
    growth: Figures | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rater": self.rater,
            "kind": "model",
            "judge_run": self.judge_run,
            "simulated": self.simulated,
            "rated": self.rated,
            "parse_failures": self.parse_failures,
            "invalid": self.invalid,
            "missing": self.missing,
            **self.against_people.as_json(),
            "alt_test": self.alt_test,
            "ppi": self.ppi,
        }
        if self.split is not None:
            out["split"] = self.split
            out["growth"] = self.growth
        return out


@dataclass
class RubricReport:
    """One rubric version's block of the report: counts, people with each other, each model rater."""

    rubric: str
    version: int
    kind: str
    items: int
    labels: list[str]
    ratings: dict[str, int]  # human, model, parse_failures, invalid
    missing: dict[str, int]  # human_ratings, items_without_human_rating, items_with_one_human_rating
    human_human: Figures
    humans: list[Figures]  # each person's agreement with the others
    raters: list[RaterAgreement] = field(default_factory=list)
    distribution: dict[str, list[int]] = field(default_factory=dict)  # "human" and each model rater
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric,
            "version": self.version,
            "kind": self.kind,
            "items": self.items,
            "labels": self.labels,
            "ratings": self.ratings,
            "missing": self.missing,
            "human_human": self.human_human,
            "humans": self.humans,
            "raters": [rater.as_json() for rater in self.raters],
            "distribution": self.distribution,
            "disagreements": self.disagreements,
        }


@dataclass
class Report:
    """The agreement report of an evaluation (or of the items matching `where`)."""

    evaluation: str
    project: str
    where: dict[str, str]
    rubrics: list[RubricReport]

    def as_json(self) -> dict[str, Any]:
        """The report as JSON data (the download, the stored computation), NaN and infinity as None."""
        return finite_only(
            {
                "evaluation": self.evaluation,
                "project": self.project,
                "where": self.where,
                "rubrics": [block.as_json() for block in self.rubrics],
            }
        )


@dataclass
class ReportSlice:
    value: str
    where: dict[str, str]
    rubrics: list[RubricReport]


@dataclass
class ReportsBy:
    """One report per value of a metadata key."""

    evaluation: str
    project: str
    where: dict[str, str]
    by: str
    slices: list[ReportSlice]

    def as_json(self) -> dict[str, Any]:
        return finite_only(
            {
                "evaluation": self.evaluation,
                "project": self.project,
                "where": self.where,
                "by": self.by,
                "slices": [
                    {"value": s.value, "where": s.where, "rubrics": [block.as_json() for block in s.rubrics]}
                    for s in self.slices
                ],
            }
        )


def build_report(
    *,
    evaluation: Evaluation,
    rubric: str | None = None,
    where: dict[str, str] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    disagreements: int = 20,
    alt_test: AltTestSettings | None = None,
) -> Report:
    """The whole report of an evaluation (optionally one rubric, optionally a metadata slice).

    `alt_test`: epsilon and metric of the alternative annotator test; default the evaluation's.
    """
    alt_test = alt_test or AltTestSettings.of(evaluation)
    versions = evaluation.ordered_versions(rubric)
    cost.check(cost.estimate_report(evaluation=evaluation, resamples=resamples))  # before reading ratings
    raters = rater_directory(evaluation)
    selected = items_matching(evaluation=evaluation, where=where) if where else None
    total_items = evaluation.item_count() if selected is None else None
    blocks = []
    for version in versions:
        data = load_ratings(evaluation=evaluation, version=version, raters=list(raters))
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
                alt_test=alt_test,
                split_key=evaluation.pk,
            )
        )
    _attach_external_ids(blocks)
    return Report(
        evaluation=evaluation.name, project=evaluation.project.slug, where=where or {}, rubrics=blocks
    )


def build_reports_by(
    *,
    evaluation: Evaluation,
    by: str,
    rubric: str | None = None,
    where: dict[str, str] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alt_test: AltTestSettings | None = None,
) -> ReportsBy:
    """One report per value of metadata key `by`, reading each rubric's ratings once."""
    alt_test = alt_test or AltTestSettings.of(evaluation)
    versions = evaluation.ordered_versions(rubric)
    cost.check(cost.estimate_report(evaluation=evaluation, resamples=resamples))  # each slice costs less
    raters = rater_directory(evaluation)
    groups = metadata_values(evaluation=evaluation, key=by)
    if where:
        allowed = items_matching(evaluation=evaluation, where=where)
        groups = {value: ids[np.isin(ids, allowed)] for value, ids in groups.items()}
    slices: dict[str, list[RubricReport]] = {value: [] for value in groups}
    for version in versions:
        data = load_ratings(evaluation=evaluation, version=version, raters=list(raters))
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
                    alt_test=alt_test,
                )
            )
    return ReportsBy(
        evaluation=evaluation.name,
        project=evaluation.project.slug,
        where=where or {},
        by=by,
        slices=[
            ReportSlice(value=value, where={**(where or {}), by: value}, rubrics=blocks)
            for value, blocks in slices.items()
        ],
    )


def _add_unknown_raters(raters: dict[int, dict], data: RubricRatings) -> None:
    """Raters of another project can only appear through odd imports; name them rather than fail."""
    unknown = set(st.unique_ids(data.rater_ids).tolist()) - raters.keys()
    for pk, name, kind in Rater.objects.filter(pk__in=unknown).values_list("pk", "name", "kind"):
        raters[pk] = {"name": name, "kind": kind, "judge_run": None, "simulated": False}


def finite_only(value: Any) -> Any:
    """The report with every NaN or infinity replaced by None, so it is valid JSON everywhere."""
    if isinstance(value, dict):
        return {key: finite_only(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_only(item) for item in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _attach_external_ids(blocks: list[RubricReport]) -> None:
    wanted = {entry["item_id"] for block in blocks for entry in block.disagreements}
    if not wanted:
        return
    names = dict(Item.objects.filter(pk__in=wanted).values_list("pk", "external_id"))
    for block in blocks:
        for entry in block.disagreements:
            entry["external_id"] = names.get(entry["item_id"], "")


def _fixed_mmap_threshold() -> None:
    """Have glibc's malloc give every array over 1 MB its own mapping, returned when freed. By default the
    threshold rises to the largest block freed so far (up to 32 MB), after which the report's 16 MB blocks
    of pair tables come from the threads' heaps and stay: 419 people on 12 items peaked at 300 MB or at
    710 MB from run to run. Setting the threshold turns that rise off. Elsewhere than glibc: nothing."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


_fixed_mmap_threshold()


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def _single_threaded_blas[**P, R](function: Callable[P, R]) -> Callable[P, R]:
    """Run `function` with OpenBLAS on one thread. The report's products are tall and thin (resamples x
    rows times rows x a few dozen columns): memory bound, so BLAS threads only spin against each other
    and the rest of the machine (measured: ~2 s more CPU, up to 1 s more wall time per 100k-item report
    on 2 cores)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _blas().limit(limits=1, user_api="blas"):
            return function(*args, **kwargs)

    return wrapper


# Threads for the bootstrap groups beside the report's own (each group also draws its next chunk of
# weights in a thread of its own). Measured on 2 cores, 20 people and 2 models (3 groups): with 2 the
# last group ran alone at the end; 3 took 3-5% less wall time (median 0.74 vs 0.77 s) for the same CPU.
# Each holds a block of pair tables at a time (tables.TABLE_BLOCK_BYTES): agreement.cost counts on 3.
GROUP_THREADS = cost.GROUP_THREADS


@_single_threaded_blas
def rubric_report(
    data: RubricRatings,
    *,
    raters: dict[int, dict],
    items: int,
    overlap: int,
    resamples: int,
    seed: int,
    disagreements: int,
    alt_test: AltTestSettings | None = None,
    split_key: int | None = None,
) -> RubricReport:
    """One rubric version's block; `split_key` (the evaluation id) adds tune and held-out figures.

    The people's figures and each model's figures against them (each group a bootstrap with its own
    generator) run in threads while this one works out the rest: NumPy and SciPy release the GIL in
    their large operations, so on two cores they overlap. The figures are the same as one after another.
    """
    version = data.version
    present = sorted(
        st.unique_ids(data.rater_ids).tolist(), key=lambda r: (raters[r]["kind"], raters[r]["name"])
    )
    humans = [r for r in present if raters[r]["kind"] == "human"]
    models = [r for r in present if raters[r]["kind"] != "human"]
    matrix = to_matrix(data, humans + models)
    human_cols = list(range(len(humans)))
    context = Context(data=data, matrix=matrix, human_cols=human_cols, resamples=resamples, seed=seed)
    human_names = [raters[r]["name"] for r in humans]
    with ThreadPoolExecutor(max_workers=GROUP_THREADS) as pool:
        people = pool.submit(human_human, context, human_names)
        against = [pool.submit(model_report, context, len(humans) + offset) for offset in range(len(models))]
        people_rated = context.people_rated
        human_ratings = int(people_rated.sum())
        block = RubricReport(
            rubric=version.rubric.name,
            version=version.number,
            kind=data.kind,
            items=items,
            labels=data.labels,
            ratings={
                "human": human_ratings,
                "model": int(np.isfinite(matrix.values[:, len(humans) :]).sum()),
                "parse_failures": int(data.parse_failed.sum()),
                "invalid": int(data.invalid.sum()),
            },
            missing={
                "human_ratings": max(0, items * overlap - human_ratings),
                "items_without_human_rating": max(0, items - int(np.count_nonzero(people_rated))),
                "items_with_one_human_rating": int(np.count_nonzero(people_rated == 1)),
            },
            human_human={},  # the people's group, when its thread is done (below)
            humans=human_summaries(context, human_names),
            distribution={"human": distribution(context.human_codes, len(data.labels))},
        )
        # Each model's point figures while the bootstraps run, then its figures against the people.
        parts = []
        if split_key is not None:  # the same for every model
            held, order = held_out(split_key, matrix.item_ids), growth_order(split_key, matrix.item_ids)
        for offset, rater_id in enumerate(models):
            col = len(humans) + offset
            info = raters[rater_id]
            mine = data.rater_ids == rater_id
            part: dict[str, Any] = {
                "rater": info["name"],
                "judge_run": info["judge_run"],
                "simulated": info["simulated"],
                "rated": int(np.isfinite(matrix.values[:, col]).sum()),
                "parse_failures": int((data.parse_failed & mine).sum()),
                "invalid": int((data.invalid & mine).sum()),
                "missing": max(0, items - int(mine.sum())),
                "alt_test": alt_test_entry(context, col, human_names, alt_test or AltTestSettings()),
                "ppi": ppi_entry(context, col),
            }
            if split_key is not None:
                part["split"] = split_entry(context, col, held)
                part["growth"] = growth_entry(context, col, order)
            parts.append(part)
            block.distribution[info["name"]] = distribution(matrix.codes[:, [col]], len(data.labels))
            if disagreements:
                block.disagreements.extend(
                    disagreement_list(context, col, info["name"], human_names, disagreements)
                )
        block.raters = [
            RaterAgreement(**part, against_people=figures.result())
            for part, figures in zip(parts, against, strict=True)
        ]
    block.disagreements.sort(key=lambda e: (-e["distance"], e["rater"], e["item_id"]))
    block.human_human = people.result()
    return block
