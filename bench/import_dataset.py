"""Benchmark: import generated dialogs through the CLI into PostgreSQL, against a raw COPY of the same rows.

    .venv/bin/python bench/import_dataset.py [--items 100000] [--database concord_bench]

1. (re)creates a throwaway database (default concord_bench) on $BENCH_PG (default
   postgres://postgres@127.0.0.1:5432) and migrates it;
2. writes N dialogs of 6 turns with realistic lengths (user turns ~15-40 words, bot turns
   ~30-120 words, a little non-ASCII) as JSONL;
3. runs `manage.py import_dataset` in a child process: wall time, items/s, and the child's peak
   RSS from wait4();
4. exports the rows it stored, empties the table, and COPYs the same rows back into the same table
   (same indexes, same constraints) in one transaction: the physical limit;
5. prints the figures and the ratio import rate / COPY rate (target >= 0.5, peak RSS < 300 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
WORDS = (  # noqa: SIM905 - a sentence of words reads better than a 100-item list
    "the a to and of I you it is that in for this my with have be on not are what do was can so but just "
    "like about your we if they me all know think one get would really how there when good time people "
    "concert music band song weekend trip movie weather travel cooking recipe garden dog cat school work "
    "project deadline meeting coffee morning evening friend family birthday holiday summer winter city "
    "museum book novel chapter idea question answer problem reason sure great sorry thanks maybe "
    "probably definitely understand feel happy tired excited worried favourite recommend suggest "
    "café naïve résumé"
).split()
TOPICS = ["Concert", "Travel", "Cooking", "Movies", "Work", "Pets", "Sports", "Books"]
# --text realistic: turns made of sentences people and models wrote (read from ../shared/data at run time,
# never copied here), so words follow a natural distribution instead of 103 words each in ~80% of items.
SHARED_DATA = ROOT.parent / "shared" / "data"


def sentence(rng: random.Random, low: int, high: int) -> str:
    words = rng.choices(WORDS, k=rng.randint(low, high))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", "?", "!", "."])


def real_sentences() -> list[str]:
    """The sentences of the PandaLM test set (instructions, inputs, both responses) and of USR PersonaChat
    (dialog lines, persona facts, candidate responses): ~4,000 distinct sentences of real English."""
    texts: list[str] = []
    for row in json.loads((SHARED_DATA / "pandalm-testset" / "testset-v1.json").read_text()):
        texts.extend(str(row[key]) for key in ("instruction", "input", "response1", "response2"))
    for row in json.loads((SHARED_DATA / "usr-personachat" / "pc_usr_data.json").read_text()):
        texts.extend((row["context"], row["fact"]))
        texts.extend(response["response"] for response in row["responses"])
    found = set()
    for text in texts:
        for line in text.splitlines():
            pieces = (piece.strip() for piece in re.split(r"(?<=[.!?])\s+", line))
            found.update(piece for piece in pieces if len(piece) > 1)
    return sorted(found)


def generate(path: Path, count: int, seed: int = 7, *, text: str = "synthetic") -> int:
    rng = random.Random(seed)
    pool = real_sentences() if text == "realistic" else []

    def turn(t: int) -> str:
        if pool:  # user turns one or two sentences, bot turns two to four
            return " ".join(rng.choices(pool, k=rng.randint(1, 2) if t % 2 == 0 else rng.randint(2, 4)))
        if t % 2 == 0:
            return sentence(rng, 6, 25)
        return " ".join(sentence(rng, 8, 30) for _ in range(2))

    with open(path, "w", encoding="utf-8") as out:
        for n in range(count):
            turns = [{"speaker": "BOT" if t % 2 else "USER", "text": turn(t)} for t in range(6)]
            item = {
                "id": f"bench-{n:07d}",
                "turns": turns,
                "metadata": {"topic": rng.choice(TOPICS), "source": "bench", "turn_count": 6},
            }
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
    return path.stat().st_size


def admin_url(base: str) -> str:
    return f"{base.rstrip('/')}/postgres"


def recreate_database(base: str, name: str) -> str:
    with psycopg.connect(admin_url(base), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base.rstrip('/')}/{name}"


def manage(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=check, capture_output=True, text=True
    )


class ServerCpu:
    """CPU seconds the PostgreSQL backends serving one database used while this is open, read from
    /proc every 0.1 s (same machine): with the client's own CPU time it says where an import's time goes
    whatever else the shared machine is doing."""

    def __init__(self, base: str, database: str):
        self.base, self.database = base, database
        self.seen: dict[int, float] = {}
        self.done = threading.Event()

    def __enter__(self) -> ServerCpu:
        self.start = self._sample({})
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    @property
    def seconds(self) -> float:
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in self.seen.items())

    def _poll(self) -> None:
        with psycopg.connect(admin_url(self.base), autocommit=True) as conn:
            while not self.done.is_set():
                pids = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)
                ).fetchall()
                self.seen.update(self._sample({pid for (pid,) in pids}))
                time.sleep(0.1)

    def _sample(self, pids) -> dict[int, float]:
        found = {}
        for pid in pids or self.seen:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return found


def timed_import(env: dict, path: Path) -> tuple[float, float, str, float]:
    """Run the CLI import; (wall seconds, peak RSS in MB of that process, its output, its CPU seconds)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "import_dataset", str(path), "--project", "bench", "--name", "bench"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"import failed ({process.returncode}):\n{output}")
    return elapsed, usage.ru_maxrss / 1024, output.strip(), usage.ru_utime + usage.ru_stime


