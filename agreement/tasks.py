"""Thin Celery task: ids and parameters in, one service call. acks_late comes from settings."""

import threading

from celery import shared_task
from celery.signals import worker_init

from agreement import alt_test, services

# One report at a time in a worker process: each fits in the server's budget (agreement.cost), but a
# worker's threads computing several at once would not.
_ONE_REPORT = threading.Lock()


@worker_init.connect
def import_statistics(**_kwargs: object) -> None:
    """SciPy's statistics imported when the worker starts, not in its first report."""
    alt_test.load_scipy()


@shared_task(acks_late=True, ignore_result=True)
def compute_agreement_report(evaluation_id: int, where: dict[str, str], resamples: int) -> bool:
    """Compute and cache one agreement report for the page; a redelivered message finds it current."""
    with _ONE_REPORT:
        return services.compute_report_in_background(
            evaluation_id=evaluation_id, where=where, resamples=resamples
        )
