from celery import shared_task

from .jobs import run_upload_job


@shared_task(acks_late=True, ignore_result=True)
def import_upload(job_id: int) -> None:
    """Import one UploadJob; a redelivered message finds the job already claimed and does nothing."""
    run_upload_job(job_id=job_id)
