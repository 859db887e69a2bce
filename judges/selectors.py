"""Reads for the judge pages: what each box of the launch form would run."""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluations.models import Evaluation
from rubrics.models import RubricVersion

from .models import Judge, JudgeRun
from .services import orders_for


@dataclass(frozen=True)
class VersionBox:
    """One rubric version on the launch form: checked or not, the calls a run of it would make with the
    picked judge, and the runs of it the evaluation has already (those of that judge it would make again)."""

    version: RubricVersion
    checked: bool
    judge_only: bool
    calls: int | None = None  # None: no judge picked yet
    earlier: list[JudgeRun] = field(default_factory=list)
    again: list[JudgeRun] = field(default_factory=list)  # the picked judge's runs of it


def version_boxes(
    *, evaluation: Evaluation, versions: list[RubricVersion], checked: set[int], judge: Judge | None
) -> list[VersionBox]:
    people = set(evaluation.rubric_versions.values_list("pk", flat=True))
    runs: dict[int, list[JudgeRun]] = {}
    for run in evaluation.judge_runs.select_related("rater").order_by("-created"):
        runs.setdefault(run.rubric_version_id, []).append(run)
    items = evaluation.item_count() if judge is not None else 0
    params = judge.parameters() if judge is not None else None
    boxes = []
    for version in versions:
        earlier = runs.get(version.pk, [])
        calls = None
        if params is not None:
            calls = items * params.samples * len(orders_for(params, version))
        again = [run for run in earlier if judge is not None and run.judge_id == judge.pk]
        boxes.append(
            VersionBox(version, version.pk in checked, version.pk not in people, calls, earlier, again)
        )
    return boxes
