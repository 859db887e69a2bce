"""Upload jobs: a stored file waiting for its column mapping, its import in the request or in a worker."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from projects import leases

from .models import UploadJob
from .readers import default_wide_mapping, detect_format, wide_header
from .services import ImportResult, import_dataset
from .text_files import FileRefused, detect_encoding
from .uploads import inline_limit

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

    from projects.models import Project

logger = logging.getLogger(__name__)

QUEUE_REFUSED = (
    "the task queue did not take this file's import (its broker could not be reached), so nothing was "
    "imported; upload it again once the queue is back"
)

PROGRESS_SECONDS = 0.5
MAPPING_KEPT_FOR = timedelta(days=1)  # a file left at the column-mapping step longer is deleted
# A running job's worker beats `heartbeat`; a job queued but never beaten dates from its creation.
UPLOAD_LEASE = leases.Lease(
    renewed="heartbeat", held=Q(status=UploadJob.Status.RUNNING), dated_by=("created",)
)


def create_upload_job(
    *,
    project: Project,
    user: User | AnonymousUser,
    name: str,
    path: Path,
    filename: str,
    format: str,
    options: dict[str, Any],
) -> UploadJob:
    """Record an upload; a wide CSV waits for its column mapping, anything else is queued."""
    drop_abandoned_mappings(project=project)
    job = UploadJob.objects.create(
        project=project,
        created_by_id=user.pk,  # None for AnonymousUser
        name=name.strip(),
        filename=filename[:300],
        path=str(path),
        size_bytes=path.stat().st_size,
        format=format,
        options=options,
    )
    try:
        encoding = detect_encoding(path, convert=bool(options.get("convert_encoding")))
        detected = detect_format(path, encoding, format)
        if detected == "csv-wide":
            header = wide_header(path, encoding)
            job.format = detected
            job.status = UploadJob.Status.MAPPING
            job.report = {"header": header, "mapping": default_wide_mapping(header)}
            job.save(update_fields=["format", "status", "report"])
    except FileRefused as refused:
        refuse_job(job, refused)
    return job


def refuse_job(job: UploadJob, refused: FileRefused) -> None:
    """The job fails with this one problem before anything was imported; its file goes."""
    record_outcome(job, refused_result(refused))
    Path(job.path).unlink(missing_ok=True)


def refused_result(refused: FileRefused) -> ImportResult:
    result = ImportResult()
    result.add_error(refused.error)
    return result


def drop_abandoned_mappings(*, project: Project) -> int:
    """Refuse the project's jobs left at the column-mapping step for over a day and delete their files,
    so abandoned uploads do not fill the disk; how many were dropped."""
    cutoff = timezone.now() - MAPPING_KEPT_FOR
    abandoned = UploadJob.objects.filter(project=project, status=UploadJob.Status.MAPPING, created__lt=cutoff)
    message = "the columns were not mapped within a day, so the stored file was deleted; upload it again"
    dropped = 0
    for job in abandoned.only("pk", "path", "report"):
        report = {**job.report, **refused_result(FileRefused(message)).as_report()}
        # Conditional, so a mapping submitted at this very moment wins or loses as a whole.
        if UploadJob.objects.filter(pk=job.pk, status=UploadJob.Status.MAPPING).update(
            status=UploadJob.Status.FAILED, error_count=1, report=report, finished=timezone.now()
        ):
            Path(job.path).unlink(missing_ok=True)
            dropped += 1
    return dropped


def set_mapping(job: UploadJob, mapping: dict[str, str]) -> None:
    options = dict(job.options, mapping=mapping)
    UploadJob.objects.filter(pk=job.pk, status=UploadJob.Status.MAPPING).update(
        options=options, status=UploadJob.Status.QUEUED
    )
    job.refresh_from_db()


def start_upload_job(job: UploadJob) -> None:
    """Import a queued job now when it is small, else hand it to a worker once this transaction commits."""
    if job.status != UploadJob.Status.QUEUED:
        return
    if job.size_bytes <= inline_limit():
        run_upload_job(job_id=job.pk)
        job.refresh_from_db()
        return
    transaction.on_commit(partial(_send_import, job.pk))


def _send_import(job_id: int) -> None:
    """Hand the job to a worker; when the broker refuses, the job fails saying so (and its file goes)."""
    if not queue_again([job_id]):
        refuse_job(UploadJob.objects.get(pk=job_id), FileRefused(QUEUE_REFUSED))


def stalled_jobs(jobs: QuerySet[UploadJob], *, stale_seconds: int) -> QuerySet[UploadJob]:
    """Jobs whose import message may be gone: queued for over `stale_seconds` (lost with a broker that
    restarted without keeping its queue) or running with a worker silent that long (it died; the broker
    gives its message back only after its visibility timeout, an hour by default)."""
    waiting = Q(status=UploadJob.Status.QUEUED) | UPLOAD_LEASE.held
    return jobs.filter(waiting & UPLOAD_LEASE.expired(stale_seconds))


def queue_again(job_ids: list[int]) -> list[int]:
    """Send these jobs' imports (once more, for a stalled job); returns those the broker took. A second
    message for a job is harmless: only one claims it (`claim_upload_job`), the other watches it until
    it is done."""
    from .tasks import import_upload

    sent = []
    for job_id in job_ids:
        try:
            import_upload.delay(job_id)
        except KombuOperationalError as error:  # the caller says what becomes of the job
            logger.warning("upload job %s: the broker refused its import (%s)", job_id, error)
            break
        sent.append(job_id)
    return sent


def claim_upload_job(*, job_id: int, stale_seconds: int) -> bool:
    """Take a queued job, or a running one whose worker went silent for `stale_seconds` (it died: the
    import is one transaction, so nothing of it was committed), and start it from the beginning.

    One conditional UPDATE: of two messages for the same job only one wins, and a job whose heartbeat
    is fresh is never taken from its live worker."""
    taken = leases.take(
        UploadJob.objects.filter(pk=job_id),
        lease=UPLOAD_LEASE,
        seconds=stale_seconds,
        free=Q(status=UploadJob.Status.QUEUED),
        status=UploadJob.Status.RUNNING,
        done_bytes=0,
        items_imported=0,
    )
    return bool(taken)


def seconds_until_stale(*, job_id: int, stale_seconds: int) -> float | None:
    """For a job running elsewhere: when its heartbeat goes stale if it stops beating now. None once
    the job is not running (finished, or never queued), when there is nothing left to watch."""
    job = UploadJob.objects.filter(UPLOAD_LEASE.held, pk=job_id).only("heartbeat", "created").first()
    if job is None:
        return None
    return leases.seconds_left(job, lease=UPLOAD_LEASE, seconds=stale_seconds)


def run_upload_job(*, job_id: int) -> bool:
    """Claim a job (once, even if the message is delivered twice; again if its worker died), import it,
    record the outcome. False when the job was not this call's to run."""
    stale_seconds = settings.UPLOAD_STALE_SECONDS
    if not claim_upload_job(job_id=job_id, stale_seconds=stale_seconds):
        return False
    job = UploadJob.objects.select_related("project", "created_by").get(pk=job_id)
    options = job.options
    last = [0.0]

    def progress(done_bytes: int, items: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_SECONDS:
            last[0] = now
            leases.renew(
                UploadJob.objects.filter(pk=job_id),
                lease=UPLOAD_LEASE,
                done_bytes=done_bytes,
                items_imported=items,
            )

    try:
        # Beat from a thread too: loading the spool in one COPY gives no progress callbacks for a while.
        with leases.renewing(
            UploadJob.objects.filter(pk=job_id),
            lease=UPLOAD_LEASE,
            every=min(5.0, stale_seconds / 4),
            name=f"upload-job-{job_id}",
        ):
            result = import_dataset(
                project=job.project,
                name=job.name,
                path=job.path,
                user=job.created_by,
                format=job.format,
                repair_text=bool(options.get("repair_text")),
                keep_mojibake=bool(options.get("keep_mojibake")),
                convert_encoding=bool(options.get("convert_encoding")),
                append=bool(options.get("append")),
                mapping=options.get("mapping") or None,
                progress=progress,
                # Done is recorded with the items: a worker dying after they commit leaves a finished
                # job, never a stale running one that another worker would import a second time.
                before_commit=lambda result: record_outcome(job, result),
                source_filename=job.filename,
            )
    except Exception:
        logger.exception("upload job %s failed", job_id)
        result = ImportResult()
        result.add_error(FileRefused("the import stopped on an internal error; nothing was imported").error)
    if not (result.ok or _recorded_done(job_id)):
        record_outcome(job, result)
    Path(job.path).unlink(missing_ok=True)
    return True


def _recorded_done(job_id: int) -> bool:
    """Whether the job's import committed, with its outcome (an error after the commit changes nothing)."""
    return UploadJob.objects.filter(pk=job_id, status=UploadJob.Status.DONE).exists()


def record_outcome(job: UploadJob, result: ImportResult) -> None:
    job.status = UploadJob.Status.DONE if result.ok else UploadJob.Status.FAILED
    job.dataset = result.dataset
    job.items_imported = result.created
    job.error_count = result.error_count
    job.done_bytes = job.size_bytes
    job.report = {**job.report, **result.as_report()}
    job.finished = timezone.now()
    job.save()
