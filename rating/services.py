"""Handing items to annotators and saving what they rate.

"Next item" claims a row of the Slot table with SELECT ... FOR UPDATE SKIP LOCKED, so parallel
requests never wait on each other and never hand an item to more than `overlap` people. Each
person's requests in one evaluation are serialised on their row of the evaluation's annotator
table, which makes "resume my reservation" and "never the same item twice" race-free too.
"""

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import (
    Exists,
    F,
    OuterRef,
    Subquery,
)
from django.db.models.lookups import LessThan
from django.http import QueryDict
from django.utils import timezone

from evaluations.models import MAX_OVERLAP, MAX_RESERVATION_MINUTES, Evaluation, Rater, Rating
from evaluations.values import value_from_shown
from rubrics.models import Rubric, RubricVersion

from . import db, revisions
from .models import Assignment, Slot, pairwise_left_side
from .progress import AnnotatorProgress, every_item_queued, progress_and_upkeep
from .spread import spread_same_baselines

Status = Assignment.Status
FormData = QueryDict | dict[str, str]  # a submitted form, or its fields as a dict
MAX_SECONDS_SPENT = 24 * 3600.0


class RatingRefused(Exception):
    """A request the rating app will not carry out; `message` is shown to the person as is."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class NotAnnotator(RatingRefused):
    pass


@dataclass
class Answer:
    version: RubricVersion
    value: str
    explanation: str = ""


@dataclass
class SubmitResult:
    created: int = 0
    revised: int = 0
    unchanged: int = 0
    reclaimed: bool = False


@dataclass
class AnswerErrors:
    """Problems with a submitted form: per field (`rubric-<id>`, `explanation-<id>`) and overall."""

    fields: dict[str, str] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.fields or self.general)


# --- the queue -------------------------------------------------------------------------------


def ensure_slots(*, evaluation: Evaluation) -> None:
    """Put every item of the evaluation's dataset in its queue, once, in the evaluation's order.

    Items appended to the dataset after rating started join the queue on the next request: the
    dataset's item count is compared with the queue's length (two index counts, a few ms at 100k).
    """
    if _queue_is_complete(evaluation):
        return
    with transaction.atomic():
        Evaluation.objects.select_for_update().filter(pk=evaluation.pk).values_list("pk").first()
        queued = _queue_length(evaluation)
        if queued >= evaluation.item_count():
            return
        unsure = evaluation.order == Evaluation.Order.JUDGE_UNSURE
        shuffled = unsure or evaluation.order in {Evaluation.Order.SHUFFLED, Evaluation.Order.LEAST_RATED}
        db.insert_slots(evaluation=evaluation, shuffled=shuffled, unsure_first=unsure)
        if queued == 0:  # the first build, before anyone holds a place in it: same baselines moved apart
            spread_same_baselines(evaluation=evaluation)


def _queue_is_complete(evaluation: Evaluation) -> bool:
    """Whether the queue holds every item: this runs before every "next item", so no count of either."""
    return Evaluation.objects.filter(every_item_queued(), pk=evaluation.pk).exists()


def _queue_length(evaluation: Evaluation) -> int:
    return Slot.objects.filter(evaluation=evaluation).count()


def _overlap_of(evaluation_id: int) -> Subquery:
    return Subquery(Evaluation.objects.filter(pk=evaluation_id).values("overlap")[:1])


def _claim_slot(*, evaluation_id: int, item_id: int) -> None:
    Slot.objects.filter(evaluation_id=evaluation_id, item_id=item_id).update(
        claims=F("claims") + 1, is_open=LessThan(F("claims") + 1, _overlap_of(evaluation_id))
    )


def _unclaim_slot(*, evaluation_id: int, item_id: int) -> None:
    Slot.objects.filter(evaluation_id=evaluation_id, item_id=item_id).update(
        claims=F("claims") - 1, is_open=LessThan(F("claims") - 1, _overlap_of(evaluation_id))
    )


def release_expired(
    *, evaluation: Evaluation, now: datetime | None = None, limit: int = 100, keep_user: User | None = None
) -> int:
    """Give reservations that ran out back to the pool. Returns how many were released.

    `keep_user`'s own reservation is left alone: they are asking for their next item, and get it back.
    """
    now = now or timezone.now()
    expired_rows = Assignment.objects.filter(
        evaluation=evaluation, status=Status.RESERVED, reserved_until__lt=now
    )
    if keep_user is not None:
        expired_rows = expired_rows.exclude(user=keep_user)
    if not expired_rows.exists():  # the usual case: one read, no transaction to open and commit
        return 0
    with transaction.atomic():
        locked = expired_rows.select_for_update(skip_locked=True)
        expired = list(locked.order_by("item_id").values_list("pk", "item_id")[:limit])
        if not expired:
            return 0
        Assignment.objects.filter(pk__in=[pk for pk, _ in expired]).update(status=Status.EXPIRED)
        for _, item_id in expired:  # item order, so two releasers never deadlock
            _unclaim_slot(evaluation_id=evaluation.pk, item_id=item_id)
    return len(expired)


def _lock_annotator(*, evaluation: Evaluation, user: User) -> None:
    """Serialise one person's rating requests in one evaluation; refuse people who are not its annotators."""
    through = Evaluation.annotators.through
    rows = list(
        through.objects.select_for_update()
        .filter(evaluation_id=evaluation.pk, user_id=user.pk)
        .values_list("pk")
    )
    if not rows:
        raise NotAnnotator(f"You are not an annotator of the evaluation “{evaluation.name}”.")


