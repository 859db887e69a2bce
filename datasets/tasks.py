from celery import shared_task
from django.conf import settings

from .jobs import run_upload_job, seconds_until_stale


@shared_task(acks_late=True, ignore_result=True)
def import_upload(job_id: int) -> None:
    """Import one UploadJob; safe to deliver twice.

    A message redelivered because its worker died (reject_on_worker_lost) usually arrives while the
    dead worker's heartbeat still looks fresh: it then comes back once that heartbeat would have gone
    stale, and takes the job over if nothing beat it in between. A job a live worker is running is
    watched the same way until it finishes, and never taken over."""
    if run_upload_job(job_id=job_id):
        return
    stale_seconds = settings.UPLOAD_STALE_SECONDS
    wait = seconds_until_stale(job_id=job_id, stale_seconds=stale_seconds)
    if wait is not None:
        import_upload.apply_async((job_id,), countdown=wait + 1)
