"""Label Studio 1.23.2 CE and Concord side by side, same workloads, one run, on this machine.

    .venv/bin/python bench/peers/labelstudio.py --install    # once: into bench/out/labelstudio
    .venv/bin/python bench/peers/labelstudio.py [--items 10000] [--annotators 20] [--rounds 15]
        [--workloads import,rating,export]   # BENCH_LS_DATABASE / BENCH_CONCORD_DATABASE name the databases

Label Studio runs from its own virtual environment (bench/out/, gitignored) with `label-studio start` on
127.0.0.1, on a throwaway PostgreSQL database of its own, with its outbound calls off: COLLECT_ANALYTICS=false
(usage analytics), LATEST_VERSION_CHECK=false (the PyPI version check), SENTRY_DSN and FRONTEND_SENTRY_DSN
empty (error reports). Workloads, each printed as a pair and its ratio (Label Studio / Concord):

1. import: the same N six-turn dialogs (bench/import_dataset.py's generator); Label Studio: one JSON file
   POSTed to /api/projects/<id>/import; Concord: `manage.py import_dataset` (bench/import_dataset.py);
   before each, untimed, Label Studio's database is vacuumed, analysed and checkpointed and its server left
   to go idle (`settle`), so that neither import pays for work the other (or Label Studio's start-up) left;
2. annotation round trips, the same number of concurrent annotators: Label Studio's API as its labelling
   page calls it (GET /api/projects/<id>/next, POST /api/tasks/<id>/annotations/, token auth); Concord's
   rating page over HTTP through gunicorn (bench/rating_http.py, forms with CSRF tokens);
3. CSV export: Label Studio's export of the N tasks (?exportType=CSV&download_all_tasks=true); Concord's
   `export_ratings --layout long` of N ratings (bench/export_ratings.py --items N/10 --skip-orm).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import requests

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
VENV = BENCH / "out" / "labelstudio"
VERSION = "1.23.2"
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
LS_DB = os.environ.get("BENCH_LS_DATABASE", "concord_bench_labelstudio")
CONCORD_DB = os.environ.get("BENCH_CONCORD_DATABASE", "concord_bench")  # for import_dataset.py
TOKEN = "concordbenchtoken0123456789abcdef"
LABEL_CONFIG = (
    '<View><Text name="dialog" value="$dialog"/><Rating name="rating" toName="dialog" maxRating="5"/></View>'
)
sys.path.insert(0, str(BENCH))
from benchdb import run_threads  # noqa: E402
from import_dataset import ServerCpu, generate  # noqa: E402 - the same dialogs as Concord's own import benchmark


def install() -> None:
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", f"label-studio=={VERSION}"]
    subprocess.run(pip, check=True)


def start(port: int, data_dir: Path) -> subprocess.Popen:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{LS_DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{LS_DB}"')
    server = psycopg.conninfo.conninfo_to_dict(f"{PG}/{LS_DB}")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(data_dir),
        "COLLECT_ANALYTICS": "false",
        "LATEST_VERSION_CHECK": "false",
        "SENTRY_DSN": "",
        "FRONTEND_SENTRY_DSN": "",
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
        "DJANGO_DB": "default",
        "POSTGRE_NAME": LS_DB,
        "POSTGRE_USER": str(server.get("user", "postgres")),
        "POSTGRE_PASSWORD": str(server.get("password", "")),
        "POSTGRE_HOST": str(server.get("host", "127.0.0.1")),
        "POSTGRE_PORT": str(server.get("port", "5432")),
    }
    command = [
        str(VENV / "bin" / "label-studio"), "start", "--no-browser", "--internal-host", "127.0.0.1",
        "--port", str(port), "--data-dir", str(data_dir), "--username", "bench@example.com",
        "--password", "bench-pass-123", "--user-token", TOKEN,
    ]  # fmt: skip
    log = open(data_dir / "labelstudio.log", "w")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900  # first start migrates its database: minutes on a busy machine
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"Label Studio exited ({process.returncode}); see {data_dir / 'labelstudio.log'}"
            )
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=10).ok:
                return process
        except requests.RequestException:
            pass
        time.sleep(2)
    process.terminate()
    raise SystemExit("Label Studio did not answer within 900 s")


class LabelStudio:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.headers = {"Authorization": f"Token {TOKEN}"}

    def call(self, method: str, path: str, session=None, **kwargs) -> requests.Response:
        response = (session or requests).request(
            method, f"{self.base}{path}", headers=self.headers, timeout=3600, **kwargs
        )
        response.raise_for_status()
        return response

    def project(self, overlap: int) -> int:
        body = {"title": "Bench", "label_config": LABEL_CONFIG, "maximum_annotations": overlap}
        return self.call("POST", "/api/projects/", json=body).json()["id"]

    def import_tasks(self, project: int, tasks_file: Path) -> float:
        started = time.perf_counter()
        with open(tasks_file, "rb") as source:
            self.call("POST", f"/api/projects/{project}/import", files={"file": ("tasks.json", source)})
        return time.perf_counter() - started

    def export_csv(self, project: int, output: Path) -> float:
        started = time.perf_counter()
        response = self.call(
            "GET", f"/api/projects/{project}/export?exportType=CSV&download_all_tasks=true", stream=True
        )
        with open(output, "wb") as out:
            for chunk in response.iter_content(1 << 20):
                out.write(chunk)
        return time.perf_counter() - started

    def annotate(self, project: int, *, annotators: int, rounds: int) -> dict:
        times: list[float] = []
        done: list[int] = []

        def one() -> None:
            session = requests.Session()
            for n in range(rounds):
                started = time.perf_counter()
                task = self.call("GET", f"/api/projects/{project}/next", session).json()
                result = [
                    {"from_name": "rating", "to_name": "dialog", "type": "rating",
                     "value": {"rating": 1 + (task["id"] + n) % 5}}
                ]  # fmt: skip
                self.call("POST", f"/api/tasks/{task['id']}/annotations/", session, json={"result": result})
                times.append(time.perf_counter() - started)
                done.append(task["id"])

        threads = [threading.Thread(target=one) for _ in range(annotators)]
        wall = run_threads(threads)
        ordered = sorted(times)
        return {
            "per_second": len(times) / wall,
            "p50_ms": 1000 * statistics.median(ordered),
            "p95_ms": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
            "round_trips": len(times),
        }


def process_cpu(pid: int) -> float:
    """CPU seconds used so far by a process and its descendants (threads included), from /proc."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        used[child] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    family, total = {pid}, 0.0
    for child in sorted(parents):  # children have higher ids than their parents, nearly always
        if child in family or parents[child] in family:
            family.add(child)
            total += used[child]
    return total


