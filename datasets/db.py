"""What the datasets app does differently on PostgreSQL and on SQLite; nothing else in it asks which.

PostgreSQL loads items with COPY, refreshes the planner's statistics after a large load and filters
metadata by jsonb containment (GIN index); SQLite inserts with bulk_create and filters metadata by
key. Both store the same rows and find the same items.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Queue
from typing import IO, TYPE_CHECKING, Any

import orjson
from django.db import connection, transaction
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTransform
from psycopg import Cursor
from psycopg.copy import QueuedLibpqWriter

from .models import Dataset, Item
from .search import UNINDEXED, is_one_word, search_words, words_query

if TYPE_CHECKING:
    from .records import ItemRecord

BULK_BATCH = 2000
COPY_STATEMENT = (
    "COPY datasets_item (dataset_id, external_id, position, context, response, baseline, metadata, "
    "search_text, search_words) FROM STDIN"
)
COPY_BATCH_CHARS = 1 << 20
ANALYZE_AFTER = 10_000  # items; a bulk load this large makes the table's statistics stale
COPY_QUEUE_CHUNKS = 16  # of at most 128 KiB each
PROBE_ITEMS = 5_000  # per page: see page_probe


def _postgresql() -> bool:
    return connection.vendor == "postgresql"


def search_text(record: ItemRecord | Item) -> str:
    """What the item browser searches: the id and every text, lower-cased."""
    parts = [record.external_id]
    parts.extend(turn["text"] for turn in record.context)
    parts.append(record.response["text"])
    if record.baseline:
        parts.append(record.baseline["text"])
    return "\n".join(parts).lower()


# ---------------------------------------------------------------- loading items


def loads_while_checking() -> bool:
    """Whether an import may write rows inside its transaction while later rows are still checked.

    PostgreSQL: yes, COPY overlaps with the checking and other writers are not held up. SQLite: no,
    its transactions take the one write lock at BEGIN, so a long one would stop every other writer
    (the rating pages, the workers): rows are checked into a spool first and written quickly.
    """
    return _postgresql()


@contextmanager
def item_copy(dataset_id: int) -> Iterator[Callable[[ItemRecord, int], None]]:
    """PostgreSQL: a COPY into datasets_item for `dataset_id`; yields write(record, position). Rows
    are sent in ~1 MB pieces from a thread (psycopg's queued writer) and the rest on a clean exit."""
    prefix = f"{dataset_id}\t"
    batch: list[str] = []
    size = 0

    def write(record: ItemRecord, position: int) -> None:
        nonlocal size
        line = _copy_line(record, position)
        batch.extend((prefix, line))
        size += len(line)
        if size > COPY_BATCH_CHARS:
            copy.write("".join(batch))
            batch.clear()
            size = 0

    with connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy(COPY_STATEMENT, writer=_BoundedQueuedWriter(raw)) as copy:
            yield write
            copy.write("".join(batch))


class _BoundedQueuedWriter(QueuedLibpqWriter):
    """psycopg's queued writer sends COPY data from a thread, so checking the next items overlaps with the
    server loading the last ones. Its queue holds up to 1024 chunks (~128 MB) when the server is the
    slower side; a short queue keeps the server just as busy with memory that does not grow."""

    def __init__(self, cursor: Cursor[Any]):
        super().__init__(cursor)
        self._queue = Queue(maxsize=COPY_QUEUE_CHUNKS)  # type: ignore[assignment]  # same class at runtime


def spool_line(record: ItemRecord, position: int) -> str:
    """One checked item as a line of the spool file `load_spool` reads: COPY text or JSON."""
    return _copy_line(record, position) if _postgresql() else _json_line(record, position)


def load_spool(spool: IO[str], dataset: Dataset) -> None:
    """Insert the spool's items into `dataset`: COPY on PostgreSQL, bulk_create elsewhere."""
    if _postgresql():
        _copy_into(spool, dataset.pk)
    else:
        _bulk_create(spool, dataset)


def refresh_statistics(*, loaded: int) -> None:
    """After a large load on PostgreSQL, fresh statistics let the planner choose between the words, the
    metadata and the position index at once, rather than after autovacuum gets round to the table. Only
    the columns the item browser filters on: the texts' statistics help no plan and took half the time.
    SQLite's planner needs nothing here."""
    if loaded >= ANALYZE_AFTER and _postgresql():
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE datasets_item (dataset_id, position, metadata, search_words)")


def _copy_escape(value: str) -> str:
    # COPY text format: backslash, newline, carriage return and tab are escaped.
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "\n" in value:
        value = value.replace("\n", "\\n")
    if "\r" in value:
        value = value.replace("\r", "\\r")
    if "\t" in value:
        value = value.replace("\t", "\\t")
    return value


_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _json_field(value: Any) -> str:
    """`value` as JSON in a COPY text field. orjson escapes every control character, so of COPY's
    special characters only the backslash can occur (in JSON's own escapes)."""
    return _dumps(value).replace("\\", "\\\\")


def _dumps(value: Any) -> str:
    """JSON text of `value` as json.dumps(ensure_ascii=False) means it, written by orjson where that is the
    same value: orjson writes NaN and infinities as null (json writes NaN, which the database then refuses
    as it did before) and refuses lone surrogates, so output with a null goes through json again."""
    try:
        text = orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _ENCODER.encode(value)
    return _ENCODER.encode(value) if "null" in text else text


def _copy_line(record: ItemRecord, position: int) -> str:
    baseline = "\\N" if record.baseline is None else _json_field(record.baseline)
    text = search_text(record)
    fields = [
        _copy_escape(record.external_id),
        str(position),
        _json_field(record.context),
        _json_field(record.response),
        baseline,
        _json_field(record.metadata),
        _copy_escape(text),
        search_words(text),  # words only: nothing COPY would escape
    ]
    return "\t".join(fields) + "\n"


def _json_line(record: ItemRecord, position: int) -> str:
    row = [record.external_id, position, record.context, record.response, record.baseline, record.metadata]
    return json.dumps(row, ensure_ascii=False) + "\n"


def _copy_into(spool: IO[str], dataset_id: int) -> None:
    prefix = f"{dataset_id}\t"
    with connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy(COPY_STATEMENT) as copy:
            batch: list[str] = []
            size = 0
            for line in spool:
                batch.append(prefix)
                batch.append(line)
                size += len(line)
                if size > COPY_BATCH_CHARS:
                    copy.write("".join(batch))
                    batch, size = [], 0
            if batch:
                copy.write("".join(batch))


def _bulk_create(spool: IO[str], dataset: Dataset) -> None:
    batch: list[Item] = []
    for line in spool:
        external_id, position, context, response, baseline, metadata = json.loads(line)
        item = Item(
            dataset=dataset,
            external_id=external_id,
            position=position,
            context=context,
            response=response,
            baseline=baseline,
            metadata=metadata,
        )
        item.search_text = search_text(item)
        batch.append(item)
        if len(batch) >= BULK_BATCH:
            Item.objects.bulk_create(batch)
            batch = []
    if batch:
        Item.objects.bulk_create(batch)


# ---------------------------------------------------------------- the item browser's metadata filter


def metadata_filter(items: QuerySet[Item], *, key: str, value: str) -> QuerySet[Item]:
    """Items whose metadata[key] is `value`, as text or as the JSON number or boolean it spells
    ('turns=6' also matches the number 6): jsonb containment on PostgreSQL, which uses the GIN index;
    the key's value elsewhere."""
    parsed = _json_scalar(value)
    if _postgresql():
        condition = Q(metadata__contains={key: value})
        if parsed is not None:
            condition |= Q(metadata__contains={key: parsed})
        return items.filter(condition)
    # KeyTransform rather than metadata__<key>, so a key named like a lookup stays a key.
    items = items.alias(meta_value=KeyTransform(key, "metadata"))
    condition = Q(meta_value=value)
    if parsed is not None:
        condition |= Q(meta_value=parsed)
    return items.filter(condition)


def page_probe(query: str, *, page: int, item_count: int) -> int | None:
    """The position below which a page of a phrase search is looked for first (then in the whole dataset), or
    None to look in the whole dataset at once.

    PostgreSQL cannot tell how many items contain a phrase (it checks the text of each item that has the
    phrase's words): depending on the sample ANALYZE took, a phrase in 1,420 of 100k items was estimated in 2
    or in 209, and with 2 its first page was found by checking and sorting the whole dataset (215-267 ms,
    bench/README.md) where walking the items in order finds it among the first 3,529 (10 ms). Looking
    among the first PROBE_ITEMS items per page first finds the page of a phrase in at least ~1% of the
    items; a rarer phrase pays that look (1-20 ms on 100k items) before the whole dataset is searched as
    before. At most a quarter of the dataset is looked at twice. One-word queries are answered by the words
    index alone, and SQLite scans in order anyway."""
    if not _postgresql() or not query or is_one_word(query.lower()):
        return None
    end = PROBE_ITEMS * page
    return end if end <= item_count // 4 else None


def capped_count(items: QuerySet[Item], cap: int) -> int:
    """How many of `items` there are, counting no further than cap + 1.

    In no order: any cap + 1 of the matches are as many as the first cap + 1 by position, and without the
    sort PostgreSQL stops reading once it has them, where in position order it found and sorted every
    match first (a phrase in half of 100k items: 41-66 instead of 183-287 ms, bench/README.md). The item
    browser counts inside `parallel_scans_priced_by_work`: a count of 1,420 matches in 100k items had
    stayed on one core (175-220 ms) that two share (127-168)."""
    return items.order_by()[: cap + 1].count()


@contextmanager
def parallel_scans_priced_by_work() -> Iterator[None]:
    """On PostgreSQL, the statements run inside are planned as if parallel workers cost nothing to start
    (one statement, for this transaction only): the item browser's filtered pages and counts. The planner
    prices a scan by the pages it reads from disk; for these searches they come from memory and checking
    each item's words and text is the work, which two workers share. Without it, once (auto)vacuum had
    emptied the words index's pending list, a phrase of common words was looked for by checking 48k
    candidates one after another on one core (230-250 ms on 100k items) instead of the whole table on two
    (127-140 ms best; bench/README.md)."""
    if not _postgresql():
        yield
        return
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('parallel_setup_cost', '0', true), "
            "set_config('parallel_tuple_cost', '0', true)"
        )
        yield