def reservation_end(*, evaluation: Evaluation, now: datetime) -> datetime:
    return now + timedelta(minutes=evaluation.reservation_minutes)


def next_assignment(*, evaluation: Evaluation, user: User, now: datetime | None = None) -> Assignment | None:
    """The item `user` should rate next: their open reservation, else a newly reserved item, else None."""
    now = now or timezone.now()
    ensure_slots(evaluation=evaluation)
    release_expired(evaluation=evaluation, now=now, keep_user=user)
    with transaction.atomic():
        _lock_annotator(evaluation=evaluation, user=user)
        return _next_locked(evaluation=evaluation, user=user, now=now)


def _next_locked(
    *, evaluation: Evaluation, user: User, now: datetime, none_reserved: bool = False
) -> Assignment | None:
    """`next_assignment` once the person's annotator row is locked; `none_reserved`: they hold none."""
    until = reservation_end(evaluation=evaluation, now=now)
    if not none_reserved:
        current = (
            Assignment.objects.select_related("item")
            .filter(evaluation=evaluation, user=user, status=Status.RESERVED)
            .first()
        )
        if current is not None:
            current.reserved_until = until
            current.save(update_fields=["reserved_until"])
            return current
    if db.reserves_in_one_statement():
        return db.reserve_next(
            evaluation=evaluation, user_id=user.pk, now=now, until=until, least_rated=_least_rated(evaluation)
        )
    slot = _pick_slot(evaluation=evaluation, user=user)
    if slot is None:
        return None
    _claim_slot(evaluation_id=evaluation.pk, item_id=slot.item_id)
    return Assignment.objects.create(
        evaluation=evaluation,
        item=slot.item,
        user=user,
        rank=slot.rank,
        reserved_until=until,
        left_side=pairwise_left_side(user_id=user.pk, item_id=slot.item_id),
    )


def _least_rated(evaluation: Evaluation) -> bool:
    """Whether "next item" takes the open item with the fewest claims first (the queue's rank breaks ties)."""
    return evaluation.order == Evaluation.Order.LEAST_RATED


