"""Benchmark: 2,000 judge calls against the simulated model at 200 ms latency with concurrency 32.

    .venv/bin/python bench/judge_calls.py [--calls 2000] [--latency-ms 200] [--concurrency 32]

Starts its own pieces and stops them at the end: a redis-server on 127.0.0.1:8478 (broker and rate limits),
`manage.py fake_llm` on 127.0.0.1:8477 and one Celery worker (threads pool), all against a PostgreSQL
database of its own (bench_concord_judges, recreated each time). Prints for each scenario the wall time
from launch to the run's end, its ratio to the limit (calls x latency / concurrency) and to the run's own
floor (every request sent, retries too, x latency / concurrency), the worker's CPU time per call (and the
simulated model's per request), a timeline (seconds from the launch until the launch returned, the first,
33rd and last call was done and the run was), and checks every call was done exactly once (rows counted).
Last, the same number of requests, clean and with the same faults, from a plain client (http.client, a
thread per slot, nothing stored, a refused request set aside until due as Concord's are): the reference for
what the simulated model on this machine lets anyone reach.
A clean run goes first and is not counted (`--no-warm-up`: counted from the worker's first run, which
also opens each thread's database connection). `--only clean|faults|rate-limit|plain` (repeatable) runs
those scenarios alone; `--repeat N` runs them N times in turn and prints each scenario's median ratio. The
worker runs with DEBUG off, as in production (BENCH_DEBUG=true: on, the settings' default).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Overridable, so two people benchmarking on one machine do not share ports or the database.
REDIS_PORT = int(os.environ.get("BENCH_REDIS_PORT", "8478"))
FAKE_PORT = int(os.environ.get("BENCH_FAKE_PORT", "8477"))
DB_NAME = os.environ.get("BENCH_DB", "bench_concord_judges")
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
BROKER = f"redis://127.0.0.1:{REDIS_PORT}/0"

os.environ.update(
    DATABASE_URL=f"{PG}/{DB_NAME}",
    CELERY_BROKER_URL=BROKER,
    REDIS_URL=BROKER,
    DJANGO_SETTINGS_MODULE="config.settings",
    BENCH_JUDGE_KEY="bench",
    CONCORD_JUDGE_CREDENTIALS="BENCH_JUDGE_KEY@127.0.0.1",
    CONCORD_JUDGE_ALLOW_PRIVATE="true",  # the simulated model listens on loopback
    LOG_LEVEL="WARNING",
    # A deployment's workers run with DEBUG off; DEBUG on keeps every SQL statement in
    # connection.queries, which costs CPU per call. BENCH_DEBUG=true measures with it on.
    DEBUG=os.environ.get("BENCH_DEBUG", "false"),
    SECRET_KEY="bench-judge-calls-not-secret",
)
sys.path.insert(0, str(ROOT))


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {DB_NAME}")


def start(command: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=ROOT, start_new_session=True, **kwargs)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def wait_port(port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


def make_study(calls: int):
    from datasets.models import Dataset, Item
    from evaluations.models import Evaluation
    from projects.models import Project
    from rubrics.models import Rubric, RubricVersion

    project = Project.objects.create(name="Bench", slug="bench")
    rubric = Rubric.objects.create(project=project, name="Quality", kind="likert")
    scale = [{"value": str(n), "label": str(n), "description": ""} for n in range(1, 6)]
    version = RubricVersion.objects.create(
        rubric=rubric,
        number=1,
        criterion="Quality",
        scale=scale,
        prompt_template="Rate the last response (1-5).\n\n{{Dialog}}\n\nScore:",
    )
    dataset = Dataset.objects.create(project=project, name="Bench dialogs")
    Item.objects.bulk_create(
        Item(
            dataset=dataset,
            external_id=f"b-{n}",
            position=n,
            context=[{"speaker": "USER", "text": f"Question number {n}: how are you today?"}],
            response={"speaker": "BOT", "text": f"I am fine, thank you ({n})."},
        )
        for n in range(calls)
    )
    evaluation = Evaluation.objects.create(project=project, dataset=dataset, name="Bench")
    evaluation.rubric_versions.set([version])
    return project, evaluation, version


def scenario(
    label: str,
    *,
    project,
    evaluation,
    version,
    workers,
    fake,
    model: str,
    concurrency: int,
    limit: float,
    **judge_fields,
) -> dict:
    import psutil
    from django.utils import timezone

    from evaluations.models import Rating
    from judges import services
    from judges.models import Judge, JudgeCall, JudgeRun

    judge = Judge.objects.create(
        project=project,
        name=f"{label} #{Judge.objects.filter(project=project).count() + 1}",
        base_url=f"http://127.0.0.1:{FAKE_PORT}/v1",
        model=model,
        api_key_env="BENCH_JUDGE_KEY",
        temperature=0.0,  # as the figures before judges could leave it to the endpoint: same requests
        concurrency=concurrency,
        cache_enabled=False,
        request_timeout=10,
        **judge_fields,
    )
    processes = [psutil.Process(worker.pid) for worker in workers]
    times_before = [process.cpu_times() for process in processes]
    fake_process = psutil.Process(fake.pid)
    fake_before = fake_process.cpu_times()
    started, started_at = time.monotonic(), timezone.now()
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    launched = time.monotonic() - started
    deadline = started + 10 * limit + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
        run.refresh_from_db(fields=["status"])
        if run.status != JudgeRun.Status.RUNNING:
            break
    wall = time.monotonic() - started
    times_after = [process.cpu_times() for process in processes]
    fake_after = fake_process.cpu_times()
    user = sum(after.user - before.user for before, after in zip(times_before, times_after, strict=True))
    system = sum(
        after.system - before.system for before, after in zip(times_before, times_after, strict=True)
    )
    cpu = user + system
    fake_cpu = fake_after.user + fake_after.system - fake_before.user - fake_before.system
    calls = run.calls
    attempts = sum(calls.values_list("attempts", flat=True))
    floor = limit * attempts / run.total_calls  # every request sent, retries too, at the same concurrency
    result = {
        "scenario": label,
        "status": run.status,
        "wall_s": round(wall, 2),
        "limit_s": round(limit, 2),
        "ratio": round(wall / limit, 3),
        "worker_cpu_ms_per_call": round(1000 * cpu / run.total_calls, 2),
        "of_it_system_ms": round(1000 * system / run.total_calls, 2),
        "calls": run.total_calls,
        "done": calls.filter(status=JudgeCall.Status.DONE).count(),
        "distinct_calls": calls.values("item_id", "sample", "swapped").distinct().count(),
        "ratings": Rating.objects.filter(rater=run.rater).count(),
        "http_attempts": attempts,
        "retried_calls": calls.filter(attempts__gt=1).count(),
        "own_floor_s": round(floor, 2),
        "ratio_to_own_floor": round(wall / floor, 3),
        "fake_server_cpu_ms_per_request": round(1000 * fake_cpu / max(attempts, 1), 2),
    }
    # Where the wall time goes: seconds from the launch to each point.
    finished = sorted(at for at in calls.values_list("finished_at", flat=True) if at is not None)
    run.refresh_from_db(fields=["finished"])
    points = {"first_done": finished[0], "33rd_done": finished[min(32, len(finished) - 1)]}
    points |= {"last_done": finished[-1], "run_done": run.finished or finished[-1]}
    result["timeline_s"] = f"launched:{launched:.2f}," + ",".join(
        f"{name}:{(moment - started_at).total_seconds():.2f}" for name, moment in points.items()
    )
    result["exactly_once"] = (
        result["done"] == result["distinct_calls"] == result["ratings"] == run.total_calls
    )
    return result


def plain_client(*, calls: int, concurrency: int, limit: float, model: str, label: str) -> dict:
    """The same number of requests from a plain client (http.client, one thread and keep-alive connection
    per slot, nothing stored): how close to the limit the simulated model on this machine lets anyone get,
    the reference for Concord's own overhead. A refused request waits as Concord's would (its Retry-After,
    else `backoff_seconds`) without holding its slot, and goes before new ones once due."""
    import heapq
    import http.client
    import json
    import threading

    from judges.calls import backoff_seconds

    lock = threading.Lock()
    fresh = list(range(calls - 1, -1, -1))
    due: list[tuple[float, int, int]] = []  # (not before, call, attempts so far)
    seconds: list[float] = []
    done: list[int] = []
    attempts = [0]

    def take() -> tuple[float, int, int] | None:
        with lock:
            if due and (due[0][0] <= time.monotonic() or not fresh):
                return heapq.heappop(due)
            return (0.0, fresh.pop(), 0) if fresh else None

    def lane() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", FAKE_PORT)
        while (taken := take()) is not None:
            not_before, n, tries = taken
            time.sleep(max(0.0, not_before - time.monotonic()))
            body = {
                "model": model,
                "messages": [{"role": "user", "content": f"Rate the last response (1-5).\n\n{n}\n\nScore:"}],
                "temperature": 0.0,
            }
            started = time.monotonic()
            connection.request(
                "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            json.loads(response.read())
            seconds.append(time.monotonic() - started)
            with lock:
                attempts[0] += 1
                if response.status == 200:
                    done.append(n)
                    continue
                retry_after = response.getheader("Retry-After")
                wait = backoff_seconds(tries + 1, float(retry_after) if retry_after else None)
                heapq.heappush(due, (time.monotonic() + wait, n, tries + 1))

    started = time.monotonic()
    threads = [threading.Thread(target=lane) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    seconds.sort()
    return {
        "scenario": label,
        "status": "done",
        "wall_s": round(wall, 2),
        "limit_s": round(limit, 2),
        "ratio": round(wall / limit, 3),
        "http_attempts": attempts[0],
        "own_floor_s": round(limit * attempts[0] / calls, 2),
        "ratio_to_own_floor": round(wall / (limit * attempts[0] / calls), 3),
        "request_ms_p50": round(1000 * seconds[len(seconds) // 2], 1),
        "request_ms_p90": round(1000 * seconds[int(len(seconds) * 0.9)], 1),
        "exactly_once": sorted(done) == list(range(calls)),
    }


def with_round(model: str, round_: int) -> str:
    if not round_:
        return model
    return f"{model}{'&' if '?' in model else '?'}round={round_}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="Celery worker processes.")
    parser.add_argument(
        "--threads", type=int, default=48, help="Threads per worker (all together >= concurrency)."
    )
    parser.add_argument("--fail-rate", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=1, help="Run the scenarios this many times, in turn.")
    parser.add_argument(
        "--only",
        choices=["clean", "faults", "rate-limit", "plain"],
        action="append",
        help="Run only these scenarios.",
    )
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="Measure from a new worker's first run (by default one clean run goes first, not counted).",
    )
    args = parser.parse_args()

    load_before = " ".join(f"{value:.1f}" for value in os.getloadavg())
    recreate_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    redis = start(
        [
            "redis-server",
            "--port",
            str(REDIS_PORT),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    fake = start(
        [
            sys.executable,
            "manage.py",
            "fake_llm",
            "--port",
            str(FAKE_PORT),
            "--latency-ms",
            str(args.latency_ms),
            "--retry-after",
            "0.2",
            "--stop-after",
            "900",
        ],
        stdout=subprocess.DEVNULL,
    )
    workers = [
        start(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--loglevel",
                "WARNING",
                "--pool",
                "threads",
                "--concurrency",
                str(args.threads),
                "--prefetch-multiplier",
                "1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"bench-{os.getpid()}-{n}@%h",
            ]
        )
        for n in range(args.workers)
    ]
    try:
        wait_port(REDIS_PORT)
        wait_port(FAKE_PORT)
        from config.celery import app

        deadline = time.monotonic() + 60
        while len(app.control.ping(timeout=0.5) or []) < args.workers and time.monotonic() < deadline:
            pass
        project, evaluation, version = make_study(args.calls)
        limit = args.calls * args.latency_ms / 1000 / args.concurrency
        common = {
            "project": project,
            "evaluation": evaluation,
            "version": version,
            "workers": workers,
            "fake": fake,
            "concurrency": args.concurrency,
            "limit": limit,
        }
        scenarios: dict[str, tuple[str, dict[str, Any]]] = {
            "clean": ("clean", {"model": "fake-judge"}),
            "faults": (
                "10% transient failures (429 with Retry-After 0.2 s, 500)",
                {"model": f"fake-judge?fault=429,500&fail_rate={args.fail_rate}"},
            ),
            "rate-limit": (
                "clean, with a Redis rate limit in the path (600k requests/min)",
                {"model": "fake-judge", "requests_per_minute": 600_000},
            ),
        }
        # Each round's requests differ (the simulated model fails a request only on its first attempt, by
        # the hash of its body): the model name carries the round, which the simulated model ignores.
        plain = {"concurrency": args.concurrency, "limit": limit}
        results = []
        if args.warm_up and (not args.only or set(args.only) - {"plain"}):
            # A new worker's first run also opens each thread's database connection (the server starts a
            # backend for each, on the same 2 cores) and this process's broker connection: once a process.
            warm = scenario("warm-up (not counted)", model=with_round("fake-judge", 999), **common)
            print("  ".join(f"{key}={value}" for key, value in warm.items()), flush=True)
        for round_ in range(args.repeat):
            for name, (label, fields) in scenarios.items():
                if not args.only or name in args.only:
                    model = with_round(fields["model"], round_)
                    results.append(scenario(label, **(fields | {"model": model}), **common))
            if not args.only or "plain" in args.only:  # requests of their own: not Concord's round's
                for label, model in (
                    ("plain client, clean (reference: no Concord)", "fake-judge"),
                    ("plain client, 10% transient failures", scenarios["faults"][1]["model"]),
                ):
                    model = with_round(model, 1000 + round_)
                    results.append(plain_client(calls=args.calls, model=model, label=label, **plain))
    finally:
        for process in (*workers, fake, redis):
            stop(process)
    print(
        f"{args.calls} calls, {args.latency_ms:g} ms latency, concurrency {args.concurrency}, "
        f"{args.workers} worker process(es) x {args.threads} threads; limit {limit:.2f} s; "
        f"DEBUG={os.environ['DEBUG']}; load average before: {load_before}"
    )
    for result in results:
        print("  ".join(f"{key}={value}" for key, value in result.items()))
    if args.repeat > 1:  # one run's noise on these machines is ~0.1-0.15 s: the median says more
        for label in dict.fromkeys(result["scenario"] for result in results):
            ratios = sorted(result["ratio"] for result in results if result["scenario"] == label)
            print(f"median of {len(ratios)}: {label}: ratio {statistics.median(ratios):.3f} (runs {ratios})")
    return 0 if all(r["exactly_once"] and r["status"] == "done" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
