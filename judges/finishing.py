"""Storing a claimed call's outcome and, once an item's calls are all done, the item's rating.

A call is finished with a conditional UPDATE that checks the claim token, so a redelivered task or a
second lane never stores a call twice; the item's rating is written in the same transaction, and the
rating's unique constraint backs that up. Done calls are stored on a few background threads, several to
a transaction (one UPDATE per call, one INSERT for all their ratings), while the lanes' next requests are
already in flight.
"""

from __future__ import annotations

import functools
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from evaluations.models import Rating
from rating.revisions import key_of, save_ratings

from . import db
from .aggregate import aggregate_calls
from .models import JudgeCall

if TYPE_CHECKING:
    from .calls import LaneContext

# Each thread holds its own database connection: keep this pool small (connections per worker
# process = its pool threads + these + the claimers).
FINISHER_THREADS = 4
# Done calls stored in one transaction at most.
FINISH_BATCH = 32
# A batch is what arrives within this long of its first call (without the wait, nearly every batch held
# one call: a transaction per call). The lanes do not wait for it, only a lane's end does.
FINISH_GATHER_SECONDS = 0.05
# What a judge writes on an item's rating (and compares when it is written again).
JUDGE_RATING_FIELDS = ("value", "parse_failed", "explanation", "raw_output", "details")
CALL_FIELDS = {column.name: column for column in JudgeCall._meta.concrete_fields}
RATING_COLUMNS = [column for column in Rating._meta.concrete_fields if not column.primary_key]
RATING_KEY = ("evaluation_id", "rater_id", "item_id", "rubric_version_id")  # the unique constraint's columns

_finisher = ThreadPoolExecutor(max_workers=FINISHER_THREADS, thread_name_prefix="judge-finish")
_waiting: list[Finish] = []  # the batch being gathered
_waiting_lock = threading.Lock()
_no_more = threading.Event()  # a lane waits for its finishes: store the batch without gathering longer


@dataclass
class Finish:
    """A done call waiting for a finisher thread; `stored` says whether its claim still held."""

    ctx: LaneContext
    call: JudgeCall
    token: uuid.UUID
    fields: dict[str, Any]
    stored: Future[bool] = field(default_factory=Future)


def finish_later(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict[str, Any]) -> Future[bool]:
    """Queue a done call for the finisher threads. Calls of items with several calls (samples, position
    swap) lock their siblings, so they go one to a transaction (no two batches wait for each other)."""
    if ctx.calls_per_item != 1:
        return _finisher.submit(_finish_one, ctx, call, token, fields)
    finish = Finish(ctx, call, token, fields)
    with _waiting_lock:
        _waiting.append(finish)
        first = len(_waiting) == 1
    if first:  # a new batch: one finisher stores it, and whatever joins it, once it has gathered
        _finisher.submit(_finish_waiting)
    return finish.stored


def store_gathered_now() -> None:
    """A lane is ending and waits for its finishes (the last of a run's): the batch being gathered is
    stored at once instead of after the rest of FINISH_GATHER_SECONDS."""
    _no_more.set()


def _finish_one(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict[str, Any]) -> bool:
    close_old_connections()
    return finish_call(ctx, call, token, fields)


def _finish_waiting() -> None:
    """Store the batch that gathered (in transactions of at most FINISH_BATCH calls)."""
    _no_more.wait(FINISH_GATHER_SECONDS)
    _no_more.clear()
    with _waiting_lock:
        waiting = _waiting[:]
        _waiting.clear()
    close_old_connections()
    for start in range(0, len(waiting), FINISH_BATCH):
        batch = waiting[start : start + FINISH_BATCH]
        try:
            stored = store_finishes(batch)
        except BaseException as error:  # the lanes see it when they wait for their finishes
            for finish in batch:
                finish.stored.set_exception(error)
            continue
        for finish, ok in zip(batch, stored, strict=True):
            finish.stored.set_result(ok)


