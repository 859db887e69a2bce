"""Thin Celery tasks: ids in, one service call. acks_late + reject_on_worker_lost come from settings."""

from celery import shared_task

from . import services


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_judge_lane(run_id: int, lane: int) -> int:
    """Work one lane of a judge run until no call is left; safe to deliver twice."""
    return services.work_lane(run_id=run_id, lane=lane)
