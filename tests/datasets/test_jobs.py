"""Upload jobs whose worker died: heartbeat, take-over by a redelivered message, page, housekeeping."""

import json
import time
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from datasets import jobs
from datasets.models import Dataset, Item, UploadJob
from datasets.services import ImportResult
from datasets.tasks import import_upload
from tests.factories import make_project

from .helpers import dialog, write_jsonl


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    settings.CONCORD_UPLOAD_DIR = tmp_path / "uploads"
    settings.UPLOAD_STALE_SECONDS = 120
    return settings.CONCORD_UPLOAD_DIR


@pytest.fixture
def requeued(monkeypatch):
    """Messages the task sends itself to look again later, as (job id, countdown)."""
    sent: list[tuple[int, float]] = []
    monkeypatch.setattr(
        "datasets.tasks.import_upload.apply_async",
        lambda args, countdown: sent.append((args[0], countdown)),
    )
    return sent


def make_job(project, user, tmp_path, *, items: int = 30, status="queued", **fields) -> UploadJob:
    path = write_jsonl(tmp_path / f"job-{UploadJob.objects.count()}.jsonl", [dialog(n) for n in range(items)])
    job = jobs.create_upload_job(
        project=project,
        user=user,
        name="Redelivered",
        path=path,
        filename=path.name,
        format="auto",
        options={},
    )
    UploadJob.objects.filter(pk=job.pk).update(status=status, **fields)
    job.refresh_from_db()
    return job


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)


def test_claim_takes_over_a_running_job_whose_heartbeat_went_stale(project, researcher, tmp_path):
    job = make_job(project, researcher, tmp_path, status="running", heartbeat=ago(121), done_bytes=500)
    assert jobs.claim_upload_job(job_id=job.pk, stale_seconds=120)
    job.refresh_from_db()
    assert job.status == "running" and job.done_bytes == 0  # starts again from the beginning
    assert job.heartbeat is not None and (timezone.now() - job.heartbeat).total_seconds() < 5
    # Now it is fresh again, so a second message does not take it from the worker that just did.
    assert not jobs.claim_upload_job(job_id=job.pk, stale_seconds=120)


def test_claim_never_takes_a_running_job_with_a_fresh_heartbeat(project, researcher, tmp_path):
    job = make_job(project, researcher, tmp_path, status="running", heartbeat=ago(100), done_bytes=500)
    assert not jobs.claim_upload_job(job_id=job.pk, stale_seconds=120)
    job.refresh_from_db()
    assert job.heartbeat is not None and job.done_bytes == 500


def test_claim_takes_a_queued_job_once_and_never_a_finished_one(project, researcher, tmp_path):
    queued = make_job(project, researcher, tmp_path)
    assert jobs.claim_upload_job(job_id=queued.pk, stale_seconds=120)
    assert not jobs.claim_upload_job(job_id=queued.pk, stale_seconds=120)
    for status in ("done", "failed", "mapping"):
        old = make_job(project, researcher, tmp_path, status=status, heartbeat=ago(3600))
        assert not jobs.claim_upload_job(job_id=old.pk, stale_seconds=120), status


def test_redelivered_message_for_a_stale_job_imports_it_exactly_once(project, researcher, tmp_path, requeued):
    job = make_job(project, researcher, tmp_path, items=30, status="running", heartbeat=ago(600))
    import_upload(job.pk)
    import_upload(job.pk)  # delivered once more: the job is done, nothing to do or watch
    job.refresh_from_db()
    assert job.status == "done" and job.items_imported == 30
    assert Dataset.objects.get().item_count == 30 and Item.objects.count() == 30
    assert requeued == []


def test_message_redelivered_while_the_dead_workers_heartbeat_is_fresh_comes_back_when_it_goes_stale(
    project, researcher, tmp_path, requeued
):
    job = make_job(project, researcher, tmp_path, items=12, status="running", heartbeat=ago(20))
    import_upload(job.pk)
    assert Item.objects.count() == 0
    [(job_id, countdown)] = requeued
    assert job_id == job.pk and 95 < countdown <= 101
    UploadJob.objects.filter(pk=job.pk).update(heartbeat=ago(130))  # nobody beat since: the worker died
    import_upload(job.pk)
    job.refresh_from_db()
    assert job.status == "done" and Item.objects.count() == 12 and len(requeued) == 1


class WorkerKilled(BaseException):
    """Stands for the worker process dying: nothing in the job's code catches it."""


