"""Benchmark: "next item + submit" round trips with 20 concurrent annotators, at 100 and 100k items.

Each annotator is a thread with its own Django test client (so its own database connection)
against a throwaway PostgreSQL database. A round trip is one htmx submit: it saves the rating,
reserves the next item and renders its page. Reports time per round trip at both sizes, queries
per request, and checks that no rating is duplicated, lost or over-assigned.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/rating_next_submit.py

Options: --annotators 20 --rounds 12 --sizes 100,100000 --overlap 3 --keep (keep the database).
"""

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchdb import run_threads  # noqa: E402

BENCH_DB = "concord_bench_rating"


def point_at_bench_database() -> tuple[str, str]:
    """Create an empty throwaway database next to DATABASE_URL's and point Django at it."""
    import psycopg

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    parsed = urlparse(base)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise SystemExit("This benchmark needs PostgreSQL: set DATABASE_URL=postgres://...")
    admin_url = urlunparse(parsed._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DB}")
    os.environ["DATABASE_URL"] = urlunparse(parsed._replace(path=f"/{BENCH_DB}"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DATABASE_CONN_MAX_AGE"] = "0"
    return admin_url, os.environ["DATABASE_URL"]


def drop_bench_database(admin_url: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def build_study(*, size: int, annotators: int, overlap: int):
    from django.contrib.auth import get_user_model
    from django.db import connection

    from datasets.models import Dataset, Item
    from evaluations.models import Evaluation
    from projects.models import Membership, Project
    from rating import services
    from rubrics.models import Rubric, RubricVersion

    project = Project.objects.create(name=f"Bench {size}", slug=f"bench-{size}")
    dataset = Dataset.objects.create(project=project, name=f"{size} items")
    for start in range(0, size, 5000):
        Item.objects.bulk_create(
            Item(
                dataset=dataset,
                external_id=f"i-{n}",
                position=n,
                context=[{"speaker": "USER", "text": f"Hello, this is dialog {n}. How was your day?"}],
                response={"speaker": "BOT", "text": f"It was fine, thank you for asking ({n})."},
            )
            for n in range(start, min(size, start + 5000))
        )
    Dataset.objects.filter(pk=dataset.pk).update(item_count=size)  # as the importer keeps it
    rubric = Rubric.objects.create(project=project, name="Fluency", kind="likert")
    scale = [{"value": str(v), "label": f"level {v}", "description": f"Level {v}."} for v in range(1, 6)]
    version = RubricVersion.objects.create(
        rubric=rubric, number=1, criterion="Fluency", scale=scale, prompt_template="{{Dialog}}"
    )
    evaluation = Evaluation.objects.create(project=project, dataset=dataset, name="Bench", overlap=overlap)
    evaluation.rubric_versions.set([version])
    users = [
        get_user_model().objects.create_user(username=f"bench{size}-{n}", password=None)
        for n in range(annotators)
    ]
    Membership.objects.bulk_create(Membership(project=project, user=u, role="annotator") for u in users)
    evaluation.annotators.set(users)
    services.ensure_slots(evaluation=evaluation)  # one-time queue fill, not part of a round trip
    with connection.cursor() as cursor:  # statistics, as autovacuum keeps them on a running server
        cursor.execute("ANALYZE")
    return evaluation, version, users


def annotate(*, evaluation, version, user, rounds: int, results: list, barrier: threading.Barrier) -> None:
    """One annotator: take an item, then `rounds` times submit it and receive the next one."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(user)
    base = f"/p/{evaluation.project.slug}/evaluations/{evaluation.pk}/rate/"
    try:
        first = client.get(base)
        item_id = int(first["Location"].rstrip("/").split("/")[-1])
        barrier.wait()
        for n in range(rounds):
            data = {f"rubric-{version.pk}": str(1 + (item_id + n) % 5), "shown_at": f"{time.time():.1f}"}
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.post(f"{base}{item_id}/submit/", data, headers={"HX-Request": "true"})
                elapsed = time.perf_counter() - started
            ok = response.status_code == 200 and "HX-Push-Url" in response
            results.append((elapsed, len(queries), ok, user.pk, item_id))
            if not ok:
                break
            item_id = int(response["HX-Push-Url"].rstrip("/").split("/")[-1])
    finally:
        connection.close()


def check_integrity(evaluation, results) -> dict:
    from django.db.models import Count

    from evaluations.models import Rating
    from rating.models import Assignment, Slot

    ratings = Rating.objects.filter(evaluation=evaluation)
    saved = {(r.rater.user_id, r.item_id) for r in ratings.select_related("rater")}
    submitted = {(user_id, item_id) for _, _, ok, user_id, item_id in results if ok}
    per_item = ratings.values("item_id").annotate(n=Count("pk"))
    held = Assignment.objects.filter(evaluation=evaluation, status__in=["reserved", "done"])
    claims = dict(held.values_list("item_id").annotate(n=Count("pk")))
    slot_mismatch = sum(
        1
        for item_id, stored in Slot.objects.filter(evaluation=evaluation).values_list("item_id", "claims")
        if stored != claims.get(item_id, 0)
    )
    return {
        "ratings": ratings.count(),
        "duplicates": ratings.count() - len(saved),
        "lost": len(submitted - saved),
        "over_assigned_items": sum(1 for row in per_item if row["n"] > evaluation.overlap),
        "slot_count_mismatches": slot_mismatch,
    }


def run_size(*, size: int, annotators: int, rounds: int, overlap: int) -> dict:
    evaluation, version, users = build_study(size=size, annotators=annotators, overlap=overlap)
    results: list = []
    barrier = threading.Barrier(annotators)
    threads = [
        threading.Thread(
            target=annotate,
            kwargs={
                "evaluation": evaluation,
                "version": version,
                "user": user,
                "rounds": rounds,
                "results": results,
                "barrier": barrier,
            },
        )
        for user in users
    ]
    wall = run_threads(threads)
    times = sorted(elapsed for elapsed, *_ in results)
    queries = [count for _, count, *_ in results]
    return {
        "size": size,
        "round_trips": len(results),
        "failed": sum(1 for *_, ok, _u, _i in results if not ok),
        "median_ms": 1000 * statistics.median(times),
        "p95_ms": 1000 * times[int(0.95 * (len(times) - 1))],
        "mean_ms": 1000 * statistics.fmean(times),
        "throughput_per_s": len(results) / wall,
        "queries_min": min(queries),
        "queries_max": max(queries),
        **check_integrity(evaluation, results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--annotators", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--sizes", default="100,100000")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database afterwards")
    args = parser.parse_args()
    admin_url, _ = point_at_bench_database()
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.ALLOWED_HOSTS = ["testserver"]
    call_command("migrate", verbosity=0)
    rows = []
    try:
        # Warm-up (not reported): compiled templates, URL resolvers and connections for both sizes alike.
        run_size(size=50, annotators=args.annotators, rounds=2, overlap=args.overlap)
        for size in (int(s) for s in args.sizes.split(",")):
            print(f"… {size} items, {args.annotators} annotators, {args.rounds} round trips each", flush=True)
            rows.append(
                run_size(size=size, annotators=args.annotators, rounds=args.rounds, overlap=args.overlap)
            )
    finally:
        if not args.keep:
            drop_bench_database(admin_url)
    header = [
        "size",
        "round_trips",
        "failed",
        "median_ms",
        "p95_ms",
        "mean_ms",
        "throughput_per_s",
        "queries_min",
        "queries_max",
        "ratings",
        "duplicates",
        "lost",
        "over_assigned_items",
        "slot_count_mismatches",
    ]
    print("\t".join(header))
    for row in rows:
        print("\t".join(f"{row[k]:.1f}" if isinstance(row[k], float) else str(row[k]) for k in header))
    if len(rows) == 2:
        ratio = rows[1]["median_ms"] / rows[0]["median_ms"]
        print(
            f"median round trip, {rows[1]['size']} vs {rows[0]['size']} items: {ratio:.2f}x (target <= 1.3x)"
        )
    bad = [
        r
        for r in rows
        if r["failed"]
        or r["duplicates"]
        or r["lost"]
        or r["over_assigned_items"]
        or r["slot_count_mismatches"]
    ]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
