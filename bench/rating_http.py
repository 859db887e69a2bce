"""Benchmark: "next item + submit" over real HTTP through gunicorn, 20 annotators at once.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/rating_http.py
    # options: --annotators 20 --rounds 15 --items 10000 --overlap 3 --workers 2 --threads 8 --keep

Builds the same study as rating_next_submit.py in a throwaway database (concord_bench_rating), starts
the production server as bin/web does (collectstatic, `gunicorn -c config/gunicorn.conf.py`, WEB_WORKERS and
WEB_THREADS from --workers and --threads) on loopback with DEBUG off, and runs one thread per
annotator with its own HTTP session doing what the browser does: GET the login page, POST the login form with
its CSRF token, GET the evaluation's "rate" URL (redirected to the reserved item), then `--rounds` times POST
the rating form of the item on the page (CSRF token and shown_at from the page, HX-Request as htmx sends it);
the answer is the next item's panel. Prints round trips per second, p50/p95, the queries of one round trip
(the same request through Django's test client with CaptureQueriesContext), and the checks: no rating lost
or duplicated, no item over-assigned, slot counts equal to live reservations plus done ratings.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rating_next_submit import (  # noqa: E402 - the study and the checks are that benchmark's
    BENCH_DB,
    build_study,
    check_integrity,
    drop_bench_database,
    point_at_bench_database,
)

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-rating-pw-1"
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SHOWN_AT = re.compile(r'name="shown_at" value="([^"]*)"')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gunicorn(*, port: int, workers: int, threads: int) -> subprocess.Popen:
    """The production server as bin/web starts it: `gunicorn -c config/gunicorn.conf.py`, DEBUG off, on plain
    http on loopback (so without the https redirect and Secure cookies), its access log discarded."""
    env = {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": "bench-only-secret-key-not-used-anywhere-else-0123456789",
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "CELERY_BROKER_URL": "memory://",
        "LOG_LEVEL": "WARNING",
        "CONCORD_HOST": "127.0.0.1",
        "CONCORD_PORT": str(port),
        "WEB_WORKERS": str(workers),
        "WEB_THREADS": str(threads),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("DATABASE_CONN_MAX_AGE", None)  # the in-process study turned it off; the server keeps its default
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    command = [str(Path(sys.executable).parent / "gunicorn"), "-c", "config/gunicorn.conf.py"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{port}/login/", timeout=30).raise_for_status()
            return server
        except requests.RequestException:
            time.sleep(0.3)
    server.terminate()
    raise SystemExit("gunicorn did not answer within 120 s")


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU of each of these processes so far (from /proc; gone processes are left out)."""
    tick, found = os.sysconf("SC_CLK_TCK"), {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings (processes started meanwhile: all of theirs)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def server_pids(master: int) -> list[int]:
    """gunicorn's master and its worker processes."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [master, *map(int, children)]


def postgres_pids() -> list[int]:
    """The PostgreSQL backends serving the benchmark database."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if command.startswith(b"postgres: ") and BENCH_DB.encode() in command:
            found.append(int(entry.name))
    return found


def token(page: str) -> str:
    found = TOKEN.search(page)
    if not found:
        raise RuntimeError("no CSRF token on the page")
    return found.group(1)


def annotate(*, base: str, evaluation, version, user, rounds: int, results: list, barrier) -> None:
    session = requests.Session()
    login = session.get(f"{base}/login/")
    session.post(
        f"{base}/login/",
        {"username": user.username, "password": PASSWORD, "csrfmiddlewaretoken": token(login.text)},
        headers={"Referer": f"{base}/login/"},
    ).raise_for_status()
    rate = f"{base}/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/"
    page = session.get(rate)
    item_id = int(page.url.rstrip("/").split("/")[-1])
    html = page.text
    barrier.wait()
    for n in range(rounds):
        shown_at = SHOWN_AT.search(html)
        data = {
            "csrfmiddlewaretoken": token(html),
            f"rubric-{version.pk}": str(1 + (item_id + n) % 5),
            "shown_at": shown_at.group(1) if shown_at else "",
        }
        started = time.perf_counter()
        response = session.post(
            f"{rate}{item_id}/submit/", data, headers={"HX-Request": "true", "Referer": f"{rate}{item_id}/"}
        )
        elapsed = time.perf_counter() - started
        ok = response.status_code == 200 and "HX-Push-Url" in response.headers
        results.append((elapsed, 0, ok, user.pk, item_id))
        if not ok:
            print(f"  {user.username}: {response.status_code} {response.text[:200]!r}", flush=True)
            break
        item_id = int(response.headers["HX-Push-Url"].rstrip("/").split("/")[-1])
        html = response.text


def queries_per_round_trip(evaluation, version, user) -> tuple[list[int], list[str]]:
    """Three submits (htmx) through the test client: the query count of each (the first also creates
    the person's rater row) and the statements of the last."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(user)
    rate = f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/"
    item_id = int(client.get(rate)["Location"].rstrip("/").split("/")[-1])
    client.get(f"{rate}{item_id}/")
    counts = []
    for _ in range(3):
        data = {f"rubric-{version.pk}": "3", "shown_at": f"{time.time():.1f}"}
        with CaptureQueriesContext(connection) as captured:
            response = client.post(f"{rate}{item_id}/submit/", data, headers={"HX-Request": "true"})
        assert response.status_code == 200, response.status_code
        counts.append(len(captured))
        item_id = int(response["HX-Push-Url"].rstrip("/").split("/")[-1])
    return counts, [q["sql"][:140] for q in captured.captured_queries]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--annotators", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn threads per worker")
    parser.add_argument("--show-queries", action="store_true", help="print the statements of one round trip")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    admin_url, _ = point_at_bench_database()
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.ALLOWED_HOSTS = ["testserver", "127.0.0.1"]
    call_command("migrate", verbosity=0)
    evaluation, version, users = build_study(
        size=args.items, annotators=args.annotators + 1, overlap=args.overlap
    )
    from django.contrib.auth.hashers import make_password

    hashed = make_password(PASSWORD)
    for user in users:
        user.password = hashed
        user.save(update_fields=["password"])
    probe, users = users[-1], users[:-1]
    count, statements = queries_per_round_trip(evaluation, version, probe)
    port = free_port()
    server = start_gunicorn(port=port, workers=args.workers, threads=args.threads)
    results: list = []
    try:
        barrier = threading.Barrier(len(users) + 1)
        threads = [
            threading.Thread(
                target=annotate,
                kwargs={
                    "base": f"http://127.0.0.1:{port}",
                    "evaluation": evaluation,
                    "version": version,
                    "user": user,
                    "rounds": args.rounds,
                    "results": results,
                    "barrier": barrier,
                },
            )
            for user in users
        ]
        for thread in threads:
            thread.start()
        barrier.wait()  # everyone logged in and holds an item
        started = time.perf_counter()
        web_before, database_before = cpu_seconds(server_pids(server.pid)), cpu_seconds(postgres_pids())
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        cpu_web = cpu_used(web_before, cpu_seconds(server_pids(server.pid)))
        cpu_database = cpu_used(database_before, cpu_seconds(postgres_pids()))
    finally:
        server.terminate()
        server.wait(timeout=30)
    times = sorted(elapsed for elapsed, *_ in results)
    checks = check_integrity(evaluation, results)
    failed = sum(1 for _e, _q, ok, *_ in results if not ok)
    print(
        f"gunicorn -c config/gunicorn.conf.py, WEB_WORKERS={args.workers} WEB_THREADS={args.threads}, "
        f"DEBUG off; {len(users)} annotators x {args.rounds} round trips on {args.items:,} items "
        f"(overlap {args.overlap}); load average {os.getloadavg()[0]:.1f}"
    )
    p50, p95 = 1000 * statistics.median(times), 1000 * times[int(0.95 * (len(times) - 1))]
    print(
        f"round trips: {len(results)} in {wall:.2f} s = {len(results) / wall:.1f}/s; "
        f"p50 {p50:.0f} ms, p95 {p95:.0f} ms; failed {failed}"
    )
    print(
        f"server CPU per round trip: gunicorn {1000 * cpu_web / len(results):.1f} ms, "
        f"PostgreSQL {1000 * cpu_database / len(results):.1f} ms"
    )
    print(f"queries per round trip (submit + next item, test client; 1st, 2nd, 3rd): {count}")
    if args.show_queries:
        print("\n".join(f"  {sql}" for sql in statements))
    print(
        "checks: ratings {ratings}, duplicates {duplicates}, lost {lost}, over-assigned items "
        "{over_assigned_items}, slot count mismatches {slot_count_mismatches}".format(**checks)
    )
    if not args.keep:
        drop_bench_database(admin_url)
    bad = failed or checks["duplicates"] or checks["lost"] or checks["over_assigned_items"]
    sys.exit(1 if bad or checks["slot_count_mismatches"] else 0)


if __name__ == "__main__":
    assert BENCH_DB
    main()
