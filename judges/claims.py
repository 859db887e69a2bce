"""Claiming a run's next judge call: one conditional UPDATE, so a redelivered task or a second lane never
takes the same call twice. A claim that outlives its lease (its worker died) can be taken over."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connection
from django.db.models import Model, Q
from django.db.models.base import ModelState
from django.utils import timezone

from datasets.models import Item
from projects import leases

from . import db
from .models import JudgeCall

if TYPE_CHECKING:
    from .calls import LaneContext

# Each thread holds its own database connection: keep this pool small (connections per worker
# process = its pool threads + these + the finishers).
CLAIMER_THREADS = 4

_claimer = ThreadPoolExecutor(max_workers=CLAIMER_THREADS, thread_name_prefix="judge-claim")

# A lane renews nothing per call: a claim lasts LaneContext.lease_seconds from `claimed_at`, longer
# than a call with all its retries can take. CLAIM_SQL below is the same claim in one statement.
CALL_LEASE = leases.Lease(renewed="claimed_at", held=Q(status=JudgeCall.Status.CLAIMED))
FREE_CALL = Q(status=JudgeCall.Status.PENDING)
CALL_ITEM = JudgeCall._meta.get_field("item")


@dataclass
class Claim:
    """A call a lane holds with its claim token, and what the lane's retries keep (judges.calls): the
    requests sent for it under this claim, and after a transient error the (monotonic) time before which
    it is not sent again."""

    call: JudgeCall
    token: uuid.UUID
    attempts: int = 0
    not_before: float = 0.0

    def release(self) -> None:
        """Give the call back (pending again), unless another lane's claim replaced this one."""
        release_claim(self.call, self.token)


CLAIM_SQL = """
WITH claimed AS (
    UPDATE {calls} SET status = 'claimed', claim_token = %s, claimed_at = %s
    WHERE id = (
        SELECT id FROM {calls} WHERE run_id = %s AND status = %s {stale}
        ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
    ) RETURNING id, item_id, sample, swapped, attempts
)
SELECT claimed.id, claimed.sample, claimed.swapped, claimed.attempts, item.id, item.external_id,
       item.context::text, item.response::text, item.baseline::text, item.metadata::text
FROM claimed JOIN {items} item ON item.id = claimed.item_id
"""


def claim_next_call(ctx: LaneContext) -> tuple[JudgeCall, uuid.UUID] | None:
    """Take the next pending call (or one whose claim outlived its lease) for this lane.

    The claim is one conditional UPDATE: on PostgreSQL a single statement with SKIP LOCKED that also
    returns the item, so lanes never wait for each other; elsewhere a select then an update that checks
    the row count.
    """
    stale = leases.expiry_cutoff(ctx.lease_seconds)
    for status, stale_before in ((JudgeCall.Status.PENDING, None), (JudgeCall.Status.CLAIMED, stale)):
        if db.claims_in_one_statement():
            claimed = _claim_postgresql(ctx.run_id, status, stale_before)
        else:
            found = _claim_portable(ctx.run_id, ctx.lease_seconds, expired=stale_before is not None)
            claimed = found and (JudgeCall.objects.select_related("item").get(pk=found[0]), found[1])
        if claimed:
            return claimed
    return None


class ClaimAhead:
    """Claims a lane's next call while its current request is in flight, so no lane waits for the
    database between two requests. Inside a transaction (tests) it claims inline instead, since rows
    made there are invisible to other connections."""

    def __init__(self, ctx: LaneContext) -> None:
        self.ctx = ctx
        self.future: Future[tuple[JudgeCall, uuid.UUID] | None] | None = None

    def next(self) -> Claim | None:
        if self.future is None:
            claimed = claim_next_call(self.ctx)
        else:
            future, self.future = self.future, None
            claimed = future.result()
        return Claim(*claimed) if claimed else None

    def prefetch(self) -> None:
        """Claim the next call in the background, unless one is being claimed already (the lane sent a
        call waiting for its retry instead of the one claimed ahead)."""
        if self.future is None and db.helper_threads_see_our_writes():
            self.future = _claimer.submit(_claim_in_thread, self.ctx)

    def claim_now(self) -> None:
        """Claim the lane's next call here and now, for `next` to hand out (a lane about to wait)."""
        self.future = Future()
        self.future.set_result(claim_next_call(self.ctx))

    def release(self) -> None:
        """Give back a claim taken ahead that the lane will not use."""
        claimed = self.next() if self.future is not None else None
        if claimed is not None:
            claimed.release()


def _claim_in_thread(ctx: LaneContext) -> tuple[JudgeCall, uuid.UUID] | None:
    close_old_connections()
    return claim_next_call(ctx)


def release_claim(call: JudgeCall, token: uuid.UUID) -> None:
    leases.release(
        JudgeCall.objects.filter(pk=call.pk, claim_token=token),
        lease=CALL_LEASE,
        status=JudgeCall.Status.PENDING,
        claim_token=None,
    )


def _claim_postgresql(
    run_id: int, status: str, stale_before: datetime | None
) -> tuple[JudgeCall, uuid.UUID] | None:
    token = uuid.uuid4()
    sql = CLAIM_SQL.format(
        calls=JudgeCall._meta.db_table,
        items=Item._meta.db_table,
        stale="AND claimed_at < %s" if stale_before else "",
    )
    params: list[Any] = [token, timezone.now(), run_id, status] + ([stale_before] if stale_before else [])
    with connection.cursor() as cursor:  # one statement: atomic by itself
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    call_id, sample, swapped, attempts, item_id, external_id, *documents = row
    context, response, baseline, metadata = (json.loads(text) if text else None for text in documents)
    item = loaded(
        Item,
        id=item_id,
        external_id=external_id,
        context=context or [],
        response=response,
        baseline=baseline,
        metadata=metadata or {},
    )
    call = loaded(
        JudgeCall,
        id=call_id,
        run_id=run_id,
        item_id=item_id,
        sample=sample,
        swapped=swapped,
        attempts=attempts,
        status=JudgeCall.Status.CLAIMED,
        claim_token=token,
    )
    CALL_ITEM.set_cached_value(call, item)
    return call, token


def loaded[M: Model](model: type[M], **columns: Any) -> M:
    """The instance `Model.from_db` makes from these columns (the others deferred: fetched if read),
    without `Model.__init__`'s loop over every field: a tenth of a claim's CPU for the call and its item."""
    instance = model.__new__(model)
    instance._state = ModelState()
    instance._state.adding, instance._state.db = False, connection.alias
    instance.__dict__.update(columns)
    return instance


def _claim_portable(run_id: int, lease_seconds: float, *, expired: bool) -> tuple[int, uuid.UUID] | None:
    """The run's first pending call (or, `expired`, its first call whose claim expired), taken with a
    conditional UPDATE; tried a few times when another lane takes the one found first."""
    candidates = JudgeCall.objects.filter(run_id=run_id).filter(
        CALL_LEASE.held & CALL_LEASE.expired(lease_seconds) if expired else FREE_CALL
    )
    for _ in range(5):
        found = candidates.order_by("id").values_list("pk", flat=True).first()
        if found is None:
            return None
        token = uuid.uuid4()
        if leases.take(
            JudgeCall.objects.filter(pk=found),
            lease=CALL_LEASE,
            seconds=lease_seconds,
            free=FREE_CALL,
            status=JudgeCall.Status.CLAIMED,
            claim_token=token,
        ):
            return found, token
    return None
