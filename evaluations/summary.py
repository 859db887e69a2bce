"""What the evaluation page shows about an evaluation, in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q

from datasets.models import Item
from rubrics.models import RubricVersion

from .models import Evaluation, Rating


@dataclass
class RubricRow:
    version: RubricVersion
    human: int = 0
    model: int = 0
    human_raters: int = 0
    model_raters: int = 0
    parse_failed: int = 0
    needed: int = 0  # human ratings the overlap asks for: items x N

    @property
    def human_percent(self) -> int:
        return min(100, round(100 * self.human / self.needed)) if self.needed else 0


@dataclass
class EvaluationSummary:
    items: int
    ratings: int
    rows: list[RubricRow]


def summarise(evaluation: Evaluation) -> EvaluationSummary:
    """Items, and ratings per rubric version and rater kind: three queries whatever the size."""
    items = Item.objects.filter(dataset_id=evaluation.dataset_id).count()
    versions = evaluation.rubric_versions.select_related("rubric").order_by("rubric__name", "number")
    rows = {version.pk: RubricRow(version=version, needed=items * evaluation.overlap) for version in versions}
    counts = (
        Rating.objects.filter(evaluation=evaluation)
        .values("rubric_version_id", "rater__kind")
        .annotate(
            ratings=Count("id"),
            raters=Count("rater_id", distinct=True),
            failed=Count("id", filter=Q(parse_failed=True)),
        )
        .order_by()
    )
    total = 0
    for group in counts:
        row = rows.get(group["rubric_version_id"])
        total += group["ratings"]
        if row is None:
            continue
        kind = group["rater__kind"]
        setattr(row, kind, group["ratings"])
        setattr(row, f"{kind}_raters", group["raters"])
        row.parse_failed += group["failed"]
    return EvaluationSummary(items=items, ratings=total, rows=list(rows.values()))
