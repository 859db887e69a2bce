import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from datasets.models import UploadJob

from .helpers import dialog


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
    deadline = time.monotonic() + 60
    while job.status not in {"done", "failed"} and time.monotonic() < deadline:
        time.sleep(0.2)
        job.refresh_from_db()
    assert job.status == "done", job.report
    assert job.items_imported == 3000
    assert job.dataset is not None and job.dataset.item_count == 3000
    assert not list(tmp_path.iterdir())
    page = client.get(response["Location"], headers={"HX-Request": "true"}).content.decode()
    assert "3,000 items imported" in page and "hx-trigger" not in page  # polling stops when done