COLUMNS = (
    "dataset_id, external_id, position, context, response, baseline, metadata, search_text, search_words"
)


def timed_copy(url: str, rows_file: Path) -> float:
    """COPY the exported rows back into the emptied table in one transaction; seconds."""
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        statement = f"COPY datasets_item ({COLUMNS}) FROM STDIN"
        with conn.cursor() as cursor, cursor.copy(statement) as copy, open(rows_file, "rb") as source:
            while chunk := source.read(1 << 20):
                copy.write(chunk)
        conn.commit()
        elapsed = time.perf_counter() - started
        conn.execute("ANALYZE datasets_item")  # as the importer does after a large import (not timed)
        conn.commit()
        return elapsed


def export_rows(url: str, rows_file: Path) -> int:
    with psycopg.connect(url) as conn, conn.cursor() as cursor, open(rows_file, "wb") as out:
        with cursor.copy(f"COPY (SELECT {COLUMNS} FROM datasets_item ORDER BY id) TO STDOUT") as copy:
            for data in copy:
                out.write(data)
        (count,) = cursor.execute("SELECT count(*) FROM datasets_item").fetchone() or (0,)
        conn.execute("TRUNCATE datasets_item CASCADE")
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE datasets_item")
    return count


def browse(env: dict, text: str = "synthetic") -> None:
    print(f"item browser (server-side time of a GET, warm cache; load average {os.getloadavg()[0]:.1f}):")
    print(manage({**env, "BENCH_TEXT": text}, "shell", "-c", BROWSE).stdout.rstrip())
    print(f"  load average {os.getloadavg()[0]:.1f}")