def test_a_worker_dying_just_after_the_items_commit_leaves_the_job_done_not_imported_again(
    project, researcher, tmp_path, requeued, monkeypatch
):
    job = make_job(project, researcher, tmp_path, items=30)
    real_import = jobs.import_dataset

    def import_then_die(**kwargs) -> ImportResult:
        real_import(**kwargs)
        raise WorkerKilled

    monkeypatch.setattr(jobs, "import_dataset", import_then_die)
    with pytest.raises(WorkerKilled):
        import_upload(job.pk)
    monkeypatch.setattr(jobs, "import_dataset", real_import)
    job.refresh_from_db()
    assert job.status == "done" and job.items_imported == 30 and job.dataset is not None
    assert job.report["format"] == "jsonl"  # the whole outcome was stored with the items
    UploadJob.objects.filter(pk=job.pk).update(heartbeat=ago(600))  # long silent since
    import_upload(job.pk)  # the message comes back (reject_on_worker_lost)
    job.refresh_from_db()
    assert job.status == "done" and job.error_count == 0
    assert Dataset.objects.get().item_count == 30 and Item.objects.count() == 30 and requeued == []


@pytest.mark.django_db(transaction=True)
def test_a_running_job_beats_its_heartbeat_during_a_long_phase_without_progress(
    project, researcher, tmp_path, settings, monkeypatch
):
    settings.UPLOAD_STALE_SECONDS = 1  # beats every 0.25 s
    job = make_job(project, researcher, tmp_path)
    seen = []

    def slow_import(**_kwargs) -> ImportResult:
        start = UploadJob.objects.get(pk=job.pk).heartbeat
        time.sleep(1.5)  # longer than UPLOAD_STALE_SECONDS, with no progress callback
        seen.append((start, UploadJob.objects.get(pk=job.pk).heartbeat))
        assert not jobs.claim_upload_job(job_id=job.pk, stale_seconds=1)  # alive: never taken over
        return ImportResult()

    monkeypatch.setattr(jobs, "import_dataset", slow_import)
    assert jobs.run_upload_job(job_id=job.pk)
    [(start, later)] = seen
    assert start is not None and later is not None and later > start


def status_page(client, project, job) -> str:
    url = reverse("dataset_upload_job", args=[project.slug, job.pk])
    return client.get(url, headers={"HX-Request": "true"}).content.decode()


def test_job_page_says_a_silent_job_is_waiting_for_a_worker(researcher_client, researcher, project, tmp_path):
    job = make_job(project, researcher, tmp_path, status="running", heartbeat=ago(5 * 60 + 10))
    page = status_page(researcher_client, project, job)
    assert "No progress for 5 minutes: waiting for a worker" in page
    assert "stopped answering" in page and 'hx-trigger="every 1s"' in page  # keeps polling for the take-over


def test_job_page_shows_progress_not_a_stall_while_the_heartbeat_is_fresh(
    researcher_client, researcher, project, tmp_path
):
    job = make_job(project, researcher, tmp_path, status="running", heartbeat=ago(30))
    page = status_page(researcher_client, project, job)
    assert "Validating and importing" in page and "No progress" not in page


def test_job_page_says_a_long_queued_job_is_waiting_for_a_worker(
    researcher_client, researcher, project, tmp_path
):
    job = make_job(project, researcher, tmp_path)
    UploadJob.objects.filter(pk=job.pk).update(created=ago(3 * 60))
    page = status_page(researcher_client, project, job)
    assert "No progress for 3 minutes: waiting for a worker" in page and "not picked this file up" in page


def wide_csv_upload(client, project, name: str):
    content = b"id,history,answer\nq1,USER: Hi,Hello\n"
    data = {"name": name, "format": "auto", "file": SimpleUploadedFile("wide.csv", content)}
    return client.post(reverse("dataset_upload", args=[project.slug]), data)


def test_a_new_upload_deletes_files_left_at_the_mapping_step_for_over_a_day(
    researcher_client, project, researcher
):
    other_project = make_project()
    wide_csv_upload(researcher_client, project, "Abandoned")
    wide_csv_upload(researcher_client, project, "Yesterday")
    abandoned, recent = UploadJob.objects.filter(project=project).order_by("pk")
    elsewhere = UploadJob.objects.create(
        project=other_project, name="Else", filename="x.csv", path=abandoned.path + ".other", status="mapping"
    )
    UploadJob.objects.filter(pk__in=[abandoned.pk, elsewhere.pk]).update(created=ago(25 * 3600))
    UploadJob.objects.filter(pk=recent.pk).update(created=ago(23 * 3600))
    assert all(jobs.Path(job.path).exists() for job in (abandoned, recent))

    wide_csv_upload(researcher_client, project, "Today")

    abandoned.refresh_from_db()
    recent.refresh_from_db()
    elsewhere.refresh_from_db()
    assert abandoned.status == "failed" and not jobs.Path(abandoned.path).exists()
    assert "not mapped within a day" in abandoned.report["errors"][0]["message"]
    assert recent.status == "mapping" and jobs.Path(recent.path).exists()
    assert elsewhere.status == "mapping"  # another project's uploads are its own business
    assert "not mapped within a day" in status_page(researcher_client, project, abandoned)


