"""How far a person got in an evaluation: done, set aside, their share, and whether "next item" has more."""

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    When,
)
from django.db.models.functions import Coalesce

from datasets.models import Item
from evaluations.models import Evaluation, ExcludedItem

from .models import Assignment, Slot

Status = Assignment.Status


def every_item_queued() -> Q:
    """For an evaluation (OuterRef "pk"): the dataset's last item (by position, which appended items
    extend) has a slot or is excluded. Slots are added for every missing item at once (`ensure_slots`),
    so this is the same as comparing the two counts, read from two index entries instead of counting."""
    last = (
        Item.objects.filter(dataset_id=OuterRef(OuterRef("dataset_id")))
        .order_by("-position")
        .values("pk")[:1]
    )
    queued = Slot.objects.filter(evaluation_id=OuterRef("pk"), item_id=Subquery(last))
    excluded = ExcludedItem.objects.filter(evaluation_id=OuterRef("pk"), item_id=Subquery(last))
    empty = ~Exists(Item.objects.filter(dataset_id=OuterRef("dataset_id")))
    return Q(Exists(queued)) | Q(Exists(excluded)) | Q(empty)


@dataclass
class AnnotatorProgress:
    evaluation: Evaluation
    done: int
    share: int
    total: int
    skipped: int = 0  # skipped or flagged as a problem: the person can reopen them from History
    has_more: bool = True  # whether "next item" would hand them one now
    # Read only by `progress_and_upkeep`: whether every item is in the queue, and whether reservations
    # of others ran out and wait to be given back.
    queue_complete: bool = True
    expired_waiting: bool = False

    @property
    def percent_of_share(self) -> int:
        return min(100, round(100 * self.done / self.share)) if self.share else 100


def share_of(*, total: int, overlap: int, annotators: int) -> int:
    """How many items one annotator is expected to rate: the evaluation's ratings split evenly."""
    if annotators <= 0:
        return 0
    return min(total, math.ceil(total * overlap / annotators))


def _count_of(queryset: QuerySet[Any]) -> Subquery:
    return Subquery(queryset.order_by().values("evaluation_id").annotate(n=Count("pk")).values("n")[:1])


def _has_more(user: User | int) -> ExpressionWrapper:
    """Whether "next item" would hand `user` an item: a reservation, an open item never held, or no queue."""
    mine = Assignment.objects.filter(evaluation_id=OuterRef("pk"), user=user)
    never_held = ~Exists(
        Assignment.objects.filter(
            evaluation_id=OuterRef(OuterRef("pk")), user=user, item_id=OuterRef("item_id")
        )
    )
    open_for_them = Slot.objects.filter(evaluation_id=OuterRef("pk"), is_open=True).filter(never_held)
    no_queue_yet = ~Exists(Slot.objects.filter(evaluation_id=OuterRef("pk")))
    reserved = Exists(mine.filter(status=Status.RESERVED))
    return ExpressionWrapper(
        Q(reserved) | Q(Exists(open_for_them)) | Q(no_queue_yet), output_field=BooleanField()
    )


def _progress_figures(user: User | int) -> dict[str, Any]:
    """For an evaluation (OuterRef "pk"): its items, the person's done and set-aside items, its annotators."""
    left_out = ExcludedItem.objects.filter(evaluation_id=OuterRef(OuterRef("pk")), item_id=OuterRef("pk"))
    items = (
        Item.objects.filter(dataset_id=OuterRef("dataset_id"))
        .exclude(Exists(left_out))
        .order_by()
        .values("dataset_id")
    )
    # The importer keeps the dataset's item count (no COUNT of 100k items per page); items made some
    # other way (admin, fixtures) leave it 0 and are counted.
    excluded = Coalesce(_count_of(ExcludedItem.objects.filter(evaluation_id=OuterRef("pk"))), 0)
    mine = Assignment.objects.filter(evaluation_id=OuterRef("pk"), user=user)
    through = Evaluation.annotators.through
    annotators = through.objects.filter(evaluation_id=OuterRef("pk")).order_by().values("evaluation_id")
    return {
        "total": Case(
            When(dataset__item_count__gt=0, then=F("dataset__item_count") - excluded),
            default=Subquery(items.annotate(n=Count("pk")).values("n")[:1]),
        ),
        "done": _count_of(mine.filter(status=Status.DONE)),
        "skipped": _count_of(mine.filter(status__in=[Status.SKIPPED, Status.FLAGGED])),
        "annotator_count": Subquery(annotators.annotate(n=Count("pk")).values("n")[:1]),  # type: ignore[misc]
    }