def text_matches(query: str) -> Q:
    """Items whose search_text (lower-cased) contains `query`; on PostgreSQL from the start of a word,
    narrowed first by the GIN index of the items' words (datasets/search.py)."""
    if not _postgresql():
        return Q(search_text__contains=query.lower())
    contains = Q(_contains(query.lower()))
    wanted = words_query(query)
    if wanted is None:
        return contains
    if is_one_word(query.lower()):
        return Q(_matches(f"'{query.lower()}':*")) | (Q(_matches(UNINDEXED)) & contains)
    return Q(_matches(wanted)) & contains


def _matches(tsquery: str) -> RawSQL:
    return RawSQL("search_words @@ %s::tsquery", (tsquery,), output_field=BooleanField())


def _contains(text: str) -> RawSQL:
    """search_text contains `text`. strpos decides: LIKE '%text%' tries the pattern from every character,
    strpos searches with Boyer-Moore-Horspool, and checking a frequent phrase's ~60k candidates took 183
    instead of 235 ms (bench/README.md). The LIKE after it runs only where strpos found the text (the same
    answer) and is there for the planner: its estimate of a LIKE pattern's matches keeps the plans chosen
    before (a parallel scan for a phrase of common words, which strpos's fixed estimate of a third turned
    into a walk of the whole position index)."""
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    sql = "(strpos(search_text, %s) > 0 AND search_text LIKE %s)"
    return RawSQL(sql, (text, pattern), output_field=BooleanField())


def _json_scalar(value: str) -> int | float | bool | None:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, int | float | bool) else None
