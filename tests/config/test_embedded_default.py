"""The embedded default: no DATABASE_URL, no CELERY_BROKER_URL. SQLite and a file broker, a real worker
process, the simulated model, and the web server, as `bin/concord` starts them."""

import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.worker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, timeout: float = 30.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def embedded_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}}
    llm_port = free_port()
    env.update(
        CONCORD_VAR_DIR=str(tmp_path),
        CONCORD_FAKE_LLM_URL=f"http://127.0.0.1:{llm_port}/v1",
        LLM_PORT=str(llm_port),
    )
    return env


def manage(env, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_embedded_default_runs_a_judge_through_a_real_worker_and_serves_pages(embedded_env, tmp_path):
    assert manage(embedded_env, "migrate", "--noinput").returncode == 0
    setup = manage(embedded_env, "setup_demo")
    assert setup.returncode == 0, setup.stderr
    assert "researcher / concord-demo" in setup.stdout

    web_port = free_port()
    commands = [
        [
            sys.executable,
            "manage.py",
            "fake_llm",
            "--port",
            embedded_env["LLM_PORT"],
            "--latency-ms",
            "5",
            "--stop-after",
            "120",
        ],
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            "WARNING",
        ],
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{web_port}", "--noreload"],
    ]
    processes = [
        subprocess.Popen(command, cwd=ROOT, env=embedded_env, start_new_session=True) for command in commands
    ]
    try:
        run = manage(
            embedded_env,
            "run_judge",
            "--evaluation",
            "Demo evaluation",
            "--rubric",
            "Repetitiveness",
            "--judge",
            "Simulated judge",
            "--wait",
            "--interval",
            "0.5",
            timeout=120,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        login_page = wait_for_http(f"http://127.0.0.1:{web_port}/login/").decode()
        assert "Log in to Concord" in login_page
    finally:
        for process in processes:
            os.killpg(process.pid, 15)
        for process in processes:
            process.wait(timeout=20)

    database = sqlite3.connect(tmp_path / "concord.sqlite3")
    (journal_mode,) = database.execute("PRAGMA journal_mode").fetchone()
    (model_ratings,) = database.execute(
        "SELECT count(*) FROM evaluations_rating r JOIN evaluations_rater rr ON rr.id = r.rater_id "
        "WHERE rr.kind = 'model'"
    ).fetchone()
    (items,) = database.execute("SELECT count(*) FROM datasets_item").fetchone()
    (human_ratings,) = database.execute(
        "SELECT count(*) FROM evaluations_rating r JOIN evaluations_rater rr ON rr.id = r.rater_id "
        "WHERE rr.kind = 'human'"
    ).fetchone()
    assert journal_mode == "wal"
    assert human_ratings == 2 * 4 * items  # the two demo raters on the four built-in rubrics
    assert items == 12
    assert model_ratings == items


def test_bin_concord_refuses_one_port_for_the_web_server_and_the_simulated_llm(embedded_env, tmp_path):
    env = {**embedded_env, "CONCORD_DEMO": "1", "CONCORD_PORT": "8765", "CONCORD_FAKE_LLM_PORT": "8765"}
    result = subprocess.run(["bin/concord"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "CONCORD_PORT" in result.stderr and "CONCORD_FAKE_LLM_PORT" in result.stderr
    assert not (tmp_path / "concord.sqlite3").exists()  # it stopped before touching anything
