import json
import os
import signal
import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from datasets.models import Dataset, Item, UploadJob
from tests.workers import wait_for

from .helpers import dialog, write_jsonl


def finished(job: UploadJob) -> bool:
    job.refresh_from_db()
    return job.status in {"done", "failed"}


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_large_upload_is_imported_by_a_real_worker_with_progress(
    celery_worker_process, researcher, project, settings, tmp_path
):
    settings.CONCORD_INLINE_IMPORT_BYTES = 1000
    settings.CONCORD_UPLOAD_DIR = tmp_path  # the worker reads the path stored on the job
    client = Client()
    client.force_login(researcher)
    content = "".join(json.dumps(dialog(n)) + "\n" for n in range(3000)).encode()
    response = client.post(
        reverse("dataset_upload", args=[project.slug]),
        {"name": "Background", "format": "auto", "file": SimpleUploadedFile("big.jsonl", content)},
    )
    job = UploadJob.objects.get()
    assert response.status_code == 302 and job.status in {"queued", "running", "done"}
    wait_for(lambda: finished(job), what="the job to finish", timeout=60)
    assert job.status == "done", job.report
    assert job.items_imported == 3000
    assert job.dataset is not None and job.dataset.item_count == 3000
    wait_for(lambda: not list(tmp_path.iterdir()), what="the upload to be removed", timeout=10)
    page = client.get(response["Location"], headers={"HX-Request": "true"}).content.decode()
    assert "3,000 items imported" in page and "hx-trigger" not in page  # polling stops when done


def pool_children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_upload_whose_worker_process_is_killed_mid_import_is_taken_over_and_imported_once(
    researcher, project, settings, tmp_path, monkeypatch
):
    from datasets.jobs import create_upload_job
    from datasets.tasks import import_upload
    from tests.workers import purge_broker, start_worker, stop_worker

    monkeypatch.setenv("UPLOAD_STALE_SECONDS", "2")  # the worker's: a job silent for 2 s lost its worker
    settings.UPLOAD_STALE_SECONDS = 2
    purge_broker()
    # Started first: a job queued over 2 s before a worker starts is one its start-up recovery sends again.
    worker = start_worker(pool="prefork", concurrency=1)
    try:
        path = write_jsonl(tmp_path / "big.jsonl", [dialog(n) for n in range(30_000)])
        job = create_upload_job(
            project=project,
            user=researcher,
            name="Killed",
            path=path,
            filename="big.jsonl",
            format="auto",
            options={},
        )
        [child] = pool_children(worker.pid)
        import_upload.delay(job.pk)
        deadline = time.monotonic() + 20
        # Killed as soon as the worker has taken the job: waiting for progress too raced the import on an
        # idle machine (30,000 items can be checked and stored between two looks).
        while job.status != "running" and time.monotonic() < deadline:
            time.sleep(0.01)
            job.refresh_from_db()
        assert job.status == "running", f"the worker never took the job ({job.status})"
        os.kill(child, signal.SIGKILL)  # reject_on_worker_lost puts the message back at once
        assert Item.objects.count() == 0  # the import is one transaction: nothing partial
        # Generous: SQLite on a busy machine notices and re-imports slowly.
        wait_for(lambda: finished(job), what="the job to be taken over and finished", timeout=90)
        # The upload is removed just after the outcome commits; stopping the worker first (SIGTERM to its
        # whole process group) would cut that short, as CI once saw.
        wait_for(lambda: not path.exists(), what="the upload to be removed", timeout=10)
    finally:
        stop_worker(worker)
    assert job.status == "done", job.report
    assert job.items_imported == 30_000 and Item.objects.count() == 30_000
    assert Dataset.objects.get().item_count == 30_000
