"""gunicorn settings for Concord: `gunicorn -c config/gunicorn.conf.py` (bin/web runs exactly that).

Read from environment variables, failing with the variable's name when one is malformed:
CONCORD_HOST / CONCORD_PORT (where to listen, default 127.0.0.1:8000), WEB_WORKERS (processes, default
2), WEB_THREADS (requests Django serves at once per process, default 8: pages mostly wait on the database),
WEB_TIMEOUT (seconds a request may take before its worker is restarted, default 120), WEB_CONNECTIONS
(connections a process holds, default 1000), WEB_HEADER_TIMEOUT (seconds a connection has to send a
request's headers, also how long an idle kept-alive connection stays open, default 10) and WEB_READ_TIMEOUT
(seconds a client may stay silent while it sends a body or reads a response, default 30).
A rating round trip costs ~27 ms of Python CPU and waits on the database in between, so one process per core
with a few requests each keeps both busy (bench/rating_http.py; 3 x 6 and 4 x 4 were no faster on 2 cores).

Connections are gevent greenlets and Django only sees whole requests (config/web_server.py), so slow clients
cost memory, not the threads that serve everyone else. gevent patches the standard library here, before
Django, psycopg (which then waits cooperatively) or redis are imported by preload_app.
"""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
from typing import Any  # noqa: E402


def _number(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise SystemExit(f"{name} must be a whole number of at least {minimum}, not {raw!r}")
    return int(raw)


bind = f"{os.environ.get('CONCORD_HOST') or '127.0.0.1'}:{_number('CONCORD_PORT', 8000)}"
workers = _number("WEB_WORKERS", 2)
worker_class = "config.web_server.TimeoutGeventWorker"
worker_connections = _number("WEB_CONNECTIONS", 1000)
# gunicorn's gevent worker reads each request's line and headers under a gevent.Timeout of `keepalive`.
keepalive = _number("WEB_HEADER_TIMEOUT", 10)
timeout = _number("WEB_TIMEOUT", 120)
graceful_timeout = 30
wsgi_app = f"config.web_server:buffered_django(slots={_number('WEB_THREADS', 8)})"
# Each request runs in its own greenlet, which never serves another: a connection kept for later would
# only wait for the garbage collector. So each request closes its own SQLite connection, and PostgreSQL's
# come from a pool of WEB_THREADS per process (connecting anew for each request cost a third of the
# throughput of bench/rating_http.py).
os.environ["DATABASE_CONN_MAX_AGE"] = "0"
os.environ["DATABASE_POOL_SIZE"] = str(_number("WEB_THREADS", 8))

_read_timeout = _number("WEB_READ_TIMEOUT", 30)
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
# Load Django once in the master, so a broken setting stops start-up instead of every worker in turn.
preload_app = True
# No runtime control socket: several servers on one machine would share its one default path.
control_socket_disable = True


def post_fork(server: object, worker: Any) -> None:
    worker.read_timeout = float(_read_timeout)