def _progress(evaluation: Evaluation, figures: Any, **more: Any) -> AnnotatorProgress:
    total = figures["total"] or 0
    return AnnotatorProgress(
        evaluation=evaluation,
        done=figures["done"] or 0,
        share=share_of(total=total, overlap=evaluation.overlap, annotators=figures["annotator_count"]),
        total=total,
        skipped=figures["skipped"] or 0,
        **more,
    )


def annotator_progress(*, user: User | int, evaluation: Evaluation | None = None) -> list[AnnotatorProgress]:
    """The evaluations `user` annotates (or just `evaluation`): done, skipped, share, total, whether more."""
    evaluations = Evaluation.objects.filter(annotators=user)
    if evaluation is not None:
        evaluations = evaluations.filter(pk=evaluation.pk)
    evaluations = (
        evaluations.select_related("project", "dataset")
        .annotate(**_progress_figures(user), has_more=_has_more(user))
        .order_by("project__name", "name")
    )
    return [_progress(row, vars(row), has_more=row.has_more) for row in evaluations]


# The hot path's progress and upkeep in one plain statement: the same figures as `_progress_figures` and
# `_every_item_queued`, without the ORM compiling eight subqueries on every submit (~15 ms of CPU).
PROGRESS_AND_UPKEEP = """
SELECT
    (SELECT COUNT(*) FROM rating_assignment a
     WHERE a.evaluation_id = %(evaluation)s AND a.user_id = %(user)s AND a.status = 'done'),
    (SELECT COUNT(*) FROM rating_assignment a
     WHERE a.evaluation_id = %(evaluation)s AND a.user_id = %(user)s AND a.status IN ('skipped', 'flagged')),
    (SELECT COUNT(*) FROM evaluations_evaluation_annotators WHERE evaluation_id = %(evaluation)s),
    CASE WHEN %(item_count)s > 0 THEN %(item_count)s
         ELSE (SELECT COUNT(*) FROM datasets_item WHERE dataset_id = %(dataset)s) END
    - (SELECT COUNT(*) FROM evaluations_excludeditem WHERE evaluation_id = %(evaluation)s),
    EXISTS (SELECT 1 FROM rating_slot s WHERE s.evaluation_id = %(evaluation)s AND s.item_id = (%(last)s))
    OR EXISTS (SELECT 1 FROM evaluations_excludeditem x
               WHERE x.evaluation_id = %(evaluation)s AND x.item_id = (%(last)s))
    OR NOT EXISTS (SELECT 1 FROM datasets_item WHERE dataset_id = %(dataset)s),
    EXISTS (SELECT 1 FROM rating_assignment a
            WHERE a.evaluation_id = %(evaluation)s AND a.status = 'reserved' AND a.reserved_until < %(now)s
              AND a.user_id <> %(user)s)
""".replace(
    "%(last)s",
    "SELECT i.id FROM datasets_item i WHERE i.dataset_id = %(dataset)s ORDER BY i.position DESC LIMIT 1",
)


def progress_and_upkeep(*, evaluation: Evaluation, user: User, now: datetime) -> AnnotatorProgress:
    """The person's progress in `evaluation`, and whether its queue misses items or others' reservations
    ran out (`queue_complete`, `expired_waiting`): one query for the rating page's hot path."""
    params = {
        "evaluation": evaluation.pk,
        "user": user.pk,
        "dataset": evaluation.dataset_id,
        "item_count": evaluation.dataset.item_count,
        "now": connection.ops.adapt_datetimefield_value(now),
    }
    with connection.cursor() as cursor:
        cursor.execute(PROGRESS_AND_UPKEEP, params)
        done, skipped, annotators, total, queue_complete, expired_waiting = cursor.fetchone()
    figures = {"done": done, "skipped": skipped, "annotator_count": annotators, "total": total}
    return _progress(
        evaluation, figures, queue_complete=bool(queue_complete), expired_waiting=bool(expired_waiting)
    )
