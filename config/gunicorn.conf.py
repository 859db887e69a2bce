"""gunicorn settings for Concord: `gunicorn -c config/gunicorn.conf.py` (bin/web runs exactly that).

Read from environment variables, failing with the variable's name when one is malformed:
CONCORD_HOST / CONCORD_PORT (where to listen, default 127.0.0.1:8000), WEB_WORKERS (processes, default
2), WEB_THREADS (threads per process, default 8: pages mostly wait on the database), WEB_TIMEOUT
(seconds a request may take before its worker is restarted, default 120: large uploads stream in).
A rating round trip costs ~27 ms of Python CPU and waits on the database in between, so one process per core
with a few threads each keeps both busy (bench/rating_http.py; 3 x 6 and 4 x 4 were no faster on 2 cores).
"""

import os


def _number(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise SystemExit(f"{name} must be a whole number of at least {minimum}, not {raw!r}")
    return int(raw)


bind = f"{os.environ.get('CONCORD_HOST') or '127.0.0.1'}:{_number('CONCORD_PORT', 8000)}"
workers = _number("WEB_WORKERS", 2)
threads = _number("WEB_THREADS", 8)
worker_class = "gthread"
timeout = _number("WEB_TIMEOUT", 120)
graceful_timeout = 30
wsgi_app = "config.wsgi:application"
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
# Load Django once in the master, so a broken setting stops start-up instead of every worker in turn.
preload_app = True
# No runtime control socket: several servers on one machine would share its one default path.
control_socket_disable = True
