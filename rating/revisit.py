"""Going back to items: undo the last submit, and whether a skipped item can still be rated."""

from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from evaluations.models import Evaluation, Rating, RatingRevision
from evaluations.values import value_as_shown

from .models import Assignment, Slot
from .services import RatingRefused, _lock_annotator, _reclaim, _unclaim_slot, reservation_end

Status = Assignment.Status


UNDOABLE = {Status.DONE, Status.SKIPPED, Status.FLAGGED}


def last_submit(*, evaluation: Evaluation, user: User | int) -> Assignment | None:
    """The person's most recently finished item in the evaluation, if they rated, skipped or flagged it."""
    latest = (
        Assignment.objects.filter(evaluation=evaluation, user=user, finished__isnull=False)
        .exclude(status=Status.RESERVED)
        .select_related("item")
        .order_by("-finished", "-pk")
        .first()
    )
    return latest if latest is not None and latest.status in UNDOABLE else None


def undo_submit(
    *, evaluation: Evaluation, item_id: int, user: User, now: datetime | None = None
) -> tuple[Assignment, dict[str, str]]:
    """Take back the person's last submit: its ratings are deleted and the item is theirs to rate again.

    Returns the item's assignment (reserved again) and the undone answers as form fields, in the
    letters the person saw, so the form shows them. The item they were handed next goes back to the
    queue. Only the last submit can be undone, and not once revised (revise it from History instead).
    """
    now = now or timezone.now()
    with transaction.atomic():
        _lock_annotator(evaluation=evaluation, user=user)
        latest = last_submit(evaluation=evaluation, user=user)
        if latest is None or latest.item_id != item_id:
            raise RatingRefused("Only your last submit can be undone; revise earlier items from History.")
        if latest.status != Status.DONE:
            reason = latest.reason  # cleared by taking the item back; shown again in its box
            return _take_back_set_aside(latest, now=now), {"reason": reason}
        ratings = list(
            Rating.objects.select_for_update().filter(
                evaluation=evaluation,
                item_id=item_id,
                rater__user=user,
                rater__project_id=evaluation.project_id,
            )
        )
        if RatingRevision.objects.filter(rating__in=ratings).exists():
            raise RatingRefused(
                "This item was revised after it was submitted; revise it from History instead."
            )
        typed: dict[str, str] = {}
        for rating in ratings:
            typed[f"rubric-{rating.rubric_version_id}"] = value_as_shown(rating.value, rating.side_shown)
            typed[f"explanation-{rating.rubric_version_id}"] = rating.explanation
        Rating.objects.filter(pk__in=[rating.pk for rating in ratings]).delete()
        _give_back_next(latest)
        latest.status, latest.finished, latest.seconds_spent = Status.RESERVED, None, None
        latest.reserved_until = reservation_end(evaluation=evaluation, now=now)
        latest.save(update_fields=["status", "finished", "seconds_spent", "reserved_until"])
    return latest, typed


def _give_back_next(latest: Assignment) -> None:
    """The item handed to the person after `latest` was never rated: as if it had not been handed out,
    it comes back to them later."""
    for handed_next in Assignment.objects.filter(
        evaluation_id=latest.evaluation_id, user_id=latest.user_id, status=Status.RESERVED
    ):
        _unclaim_slot(evaluation_id=latest.evaluation_id, item_id=handed_next.item_id)
        handed_next.delete()


def _take_back_set_aside(latest: Assignment, *, now: datetime) -> Assignment:
    """Undo a skip or flag (the person's row is locked): the item is reserved for them again, if it still
    has room; the reason comes back in its box."""
    _give_back_next(latest)
    try:
        _reclaim(assignment=latest, now=now)
    except RatingRefused:
        raise RatingRefused(
            "This item has been rated by enough people since you set it aside, so it cannot be taken back."
        ) from None
    latest.status, latest.reason, latest.finished, latest.seconds_spent = Status.RESERVED, "", None, None
    latest.reserved_until = reservation_end(evaluation=latest.evaluation, now=now)
    latest.save(update_fields=["status", "reason", "finished", "seconds_spent", "reserved_until"])
    return latest


def has_room(*, assignment: Assignment) -> bool:
    """Whether an item the person skipped, flagged or let expire can still take their rating."""
    if assignment.holds_claim:
        return True
    slot = Slot.objects.filter(evaluation_id=assignment.evaluation_id, item_id=assignment.item_id).first()
    return slot is None or slot.is_open
