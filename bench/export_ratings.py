"""Benchmark: long CSV export of 1M ratings through the CLI, against PostgreSQL's own COPY.

Builds a throwaway PostgreSQL database (concord_bench_export), migrates it, and generates
100k items x 2 likert rubrics x 5 raters (3 people, 2 judges with explanations) = 1M ratings with
INSERT ... SELECT generate_series (fast, no Python per row). Then, in the same run:

1. `manage.py export_ratings --layout long -o FILE` in a fresh process: wall time, rows/s, and
   peak RSS growth (peak RSS during the export minus RSS after Django started);
2. `COPY (SELECT <the same rows, plain columns, same order>) TO STDOUT` into a file: rows/s,
   the physical limit;
3. for information, the ORM fallback path (`evaluations.exports.long_csv`, used on SQLite) in a
   fresh process.

Prints the figures and the ratio export/COPY (target >= 0.5) and RSS growth (target < 50 MB).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/export_ratings.py

Options: --items 100000 (ratings = items x 10), --keep (keep the database), --reuse (use the kept one),
--import-too (also time import_ratings of the exported file), --skip-orm.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BENCH_DB = "concord_bench_export"
EVALUATION = "Export bench"
HUMANS, MODELS, RUBRICS = 3, 2, 2


def database_urls() -> tuple[str, str]:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    parsed = urlparse(base)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise SystemExit("This benchmark needs PostgreSQL: set DATABASE_URL=postgres://...")
    return urlunparse(parsed._replace(path="/postgres")), urlunparse(parsed._replace(path=f"/{BENCH_DB}"))


def recreate_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database(admin_url: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def setup_django(bench_url: str) -> None:
    os.environ["DATABASE_URL"] = bench_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


def build(items: int) -> dict:
    """Migrate, then generate the project, dataset, rubrics, raters and 1M ratings in SQL."""
    from django.core.management import call_command
    from django.db import connection

    from datasets.models import Dataset
    from evaluations.models import Rater
    from evaluations.services import create_evaluation
    from projects.models import Project
    from rubrics.models import Rubric, RubricVersion

    call_command("migrate", verbosity=0)
    project = Project.objects.create(name="Bench", slug="bench")
    dataset = Dataset.objects.create(project=project, name="Bench dialogs")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO datasets_item
                (dataset_id, external_id, position, context, response, baseline, metadata, search_text)
            SELECT %s, 'dlg-' || n, n,
                   jsonb_build_array(
                       jsonb_build_object('speaker', 'USER', 'text', 'Hi, I was wondering about item ' || n),
                       jsonb_build_object('speaker', 'BOT', 'text', 'Sure, happy to help with that.'),
                       jsonb_build_object('speaker', 'USER', 'text', 'What would you recommend for a trip?')),
                   jsonb_build_object('speaker', 'BOT', 'text', 'Pack light, check the weather ' || n),
                   NULL, jsonb_build_object('topic', CASE WHEN n %% 2 = 0 THEN 'travel' ELSE 'food' END),
                   'dlg-' || n
            FROM generate_series(0, %s - 1) AS n
            """,
            [dataset.pk, items],
        )
    versions = []
    for number in range(RUBRICS):
        rubric = Rubric.objects.create(project=project, name=f"Criterion {number + 1}", kind="likert")
        versions.append(
            RubricVersion.objects.create(
                rubric=rubric,
                number=1,
                criterion=rubric.name,
                prompt_template="Rate:\n{{Dialog}}\nScore:",
                scale=[{"value": str(v), "label": str(v), "description": ""} for v in range(1, 6)],
            )
        )
    raters = [
        Rater.objects.create(project=project, name=f"annotator{n}", kind="human") for n in range(HUMANS)
    ]
    raters += [Rater.objects.create(project=project, name=f"judge-{n}", kind="model") for n in range(MODELS)]
    checked = time.perf_counter()
    evaluation = create_evaluation(
        project=project, dataset=dataset, rubric_versions=versions, name=EVALUATION, overlap=HUMANS
    )
    check_seconds = time.perf_counter() - checked
    with connection.cursor() as cursor:
        for version in versions:
            for rater in raters:
                model = rater.kind == "model"
                cursor.execute(
                    """
                    INSERT INTO evaluations_rating
                        (evaluation_id, item_id, rubric_version_id, rater_id, value, explanation,
                         parse_failed, raw_output, side_shown, details, created, updated)
                    SELECT %s, i.id, %s, %s,
                           CASE WHEN %s THEN to_char(1 + (i.position * 37 %% 400) / 100.0, 'FM0.00')
                                ELSE (1 + (i.position * 7 + %s) %% 5)::text END,
                           CASE WHEN NOT %s THEN ''
                                WHEN i.position %% 50 = 0 THEN '=The response ' || md5(i.external_id)
                                ELSE 'The response stays on topic, but ' || md5(i.external_id || %s)
                                     || ' could be shorter; it repeats the question once.' END,
                           false, '', '', '{}'::jsonb,
                           now() - (i.position || ' seconds')::interval, now()
                    FROM datasets_item i WHERE i.dataset_id = %s
                    """,
                    [evaluation.pk, version.pk, rater.pk, model, rater.pk, model, rater.name, dataset.pk],
                )
        cursor.execute("ANALYZE")
        cursor.execute("SELECT count(*) FROM evaluations_rating")
        (ratings,) = cursor.fetchone()
    return {
        "evaluation_id": evaluation.pk,
        "ratings": ratings,
        "generate_seconds": time.perf_counter() - started,
        "create_evaluation_check_seconds": check_seconds,
    }