def settle(pid: int, *, limit: float = 120.0) -> None:
    """Finish what Label Studio left behind (its start-up, its import) before the next workload, untimed:
    a VACUUM ANALYZE of its database (else autovacuum takes up 100k new rows a minute later, in the middle
    of Concord's import, on the same 2 cores) and a CHECKPOINT (else its dirty pages are written out during
    the next import), then wait until its server is idle (under 5% of a core for a second; at most `limit`
    seconds). Concord's own import leaves the same work after its measured time."""
    started = time.monotonic()
    with psycopg.connect(f"{PG}/{LS_DB}", autocommit=True) as database:
        database.execute("VACUUM (ANALYZE)")
        database.execute("CHECKPOINT")
    vacuumed = time.monotonic() - started
    while time.monotonic() - started < limit:
        before = process_cpu(pid)
        time.sleep(1)
        if process_cpu(pid) - before < 0.05:
            break
    print(
        f"  (Label Studio's database vacuumed, analysed and checkpointed in {vacuumed:.1f} s, its server "
        f"idle after {time.monotonic() - started:.1f} s: neither counted)",
        flush=True,
    )


def as_tasks(dialogs: Path, output: Path) -> None:
    """The same dialogs as Label Studio tasks: the whole dialog as text, the id and topic kept."""
    with open(dialogs, encoding="utf-8") as source, open(output, "w", encoding="utf-8") as out:
        out.write("[")
        for n, line in enumerate(source):
            item = json.loads(line)
            text = "\n".join(f"{turn['speaker']}: {turn['text']}" for turn in item["turns"])
            task = {"dialog": text, "external_id": item["id"], "topic": item["metadata"]["topic"]}
            out.write(("," if n else "") + json.dumps(task, ensure_ascii=False))
        out.write("]")


