"""Start `bin/concord` for real, as an operator would in production (DEBUG off), for tests/config."""

import http.client
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 240


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The test run's database and broker, and DJANGO_ALLOW_ASYNC_UNSAFE (set for the browser tests), which a
# deployment must not have.
NOT_INHERITED = {
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "REDIS_URL",
    "CONCORD_DEMO",
    "DEBUG",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
}


def production_env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env.update(
        {
            "CONCORD_VAR_DIR": str(var_dir),
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_PROXY_SSL_HEADER": "true",
            "WEB_WORKERS": "1",
            "WEB_THREADS": "2",
            "CONCORD_WORKER_CONCURRENCY": "2",
            **extra,
        }
    )
    return env


def get(port: int, path: str, *, https_proxy: bool = True) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"X-Forwarded-Proto": "https"} if https_proxy else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def wait_for_page(process: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"bin/concord ended early:\n{log.read_text()}")
        try:
            if get(port, "/login/").status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("bin/concord did not serve /login/ in time")


@contextmanager
def running_concord(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """bin/concord with `env`, its output in `log`, serving /login/ on CONCORD_PORT; stopped afterwards."""
    with log.open("w") as output:
        process = subprocess.Popen(
            ["bin/concord"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_page(process, int(env["CONCORD_PORT"]), log)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