BROWSE = """
import time
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.db import connection
from datasets.models import Dataset
user = get_user_model().objects.filter(username="bench").first()
user = user or get_user_model().objects.create_superuser("bench", password="bench-pw-123")
client = Client()
client.force_login(user)
dataset = Dataset.objects.get(name="bench")
dataset.item_count = dataset.items.count()
dataset.save()
url = f"/p/bench/datasets/{dataset.pk}/"
import os
import re
cases = [("first page", {}), ("page 1000 of 50", {"page": 1000}), ("200 a page", {"size": 200}),
         ("search a common word", {"q": "coffee"}), ("search a rare phrase", {"q": "zebra crossing"}),
         ("search an id", {"q": "bench-0099999"}), ("metadata topic=Travel", {"meta": "topic=Travel"}),
         ("metadata + search", {"meta": "topic=Travel", "q": "museum"}),
         ("frequent 2-word phrase", {"q": "great coffee"}), ("3-word phrase", {"q": "great coffee and"})]
if os.environ["BENCH_TEXT"] == "realistic":  # the same kinds of query in real sentences
    cases[3:] = [("search a common word", {"q": "know"}), ("search a rare phrase", {"q": "polyamorous open"}),
                 ("search an id", {"q": "bench-0099999"}),
                 ("metadata topic=Travel", {"meta": "topic=Travel"}),
                 ("metadata + search", {"meta": "topic=Travel", "q": "music"}),
                 ("frequent 2-word phrase", {"q": "of the"}),
                 ("phrase of common words", {"q": "i think it is"}),
                 ("3-word phrase", {"q": "let me know"}), ("phrase, most items", {"q": "i am"})]
# A page may leave its count to a second request (htmx, hx-get ... count=1): timed on its own line.
LAZY = re.compile(r'hx-get="([^"]*count=1[^"]*)"')


def timed(get, label):
    get()  # warm the cache
    times = []
    for _ in range(5):  # best of 5: the machine is shared, the best run is the page's own cost
        started = time.perf_counter()
        with CaptureQueriesContext(connection) as queries:
            response = get()
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
    best, median = min(times), sorted(times)[2]
    print(f"  {label:24s} {best:7.1f} ms best, {median:7.1f} ms median  {len(queries)} queries")
    return response


for label, params in cases:
    response = timed(lambda: client.get(url, params), label)
    lazy = LAZY.search(response.content.decode())
    if lazy:
        count_url = lazy.group(1).replace("&amp;", "&")
        timed(lambda: client.get(count_url, headers={"HX-Request": "true"}), "  its count (htmx)")
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--database", default="concord_bench")
    parser.add_argument("--keep", action="store_true", help="keep the database and files afterwards")
    parser.add_argument("--browse", action="store_true", help="then time the item browser on the N items")
    parser.add_argument(
        "--browse-only", action="store_true", help="only time the item browser on a database kept by --keep"
    )
    parser.add_argument(
        "--text",
        choices=["synthetic", "realistic"],
        default="synthetic",
        help="dialogs of the 103 bench words, or of real sentences from ../shared/data (and their queries)",
    )
    args = parser.parse_args()
    base = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
    if args.browse_only:
        env = {**os.environ, "DATABASE_URL": f"{base.rstrip('/')}/{args.database}", "LOG_LEVEL": "WARNING"}
        env.update(CELERY_BROKER_URL="memory://")
        browse(env, args.text)
        return
    url = recreate_database(base, args.database)
    env = {**os.environ, "DATABASE_URL": url, "CELERY_BROKER_URL": "memory://", "LOG_LEVEL": "WARNING"}
    # As installed, Python keeps compiled modules; with PYTHONDONTWRITEBYTECODE every CLI start would
    # compile Django and the project again (seconds), which is not the import's time.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    manage(env, "migrate", "-v0")
    manage(
        env,
        "shell",
        "-c",
        "from projects.models import Project; Project.objects.create(name='Bench', slug='bench')",
    )
    work = Path(tempfile.mkdtemp(prefix="concord-bench-"))
    try:
        data = work / "dialogs.jsonl"
        size = generate(data, args.items, text=args.text)
        print(f"generated {args.items:,} dialogs x 6 turns ({args.text} text): {size / 1e6:.1f} MB JSONL")
        with ServerCpu(base, args.database) as server:
            seconds, rss, output, cpu = timed_import(env, data)
        print(f"CLI: {output}")
        rows_file = work / "rows.copy"
        count = export_rows(url, rows_file)
        assert count == args.items, f"imported {count} rows, expected {args.items}"
        with ServerCpu(base, args.database) as copy_server:
            copy_seconds = timed_copy(url, rows_file)
        rate, copy_rate = args.items / seconds, args.items / copy_seconds
        print(f"import_dataset CLI : {seconds:7.2f} s wall  {rate:9,.0f} items/s  peak RSS {rss:6.1f} MB")
        print(
            f"  CPU: importer {cpu:6.2f} s, PostgreSQL {server.seconds:6.2f} s; COPY alone: PostgreSQL "
            f"{copy_server.seconds:6.2f} s; load average {os.getloadavg()[0]:.1f}"
        )
        print(
            f"PostgreSQL COPY    : {copy_seconds:7.2f} s       {copy_rate:9,.0f} items/s"
            "  (same rows, same table)"
        )
        print(
            f"ratio import/COPY  : {rate / copy_rate:.2f}  (target >= 0.50)   peak RSS target < 300 MB: "
            f"{'met' if rss < 300 else 'MISSED'}"
        )
        if args.browse:
            # Autovacuum takes up a large load within a minute (insert threshold): its pages' visibility and
            # hint bits set, the state people browse in. Done here, untimed, so it does not run meanwhile.
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM datasets_item")
            browse(env, args.text)
    finally:
        if not args.keep:
            for path in work.iterdir():
                path.unlink()
            work.rmdir()
            with psycopg.connect(admin_url(base), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
