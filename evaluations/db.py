"""What the evaluations app does differently on PostgreSQL and on SQLite; nothing else in it asks which.

PostgreSQL writes imported ratings with COPY and produces the long CSV export with COPY ... TO STDOUT;
elsewhere ratings go through bulk_create and the export through the ORM's chunked iterator.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import connection

from .models import Evaluation, Rating

if TYPE_CHECKING:
    from .ratings_import import _Row

BATCH_SIZE = 5000  # rows per bulk_create, as the import batches them


def _postgresql() -> bool:
    return connection.vendor == "postgresql"


def exports_with_copy() -> bool:
    """Whether the long CSV can come from PostgreSQL's COPY (`exports.long_csv_copy`), which formats the
    same text as the ORM path (`exports.long_csv`) several times faster."""
    return _postgresql()


NEW_RATING_COLUMNS = (
    "evaluation_id", "item_id", "rubric_version_id", "rater_id", "value", "explanation", "parse_failed",
    "raw_output", "side_shown", "details", "created", "updated",
)  # fmt: skip
IMPORTED_DETAILS = {"imported": True}


def insert_imported_ratings(evaluation: Evaluation, new: list[tuple[_Row, int]], now: datetime) -> None:
    """Insert an import's new ratings: COPY on PostgreSQL (several times faster), bulk_create elsewhere."""
    if not new:
        return
    if not _postgresql():
        Rating.objects.bulk_create(
            [
                Rating(
                    evaluation=evaluation,
                    item_id=row.item_id,
                    rubric_version=row.version,
                    rater_id=rater_id,
                    value=row.value,
                    explanation=row.explanation,
                    parse_failed=row.parse_failed,
                    side_shown=row.side_shown,
                    details=IMPORTED_DETAILS,
                )
                for row, rater_id in new
            ],
            batch_size=BATCH_SIZE,
        )
        return
    details = json.dumps(IMPORTED_DETAILS)
    sql = f"COPY evaluations_rating ({', '.join(NEW_RATING_COLUMNS)}) FROM STDIN"
    # wrap_database_errors: the raw psycopg cursor raises psycopg errors; Django's are caught upstream.
    with connection.wrap_database_errors, connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row, rater_id in new:
            copy.write_row((
                evaluation.pk, row.item_id, row.version.pk, rater_id, row.value, row.explanation,
                row.parse_failed, "", row.side_shown, details, now, now,
            ))  # fmt: skip
