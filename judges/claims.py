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
# Calls a lane claims with one statement while many are left (a fraction of the CPU of one per statement:
# the statement, its round trip and the hand-off to the claimer thread are shared).
CLAIM_BATCH = 4

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
    overloads: int = 0  # of the attempts, those an overloaded endpoint turned away (`calls.RunHealth`)
    last_error: str = ""  # the last server error, and how many attempts in a row got it (`calls.repeating`)
    same_errors: int = 0

    def release(self) -> None:
        """Give the call back (pending again), unless another lane's claim replaced this one."""
        release_claim(self.call, self.token)


CLAIM_SQL = """
WITH claimed AS (
    UPDATE {calls} SET status = 'claimed', claim_token = %s, claimed_at = %s
    WHERE id IN (
        SELECT id FROM {calls} WHERE run_id = %s AND status = %s {stale}
        ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
    ) RETURNING id, item_id, sample, swapped, attempts
)
SELECT claimed.id, claimed.sample, claimed.swapped, claimed.attempts, item.id, item.external_id,
       item.context::text, item.response::text, item.baseline::text, item.metadata::text
FROM claimed JOIN {items} item ON item.id = claimed.item_id ORDER BY claimed.id
"""


def claim_next_call(ctx: LaneContext) -> tuple[JudgeCall, uuid.UUID] | None:
    """Take the next pending call (or one whose claim outlived its lease) for this lane."""
    claimed = claim_next_calls(ctx, 1)
    return claimed[0] if claimed else None


def claim_next_calls(ctx: LaneContext, count: int) -> list[tuple[JudgeCall, uuid.UUID]]:
    """Take the next pending calls (or ones whose claim outlived its lease), at most `count`, in id order.

    The claim is one conditional UPDATE: on PostgreSQL a single statement with SKIP LOCKED that also
    returns the items, so lanes never wait for each other; elsewhere a select then an update that checks
    the row count, one call at a time.
    """
    stale = leases.expiry_cutoff(ctx.lease_seconds)
    for status, stale_before in ((JudgeCall.Status.PENDING, None), (JudgeCall.Status.CLAIMED, stale)):
        if db.claims_in_one_statement():
            claimed = _claim_postgresql(ctx.run_id, status, stale_before, count)
        else:
            found = _claim_portable(ctx.run_id, ctx.lease_seconds, expired=stale_before is not None)
            claimed = [(JudgeCall.objects.select_related("item").get(pk=found[0]), found[1])] if found else []
        if claimed:
            return claimed
    return []


class ClaimAhead:
    """Claims a lane's next calls while its current request is in flight, so no lane waits for the
    database between two requests: CLAIM_BATCH at a time while many are left; near the run's end one at a
    time, when the lane is free, so that no lane holds calls back while the others run out. Inside a
    transaction (tests) it claims inline instead, since rows made there are invisible to other
    connections."""

    def __init__(self, ctx: LaneContext) -> None:
        self.ctx = ctx
        self.claimed: list[Claim] = []  # claimed, not handed out yet (id order)
        self.future: Future[list[tuple[JudgeCall, uuid.UUID]]] | None = None
        self.last_id = ctx.call_ids[0] - 1

    def in_hand(self) -> Claim | None:
        """The next call already claimed for this lane, if any (no claim is made)."""
        return self.claimed.pop(0) if self.claimed else None

    def next(self) -> Claim | None:
        if not self.claimed:
            if self.future is None:
                claimed = claim_next_calls(self.ctx, self.count())
            else:
                future, self.future = self.future, None
                claimed = future.result()
            self.claimed = [Claim(call, token) for call, token in claimed]
            if claimed:
                self.last_id = max(self.last_id, claimed[-1][0].pk)
        return self.in_hand()

    def count(self) -> int:
        """CLAIM_BATCH while the calls after the last one claimed (the run's call ids are consecutive,
        claimed in order: an estimate) would keep every lane busy for a few batches; else 1."""
        left = self.ctx.call_ids[1] - self.last_id
        return CLAIM_BATCH if left > 2 * CLAIM_BATCH * self.ctx.params.concurrency else 1

    def prefetch(self, sending: Claim) -> None:
        """Claim the next calls in the background once none is left in hand, unless they are being
        claimed already (the lane sent a call waiting for its retry instead of the one claimed ahead).
        Near the run's end a lane claims only when it is free: a call claimed ahead would wait behind the
        lane's current request (and retries) while other lanes run out of calls.

        `sending`, the call the lane sends now, tells how far the run's claims have got when it is another
        lane's due retry: a lane that sent others' retries for a while has an old claim of its own, and
        four calls claimed by that at the end kept it busy while the other lanes had nothing left."""
        self.last_id = max(self.last_id, sending.call.pk)
        if (
            not self.claimed
            and self.future is None
            and self.count() > 1
            and db.helper_threads_see_our_writes()
        ):
            self.future = _claimer.submit(_claim_in_thread, self.ctx, self.count())

    def release(self) -> None:
        """Give back the calls claimed ahead that the lane will not use."""
        if self.future is not None:
            self.claimed += [Claim(call, token) for call, token in self.future.result()]
            self.future = None
        for claim in self.claimed:
            claim.release()
        self.claimed.clear()


def _claim_in_thread(ctx: LaneContext, count: int) -> list[tuple[JudgeCall, uuid.UUID]]:
    close_old_connections()
    return claim_next_calls(ctx, count)


def release_claim(call: JudgeCall, token: uuid.UUID) -> None:
    leases.release(
        JudgeCall.objects.filter(pk=call.pk, claim_token=token),
        lease=CALL_LEASE,
        status=JudgeCall.Status.PENDING,
        claim_token=None,
    )


def _claim_postgresql(
    run_id: int, status: str, stale_before: datetime | None, count: int
) -> list[tuple[JudgeCall, uuid.UUID]]:
    token = uuid.uuid4()
    sql = CLAIM_SQL.format(
        calls=JudgeCall._meta.db_table,
        items=Item._meta.db_table,
        stale="AND claimed_at < %s" if stale_before else "",
    )
    params: list[Any] = [token, timezone.now(), run_id, status] + ([stale_before] if stale_before else [])
    with connection.cursor() as cursor:  # one statement: atomic by itself
        cursor.execute(sql, [*params, count])
        rows = cursor.fetchall()
    return [(_claimed_call(row, run_id, token), token) for row in rows]


def _claimed_call(row: tuple[Any, ...], run_id: int, token: uuid.UUID) -> JudgeCall:
    """The call and its item from a row of CLAIM_SQL."""
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
    return call


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
