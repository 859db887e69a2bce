"""Reads for the judge pages: what each box of the launch form would run; the evaluation page's runs
with their live counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q

from evaluations.models import Evaluation
from rubrics.models import RubricVersion

from .models import Judge, JudgeCall, JudgeRun
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


@dataclass(frozen=True)
class RunRow:
    """A run on the evaluation page with its calls done and failed so far (the bar and the counts)."""

    run: JudgeRun
    done: int
    failed: int

    def _percent(self, count: int) -> float:
        return round(100 * count / self.run.total_calls, 1) if self.run.total_calls else 0.0

    @property
    def done_percent(self) -> float:
        return self._percent(self.done)

    @property
    def failed_percent(self) -> float:
        return self._percent(self.failed)


def evaluation_runs(evaluation: Evaluation) -> dict[str, Any]:
    """The evaluation page's judge runs section: its runs, newest first, counted in one query."""
    runs = list(evaluation.judge_runs.select_related("judge", "rubric_version__rubric", "rater"))
    counts: dict[int, tuple[int, int]] = {
        row["run_id"]: (row["done"], row["failed"])
        for row in JudgeCall.objects.filter(run__evaluation=evaluation)
        .values("run_id")
        .annotate(
            done=Count("id", filter=Q(status=JudgeCall.Status.DONE)),
            failed=Count("id", filter=Q(status=JudgeCall.Status.FAILED)),
        )
        .order_by()
    }
    rows = [RunRow(run, *counts.get(run.pk, (0, 0))) for run in runs]
    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "rows": rows,
        # While any run is running the section polls itself, so counts and statuses change without a reload.
        "active": any(run.is_active for run in runs),
    }
