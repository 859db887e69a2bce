"""Benchmark: the whole agreement report of 100k items x 3 people + 2 models vs only reading the ratings.

Builds a throwaway PostgreSQL database (concord_bench_agreement, or $BENCH_DB), migrates it, and loads with
COPY one evaluation of 100k items (metadata `bot`), one likert 1-5 rubric and 500k ratings:
three people (the truth +-1 now and then) and two judges (noisier; one with 2% parse failures).
Then, best of --repeat runs each, the two run alternately (the machine may be busy):

1. read: the ratings alone, the plain `values_list(item, rater, value, parse_failed)` into a list;
2. report: `agreement.report.build_report` for the evaluation, bootstrap included (1,000 resamples).

Prints both times and the ratio report/read (target: within 3x). With --kind pairwise the rubric is
A / SAME / B instead.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/agreement_report.py

Options: --items 100000 --kind likert|pairwise --resamples 1000 --repeat 3 --keep (keep the database)
--profile (print where one report run spends its time) --fractional (judge-a scores like "3.72",
as a logprob judge stores them: about 400 distinct values instead of 5) --people 20 (a pool of 20
annotators, 3 per item: 190 pairs of people).

--shapes (issue 34): the report's peak memory (RSS of a process of its own, ru_maxrss) and time for
1,000 people x 12 items, 419 people x 12 items (the issue's 417 bulk raters and the demo's two; every
person rates every item, no model) and 20 people x 100k items (3 per item, 2 models), each beside the
estimate the report priced itself at (agreement.cost) before it started; a report above the budgets
prints its refusal instead. `--shapes 419x12` runs one of them.
"""

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchdb import database_urls, run_on_admin, setup_django  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "concord_bench_agreement")
HUMANS = ["ann", "bob", "cy"]
MODELS = ["judge-a", "judge-b"]


