"""Start and stop real Celery worker processes against the test database and broker."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def worker_environment() -> dict[str, str]:
    """The environment of this test process, pointed at the test database pytest-django made."""
    env = dict(os.environ)
    db = connection.settings_dict
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or "5432"
    user = db.get("USER") or "postgres"
    env["DATABASE_URL"] = f"postgres://{user}@{host}:{port}/{db['NAME']}"
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    return env


def purge_broker() -> None:
    from config.celery import app

    app.control.purge()


def start_worker(
    *extra: str,
    concurrency: int = 8,
    pool: str = "threads",
    queues: str = "celery",
    ready_timeout: float = 30.0,
) -> subprocess.Popen:
    """Start `celery worker` and wait until it answers a ping."""
    from config.celery import app

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
        queues,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
        *extra,
    ]
    process = subprocess.Popen(command, cwd=ROOT, env=worker_environment(), start_new_session=True)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited early with code {process.returncode}")
        replies = app.control.ping(timeout=0.5) or []
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
