"""Persona fixtures shared by every test: a researcher, an annotator and an outsider of one project."""

import pytest

from tests import factories


def pytest_configure(config):
    from tests.workers import use_own_queue

    use_own_queue()


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `postgres(reason=...)` when the suite runs on another database, saying why."""
    from django.db import connection

    _serialized_rollback_first(items)

    if connection.vendor == "postgresql":
        return
    for item in items:
        marker = item.get_closest_marker("postgres")
        if marker is not None:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))


def _serialized_rollback_first(items) -> None:
    """Run the transactional tests that restore the migrated rows (serialized_rollback) before the other
    transactional tests. Those flush the database and let post_migrate create content types again under
    new ids, which the restore then collides with; pytest-xdist's order made that happen."""

    def serialized(item) -> bool:
        marker = item.get_closest_marker("django_db")
        return bool(marker and marker.kwargs.get("serialized_rollback"))

    def transactional(item) -> bool:
        marker = item.get_closest_marker("django_db")
        fixtures = set(getattr(item, "fixturenames", ()))
        return bool(marker and marker.kwargs.get("transaction")) or bool(
            {"transactional_db", "live_server"} & fixtures
        )

    first = [item for item in items if serialized(item)]
    if not first:
        return
    rest = [item for item in items if not serialized(item)]
    start = next((n for n, item in enumerate(rest) if transactional(item)), len(rest))
    items[:] = rest[:start] + first + rest[start:]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and before it is dropped, an end to the sessions this process left open.
    The judge's claim and finish threads (judges/claims.py, judges/finishing.py) keep their connection for
    the next run, as they do in a worker process; in the test process their last run is over, and PostgreSQL
    refuses to drop a database that sessions are still using."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Real hashing costs about a second per user; tests make many users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def researcher(db):
    return factories.make_user("rita")


@pytest.fixture
def annotator(db):
    return factories.make_user("anna")


@pytest.fixture
def outsider(db):
    return factories.make_user("otto")


@pytest.fixture
def project(researcher, annotator):
    return factories.make_project(name="Demo study", researchers=[researcher], annotators=[annotator])


@pytest.fixture
def researcher_client(client, researcher):
    client.force_login(researcher)
    return client


@pytest.fixture
def annotator_client(client, annotator):
    client.force_login(annotator)
    return client


@pytest.fixture
def outsider_client(client, outsider):
    client.force_login(outsider)
    return client


@pytest.fixture
def celery_worker_process(transactional_db, settings):
    """A real Celery worker process on the test database and the test broker.

    Tests that use it must commit their data (transactional_db) so the worker can see it.
    Yields the Popen; the worker is terminated afterwards. Extra `-c`/`--pool` can be set by
    parametrising `worker_options` (a list of CLI arguments).
    """
    from tests.workers import start_worker, stop_worker

    process = start_worker()
    try:
        yield process
    finally:
        stop_worker(process)