@pytest.mark.django_db(transaction=True)  # as the server runs a view: the import is sent as the job commits
def test_an_upload_whose_import_the_broker_refuses_fails_saying_so_and_keeps_no_file(
    researcher_client, project, settings, upload_dir, monkeypatch
):
    from tests.workers import unreachable_broker

    settings.CONCORD_INLINE_IMPORT_BYTES = 100  # a worker's job
    down = unreachable_broker(monkeypatch)
    monkeypatch.setattr(import_upload, "delay", lambda *args: down.send_task(import_upload.name, args))
    content = "".join(json.dumps(dialog(n)) + "\n" for n in range(20)).encode()
    response = researcher_client.post(
        reverse("dataset_upload", args=[project.slug]),
        {"name": "Queued", "format": "auto", "file": SimpleUploadedFile("big.jsonl", content)},
    )
    job = UploadJob.objects.get()
    assert response.status_code == 302 and job.status == "failed"
    page = researcher_client.get(response["Location"]).content.decode()
    assert "the task queue did not take this file&#x27;s import" in page and "upload it again" in page
    assert not Dataset.objects.exists() and not list(upload_dir.iterdir())


@pytest.fixture
def sent_imports(monkeypatch):
    """Import messages sent to the broker, recorded (job ids)."""
    sent: list[int] = []
    monkeypatch.setattr(import_upload, "delay", sent.append)
    return sent


def test_a_starting_worker_queues_again_the_imports_a_dead_worker_or_a_restarted_broker_lost(
    project, researcher, tmp_path, sent_imports
):
    """A queued job's message lost with the broker's queue, a running job whose worker died (its message
    comes back only after the broker's visibility timeout, an hour by default): a worker that starts
    queues both again; jobs still moving, waiting for their mapping or finished are left alone."""
    from datasets.tasks import recover_upload_jobs

    lost = make_job(project, researcher, tmp_path, name="Lost")
    UploadJob.objects.filter(pk=lost.pk).update(created=ago(121))
    dead = make_job(project, researcher, tmp_path, status="running", heartbeat=ago(121))
    make_job(project, researcher, tmp_path)  # queued just now: its message is on its way
    make_job(project, researcher, tmp_path, status="running", heartbeat=ago(30))
    for status in ("mapping", "done", "failed"):
        job = make_job(project, researcher, tmp_path, status=status)
        UploadJob.objects.filter(pk=job.pk).update(created=ago(3600))
    assert sorted(recover_upload_jobs()) == sorted([lost.pk, dead.pk]) == sorted(sent_imports)
    import_upload(dead.pk)  # the message sent again takes the dead worker's job over
    import_upload(lost.pk)
    assert {job.status for job in UploadJob.objects.filter(pk__in=[lost.pk, dead.pk])} == {"done"}
    assert sorted(Dataset.objects.values_list("name", "item_count")) == [("Lost", 30), ("Redelivered", 30)]


def test_a_stalled_upload_can_be_queued_again_from_its_page(
    researcher_client, annotator, project, researcher, tmp_path, sent_imports
):
    from django.test import Client

    job = make_job(project, researcher, tmp_path)
    url = reverse("dataset_upload_requeue", args=[project.slug, job.pk])
    page = researcher_client.post(url, follow=True).content.decode()
    assert "not stalled: nothing was queued again" in page and sent_imports == []
    UploadJob.objects.filter(pk=job.pk).update(created=ago(3 * 60))
    assert "Queue it again" in status_page(researcher_client, project, job)
    page = researcher_client.post(url, follow=True).content.decode()
    assert "Queued again" in page and sent_imports == [job.pk]
    annotator_client = Client()
    annotator_client.force_login(annotator)
    assert annotator_client.post(url).status_code == 403 and sent_imports == [job.pk]
    other = make_project(name="Other", researchers=[researcher])
    assert (
        researcher_client.post(reverse("dataset_upload_requeue", args=[other.slug, job.pk])).status_code
        == 404
    )
