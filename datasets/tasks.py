from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from .jobs import queue_again, run_upload_job, seconds_until_stale, stalled_jobs
from .models import UploadJob


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


@shared_task(acks_late=True, ignore_result=True)
def recover_upload_jobs() -> list[int]:
    """Queue again the imports of jobs whose message may be gone (`jobs.stalled_jobs`)."""
    stalled = stalled_jobs(UploadJob.objects.all(), stale_seconds=settings.UPLOAD_STALE_SECONDS)
    return queue_again(list(stalled.values_list("pk", flat=True)))


@worker_ready.connect
def recover_uploads_when_a_worker_starts(**_kwargs: object) -> None:
    """A worker coming back imports what a dead one left or a restarted broker lost: check now, and again
    once a heartbeat that was still fresh at start-up would have gone stale."""
    recover_upload_jobs.apply_async()
    recover_upload_jobs.apply_async(countdown=settings.UPLOAD_STALE_SECONDS + 1)