def existing() -> dict:
    from django.db import connection

    from evaluations.models import Evaluation

    Evaluation.objects.filter(name="Import bench").delete()
    evaluation = Evaluation.objects.get(name=EVALUATION)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE evaluations_rating")
    return {
        "evaluation_id": evaluation.pk,
        "ratings": evaluation.ratings.count(),
        "generate_seconds": 0.0,
        "create_evaluation_check_seconds": 0.0,
    }


def measure_in_child(mode: str, output: Path, bench_url: str) -> dict:
    """Run the export in a fresh Python process; it prints seconds and RSS figures as JSON."""
    command = [sys.executable, __file__, "--child", mode, "--output", str(output)]
    env = dict(os.environ, DATABASE_URL=bench_url)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_seconds"] = time.perf_counter() - started
    return figures


class PeakRss:
    """Samples this process's RSS every 20 ms in a thread; `peak` is the highest seen."""

    def __init__(self):
        import psutil

        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.peak, self.process.memory_info().rss)


def child(mode: str, output: str) -> None:
    import psutil

    setup_django(os.environ["DATABASE_URL"])
    from django.core.management import call_command
    from django.db import connection

    from evaluations import exports
    from evaluations.models import Evaluation

    evaluation = Evaluation.objects.select_related("project").get(name=EVALUATION)
    connection.ensure_connection()
    rss_before = psutil.Process().memory_info().rss
    sampler = PeakRss()
    started = time.perf_counter()
    if mode == "cli":
        call_command("export_ratings", "--evaluation", EVALUATION, "--layout", "long", "-o", output)
    elif mode == "import":
        fresh = Evaluation.objects.create(
            project=evaluation.project, dataset=evaluation.dataset, name="Import bench", overlap=3
        )
        fresh.rubric_versions.set(evaluation.rubric_versions.all())
        call_command("import_ratings", output, "--evaluation", "Import bench")
    else:
        with open(output, "wb") as handle:
            for chunk in exports.long_csv(evaluation):
                handle.write(chunk)
    seconds = time.perf_counter() - started
    peak = sampler.stop()
    print(json.dumps({"seconds": seconds, "rss_before": rss_before, "rss_peak": peak}))


