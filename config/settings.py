"""Concord's one settings module, read from environment variables.

Every variable is optional. Unset, Concord runs on an embedded default: SQLite in var/ and a
Celery broker kept in files under var/broker, so `bin/concord` needs no server. A malformed
value stops start-up with an error that names the variable.
"""

import base64
import os
import re
import ssl
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONCORD_VAR_DIR") or BASE_DIR / "var")


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false (1/0, yes/no, on/off), not {raw!r}")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_choice(name: str, default: str, *, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return raw


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


def env_url(name: str, default: str, *, schemes: set[str]) -> str:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    parsed = urlparse(raw)
    if parsed.scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name} must be a URL starting with one of {sorted(schemes)}, not {raw!r}"
        )
    return raw


def sqlite_database(path: Path) -> dict:
    """SQLite as the embedded default runs it, for var/concord.sqlite3 and for a sqlite:// DATABASE_URL."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            # WAL lets the web process read while the worker writes; IMMEDIATE takes the
            # write lock at BEGIN so two writers wait instead of failing mid-transaction.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        # A file rather than Django's in-memory default, so that Celery worker processes started by
        # the tests open the same test database.
        "TEST": {"NAME": str(path.with_name(env_str("CONCORD_TEST_DB", f"test_{path.name}")))},
    }


def database_from_env() -> dict:
    raw = os.environ.get("DATABASE_URL", "").strip()
    if not raw:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return sqlite_database(VAR_DIR / "concord.sqlite3")
    scheme = urlparse(raw).scheme
    if scheme not in {"postgres", "postgresql", "sqlite"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must start with postgres://, postgresql:// or sqlite://, not {raw!r}"
        )
    try:
        config: dict = dict(dj_database_url.parse(raw, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60)))
    except Exception as error:  # dj-database-url raises several types for bad URLs
        raise ImproperlyConfigured(f"DATABASE_URL is malformed: {error}") from None
    if config["ENGINE"].endswith("sqlite3"):
        if config["NAME"] in {"", ":memory:"}:
            raise ImproperlyConfigured(
                f"DATABASE_URL must name an SQLite file (sqlite:///path/to/file), not {raw!r}"
            )
        return sqlite_database(Path(config["NAME"]))
    if config["ENGINE"].endswith("postgresql"):
        # Each tester (and xdist worker) keeps its own test database: test_<database>, or CONCORD_TEST_DB.
        config["TEST"] = {"NAME": env_str("CONCORD_TEST_DB", f"test_{config['NAME']}")}
        # The web server (config/gunicorn.conf.py) serves each request in a greenlet of its own, which never
        # serves another: its connections are lent by a pool of this many per process instead of kept.
        pool_size = env_int("DATABASE_POOL_SIZE", 0, minimum=0)
        if pool_size:
            config["CONN_MAX_AGE"] = 0
            config.setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": pool_size}
    return config


SECRET_KEY = env_str("SECRET_KEY", "concord-insecure-development-key-change-me")
DEBUG = env_bool("DEBUG", True)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# A refused rating submit gets its form back with what was typed; other pages get Django's page.
CSRF_FAILURE_VIEW = "rating.views.csrf_failure"
if not DEBUG and SECRET_KEY.startswith("concord-insecure"):
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "axes",
    "projects",
    "rubrics",
    "datasets",
    "evaluations",
    "rating",
    "judges",
    "agreement",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

DATABASES = {"default": database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "project_list"
LOGOUT_REDIRECT_URL = "login"

# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT failed logins for one username from one address,
# that pair is locked for LOGIN_LOCKOUT_MINUTES after its last attempt; staff can unlock it in the admin
# (Access attempts). A success resets the count. Behind a proxy every client has the proxy's address, so
# the lock then holds per username.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "config.lockout.login_locked"
AXES_VERBOSE = False

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# WhiteNoise serves the collected files (bin/concord runs collectstatic) under gunicorn; with DEBUG off they
# get hashed names and compressed copies, so browsers may cache them for good.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_AUTOREFRESH = DEBUG  # fixed at start-up: the test runner turns DEBUG off later

# With DEBUG off, HTTPS is assumed: HSTS, redirects to https and Secure cookies. Behind a proxy that ends
# TLS, set SECURE_PROXY_SSL_HEADER=true (it must set X-Forwarded-Proto) or SECURE_SSL_REDIRECT=false.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
# Pages load scripts, styles, images and fonts from Concord alone and run no inline script, so an injected
# <script> or on...= attribute does nothing. Style attributes stay allowed (not <style> elements): the
# progress bars' and charts' widths are computed on the server. base.html turns off htmx's own inline
# <style>. Enforced with DEBUG off; tests/browser/test_content_security_policy_in_browser.py checks the pages.
CONCORD_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "style-src-attr": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
SECURE_CSP = {} if DEBUG else CONCORD_CSP

# The demo project and its users with the published password: only when asked for, or in debug
# (bin/concord reads it; checked here so that a malformed value stops start-up).
CONCORD_DEMO = env_bool("CONCORD_DEMO", DEBUG)

# Who may create projects: "staff" (is_staff users; they then give access through membership) or "everyone".
CONCORD_PROJECT_CREATORS = env_choice("CONCORD_PROJECT_CREATORS", "staff", choices=("staff", "everyone"))

# Uploads above this many bytes are refused before they are read whole.
CONCORD_MAX_UPLOAD_BYTES = env_int("CONCORD_MAX_UPLOAD_BYTES", 512 * 1024 * 1024, minimum=1)
# A running upload job with a heartbeat older than this lost its worker: a redelivered message takes it over.
UPLOAD_STALE_SECONDS = env_int("UPLOAD_STALE_SECONDS", 120, minimum=1)
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
DATA_UPLOAD_MAX_NUMBER_FIELDS = 10_000

# Celery: results live in our own tables, so there is no result backend.
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL", "filesystem://", schemes={"redis", "rediss", "filesystem", "memory", "amqp"}
)
if CELERY_BROKER_URL == "filesystem://":
    BROKER_DIR = VAR_DIR / "broker"
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Tasks go to this queue and workers take from it; installations (or test processes) sharing one broker
# keep apart by naming their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("CELERY_WORKER_PREFETCH_MULTIPLIER", 4, minimum=1)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The worker's memory (its data and heap, RLIMIT_DATA, set when it starts: config.celery): a task that asks
# for more gets a MemoryError instead of the kernel's out-of-memory killer picking a process of the
# machine. 0: no limit. With a prefork pool, a child above it after a task is also replaced (in KB).
WORKER_MEMORY_LIMIT_MB = env_int("WORKER_MEMORY_LIMIT_MB", 2048, minimum=0)
CELERY_WORKER_MAX_MEMORY_PER_CHILD = WORKER_MEMORY_LIMIT_MB * 1024 or None
# A worker waits for a broker that is down (at start or after losing it) for as long as it takes, rather
# than giving up after Celery's 100 attempts. (A Redis restart can still end it in kombu's redis transport,
# closing a channel whose connection is gone; bin/concord then starts it again, see README.)
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None

# Redis for cross-worker state (rate limits). Defaults to the broker when that is Redis.
REDIS_URL = env_url(
    "REDIS_URL",
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else "",
    schemes={"redis", "rediss"},
)

# LLM judges. The API key itself is never in settings: each judge names the variable.
LLM_DEFAULT_BASE_URL = env_url("LLM_DEFAULT_BASE_URL", "https://api.openai.com/v1", schemes={"http", "https"})
LLM_REQUEST_TIMEOUT = env_float("LLM_REQUEST_TIMEOUT", 60.0, minimum=0.1)
LLM_MAX_ATTEMPTS = env_int("LLM_MAX_ATTEMPTS", 6, minimum=1)
# A running judge run whose lanes have not reported for this long is taken over by a starting worker.
JUDGE_STALE_SECONDS = env_int("JUDGE_STALE_SECONDS", 180, minimum=1)
# Queued judge work no worker has taken for this long is named on the run and evaluation pages.
JUDGE_WORKER_WAIT_SECONDS = env_int("JUDGE_WORKER_WAIT_SECONDS", 120, minimum=1)
# Seconds between two looks at a batch run's batches (OpenAI's Batch API: up to 24 h per batch).
JUDGE_BATCH_POLL_SECONDS = env_float("JUDGE_BATCH_POLL_SECONDS", 30.0, minimum=0.05)
# Requests per batch input file: OpenAI's limit is 50,000 requests and 200 MB.
JUDGE_BATCH_MAX_REQUESTS = env_int("JUDGE_BATCH_MAX_REQUESTS", 50_000, minimum=1)

# Judge credentials and endpoints. A judge's key is either one of the server credentials the operator
# declares here (names of environment variables; no other variable is ever read for a judge) or a key a
# researcher pasted, stored encrypted with CONCORD_ENCRYPTION_KEY (Fernet keys, comma-separated: the first
# encrypts, all decrypt, so a new key goes first and the old one stays until keys are re-saved).
CONCORD_OWN_SECRETS = {
    "SECRET_KEY",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "REDIS_URL",
    "CONCORD_ENCRYPTION_KEY",
}


def env_credentials(name: str) -> dict[str, list[str]]:
    """NAME@host[:port] entries: each server credential with the hosts its key may be sent to (a name
    repeated with another host adds that host). A key bound to no host would go wherever a researcher
    points a judge, their own server included: a bare name stops start-up."""
    declared: dict[str, list[str]] = {}
    for position, entry in enumerate(env_list(name, []), start=1):
        variable, at, host = entry.partition("@")
        variable = variable.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
            raise ImproperlyConfigured(
                f"{name}: entry {position} does not start with an environment variable name (letters, "
                "digits, underscores)"
            )
        if variable in CONCORD_OWN_SECRETS:
            raise ImproperlyConfigured(
                f"{name}: {variable} is one of Concord's own secrets, never a judge key"
            )
        parsed = urlsplit("//" + host.strip())
        try:
            parsed.port  # noqa: B018 -- raises on a port that is not a number
        except ValueError:
            parsed = urlsplit("//")
        if not at or not parsed.hostname or parsed.path or parsed.username or parsed.password:
            raise ImproperlyConfigured(
                f"{name}: entry {position} ({variable}) names no host its key may be sent to: write "
                f"{variable}@api.openai.com (or @host:port; one entry per host), so that no judge can send "
                "it to a server of its own"
            )
        declared.setdefault(variable, []).append(parsed.netloc.lower())
    return declared


def env_fernet_keys(name: str) -> list[str]:
    keys = env_list(name, [])
    for position, key in enumerate(keys, start=1):
        try:
            if len(base64.urlsafe_b64decode(key.encode())) != 32:
                raise ValueError
        except ValueError:
            # The value itself is never repeated: it is a secret.
            raise ImproperlyConfigured(
                f"{name}: key {position} is not a Fernet key (32 url-safe base64 bytes); make one with "
                "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
            ) from None
    return keys


def env_ca_bundle(name: str) -> str:
    """A PEM file of certificate authorities, checked now: a wrong path or file stops start-up, not a run."""
    path = env_str(name).strip()
    if not path:
        return ""
    try:
        ssl.create_default_context(cafile=path)
    except FileNotFoundError:
        raise ImproperlyConfigured(f"{name}: no file at {path}") from None
    except (OSError, ssl.SSLError) as error:
        raise ImproperlyConfigured(
            f"{name}: {path} is not a readable PEM file of CA certificates ({error.strerror or error})"
        ) from None
    return path


CONCORD_JUDGE_CREDENTIALS = env_credentials("CONCORD_JUDGE_CREDENTIALS")
CONCORD_ENCRYPTION_KEY = env_fernet_keys("CONCORD_ENCRYPTION_KEY")
# Loopback and private-network endpoints (vLLM or Ollama in the lab, the demo's simulated model); link-local
# and cloud metadata addresses are refused whatever this says.
CONCORD_JUDGE_ALLOW_PRIVATE = env_bool("CONCORD_JUDGE_ALLOW_PRIVATE", False)
# Certificate authorities (the lab's own) that judges' https endpoints may be signed by, besides public ones.
CONCORD_JUDGE_CA_BUNDLE = env_ca_bundle("CONCORD_JUDGE_CA_BUNDLE")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # The openai client's HTTP layer logs every request at INFO.
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpx2", "httpcore", "openai")},
}

# Agreement reports are priced before they start (agreement.cost: memory and time from each rubric's
# people, pairs of people, items and resamples). One estimated to take longer than AGREEMENT_INLINE_SECONDS
# is computed by a Celery task while the page shows progress; one above AGREEMENT_MAX_BYTES (peak memory of
# the process) or AGREEMENT_MAX_SECONDS is refused, saying what to reduce. A task's claim lapses after
# AGREEMENT_CLAIM_SECONDS (keep it above AGREEMENT_MAX_SECONDS).
AGREEMENT_INLINE_SECONDS = env_float("AGREEMENT_INLINE_SECONDS", 1.0)
AGREEMENT_MAX_BYTES = env_int("AGREEMENT_MAX_BYTES", 1_000_000_000, minimum=1)
AGREEMENT_MAX_SECONDS = env_float("AGREEMENT_MAX_SECONDS", 600.0)
AGREEMENT_CLAIM_SECONDS = env_int("AGREEMENT_CLAIM_SECONDS", 900, minimum=1)
