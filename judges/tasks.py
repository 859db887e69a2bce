"""Thin Celery tasks: ids in, one service call. acks_late + reject_on_worker_lost come from settings."""

import gc
from typing import Any

from celery import shared_task
from celery.signals import worker_init, worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from . import batch, client, services

# A lost database connection (restart, too many clients) ends a lane's loop or a batch poll; the task runs
# again a little later and carries on. Nothing else is retried here: call errors are handled per call in
# judges.calls, the one retry layer for the endpoint, and a batch poll looks again at its next turn.
DATABASE_RETRIES: dict[str, Any] = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "max_retries": 20,
}


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **DATABASE_RETRIES)
def run_judge_lane(run_id: int, lane: int, queue_stamp: str | None = None) -> int:
    """Work one lane of a judge run until no call is left; safe to deliver twice, and a no-op once the run
    was queued again (`JudgeRun.queue_stamp`; None: a task queued before lanes carried it)."""
    return services.work_lane(run_id=run_id, lane=lane, queue_stamp=queue_stamp)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **DATABASE_RETRIES)
def poll_judge_batches(run_id: int, poller: str) -> None:
    """Look at a batch run's batches once and queue the next look; a redelivered or superseded poll
    finds its token gone and does nothing (judges.batch)."""
    following = batch.advance(run_id=run_id, poller=poller)
    if following is not None:
        batch.send_poll(run_id, following, countdown=settings.JUDGE_BATCH_POLL_SECONDS)


@shared_task(acks_late=True, ignore_result=True)
def recover_judge_runs() -> list[int]:
    """Restart runs whose lanes died with their worker (no heartbeat for JUDGE_STALE_SECONDS)."""
    return services.recover_stalled_runs(stale_seconds=settings.JUDGE_STALE_SECONDS)


@worker_ready.connect
def recover_when_a_worker_starts(**_kwargs: object) -> None:
    """A worker coming back finishes what a dead one left: check now, and again once a heartbeat
    that was still fresh at start-up would have gone stale."""
    recover_judge_runs.apply_async()
    recover_judge_runs.apply_async(countdown=settings.JUDGE_STALE_SECONDS + 1)


@worker_init.connect
def prepare_for_calls(**_kwargs: object) -> None:
    """Import the LLM client and load its trust store when the worker starts (~1 s of CPU), not in a run's
    first call, which the run's other lanes wait for; then keep what start-up made, which lives as long as
    the worker, out of every later garbage collection (prefork children inherit both)."""
    client.preload()
    gc.freeze()