def store_finishes(batch: list[Finish]) -> list[bool]:
    """Store done calls of one call per item, and their ratings, in one transaction; per call, whether
    its claim still held. On PostgreSQL that is two statements for the whole batch (the calls' UPDATE
    locks their rows in id order, so two batches never wait for each other in a cycle)."""
    now = timezone.now()
    fields = [{**finish.fields, "finished_at": now, "claim_token": None} for finish in batch]
    with transaction.atomic():
        if db.writes_in_one_statement():
            held = update_claimed_calls(
                [(f.call.pk, f.token, values) for f, values in zip(batch, fields, strict=True)]
            )
            stored = [finish.call.pk in held for finish in batch]
        else:
            order = sorted(range(len(batch)), key=lambda i: batch[i].call.pk)
            stored = [False] * len(batch)
            for index in order:
                stored[index] = update_claimed_call(batch[index].call.pk, batch[index].token, fields[index])
        for finish, values, ok in zip(batch, fields, stored, strict=True):
            if ok:
                _apply(finish.call, values)
        store_ratings(
            [rating_for(f.ctx, f.call.item_id, [f.call]) for f, ok in zip(batch, stored, strict=True) if ok]
        )
    return stored


def finish_call(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict[str, Any]) -> bool:
    """Store a call's outcome if this lane still holds its claim; write the item's rating when complete.

    With several calls per item (samples, position swap) the item's calls are locked first, so the last
    of them to finish sees all the others done and writes the rating exactly once.
    """
    fields = {**fields, "finished_at": timezone.now(), "claim_token": None}
    with transaction.atomic():
        if ctx.calls_per_item == 1:
            siblings = [call]
        else:
            siblings = list(
                JudgeCall.objects.select_for_update()
                .filter(run_id=ctx.run_id, item_id=call.item_id)
                .order_by("id")
            )
        if not update_claimed_call(call.pk, token, fields):
            return False
        for sibling in siblings:
            if sibling.pk == call.pk:
                _apply(sibling, fields)
        if all(sibling.status == JudgeCall.Status.DONE for sibling in siblings):
            store_ratings([rating_for(ctx, call.item_id, siblings)])
    return True


