"""Benchmark: the Excel workbook (.xlsx) of 100k ratings against the long CSV of the same ratings.

Builds a throwaway PostgreSQL database (concord_bench_workbook) with export_ratings.py's generator:
10k items x 2 likert rubrics x 5 raters (3 people, 2 judges with explanations) = 100k ratings. Then
runs, alternating, `manage.py export_ratings --layout long -o FILE` and `--layout xlsx --item-text -o
FILE` (the workbook the evaluation page offers: long, wide with the item texts, rubric versions), each
in a fresh process, `--repeat` times (default 3). Prints each run's wall time and peak RSS growth (peak
RSS during the export minus RSS after Django started), the medians, and the ratio workbook / long CSV
(target <= 3x; memory bounded: growth < 50 MB). Checks the last workbook with openpyxl: its long sheet
has one row per rating and its wide sheet one row per item.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/export_workbook.py

Options: --items 10000 (ratings = items x 10), --repeat 3, --keep (keep the database), --reuse.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_ratings as base  # noqa: E402  (bench/ is not a package)

base.BENCH_DB = "concord_bench_workbook"
MB = 1024 * 1024


def child(mode: str, output: str) -> None:
    import psutil

    base.setup_django(os.environ["DATABASE_URL"])
    from django.core.management import call_command
    from django.db import connection

    connection.ensure_connection()
    rss_before = psutil.Process().memory_info().rss
    sampler = base.PeakRss()
    started = time.perf_counter()
    extra = ["--item-text"] if mode == "xlsx" else []
    call_command("export_ratings", "--evaluation", base.EVALUATION, "--layout", mode, *extra, "-o", output)
    seconds = time.perf_counter() - started
    peak = sampler.stop()
    print(json.dumps({"seconds": seconds, "rss_before": rss_before, "rss_peak": peak}))


def measure(mode: str, output: Path, bench_url: str) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--output", str(output)]
    env = dict(os.environ, DATABASE_URL=bench_url)
    done = subprocess.run(command, cwd=base.ROOT, env=env, check=True, capture_output=True, text=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["growth_mb"] = (figures["rss_peak"] - figures["rss_before"]) / MB
    figures["bytes"] = output.stat().st_size
    return figures


def check_workbook(path: Path, ratings: int, items: int) -> str:
    import openpyxl

    book = openpyxl.load_workbook(path, read_only=True)
    long_rows = sum(1 for _ in book["long"].iter_rows(values_only=True)) - 1
    wide_rows = sum(1 for _ in book["wide"].iter_rows(values_only=True)) - 1
    book.close()
    ok = long_rows == ratings and wide_rows == items
    return f"long sheet {long_rows:,} rows, wide sheet {wide_rows:,} rows: {'ok' if ok else 'WRONG'}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--child", choices=["long", "xlsx"])
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.output)
        return
    admin_url, bench_url = base.database_urls()
    if not args.reuse:
        base.recreate_database(admin_url)
    base.setup_django(bench_url)
    try:
        built = base.existing() if args.reuse else base.build(args.items)
        print(f"{built['ratings']:,} ratings ({built['generate_seconds']:.1f} s to generate)")
        runs: dict[str, list[dict]] = {"long": [], "xlsx": []}
        with tempfile.TemporaryDirectory() as folder:
            for n in range(args.repeat):
                for mode in ["long", "xlsx"]:
                    figures = measure(
                        mode, Path(folder) / f"export.{'csv' if mode == 'long' else 'xlsx'}", bench_url
                    )
                    runs[mode].append(figures)
                    size = figures["bytes"] / MB
                    print(f"run {n + 1} {mode:4}: {figures['seconds']:.2f} s, {size:.1f} MB file, "
                          f"peak RSS growth {figures['growth_mb']:.1f} MB")  # fmt: skip
            print(check_workbook(Path(folder) / "export.xlsx", built["ratings"], args.items))
        long_s = statistics.median(r["seconds"] for r in runs["long"])
        xlsx_s = statistics.median(r["seconds"] for r in runs["xlsx"])
        growth = max(r["growth_mb"] for r in runs["xlsx"])
        print(
            f"median long CSV {long_s:.2f} s, workbook {xlsx_s:.2f} s: {xlsx_s / long_s:.2f}x (target <= 3x)"
        )
        print(f"workbook peak RSS growth at most {growth:.1f} MB (target < 50 MB); "
              f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")  # fmt: skip
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            base.drop_database(admin_url)


if __name__ == "__main__":
    main()
