"""Thin Celery tasks: ids in, one service call. acks_late + reject_on_worker_lost come from settings."""

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError

from . import services


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # A lost database connection (restart, too many clients) ends the lane's loop; the lane starts
    # again a little later and carries on claiming. Nothing else is retried here: call errors are
    # handled per call in judges.calls, the one retry layer for the endpoint.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=20,
)
def run_judge_lane(run_id: int, lane: int) -> int:
    """Work one lane of a judge run until no call is left; safe to deliver twice."""
    return services.work_lane(run_id=run_id, lane=lane)


@shared_task(acks_late=True, ignore_result=True)
def recover_judge_runs() -> list[int]:
    """Restart runs whose lanes died with their worker (no heartbeat for JUDGE_STALE_SECONDS)."""
    return services.recover_stalled_runs(stale_seconds=settings.JUDGE_STALE_SECONDS)


@worker_ready.connect
def recover_when_a_worker_starts(**_kwargs) -> None:
    """A worker coming back finishes what a dead one left: check now, and again once a heartbeat
    that was still fresh at start-up would have gone stale."""
    recover_judge_runs.apply_async()
    recover_judge_runs.apply_async(countdown=settings.JUDGE_STALE_SECONDS + 1)