def copy_baseline(bench_url: str, evaluation_id: int, output: Path, *, jit: bool = True) -> float:
    """COPY of the same rows (plain columns, same joins and order) TO STDOUT, written to a file.

    Run once with the server's JIT setting and once with JIT off (as the export runs), best kept.
    """
    import psycopg

    sql = (
        "COPY (SELECT i.external_id, rb.name, rv.number, ra.name, ra.kind, r.value, r.explanation, "
        "r.parse_failed, r.side_shown, r.created, r.updated FROM evaluations_rating r "
        "JOIN datasets_item i ON i.id = r.item_id "
        "JOIN rubrics_rubricversion rv ON rv.id = r.rubric_version_id "
        "JOIN rubrics_rubric rb ON rb.id = rv.rubric_id JOIN evaluations_rater ra ON ra.id = r.rater_id "
        f"WHERE r.evaluation_id = {int(evaluation_id)} ORDER BY i.position, rb.name, rv.number, ra.name) "
        "TO STDOUT WITH (FORMAT csv, HEADER true)"
    )
    with psycopg.connect(bench_url) as conn, output.open("wb") as handle:
        if not jit:
            conn.execute("SET jit = off")
        started = time.perf_counter()
        with conn.cursor().copy(sql) as copy:
            for block in copy:
                handle.write(block)
        return time.perf_counter() - started


def count_rows(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle) - 1  # the bench's texts have no line breaks; minus the header


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--skip-orm", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="reuse a database kept by --keep")
    parser.add_argument("--import-too", action="store_true", help="also time importing the export (slow)")
    parser.add_argument("--child", choices=["cli", "orm", "import"], help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.output)
        return
    admin_url, bench_url = database_urls()
    if not args.reuse:
        recreate_database(admin_url)
    try:
        setup_django(bench_url)
        built = existing() if args.reuse else build(args.items)
        from django.db import connections

        connections.close_all()
        ratings = built["ratings"]
        print(
            f"generated {ratings:,} ratings on {args.items:,} items in {built['generate_seconds']:.1f} s "
            f"(create_evaluation's item checks: {built['create_evaluation_check_seconds']:.2f} s)"
        )
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch)
            copy_seconds = copy_baseline(bench_url, built["evaluation_id"], out / "copy.csv")
            cli = measure_in_child("cli", out / "cli.csv", bench_url)
            copy_again = copy_baseline(bench_url, built["evaluation_id"], out / "copy.csv", jit=False)
            copy_seconds = min(copy_seconds, copy_again)
            rows = count_rows(out / "cli.csv")
            assert rows == ratings == count_rows(out / "copy.csv"), (rows, ratings)
            cli_rate, copy_rate = rows / cli["seconds"], rows / copy_seconds
            growth = (cli["rss_peak"] - cli["rss_before"]) / 2**20
            print(
                f"COPY (SELECT ...) TO STDOUT: {copy_seconds:.2f} s, "
                f"{copy_rate:,.0f} rows/s (best of 2, JIT on and off)"
            )
            print(
                f"export_ratings --layout long: {cli['seconds']:.2f} s, {cli_rate:,.0f} rows/s "
                f"(process incl. start-up {cli['process_seconds']:.2f} s), "
                f"{(out / 'cli.csv').stat().st_size / 2**20:.0f} MB written"
            )
            print(f"  ratio to COPY: {cli_rate / copy_rate:.2f} (target >= 0.5)")
            print(
                f"  RSS after start-up {cli['rss_before'] / 2**20:.0f} MB, "
                f"peak {cli['rss_peak'] / 2**20:.0f} MB, "
                f"growth {growth:.1f} MB (target < 50 MB)"
            )
            if args.import_too:
                imported = measure_in_child("import", out / "cli.csv", bench_url)
                print(
                    f"import_ratings of that export into a fresh evaluation: {imported['seconds']:.1f} s, "
                    f"{ratings / imported['seconds']:,.0f} rows/s, "
                    f"RSS growth {(imported['rss_peak'] - imported['rss_before']) / 2**20:.0f} MB"
                )
            if not args.skip_orm:
                orm = measure_in_child("orm", out / "orm.csv", bench_url)
                assert count_rows(out / "orm.csv") == ratings
                print(
                    f"ORM fallback (SQLite path) on PostgreSQL: {orm['seconds']:.2f} s, "
                    f"{ratings / orm['seconds']:,.0f} rows/s, "
                    f"ratio {ratings / orm['seconds'] / copy_rate:.2f}, "
                    f"RSS growth {(orm['rss_peak'] - orm['rss_before']) / 2**20:.1f} MB"
                )
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(admin_url)


if __name__ == "__main__":
    main()
