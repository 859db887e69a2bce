"""What the rating app does differently on PostgreSQL and on SQLite; nothing else in it asks which."""

from datetime import datetime

from django.db import connection

from agreement.uncertainty import item_uncertainty, unsure_first_rank
from datasets.models import Item
from evaluations.models import Evaluation, ExcludedItem

from .models import Assignment, Slot, shuffled_rank


def insert_slots(*, evaluation: Evaluation, shuffled: bool, unsure_first: bool = False) -> None:
    """Queue the evaluation's items that have no slot yet and are not excluded (all of them, the first
    time): one INSERT ... SELECT on PostgreSQL (its md5 gives the same shuffled rank as `shuffled_rank`),
    bulk_create elsewhere and for `unsure_first` (ranked by the judges' uncertainty, computed in Python)."""
    if connection.vendor == "postgresql" and not unsure_first:
        _insert_in_sql(evaluation=evaluation, shuffled=shuffled)
    else:
        _insert_in_python(evaluation=evaluation, shuffled=shuffled, unsure_first=unsure_first)


def _insert_in_sql(*, evaluation: Evaluation, shuffled: bool) -> None:
    """Slots for the dataset's items that have none yet (all of them, the first time)."""
    rank = (
        "('x' || substr(md5(%s::text || ':' || i.id::text), 1, 15))::bit(60)::bigint"
        if shuffled
        else "i.position"
    )
    params: list[int] = [evaluation.pk] + ([evaluation.pk] if shuffled else [])
    params += [evaluation.dataset_id, evaluation.pk, evaluation.pk]
    table = Slot._meta.db_table
    excluded = ExcludedItem._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (evaluation_id, item_id, rank, claims, is_open) "
            f"SELECT %s, i.id, {rank}, 0, true FROM {Item._meta.db_table} i WHERE i.dataset_id = %s "
            f"AND NOT EXISTS (SELECT 1 FROM {table} s WHERE s.evaluation_id = %s AND s.item_id = i.id) "
            f"AND NOT EXISTS (SELECT 1 FROM {excluded} e WHERE e.evaluation_id = %s AND e.item_id = i.id)",
            params,
        )


def _insert_in_python(*, evaluation: Evaluation, shuffled: bool, unsure_first: bool = False) -> None:
    """Slots for the items without one; `unsure_first`: by the judges' uncertainty (agreement.uncertainty)."""
    queued = set(Slot.objects.filter(evaluation=evaluation).values_list("item_id", flat=True))
    items = evaluation.items().values_list("id", "position")
    unsure = item_uncertainty(evaluation) if unsure_first else {}

    def rank(item_id: int, position: int) -> int:
        if not shuffled:
            return position
        tie = shuffled_rank(evaluation_id=evaluation.pk, item_id=item_id)
        return unsure_first_rank(unsure.get(item_id, 0.0), tie) if unsure_first else tie

    Slot.objects.bulk_create(
        (
            Slot(evaluation=evaluation, item_id=item_id, rank=rank(item_id, position))
            for item_id, position in items.iterator(chunk_size=5000)
            if item_id not in queued
        ),
        batch_size=2000,
    )


def reserves_in_one_statement() -> bool:
    """Whether "next item" is one statement (`reserve_next`, PostgreSQL); elsewhere the ORM picks, claims and
    creates in three (`services._pick_slot`), which SQLite's one-writer-at-a-time transactions make safe."""
    return connection.vendor == "postgresql"


# The first open slot after `after` in queue order that the person never held, locked (others' locks
# skipped), claimed and turned into their reservation; the item comes back with it. The left side is
# `pairwise_left_side` in SQL: the first byte of the same SHA-256, odd = the response on the left.
RESERVE_NEXT = """
WITH picked AS (
    SELECT s.id FROM rating_slot s
    WHERE s.evaluation_id = %(evaluation)s AND s.is_open AND s.claims < %(overlap)s AND s.rank > %(after)s
      AND NOT EXISTS (
        SELECT 1 FROM rating_assignment a
        WHERE a.evaluation_id = %(evaluation)s AND a.user_id = %(user)s AND a.item_id = s.item_id)
    ORDER BY %(order)s LIMIT 1 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE rating_slot s SET claims = s.claims + 1,
        is_open = s.claims + 1 < (SELECT e.overlap FROM evaluations_evaluation e WHERE e.id = %(evaluation)s)
    FROM picked WHERE s.id = picked.id
    RETURNING s.item_id, s.rank
), made AS (
    INSERT INTO rating_assignment
        (evaluation_id, item_id, user_id, status, rank, reserved_until, left_side, reason, started)
    SELECT %(evaluation)s, c.item_id, %(user)s, 'reserved', c.rank, %(until)s,
        CASE WHEN get_byte(sha256(convert_to('pairwise-side:' || %(user)s::text || ':' || c.item_id::text,
                                             'UTF8')), 0) & 1 = 1
             THEN 'response' ELSE 'baseline' END,
        '', %(now)s
    FROM claimed c
    RETURNING id, item_id, rank, left_side
)
SELECT i.*, made.id AS assignment_id, made.rank AS assignment_rank, made.left_side AS assignment_left_side
FROM made JOIN datasets_item i ON i.id = made.item_id
"""
LOWEST_RANK = -(2**63)
LAST_RANK = (
    "COALESCE((SELECT max(a.rank) FROM rating_assignment a WHERE a.evaluation_id = %(evaluation)s "
    f"AND a.user_id = %(user)s), {LOWEST_RANK})"
)


def reserve_next(
    *, evaluation: Evaluation, user_id: int, now: datetime, until: datetime, least_rated: bool = False
) -> Assignment | None:
    """Reserve the person's next item in one statement: ahead of the last place they were handed one,
    else (items that came back meanwhile) from the start of the queue. None when nothing is open for them.

    `least_rated`: the open item with the fewest claims, queue order among equals, from the start."""
    params: dict[str, int | datetime] = {
        "evaluation": evaluation.pk,
        "user": user_id,
        "overlap": evaluation.overlap,
        "now": now,
        "until": until,
    }
    sql = RESERVE_NEXT.replace("%(order)s", "s.claims, s.rank" if least_rated else "s.rank")
    for after in (str(LOWEST_RANK),) if least_rated else (LAST_RANK, str(LOWEST_RANK)):
        found = list(Item.objects.raw(sql.replace("%(after)s", after), params))
        if found:
            break
    else:
        return None
    (item,) = found
    extra = item.__dict__  # the assignment's columns, which RawQuerySet puts on the item
    pk, rank, left_side = (extra.pop(f"assignment_{name}") for name in ("id", "rank", "left_side"))
    assignment = Assignment(
        pk=pk,
        evaluation=evaluation,
        item=item,
        user_id=user_id,
        status=Assignment.Status.RESERVED,
        rank=rank,
        reserved_until=until,
        left_side=left_side,
        started=now,
    )
    assignment._state.adding, assignment._state.db = False, connection.alias
    return assignment