def _pick_slot(*, evaluation: Evaluation, user: User) -> Slot | None:
    """Lock the first open slot, in queue order, that `user` has never held; skip slots others are locking.

    Each person moves forward from the last place they were handed an item, so the scan does not
    wade through the items they already rated while those wait for other raters. Only when nothing
    is left ahead does it look behind, for items that came back (skipped or expired) meanwhile.
    """
    already_had = Assignment.objects.filter(evaluation=evaluation, user=user, item_id=OuterRef("item_id"))
    candidates = (
        Slot.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(evaluation=evaluation, is_open=True, claims__lt=evaluation.overlap)
        .filter(~Exists(already_had))
        .order_by("rank")
        .select_related("item")
    )
    if _least_rated(evaluation):
        return candidates.order_by("claims", "rank").first()
    last_rank = (
        Assignment.objects.filter(evaluation=evaluation, user=user)
        .order_by("-rank")
        .values_list("rank", flat=True)
        .first()
    )
    if last_rank is not None:
        ahead = candidates.filter(rank__gt=last_rank).first()
        if ahead is not None:
            return ahead
    return candidates.first()


def submit_and_next(
    *,
    evaluation: Evaluation,
    held: Assignment,
    user: User,
    answers: dict[int, Answer],
    seconds_spent: float | None = None,
    rater_id: int | None = None,
    now: datetime | None = None,
) -> tuple[SubmitResult, Assignment | None, AnnotatorProgress]:
    """Save a submit and reserve the person's next item in one transaction (the rating page's hot path).

    Returns what the submit did, the next assignment (None when nothing is left) and the person's
    progress counted after the submit. Queue upkeep (items added to the dataset, reservations that
    ran out) is read in the progress query and done only when needed.
    """
    now = now or timezone.now()
    with transaction.atomic():
        _lock_annotator(evaluation=evaluation, user=user)
        result = _submit(
            evaluation=evaluation,
            item_id=held.item_id,
            user=user,
            answers=answers,
            seconds_spent=seconds_spent,
            rater_id=rater_id,
            held=held,
            now=now,
        )
        progress = progress_and_upkeep(evaluation=evaluation, user=user, now=now)
        if not progress.queue_complete:
            ensure_slots(evaluation=evaluation)
        if progress.expired_waiting:
            release_expired(evaluation=evaluation, now=now, keep_user=user)
        # One reservation per person: the one just submitted was it, unless this was a late submit.
        none_reserved = held.status == Status.RESERVED and not result.reclaimed
        assignment = _next_locked(evaluation=evaluation, user=user, now=now, none_reserved=none_reserved)
        progress.has_more = assignment is not None
    return result, assignment, progress


def _reclaim(*, assignment: Assignment, now: datetime) -> None:
    """Take back an item whose reservation was released, if it still has room, for a late submit."""
    slot = Slot.objects.select_for_update().get(
        evaluation_id=assignment.evaluation_id, item_id=assignment.item_id
    )
    evaluation = Evaluation.objects.only("overlap").get(pk=assignment.evaluation_id)
    if slot.claims >= evaluation.overlap:
        raise RatingRefused(
            "Your reservation of this item ran out and it has since been rated by enough people "
            f"({evaluation.overlap}). Nothing was saved; your answers are still in the form."
        )
    _claim_slot(evaluation_id=assignment.evaluation_id, item_id=assignment.item_id)


# --- answers ---------------------------------------------------------------------------------


def read_answers(
    *, versions: list[RubricVersion], data: FormData, left_side: str, explain: set[int]
) -> tuple[dict[int, Answer], AnswerErrors]:
    """Read `rubric-<version id>` / `explanation-<version id>` fields of a submitted form and check them;
    the versions in `explain` need an explanation (rater_view.people_explain).

    A pairwise field holds the letter the person picked as shown (A = their left card, whichever
    response that is, so the page never says which card is the response); the answer holds the
    canonical value (A = baseline), converted with `left_side`.
    """
    errors = AnswerErrors()
    known = {str(version.pk) for version in versions}
    for key in data:
        prefix, _, version_id = key.partition("-")
        if prefix in {"rubric", "explanation"} and version_id not in known:
            errors.general.append(
                f"Field “{key}” names rubric version {version_id!r}, which is not part of this evaluation. "
                "Nothing was saved."
            )
    answers: dict[int, Answer] = {}
    for version in versions:
        value = (data.get(f"rubric-{version.pk}") or "").strip()
        explanation = (data.get(f"explanation-{version.pk}") or "").strip()
        if not value:
            errors.fields[f"rubric-{version.pk}"] = f"Pick a value for “{version.criterion}”."
            continue
        if value not in version.scale_values:
            allowed = ", ".join(version.scale_values)
            errors.fields[f"rubric-{version.pk}"] = (
                f"“{value}” is not on the scale of “{version.criterion}” (allowed: {allowed})."
            )
            continue
        if version.pk in explain and not explanation:
            errors.fields[f"explanation-{version.pk}"] = f"“{version.criterion}” asks for an explanation."
            continue
        if version.kind == Rubric.Kind.PAIRWISE:
            value = value_from_shown(value, left_side)
        answers[version.pk] = Answer(version=version, value=value, explanation=explanation)
    return answers, errors


