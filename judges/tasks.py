"""Thin Celery tasks: ids in, one service call. acks_late + reject_on_worker_lost come from settings."""

from celery import shared_task
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
