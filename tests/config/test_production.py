"""The production start: `DEBUG=false bin/concord` serves styled pages through gunicorn and WhiteNoise,
with the secure defaults on, no demo accounts, starts a process that died again (and stops everything when
one dies too often), and holds many slow clients without keeping others waiting.

bin/concord runs for real here (a fresh SQLite database in a temporary directory, the file broker), as an
operator would start it behind a proxy that ends TLS.
"""

import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .production import ROOT, free_port, get, production_env, running_concord

HEADER_TIMEOUT = 4
READ_TIMEOUT = 4


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    """bin/concord with DEBUG=false on a free port: yields (process, port, env, its output file)."""
    var_dir = tmp_path_factory.mktemp("production")
    port = free_port()
    env = production_env(
        var_dir,
        CONCORD_PORT=str(port),
        WEB_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        WEB_READ_TIMEOUT=str(READ_TIMEOUT),
        CONCORD_RESTARTS_PER_MINUTE="2",
    )
    log = var_dir / "concord.log"
    with running_concord(env, log) as process:
        yield process, port, env, log


def test_production_start_serves_a_styled_page_and_its_css_through_gunicorn(production):
    _, port, _, _ = production
    page = get(port, "/login/")
    assert page.status == 200 and page.getheader("Server") == "gunicorn"
    html = page.body.decode()  # type: ignore[attr-defined]
    stylesheet = re.search(r'href="(/static/concord\.[0-9a-f]{12}\.css)"', html)
    assert stylesheet, "the page links the hashed stylesheet of the manifest storage"
    css = get(port, stylesheet.group(1))
    assert css.status == 200
    assert css.getheader("Content-Type", "").startswith("text/css")
    assert "immutable" in css.getheader("Cache-Control", "")
    assert b"{" in css.body  # type: ignore[attr-defined]
    htmx = re.search(r'src="(/static/django_htmx/htmx[^"]+\.js)"', html)
    assert htmx and get(port, htmx.group(1)).status == 200


def test_production_start_has_the_secure_defaults(production):
    _, port, _, _ = production
    plain = get(port, "/login/", https_proxy=False)
    assert plain.status == 301 and plain.getheader("Location", "").startswith("https://")
    page = get(port, "/login/")
    assert "max-age=31536000" in page.getheader("Strict-Transport-Security", "")
    cookie = page.getheader("Set-Cookie", "")
    assert "csrftoken=" in cookie and "Secure" in cookie
    assert page.getheader("X-Frame-Options") == "DENY"


def test_production_start_creates_no_demo_account_and_says_how_to_make_one(production):
    _, port, env, _ = production
    count = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.contrib.auth.models import User; print(User.objects.count())",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert count.stdout.strip().splitlines()[-1] == "0", count.stderr
    assert "concord-demo" not in get(port, "/login/").body.decode()  # type: ignore[attr-defined]


