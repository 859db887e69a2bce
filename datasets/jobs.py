"""Upload jobs: a stored file waiting for its column mapping, its import in the request or in a worker."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from .models import UploadJob
from .readers import FileRefused, default_wide_mapping, detect_encoding, detect_format, wide_header
from .services import ImportResult, import_dataset
from .uploads import inline_limit

logger = logging.getLogger(__name__)
PROGRESS_SECONDS = 0.5


def create_upload_job(
    *, project, user, name: str, path: Path, filename: str, format: str, options: dict
) -> UploadJob:
    """Record an upload; a wide CSV waits for its column mapping, anything else is queued."""
    job = UploadJob.objects.create(
        project=project,
        created_by=user,
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
        finish_job(job, refused_result(refused))
    return job


def refused_result(refused: FileRefused) -> ImportResult:
    result = ImportResult()
    result.add_error(refused.error)
    return result


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
    from .tasks import import_upload

    transaction.on_commit(lambda: import_upload.delay(job.pk))


def run_upload_job(*, job_id: int) -> None:
    """Claim a queued job (once, even if the message is delivered twice), import it, record the outcome."""
    claimed = UploadJob.objects.filter(pk=job_id, status=UploadJob.Status.QUEUED).update(
        status=UploadJob.Status.RUNNING
    )
    if not claimed:
        return
    job = UploadJob.objects.select_related("project", "created_by").get(pk=job_id)
    options = job.options
    last = [0.0]

    def progress(done_bytes: int, items: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_SECONDS:
            last[0] = now
            UploadJob.objects.filter(pk=job_id).update(done_bytes=done_bytes, items_imported=items)

    try:
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
        )
    except Exception:
        logger.exception("upload job %s failed", job_id)
        result = ImportResult()
        result.add_error(FileRefused("the import stopped on an internal error; nothing was imported").error)
    finish_job(job, result)


def finish_job(job: UploadJob, result: ImportResult) -> None:
    job.status = UploadJob.Status.DONE if result.ok else UploadJob.Status.FAILED
    job.dataset = result.dataset
    job.items_imported = result.created
    job.error_count = result.error_count
    job.done_bytes = job.size_bytes
    job.report = {**job.report, **result.as_report()}
    job.finished = timezone.now()
    job.save()
    Path(job.path).unlink(missing_ok=True)
