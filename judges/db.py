"""What the judges app does differently on PostgreSQL and on SQLite; nothing else in it asks which."""

from django.db import connection


def claims_in_one_statement() -> bool:
    """Whether a lane claims its next call with one UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING that
    also reads the item (PostgreSQL: lanes never wait for each other), rather than a select and then an
    update that checks the row count (SQLite, which has one writer at a time and no SKIP LOCKED)."""
    return connection.vendor == "postgresql"


def writes_in_one_statement() -> bool:
    """Whether finished calls and their new ratings are written one statement for many rows (PostgreSQL:
    UPDATE ... FROM VALUES and INSERT ... ON CONFLICT DO NOTHING RETURNING), rather than row by row."""
    return connection.vendor == "postgresql"


def helper_threads_see_our_writes() -> bool:
    """Whether rows this connection wrote are visible to a helper thread's own connection. Not inside an
    open transaction (a test wrapped in one), where claiming ahead and finishing stay on this thread."""
    return not connection.in_atomic_block
