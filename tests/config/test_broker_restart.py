"""A Redis restart under `DEBUG=false bin/concord`: a judge run (the simulated model) and a background
upload that were running finish exactly once, and the next upload is taken within its stale time. A worker
that outlives a restart (it holds no unacknowledged message) takes over what the restart lost.

The Redis server is the test's own (a free loopback port, its append-only file in a temporary folder, so
queued messages outlive the restart as they do on a production Redis); the machine's Redis is not touched.
"""

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from .production import ROOT, free_port, production_env, running_concord

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server on the PATH"),
]
STALE_SECONDS = 25  # the machine may be loaded: the next upload typically takes 5-13 s here
BIG_UPLOAD_ITEMS = 20_000


class OwnRedis:
    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
            + ["--appendonly", "yes", "--save", "", "--logfile", str(self.folder / "redis.log")],
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise AssertionError("the test's redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # a clean shutdown, which writes the append-only file out
            self.process.wait(timeout=30)


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def queue_upload(env: dict[str, str], path: Path, name: str) -> int:
    """An upload of the demo researcher's, handed to a worker as the upload page does with a large file."""
    code = (
        "from pathlib import Path; from django.contrib.auth.models import User; "
        "from projects.models import Project; from datasets.jobs import create_upload_job, queue_again; "
        f"job = create_upload_job(project=Project.objects.get(slug='demo'), "
        f"user=User.objects.get(username='researcher'), name={name!r}, path=Path({str(path)!r}), "
        "filename='dialogs.jsonl', format='auto', options={}); "
        "assert queue_again([job.pk]) == [job.pk]; print(job.pk)"
    )
    return int(manage(env, "shell", "-c", code).split()[-1])


def write_dialogs(path: Path, count: int) -> Path:
    lines = (
        json.dumps(
            {
                "id": f"d-{n}",
                "turns": [{"speaker": "USER", "text": f"hi {n}"}, {"speaker": "BOT", "text": "hello"}],
            }
        )
        for n in range(count)
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def wait_for(database: Path, query: str, expected: object, *, seconds: float, what: str) -> float:
    """Seconds until `query`'s one value is `expected`; fail naming `what` after `seconds`."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        with sqlite3.connect(database, timeout=30) as db:
            if db.execute(query).fetchone()[0] == expected:
                return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_redis_restart_leaves_runs_and_uploads_finishing_exactly_once(tmp_path):
    broker = OwnRedis(tmp_path)
    broker.start()
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    env = production_env(
        var_dir,
        CONCORD_PORT=str(free_port()),
        CONCORD_FAKE_LLM_PORT=str(free_port()),
        CONCORD_DEMO="1",
        CELERY_BROKER_URL=f"redis://127.0.0.1:{broker.port}/0",
        JUDGE_STALE_SECONDS=str(STALE_SECONDS),
        UPLOAD_STALE_SECONDS=str(STALE_SECONDS),
        CONCORD_WORKER_CONCURRENCY="4",
        CONCORD_RESTARTS_PER_MINUTE="3",
    )
    database = var_dir / "concord.sqlite3"
    log = var_dir / "concord.log"
    try:
        with running_concord(env, log) as concord:
            manage(env, "run_judge", "--evaluation", "Demo evaluation", "--rubric", "Repetitiveness",
                   "--rubric", "Empathetical understanding", "--judge", "Simulated judge")  # fmt: skip
            big = queue_upload(env, write_dialogs(tmp_path / "big.jsonl", BIG_UPLOAD_ITEMS), "Big")
            # Both are under way (a call answered, the upload claimed): now the broker goes and comes back.
            wait_for(database, "SELECT count(*) > 0 FROM judges_judgecall WHERE status = 'done'", 1,
                     seconds=120, what="the judge run's first answer")  # fmt: skip
            wait_for(database, f"SELECT status FROM datasets_uploadjob WHERE id = {big}", "running",
                     seconds=120, what="the upload to start")  # fmt: skip
            broker.stop()
            time.sleep(2)
            broker.start()

            wait_for(database, "SELECT count(*) FROM judges_judgerun WHERE status = 'done'", 2,
                     seconds=240, what="both judge runs to finish")  # fmt: skip
            wait_for(database, f"SELECT status FROM datasets_uploadjob WHERE id = {big}", "done",
                     seconds=240, what="the big upload to finish")  # fmt: skip
            small = queue_upload(env, write_dialogs(tmp_path / "small.jsonl", 10), "Small")
            taken = wait_for(database, f"SELECT status FROM datasets_uploadjob WHERE id = {small}", "done",
                             seconds=STALE_SECONDS + 60, what="the next upload")  # fmt: skip
            assert concord.poll() is None, log.read_text()
    finally:
        broker.stop()
    print(f"next upload done {taken:.1f} s after it was queued; bin/concord said:\n{log.read_text()[-3000:]}")
    assert taken < STALE_SECONDS
    with sqlite3.connect(database) as db:
        items = dict(
            db.execute(
                "SELECT d.name, count(i.id) FROM datasets_dataset d "
                "JOIN datasets_item i ON i.dataset_id = d.id GROUP BY d.name"
            ).fetchall()
        )
        calls = db.execute(
            "SELECT count(*), count(DISTINCT item_id || '/' || run_id) FROM judges_judgecall"
        ).fetchone()
        not_done = db.execute("SELECT count(*) FROM judges_judgecall WHERE status != 'done'").fetchone()[0]
        model_ratings = db.execute(
            "SELECT count(*), count(DISTINCT r.item_id || '/' || r.rater_id) FROM evaluations_rating r "
            "JOIN evaluations_rater rr ON rr.id = r.rater_id WHERE rr.kind = 'model'"
        ).fetchone()
    assert items["Big"] == BIG_UPLOAD_ITEMS and items["Small"] == 10
    assert calls == (24, 24) and not_done == 0  # 12 demo dialogs x 2 rubrics, one sample each
    assert model_ratings == (24, 24)


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_outlived_a_redis_restart_takes_over_uploads_whose_message_was_lost(
    project, researcher, settings, tmp_path
):
    from datasets.jobs import create_upload_job
    from datasets.models import UploadJob
    from tests.datasets.helpers import dialog, write_jsonl
    from tests.workers import wait_for, worker_environment

    broker = OwnRedis(tmp_path)
    broker.start()
    env = {
        **worker_environment(),
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{broker.port}/0",
        "CELERY_TASK_DEFAULT_QUEUE": "celery",
        "UPLOAD_STALE_SECONDS": "2",
        "JUDGE_STALE_SECONDS": "2",  # so that no start-up recovery waits in the worker, unacknowledged
    }
    log = tmp_path / "worker.log"
    with log.open("w") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads", "-c", "2"]
            + ["--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: " ready." in log.read_text(), what="the worker to start", timeout=120)
        time.sleep(5)  # past its start-up recovery (2 s stale + 1)
        # A job whose message Redis lost: queued, never taken. Then Redis restarts, the worker idle.
        job = create_upload_job(
            project=project, user=researcher, name="Lost", path=write_jsonl(tmp_path / "lost.jsonl",
            [dialog(n) for n in range(5)]), filename="lost.jsonl", format="auto", options={},
        )  # fmt: skip
        broker.stop()
        time.sleep(2)
        broker.start()
        wait_for(
            lambda: UploadJob.objects.get(pk=job.pk).status == "done", what="the lost upload", timeout=60
        )
        assert worker.poll() is None, log.read_text()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        broker.stop()