class SlowClients:
    """`count` connections that each send one byte a second: half of them a request's headers, half a login
    form's body after whole headers (each reconnects when the server closes it). Loopback only; they stop
    after `seconds` at the latest, or when stop() is called."""

    def __init__(self, port: int, count: int, seconds: float) -> None:
        self.port, self.count, self.deadline = port, count, time.monotonic() + seconds
        self.stopped = threading.Event()
        self.reconnects = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connect(self, index: int) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        if index % 2:  # whole headers, then a body that never ends in time
            sock.sendall(
                b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-Proto: https\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nu"
            )
        else:  # a request line, then header bytes one at a time
            sock.sendall(b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        return sock

    def run(self) -> None:
        sockets = [self.connect(index) for index in range(self.count)]
        while time.monotonic() < self.deadline and not self.stopped.wait(1.0):
            for index, sock in enumerate(sockets):
                try:
                    sock.send(b"a")
                except OSError:  # the server closed it: come back, as a slowloris does
                    sock.close()
                    sockets[index] = self.connect(index)
                    self.reconnects += 1
        for sock in sockets:
            sock.close()

    def __enter__(self) -> "SlowClients":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


def test_fifty_slow_clients_do_not_keep_the_login_page_from_others(production):
    _, port, _, _ = production
    with SlowClients(port, count=50, seconds=60) as slow:
        time.sleep(2.0)  # every slow connection is open and has sent its first bytes
        times = []
        for _ in range(8):
            started = time.monotonic()
            page = get(port, "/login/")
            times.append(time.monotonic() - started)
            assert page.status == 200
            time.sleep(0.5)
    print(
        f"/login/ under 50 slow clients: median {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms, {slow.reconnects} reconnects"
    )
    assert max(times) < 1.0, times


def test_a_client_too_slow_with_its_headers_or_body_is_cut_off(production):
    _, port, _, _ = production
    headers = socket.create_connection(("127.0.0.1", port), timeout=30)
    headers.sendall(b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    body = socket.create_connection(("127.0.0.1", port), timeout=30)
    body.sendall(
        b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-Proto: https\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nusername="
    )
    started = time.monotonic()
    assert headers.recv(1000) == b""  # closed without an answer once its headers took too long
    assert time.monotonic() - started < HEADER_TIMEOUT + 3
    assert body.recv(1000).startswith(b"HTTP/1.1 408")  # a body silent for too long
    assert time.monotonic() - started < READ_TIMEOUT + 3
    headers.close()
    body.close()


def celery_child(process: subprocess.Popen, *, other_than: str = "") -> str | None:
    """The pid of bin/concord's Celery worker (other than `other_than`), or None."""
    children = subprocess.run(
        ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
    ).stdout.split()
    for pid in children:
        try:
            if pid != other_than and b"celery" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except FileNotFoundError:
            pass
    return None


def started_again_or_stopped(process: subprocess.Popen, log: Path, old_worker: str) -> bool:
    """After the worker `old_worker` ended: True once bin/concord started another, False once it says it
    stops everything instead."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if "stopping everything" in log.read_text():
            return False
        if celery_child(process, other_than=old_worker):
            return True
        time.sleep(0.2)
    raise AssertionError(f"bin/concord neither started the worker again nor stopped:\n{log.read_text()}")


def test_a_worker_the_file_broker_failed_is_started_again(production):
    process, port, env, log = production
    worker = celery_child(process)
    assert worker
    queue = Path(env["CONCORD_VAR_DIR"]) / "broker" / "queue"
    away = queue.with_name("queue.away")
    queue.rename(away)  # the embedded broker's folder is gone for a moment
    time.sleep(3)
    if queue.exists():  # a worker started meanwhile made it again
        for message in away.iterdir():
            message.rename(queue / message.name)
        away.rmdir()
    else:
        away.rename(queue)
    assert started_again_or_stopped(process, log, worker)
    assert (
        "Concord: the Celery worker stopped (exit status 1); starting it again (restart 1 of at most 2"
        in (log.read_text())
    )
    assert get(port, "/login/").status == 200


def test_a_child_that_dies_is_started_again_until_it_dies_too_often_then_everything_stops(production):
    process, port, _, log = production
    for _ in range(4):  # restarts older than a minute no longer count: kill until the limit is passed
        worker = celery_child(process)
        assert worker
        os.kill(int(worker), signal.SIGKILL)
        if not started_again_or_stopped(process, log, worker):
            break
        assert process.poll() is None and get(port, "/login/").status == 200
        assert "Concord: the Celery worker stopped (exit status 137); starting it again" in log.read_text()
    assert process.wait(timeout=90) == 1
    output = log.read_text()
    assert "createsuperuser" in output and "concord-demo" not in output
    assert "the Celery worker stopped (exit status 137) after 2 restarts within a minute; stopping" in output
    with pytest.raises(OSError):
        get(port, "/login/")


def test_check_deploy_passes_with_debug_off_a_secret_key_and_allowed_hosts(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production_env(tmp_path, SECURE_PROXY_SSL_HEADER="false"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
