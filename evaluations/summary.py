"""What the evaluation page shows about an evaluation, in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Q

from datasets.models import Item
from rubrics.models import RubricVersion

from .models import Evaluation, Rater, Rating


@dataclass
class RubricRow:
    version: RubricVersion
    human: int = 0
    model: int = 0
    human_raters: int = 0
    model_raters: int = 0
    parse_failed: int = 0
    needed: int = 0  # human ratings the overlap asks for: items x N
    imported: int = 0  # of `human`: by people imported with their ratings, not annotators of this evaluation

    @property
    def by_annotators(self) -> int:
        return self.human - self.imported

    @property
    def human_percent(self) -> int:
        """How far the annotators are toward N ratings per item: what their queues fill. Imported human
        ratings (an earlier study) do not count, as the queues do not count them either."""
        return min(100, round(100 * self.by_annotators / self.needed)) if self.needed else 0


@dataclass
class EvaluationSummary:
    items: int
    ratings: int
    rows: list[RubricRow]
    excluded: int = 0  # dataset items left out because they lack what a rubric needs
    exclusion_reasons: list[tuple[str, int]] = field(default_factory=list)


def summarise(evaluation: Evaluation) -> EvaluationSummary:
    """Items, and ratings per rubric version and rater kind: five queries whatever the size."""
    reasons = list(
        evaluation.exclusions.values_list("reason").annotate(n=Count("id")).order_by("-n", "reason")
    )
    excluded = sum(n for _, n in reasons)
    items = Item.objects.filter(dataset_id=evaluation.dataset_id).count() - excluded
    versions = evaluation.ordered_versions()
    rows = {version.pk: RubricRow(version=version, needed=items * evaluation.overlap) for version in versions}
    # Grouping by rater id (not by kind with COUNT(DISTINCT)) lets PostgreSQL hash-aggregate the
    # ratings without a join; raters are few, so their kinds come from one small query.
    counts = (
        Rating.objects.filter(evaluation=evaluation)
        .values_list("rubric_version_id", "rater_id")
        .annotate(ratings=Count("id"), failed=Count("id", filter=Q(parse_failed=True)))
        .order_by()
    )
    raters = Rater.objects.filter(project_id=evaluation.project_id).values_list("pk", "kind", "user_id")
    kinds = {pk: kind for pk, kind, _ in raters}
    imported = {pk for pk, kind, user in raters if kind == Rater.Kind.HUMAN and user is None}
    total = 0
    for version_id, rater_id, ratings, failed in counts:
        total += ratings
        row = rows.get(version_id)
        if row is None:
            continue
        kind = kinds[rater_id]
        setattr(row, kind, getattr(row, kind) + ratings)
        setattr(row, f"{kind}_raters", getattr(row, f"{kind}_raters") + 1)
        row.imported += ratings if rater_id in imported else 0
        row.parse_failed += failed
    return EvaluationSummary(
        items=items, ratings=total, rows=list(rows.values()), excluded=excluded, exclusion_reasons=reasons
    )