def copy_rows(model, rows: dict[str, list]) -> None:
    """COPY rows into a model's table; other columns get their field default."""
    from django.db import connection
    from django.utils import timezone

    count = len(next(iter(rows.values())))
    now = timezone.now().isoformat()
    columns, data = [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        name = field.attname
        if name in rows:
            values = rows[name]
        elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            values = [now] * count
        elif field.has_default() or not field.null:
            default = field.get_default()  # "" for text fields without a default
            values = [json.dumps(default) if isinstance(default, dict | list) else default] * count
        else:
            continue
        columns.append(field.column)
        data.append(values)
    buffer = io.StringIO()
    for row in zip(*data, strict=True):
        buffer.write("\t".join(_copy_text(v) for v in row) + "\n")
    with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        copy.write(buffer.getvalue())


def _copy_text(value) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def generate(
    items: int, kind: str, *, fractional: bool = False, people: int = 3, per_item: int = 3, models: int = 2
):
    from datasets.models import Dataset, Item
    from evaluations.models import Evaluation, Rater, Rating
    from projects.models import Project
    from tests import factories

    project = Project.objects.create(name="Agreement bench", slug="agreement-bench")
    version = factories.make_rubric(project=project, name="Bench rubric", kind=kind)
    dataset = Dataset.objects.create(project=project, name="Bench items")
    rng = np.random.default_rng(7)
    bots = np.array(["alpha", "beta", "gamma", "delta"])[rng.integers(0, 4, items)]
    copy_rows(
        Item,
        {
            "dataset_id": [dataset.pk] * items,
            "external_id": [f"d-{n}" for n in range(items)],
            "position": list(range(items)),
            "context": [json.dumps([{"speaker": "USER", "text": f"Question {n}?"}]) for n in range(items)],
            "response": [json.dumps({"speaker": "BOT", "text": f"Answer {n}."}) for n in range(items)],
            "baseline": [json.dumps({"speaker": "BOT", "text": f"Other {n}."}) for n in range(items)],
            "metadata": [json.dumps({"bot": str(b)}) for b in bots],
        },
    )
    evaluation = Evaluation.objects.create(project=project, dataset=dataset, name="Bench", overlap=3)
    evaluation.rubric_versions.set([version])
    item_ids = np.array(
        list(Item.objects.filter(dataset=dataset).order_by("position").values_list("pk", flat=True))
    )
    labels = ["A", "SAME", "B"] if kind == "pairwise" else ["1", "2", "3", "4", "5"]
    truth = rng.integers(0, len(labels), items)
    columns: dict[str, list] = {"item_id": [], "rater_id": [], "value": [], "parse_failed": []}
    humans = HUMANS if people == 3 else [f"person-{k + 1}" for k in range(people)]
    # Each item is rated by `per_item` of the people (all of them when there are that many).
    chosen = np.argsort(rng.random((items, people)), axis=1)[:, :per_item]
    for name, spread, fail in [(h, 0.25, 0.0) for h in humans] + [
        ("judge-a", 0.45, 0.0),
        ("judge-b", 0.6, 0.02),
    ][:models]:
        rater = Rater.objects.create(project=project, name=name, kind="human" if name in humans else "model")
        mine = (chosen == humans.index(name)).any(axis=1) if name in humans else np.ones(items, dtype=bool)
        noise = rng.choice([-1, 1], items) * (rng.random(items) < spread)
        codes = np.clip(truth + noise, 0, len(labels) - 1)[mine]
        failed = (rng.random(items) < fail)[mine]
        columns["item_id"] += item_ids[mine].tolist()
        columns["rater_id"] += [rater.pk] * int(mine.sum())
        if fractional and name == "judge-a":  # a logprob judge: probability-weighted scores like "3.72"
            scores = np.clip(truth + 1 + rng.normal(0, 0.5, items), 1, 5).round(2)
            columns["value"] += [f"{score:g}" for score in scores]
        else:
            columns["value"] += ["" if f else labels[c] for c, f in zip(codes, failed, strict=True)]
        columns["parse_failed"] += failed.tolist()
    columns["evaluation_id"] = [evaluation.pk] * len(columns["item_id"])
    columns["rubric_version_id"] = [version.pk] * len(columns["item_id"])
    copy_rows(Rating, columns)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return evaluation, version


def timed(work) -> tuple[float, object]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def interleaved(repeat: int, first, second) -> tuple[float, object, float, object]:
    """Best time of each of two jobs, run alternately so a busy machine slows both alike."""
    best_a = best_b = float("inf")
    result_a = result_b = None
    for _ in range(repeat):
        seconds, result_a = timed(first)
        best_a = min(best_a, seconds)
        seconds, result_b = timed(second)
        best_b = min(best_b, seconds)
    return best_a, result_a, best_b, result_b


# name: (people, items, people per item, models)
SHAPES = {
    "1000x12": (1000, 12, 1000, 0),
    "419x12": (419, 12, 419, 0),
    "20x100k": (20, 100_000, 3, 2),
}


def measure_report() -> None:
    """In a process of its own (on the database generate() filled): price the report, build it as the
    page's task does (its JSON), and print the estimate, the peak RSS and the time, as one JSON line."""
    import resource

    from agreement import cost
    from agreement.report import build_report
    from evaluations.models import Evaluation

    evaluation = Evaluation.objects.get(name="Bench")
    started = time.perf_counter()
    estimate = cost.estimate_report(evaluation=evaluation, resamples=1000)
    try:
        text = json.dumps(build_report(evaluation=evaluation, resamples=1000).as_json())
        refused = ""
    except cost.ReportTooLarge as error:
        text, refused = "", str(error)
    result = {
        "seconds": time.perf_counter() - started,
        "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "estimate_bytes": estimate.bytes,
        "estimate_seconds": estimate.seconds,
        "json_bytes": len(text),
        "refused": refused,
    }
    print(json.dumps(result))


def run_shapes(names: list[str]) -> None:
    """Each shape in a throwaway database: generated, then its report measured in a child process."""
    import subprocess

    for name in names:
        people, items, per_item, models = SHAPES[name]
        admin_url, bench_url = database_urls(BENCH_DB)
        run_on_admin(admin_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        run_on_admin(admin_url, f"CREATE DATABASE {BENCH_DB}")
        try:
            child = subprocess.run(
                [sys.executable, __file__, "--generate-only", name],
                check=True,
                capture_output=True,
                text=True,
            )
            measured = subprocess.run(
                [sys.executable, __file__, "--measure"],
                check=True,
                capture_output=True,
                text=True,
                env={**os.environ, "DATABASE_URL": bench_url},
            )
        finally:
            run_on_admin(admin_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        result = json.loads(measured.stdout.strip().splitlines()[-1])
        print(child.stdout.strip())
        outcome = (
            f"refused: {result['refused']}" if result["refused"] else f"JSON {result['json_bytes']:,} bytes"
        )
        print(
            f"{name} ({people:,} people, {per_item} per item, {items:,} items, {models} models): "
            f"peak RSS {result['peak_bytes'] / 1e6:.0f} MB in {result['seconds']:.1f} s "
            f"(estimated {result['estimate_bytes'] / 1e6:.0f} MB, {result['estimate_seconds']:.1f} s); "
            f"{outcome}"
        )


def generate_shape(name: str) -> None:
    people, items, per_item, models = SHAPES[name]
    _, bench_url = database_urls(BENCH_DB)
    setup_django(bench_url)
    started = time.perf_counter()
    generate(items, "likert", people=people, per_item=per_item, models=models)
    print(f"{name}: generated in {time.perf_counter() - started:.1f} s")


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        import django

        django.setup()
        return measure_report()
    if sys.argv[1:2] == ["--generate-only"]:
        return generate_shape(sys.argv[2])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--kind", choices=["likert", "pairwise"], default="likert")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--people", type=int, default=3, help="Annotators; each item gets 3 of them.")
    parser.add_argument("--fractional", action="store_true", help="judge-a gives scores like 3.72 (likert).")
    parser.add_argument("--profile", action="store_true", help="Print a profile of one report run.")
    parser.add_argument(
        "--shapes",
        nargs="?",
        const=",".join(SHAPES),
        help=f"Peak memory and time of the report for these shapes (default all: {', '.join(SHAPES)}).",
    )
    args = parser.parse_args()
    if args.shapes:
        return run_shapes(args.shapes.split(","))

    admin_url, bench_url = database_urls(BENCH_DB)
    run_on_admin(admin_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    run_on_admin(admin_url, f"CREATE DATABASE {BENCH_DB}")
    try:
        setup_django(bench_url)
        started = time.perf_counter()
        evaluation, version = generate(args.items, args.kind, fractional=args.fractional, people=args.people)
        print(
            f"generated {args.items:,} items and {args.items * 5:,} ratings "
            f"in {time.perf_counter() - started:.1f} s"
        )

        from agreement.report import build_report
        from evaluations.models import Rating

        def read():
            return list(
                Rating.objects.filter(evaluation=evaluation, rubric_version=version).values_list(
                    "item_id", "rater_id", "value", "parse_failed"
                )
            )

        def report_once():
            return build_report(evaluation=evaluation, resamples=args.resamples).as_json()

        read_seconds, rows, report_seconds, report = interleaved(args.repeat, read, report_once)
        from agreement.db import read_ratings
        from evaluations.models import Rater

        ratings = Rating.objects.filter(evaluation=evaluation, rubric_version=version)
        raters = list(Rater.objects.values_list("pk", flat=True))
        grouped_seconds = min(
            timed(lambda: read_ratings(ratings, raters=raters))[0] for _ in range(args.repeat)
        )
        if args.profile:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.runcall(report_once)
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        block = report["rubrics"][0]
        print(f"read {len(rows):,} ratings (values_list only): {read_seconds:.2f} s")
        print(f"whole report ({args.kind}, {args.resamples} bootstrap resamples): {report_seconds:.2f} s")
        print(f"ratio report / read: {report_seconds / read_seconds:.2f}x (target <= 3x)")
        print(
            f"(the report's own read, item ids packed as bytes per rater and value, two halves at once: "
            f"{grouped_seconds:.2f} s; "
            f"statistics and bootstrap: about {report_seconds - grouped_seconds:.2f} s)"
        )
        hh = block["human_human"]
        print(
            f"people: alpha {hh['krippendorff_alpha']:.3f}, kappa {hh['cohen_kappa']:.3f} "
            f"on {hh['items']:,} items"
        )
        for rater in block["raters"]:
            print(f"{rater['rater']}: {rater['verdict']['text']} ({rater['parse_failures']} parse failures)")
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            run_on_admin(admin_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