def seconds_since(shown_at: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds between the page's `shown_at` stamp (Unix time) and now; None when missing or implausible."""
    now = now or timezone.now()
    try:
        shown = float(shown_at or "")
    except ValueError:
        return None
    spent = now.timestamp() - shown
    if not math.isfinite(spent) or spent < 0 or spent > MAX_SECONDS_SPENT:
        return None
    return round(spent, 1)


def _ratings_of(
    *,
    evaluation: Evaluation,
    item_id: int,
    rater_id: int,
    answers: dict[int, Answer],
    side: str,
    seconds_spent: float | None,
) -> list[Rating]:
    """The ratings a submit stores: pairwise ones with the side the person saw on the left."""
    return [
        Rating(
            evaluation=evaluation,
            rater_id=rater_id,
            item_id=item_id,
            rubric_version=answer.version,
            value=answer.value,
            explanation=answer.explanation,
            side_shown=side if answer.version.kind == Rubric.Kind.PAIRWISE else "",
            seconds_spent=seconds_spent,
        )
        for answer in answers.values()
    ]


def submit_ratings(
    *,
    evaluation: Evaluation,
    item_id: int,
    user: User,
    answers: dict[int, Answer],
    seconds_spent: float | None = None,
    rater_id: int | None = None,
    held: Assignment | None = None,
    now: datetime | None = None,
) -> SubmitResult:
    """Save every rubric's answer for one item in one transaction; revising keeps the earlier value.

    Submitting the same answers again changes nothing, so double submits and replays are harmless.
    `rater_id` and `held` (the person's assignment of the item, unlocked): what the caller already read.
    """
    with transaction.atomic():
        return _submit(
            evaluation=evaluation,
            item_id=item_id,
            user=user,
            answers=answers,
            seconds_spent=seconds_spent,
            rater_id=rater_id,
            held=held,
            now=now or timezone.now(),
        )


def _submit(
    *,
    evaluation: Evaluation,
    item_id: int,
    user: User,
    answers: dict[int, Answer],
    seconds_spent: float | None,
    rater_id: int | None,
    held: Assignment | None,
    now: datetime,
) -> SubmitResult:
    result = SubmitResult()
    if rater_id is None:
        rater_id = Rater.for_user(evaluation.project, user).pk
    # The usual case in one statement: the person's reservation becomes done. A reserved item has no
    # ratings of theirs yet (undo deletes them), so its ratings are created without reading any.
    mine = Assignment.objects.filter(evaluation=evaluation, item_id=item_id, user=user)
    if held is not None and held.status == Status.RESERVED:
        # The usual case in one statement: the reservation the caller read becomes done. A reserved
        # item has no ratings of theirs yet (undo deletes them), so none is read before creating.
        still = mine.filter(pk=held.pk, status=Status.RESERVED, left_side=held.left_side)
        if still.update(status=Status.DONE, finished=now, seconds_spent=seconds_spent):
            ratings = _ratings_of(
                evaluation=evaluation,
                item_id=item_id,
                rater_id=rater_id,
                answers=answers,
                side=held.left_side,
                seconds_spent=seconds_spent,
            )
            result.created = revisions.save_ratings(ratings, fields=(), none_stored=True).created
            return result
    assignment = mine.select_for_update().first()
    if assignment is None:
        raise RatingRefused("This item is not reserved for you, so nothing was saved. Use “Next item”.")
    if not assignment.holds_claim:
        _reclaim(assignment=assignment, now=now)
        result.reclaimed = True
    ratings = _ratings_of(
        evaluation=evaluation,
        item_id=item_id,
        rater_id=rater_id,
        answers=answers,
        side=assignment.left_side,
        seconds_spent=seconds_spent,
    )
    saved = revisions.save_ratings(
        ratings,
        fields=("value", "explanation", "side_shown", "seconds_spent"),
        compared=revisions.VALUE_FIELDS,
    )
    result.created, result.revised, result.unchanged = saved.created, saved.revised, saved.unchanged
    if assignment.status != Status.DONE:
        assignment.status, assignment.finished = Status.DONE, now
        assignment.seconds_spent = seconds_spent
        assignment.save(update_fields=["status", "finished", "seconds_spent"])
    return result


def set_aside(
    *,
    evaluation: Evaluation,
    item_id: int,
    user: User,
    reason: str,
    flag: bool,
    seconds_spent: float | None = None,
    now: datetime | None = None,
) -> Assignment:
    """Skip an item (or flag it as a problem) with a reason; it goes back to the pool for others."""
    reason = reason.strip()
    if not reason:
        what = "flagging" if flag else "skipping"
        raise RatingRefused(f"Say why you are {what} this item (the reason field is empty).", field="reason")
    now = now or timezone.now()
    with transaction.atomic():
        assignment = (
            Assignment.objects.select_for_update()
            .filter(evaluation=evaluation, item_id=item_id, user=user)
            .first()
        )
        if assignment is None:
            raise RatingRefused("This item is not reserved for you.")
        if assignment.status == Status.DONE:
            raise RatingRefused("You have already rated this item; revise it from your history instead.")
        if assignment.status == Status.RESERVED:
            _unclaim_slot(evaluation_id=evaluation.pk, item_id=item_id)
        assignment.status = Status.FLAGGED if flag else Status.SKIPPED
        assignment.reason, assignment.finished, assignment.seconds_spent = reason, now, seconds_spent
        assignment.save(update_fields=["status", "reason", "finished", "seconds_spent"])
    return assignment


# --- settings and progress -------------------------------------------------------------------


def update_assignment_settings(
    *, evaluation: Evaluation, overlap: int, reservation_minutes: int, order: str
) -> Evaluation:
    """Change overlap N, the reservation timeout and the order; reopen or close items to match."""
    if not 1 <= overlap <= MAX_OVERLAP:
        message = f"Overlap must be between 1 and {MAX_OVERLAP:,} ratings per item, not {overlap:,}."
        raise RatingRefused(message, field="overlap")
    if not 1 <= reservation_minutes <= MAX_RESERVATION_MINUTES:
        message = (
            f"The reservation timeout must be between 1 and {MAX_RESERVATION_MINUTES:,} minutes (a week), "
            f"not {reservation_minutes:,}."
        )
        raise RatingRefused(message, field="reservation_minutes")
    if order not in Evaluation.Order.values:
        raise RatingRefused(f"Unknown order {order!r}.", field="order")
    with transaction.atomic():
        locked = Evaluation.objects.select_for_update().get(pk=evaluation.pk)
        if order != locked.order:
            if Assignment.objects.filter(evaluation=locked).exists():
                raise RatingRefused("The order cannot change once rating has started.", field="order")
            Slot.objects.filter(evaluation=locked).delete()  # rebuilt in the new order on the next request
        locked.overlap, locked.reservation_minutes, locked.order = overlap, reservation_minutes, order
        locked.save(update_fields=["overlap", "reservation_minutes", "order"])
        Slot.objects.filter(evaluation=locked).update(is_open=LessThan(F("claims"), overlap))
    return locked
