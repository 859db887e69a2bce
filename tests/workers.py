"""Start and stop real Celery worker processes against the test database and broker."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from celery import Celery
from django.db import connection

from config.celery import app

ROOT = Path(__file__).resolve().parent.parent


def worker_environment() -> dict[str, str]:
    """The environment of this test process, pointed at the test database pytest-django made."""
    env = dict(os.environ)
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        env["DATABASE_URL"] = f"sqlite:///{Path(db['NAME']).resolve()}"
    else:
        host = db.get("HOST") or "127.0.0.1"
        port = db.get("PORT") or "5432"
        user = db.get("USER") or "postgres"
        env["DATABASE_URL"] = f"postgres://{user}@{host}:{port}/{db['NAME']}"
    # The broker this process sends to (a test may have switched it); the embedded one's folders follow
    # CONCORD_VAR_DIR, which the worker inherits.
    env["CELERY_BROKER_URL"] = app.conf.broker_url
    env["CELERY_TASK_DEFAULT_QUEUE"] = own_queue()  # where it listens, and sends the tasks it starts
    return env


def own_queue() -> str:
    """This test process's own queue. pytest-xdist runs several processes, each on its own test database
    but on one broker: a worker started by one of them must never take another's task."""
    return f"celery-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def use_own_queue() -> None:
    """Send this process's tasks to `own_queue()`, where only its workers listen."""
    app.conf.task_default_queue = own_queue()


def purge_broker() -> None:
    app.control.purge()


def start_worker(
    *extra: str,
    concurrency: int = 8,
    pool: str = "threads",
    queues: str | None = None,
    ready_timeout: float = 30.0,
) -> subprocess.Popen:
    """Start `celery worker` on this process's own queue and wait until it answers a ping."""
    name = f"test-{os.getpid()}-{time.monotonic_ns()}@{socket.gethostname()}"
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--loglevel",
        "WARNING",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "-Q",
        queues or own_queue(),
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        name,
        *extra,
    ]
    process = subprocess.Popen(command, cwd=ROOT, env=worker_environment(), start_new_session=True)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited early with code {process.returncode}")
        replies = app.control.ping(destination=[name], timeout=0.5) or []
        if replies:
            return process
    stop_worker(process)
    raise RuntimeError("celery worker did not answer a ping in time")


def stop_worker(process: subprocess.Popen, *, kill: bool = False) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


def wait_for(predicate, *, what: str, timeout: float = 30) -> None:
    """Poll `predicate` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def unreachable_broker(monkeypatch) -> Celery:
    """A Celery app whose broker is a port nothing listens on: publishing through it raises kombu's own
    OperationalError, as a lost Redis does, in a fraction of a second (by default the connection is tried
    for about six seconds first)."""
    closed = "redis://127.0.0.1:1/0"
    monkeypatch.setenv("CELERY_BROKER_URL", closed)  # Celery prefers this variable to an app's own broker
    down = Celery("down", broker=closed, set_as_current=False)  # later tests' tasks stay on the real app
    down.conf.task_publish_retry = False
    down.conf.broker_transport_options = {"max_retries": 1, "interval_start": 0, "interval_max": 0.1}
    assert down.conf.broker_url == closed
    return down