def concord(script: str, *args: str, pattern: str) -> float:
    """Run one of Concord's benchmarks and read one figure from what it prints."""
    env = {**os.environ, "DATABASE_URL": f"{PG}/postgres"}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    found = re.search(pattern, done.stdout)
    if found is None:
        raise SystemExit(f"{script} printed no figure:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    print(f"  (Concord, {script}): {found.group(0)}", flush=True)
    for line in done.stdout.splitlines():
        if "CPU:" in line:
            print(f"  (Concord, {script}): {line.strip()}", flush=True)
    return float(found.group(1).replace(",", ""))


def pair(label: str, peer: float, ours: float, unit: str, *, higher_is_better: bool = False) -> None:
    ratio = peer / ours
    better = ratio < 1 if higher_is_better else ratio > 1
    print(
        f"{label:44s} Label Studio {peer:10.2f} {unit:4s} Concord {ours:10.2f} {unit:4s} "
        f"ratio LS/Concord {ratio:6.2f} ({'Concord' if better else 'Label Studio'} faster)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--install", action="store_true", help=f"install Label Studio {VERSION} first")
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--annotators", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument(
        "--workloads", default="import,rating,export", help="comma-separated: which of import, rating, export"
    )
    args = parser.parse_args()
    if args.install:
        install()
    if not (VENV / "bin" / "label-studio").exists():
        raise SystemExit(f"Label Studio is not installed in {VENV}: run with --install")
    work = Path(tempfile.mkdtemp(prefix="concord-peer-"))
    process = None
    try:
        dialogs, tasks = work / "dialogs.jsonl", work / "tasks.json"
        generate(dialogs, args.items)
        as_tasks(dialogs, tasks)
        print(f"{args.items:,} dialogs; starting Label Studio {VERSION} on 127.0.0.1:{args.port}", flush=True)
        process = start(args.port, work)
        peer = LabelStudio(args.port)
        project = peer.project(args.overlap)
        workloads = set(args.workloads.split(","))
        # Label Studio's import always runs: its rating and export workloads need the tasks.
        settle(process.pid)  # its start-up migrated a new database: that too is written out first
        with ServerCpu(PG, LS_DB) as ls_database:
            before = process_cpu(process.pid)
            ls_import = peer.import_tasks(project, tasks)
            ls_cpu = process_cpu(process.pid) - before
        print(
            f"  (Label Studio): import {ls_import:.2f} s wall; CPU: server {ls_cpu:.2f} s, "
            f"PostgreSQL {ls_database.seconds:.2f} s; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        settle(process.pid)
        if "import" in workloads:
            ours = concord(
                "import_dataset.py",
                f"--items={args.items}",
                f"--database={CONCORD_DB}",
                pattern=r"import_dataset CLI :\s+([\d.]+) s wall",
            )
            pair(f"import {args.items:,} dialogs", ls_import, ours, "s")
        if "rating" in workloads:
            rating(peer, project, args)
        if "export" in workloads:
            ls_export = peer.export_csv(project, work / "export.csv")
            ours = concord(
                "export_ratings.py",
                f"--items={max(1, args.items // 10)}",
                "--skip-orm",
                pattern=r"export_ratings --layout long: ([\d.]+) s",
            )
            pair(f"CSV export ({args.items:,} tasks / ratings)", ls_export, ours, "s")
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{LS_DB}" WITH (FORCE)')


def rating(peer: LabelStudio, project: int, args: argparse.Namespace) -> None:
    """Annotation round trips at the same concurrency (Label Studio needs the tasks imported first)."""
    ls_rating = peer.annotate(project, annotators=args.annotators, rounds=args.rounds)
    print(f"  (Label Studio): {ls_rating}", flush=True)
    ours = concord(
        "rating_http.py",
        f"--items={args.items}",
        f"--annotators={args.annotators}",
        f"--rounds={args.rounds}",
        f"--overlap={args.overlap}",
        pattern=r"= ([\d.]+)/s",
    )
    pair(f"annotation round trips, {args.annotators} at once", ls_rating["per_second"], ours, "/s",
         higher_is_better=True)  # fmt: skip


if __name__ == "__main__":
    main()
