"""Benchmark: prompt rendering speed and the rubric pages on a project with a 100k-item dataset.

Builds a throwaway PostgreSQL database (concord_bench_rubrics), migrates it (which loads the four
built-in rubrics), and inserts one dataset of 100k eight-turn items with INSERT ... SELECT
generate_series. Then measures, in this process:

1. `rubrics.rendering.render_prompt` per built-in rubric: prompts per second on stored items;
2. the rubric page (GET rubric_detail) and the htmx preview region (GET rubric_preview, HX-Request)
   for an item picked by id near the end of the dataset: median and worst wall time of 20 requests
   through Django's test client, and the number of SQL queries of one request;
3. `import_rubric` of a JSON spec whose placeholder is not a metadata key of any item, the worst
   case of the metadata-key check (a scan of the project's items).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/rubric_pages.py

Options: --items 100000 --keep (keep the database).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchdb import database_urls, run_on_admin, setup_django  # noqa: E402

BENCH_DB = "concord_bench_rubrics"


def make_data(items: int):
    from django.contrib.auth import get_user_model
    from django.db import connection

    from datasets.models import Dataset
    from projects.models import Membership, Project

    user = get_user_model().objects.create_user("bench", password="bench-pw-123")
    project = Project.objects.create(name="Bench", slug="bench")
    Membership.objects.create(project=project, user=user, role="researcher")
    dataset = Dataset.objects.create(project=project, name="Big")
    turn = '"speaker": "%s", "text": "Turn %s of dialog \' || n || \', with some words to make it long."'
    context = ", ".join("{" + turn % ("USER" if t % 2 == 0 else "BOT", t) + "}" for t in range(7))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO datasets_item"
            " (dataset_id, external_id, position, context, response, baseline, metadata, search_text) "
            f"SELECT %s, 'd-' || n, n, ('[{context}]')::jsonb, "
            '(\'{"speaker": "BOT", "text": "Response \' || n || \'."}\')::jsonb, '
            '(\'{"speaker": "BOT", "text": "Baseline \' || n || \'."}\')::jsonb, '
            "'{\"topic\": \"Concert\"}'::jsonb, '' FROM generate_series(0, %s) AS n",
            [dataset.pk, items - 1],
        )
    return user, project, dataset


def bench_rendering(dataset) -> dict[str, float]:
    from rubrics.models import Rubric
    from rubrics.rendering import render_prompt

    items = list(dataset.items.order_by("position")[:2000])
    figures = {}
    for rubric in Rubric.objects.filter(project__isnull=True).order_by("name"):
        version = rubric.latest_version()
        started = time.perf_counter()
        for _ in range(5):
            for item in items:
                render_prompt(version, item)
        figures[rubric.name] = 5 * len(items) / (time.perf_counter() - started)
    return figures


def timed_requests(
    client, url: str, params: dict, headers: dict, repeat: int = 20
) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url, params, headers=headers)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    with CaptureQueriesContext(connection) as queries:
        client.get(url, params, headers=headers)
    return statistics.median(times) * 1000, max(times) * 1000, len(queries)


def bench_pages(user, project, dataset, items: int) -> dict[str, tuple[float, float, int]]:
    from django.test import Client
    from django.urls import reverse

    from rubrics.models import Rubric

    client = Client()
    client.force_login(user)
    rubric = Rubric.objects.get(project__isnull=True, name="Multi-turn chat quality")
    params = {"dataset": dataset.pk, "item": f"d-{items - 7}"}
    detail = reverse("rubric_detail", args=[project.slug, rubric.pk])
    preview = reverse("rubric_preview", args=[project.slug, rubric.pk])
    return {
        "rubric_detail": timed_requests(client, detail, {}, {}),
        "rubric_preview (htmx)": timed_requests(client, preview, params, {"HX-Request": "true"}),
    }


def bench_import(project) -> float:
    from rubrics.parsing import RubricParseError
    from rubrics.services import import_rubric

    spec = {
        "name": "Fit",
        "kind": "likert",
        "scale": [{"value": 1}, {"value": 2}],
        "prompt_template": "{persona}",
    }
    started = time.perf_counter()
    try:
        import_rubric(text=json.dumps(spec), project=project)
    except RubricParseError:
        pass
    else:
        raise AssertionError("the unknown placeholder should have been refused")
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    admin_url, bench_url = database_urls(BENCH_DB)
    run_on_admin(admin_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    run_on_admin(admin_url, f"CREATE DATABASE {BENCH_DB}")
    try:
        setup_django(bench_url)
        started = time.perf_counter()
        user, project, dataset = make_data(args.items)
        print(f"setup: {args.items:,} items in {time.perf_counter() - started:.1f} s")
        for name, rate in bench_rendering(dataset).items():
            print(f"render_prompt {name}: {rate:,.0f} prompts/s")
        for page, (median, worst, queries) in bench_pages(user, project, dataset, args.items).items():
            print(f"{page}: median {median:.1f} ms, worst {worst:.1f} ms, {queries} queries")
        refusal_ms = bench_import(project)
        print(f"import_rubric refusing an unknown placeholder over {args.items:,} items: {refusal_ms:.0f} ms")
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            run_on_admin(admin_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
