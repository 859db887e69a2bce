"""Settings come from the environment and fail loudly, naming the variable, when a value is malformed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def boot(tmp_path: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    """`manage.py check` (or `command`) with only the given variables set, var/ in `tmp_path`."""
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "CONCORD_TEST_DB"}
    }
    environment.update(CONCORD_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", *(command or ["check"])],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql-ish:/nowhere"),
        ("CELERY_BROKER_URL", "carrier-pigeon://coop"),
        ("DEBUG", "maybe"),
        ("LLM_REQUEST_TIMEOUT", "soon"),
        ("LLM_MAX_ATTEMPTS", "-3"),
        ("CONCORD_MAX_UPLOAD_BYTES", "big"),
        ("REDIS_URL", "localhost:6379"),
        ("CONCORD_PROJECT_CREATORS", "admins"),
        ("CONCORD_JUDGE_CREDENTIALS", "OPENAI_API_KEY@api.openai.com,not a name@host"),
        ("CONCORD_JUDGE_CREDENTIALS", "OPENAI_API_KEY@api.openai.com,SECRET_KEY@api.openai.com"),
        ("CONCORD_JUDGE_CREDENTIALS", "OPENAI_API_KEY"),  # bound to no host: it would go anywhere
        ("CONCORD_JUDGE_CREDENTIALS", "OPENAI_API_KEY@"),
        ("CONCORD_JUDGE_CREDENTIALS", "OPENAI_API_KEY@api.openai.com/v1"),
        ("CONCORD_JUDGE_CREDENTIALS", "OPENAI_API_KEY@api.openai.com:https"),
        ("CONCORD_ENCRYPTION_KEY", "too-short"),
        ("CONCORD_JUDGE_ALLOW_PRIVATE", "perhaps"),
        ("CONCORD_JUDGE_CA_BUNDLE", "/nowhere/lab-ca.pem"),
        ("CONCORD_JUDGE_CA_BUNDLE", "/etc/hostname"),
    ],
)
def test_malformed_variable_stops_start_up_naming_it(tmp_path, name, value):
    result = boot(tmp_path, **{name: value})
    assert result.returncode != 0
    assert name in result.stderr
    assert "ImproperlyConfigured" in result.stderr


def test_debug_off_requires_a_secret_key(tmp_path):
    result = boot(tmp_path, DEBUG="false")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_unset_variables_give_the_embedded_default(tmp_path):
    result = boot(tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "broker" / "queue").is_dir()


def database_settings(tmp_path: Path, **env: str) -> dict:
    script = (
        "import json; from django.conf import settings; "
        "print(json.dumps(settings.DATABASES['default'], default=str))"
    )
    result = boot(tmp_path, "shell", "-c", script, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # after shell's "objects imported" line


def test_an_sqlite_url_runs_like_the_embedded_default_with_a_file_test_database(tmp_path):
    named = database_settings(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path}/study.sqlite3")
    embedded = database_settings(tmp_path)
    assert named["NAME"] == f"{tmp_path}/study.sqlite3"
    assert named["OPTIONS"] == embedded["OPTIONS"]
    assert named["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in named["OPTIONS"]["init_command"]
    # A file, not memory: worker processes the tests start open the same test database.
    assert named["TEST"]["NAME"] == f"{tmp_path}/test_study.sqlite3"


def test_an_sqlite_url_without_a_file_stops_start_up(tmp_path):
    result = boot(tmp_path, DATABASE_URL="sqlite://:memory:")
    assert result.returncode != 0
    assert "DATABASE_URL must name an SQLite file" in result.stderr


def test_a_malformed_encryption_key_is_named_by_position_never_repeated(tmp_path):
    good = "A" * 43 + "="
    result = boot(tmp_path, CONCORD_ENCRYPTION_KEY=f"{good},sk-this-is-not-a-fernet-key")
    assert result.returncode != 0
    assert "CONCORD_ENCRYPTION_KEY: key 2 is not a Fernet key" in result.stderr
    assert "sk-this-is-not-a-fernet-key" not in result.stderr


def test_the_web_servers_pool_size_lends_postgresql_connections_instead_of_keeping_them(tmp_path):
    url = "postgres://concord@db.internal:5432/concord"
    pooled = database_settings(tmp_path, DATABASE_URL=url, DATABASE_POOL_SIZE="8")
    assert pooled["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 8} and pooled["CONN_MAX_AGE"] == 0
    kept = database_settings(tmp_path, DATABASE_URL=url)  # the Celery workers and everything else
    assert "pool" not in kept.get("OPTIONS", {}) and kept["CONN_MAX_AGE"] == 60