def _apply(call: JudgeCall, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        setattr(call, name, value)


def update_claimed_call(call_id: int, token: uuid.UUID, fields: dict[str, Any]) -> bool:
    """UPDATE the call's row with `fields` if it is still claimed with `token`; whether it was.

    The same statement QuerySet.update would send, with values prepared by the fields themselves, but
    without building a query per call (that was a fifth of a worker's CPU per call)."""
    quote = connection.ops.quote_name
    columns = [CALL_FIELDS[name] for name in fields]
    assignments = ", ".join(f"{quote(str(column.column))} = %s" for column in columns)
    values = [column.get_db_prep_save(fields[column.name], connection) for column in columns]
    token_value = CALL_FIELDS["claim_token"].get_db_prep_save(token, connection)
    sql = (
        f"UPDATE {quote(JudgeCall._meta.db_table)} SET {assignments} "
        f"WHERE {quote('id')} = %s AND {quote('status')} = %s AND {quote('claim_token')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, call_id, JudgeCall.Status.CLAIMED, token_value])
        return cursor.rowcount == 1


UPDATE_CALLS_SQL = """
WITH given AS (SELECT * FROM json_to_recordset(%s::json) AS given ({columns})),
locked AS MATERIALIZED (
    SELECT id FROM {calls} WHERE id IN (SELECT given.id FROM given) ORDER BY id FOR UPDATE
)
UPDATE {calls} SET {assignments}
FROM given, locked
WHERE {calls}.id = given.id AND locked.id = given.id
  AND {calls}.status = %s AND {calls}.claim_token = given.token
RETURNING {calls}.id
"""


def update_claimed_calls(calls: list[tuple[int, uuid.UUID, dict[str, Any]]]) -> set[int]:
    """`update_claimed_call` for several calls with the same fields in one statement (PostgreSQL); the
    ids whose claim held. Rows are locked in id order, so two batches never wait for each other in a
    cycle. The rows go as one JSON parameter (`json_rows`), so the statement's text is the same whatever
    the batch's size."""
    names = tuple(calls[0][2])
    if any(tuple(fields) != names for _, _, fields in calls):
        return {pk for pk, token, fields in calls if update_claimed_call(pk, token, fields)}
    columns = [CALL_FIELDS[name] for name in names]
    rows = [
        [pk, str(token), *prepared(columns, [fields[name] for name in names])] for pk, token, fields in calls
    ]
    given = json_rows(["id", "token", *(str(column.column) for column in columns)], rows)
    with connection.cursor() as cursor:
        cursor.execute(update_calls_sql(names), [given, JudgeCall.Status.CLAIMED])
        return {pk for (pk,) in cursor.fetchall()}


@functools.cache
def update_calls_sql(names: tuple[str, ...]) -> str:
    columns = [CALL_FIELDS[name] for name in names]
    given = [f"id {CALL_FIELDS['id'].db_type(connection)}", "token uuid", *recordset_columns(columns)]
    quoted = [connection.ops.quote_name(str(column.column)) for column in columns]
    return UPDATE_CALLS_SQL.format(
        calls=JudgeCall._meta.db_table,
        columns=", ".join(given),
        assignments=", ".join(f"{name} = given.{name}" for name in quoted),
    )


def prepared(columns: list[Any], values: list[Any]) -> list[Any]:
    """Each value as its field prepares it for the database, before the adapter (a JSON field's document
    stays the document)."""
    return [column.get_prep_value(value) for column, value in zip(columns, values, strict=True)]


def json_rows(names: list[str], rows: list[list[Any]]) -> str:
    """Rows as the JSON array of objects `json_to_recordset` reads: one text parameter for a whole batch,
    made by orjson (quoting one string instead of dumping an array per column, which was a tenth of a
    judge worker's CPU)."""
    return orjson.dumps([dict(zip(names, row, strict=True)) for row in rows]).decode()


def recordset_columns(columns: list[Any]) -> list[str]:
    """`column type` for each column, as `json_to_recordset` names (the JSON keys) and types them."""
    quote = connection.ops.quote_name
    return [f"{quote(str(column.column))} {column.db_type(connection)}" for column in columns]


# -- the item's rating --------------------------------------------------------------------------
def rating_for(ctx: LaneContext, item_id: int, calls: list[JudgeCall]) -> Rating:
    fields = aggregate_calls(calls, kind=ctx.kind, scale_values=ctx.version.scale_values)
    return Rating(
        evaluation_id=ctx.evaluation_id,
        rater_id=ctx.rater_id,
        item_id=item_id,
        rubric_version_id=ctx.version.pk,
        **fields,
    )


def store_ratings(ratings: list[Rating]) -> None:
    """New ratings are created; one written again (a resumed or repeated run) is revised with its earlier
    value kept, as people's are (rating.revisions, the one way to revise a rating). On PostgreSQL the new
    ones go in with one INSERT ... ON CONFLICT DO NOTHING, and only those already stored are read."""
    if ratings and db.writes_in_one_statement():
        ratings = insert_new_ratings(ratings)
    if ratings:
        save_ratings(ratings, fields=JUDGE_RATING_FIELDS)


def insert_new_ratings(ratings: list[Rating]) -> list[Rating]:
    """INSERT the ratings whose key (evaluation, rater, item, rubric version) is not stored yet; returns
    the others, left for `save_ratings` to revise. Any other constraint still refuses a bad row. The rows
    go as one JSON parameter (`json_rows`): the same statement text for any number of ratings."""
    rows = [
        prepared(RATING_COLUMNS, [column.pre_save(rating, True) for column in RATING_COLUMNS])
        for rating in ratings
    ]
    given = json_rows([str(column.column) for column in RATING_COLUMNS], rows)
    with connection.cursor() as cursor:
        cursor.execute(insert_ratings_sql(), [given])
        created = {tuple(key): pk for *key, pk in cursor.fetchall()}
    for rating in ratings:
        rating.pk = created.get(key_of(rating))
    return [rating for rating in ratings if rating.pk is None]


@functools.cache
def insert_ratings_sql() -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(column.column)) for column in RATING_COLUMNS)
    key = ", ".join(quote(name) for name in RATING_KEY)
    return (
        f"INSERT INTO {quote(Rating._meta.db_table)} ({columns}) "
        f"SELECT {columns} FROM json_to_recordset(%s::json) AS given "
        f"({', '.join(recordset_columns(RATING_COLUMNS))}) "
        f"ON CONFLICT ({key}) DO NOTHING RETURNING {key}, {quote('id')}"
    )
