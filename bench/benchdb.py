"""A throwaway PostgreSQL database for a benchmark: its URLs, admin statements and a migrated Django."""

import os
from urllib.parse import urlparse, urlunparse


def database_urls(name: str) -> tuple[str, str]:
    """(URL of the server's `postgres` database, URL of the benchmark's database `name`)."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    parsed = urlparse(base)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise SystemExit("This benchmark needs PostgreSQL: set DATABASE_URL=postgres://...")
    return urlunparse(parsed._replace(path="/postgres")), urlunparse(parsed._replace(path=f"/{name}"))


def run_on_admin(admin_url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(statement)


def setup_django(bench_url: str) -> None:
    os.environ["DATABASE_URL"] = bench_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def run_threads(threads) -> float:
    """Start every thread, wait for all of them; the wall seconds that took."""
    import time

    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started
