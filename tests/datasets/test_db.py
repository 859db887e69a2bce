"""datasets/db.py, the app's database-specific code, behaves the same on PostgreSQL and SQLite."""

import pytest
from django.db import connection, transaction

from datasets import db
from datasets.models import Item
from datasets.records import ItemRecord
from tests import factories


def records() -> list[ItemRecord]:
    return [
        ItemRecord(
            external_id="tab\tand\\slash",
            context=[{"speaker": "USER", "text": "Zeile 1\nZeile 2\r\n\tÄrger?"}],
            response={"speaker": "BOT", "text": "Kein Ärger. ☕"},
            baseline=None,
            metadata={"topic": "Café", "turns": 6, "nested": {"a": [1, 2]}},
        ),
        ItemRecord(
            external_id="plain",
            context=[],
            response={"speaker": "BOT", "text": "Hello"},
            baseline={"speaker": "BOT", "text": "Hi"},
            metadata={"topic": "greeting", "turns": "6"},
        ),
    ]


def stored(dataset) -> list[tuple]:
    return list(
        Item.objects.filter(dataset=dataset)
        .order_by("position")
        .values_list("external_id", "position", "context", "response", "baseline", "metadata", "search_text")
    )


def expected() -> list[tuple]:
    return [
        (r.external_id, n, r.context, r.response, r.baseline, r.metadata, db.search_text(r))
        for n, r in enumerate(records())
    ]


def test_a_spooled_load_stores_every_field_exactly(project, tmp_path):
    dataset = factories.make_dataset(project, items=0)
    with open(tmp_path / "spool", "w+", encoding="utf-8", newline="\n") as spool:
        for position, record in enumerate(records()):
            spool.write(db.spool_line(record, position))
        spool.seek(0)
        with transaction.atomic():
            db.load_spool(spool, dataset)
    assert stored(dataset) == expected()


@pytest.mark.postgres(reason="COPY while checking is PostgreSQL's one-pass import")
def test_copying_while_checking_stores_every_field_exactly(project):
    dataset = factories.make_dataset(project, items=0)
    with transaction.atomic(), db.item_copy(dataset.pk) as write:
        for position, record in enumerate(records()):
            write(record, position)
    assert stored(dataset) == expected()


def test_only_postgresql_loads_while_checking():
    # SQLite holds its one write lock for a whole transaction: a long import must not keep it.
    assert db.loads_while_checking() is (connection.vendor == "postgresql")


def test_refreshing_statistics_after_a_large_load_is_harmless(project):
    db.refresh_statistics(loaded=db.ANALYZE_AFTER)
    db.refresh_statistics(loaded=0)


@pytest.mark.parametrize(
    ("key", "value", "found"),
    [
        ("topic", "weather", ["d-0", "d-2"]),
        ("topic", "Weather", []),
        ("turns", "6", ["d-1", "d-3"]),  # the number 6 and the text "6"
        ("flag", "true", ["d-3"]),
        ("contains", "x", ["d-2"]),  # a key named like a lookup stays a key
        ("missing", "x", []),
    ],
)
def test_metadata_filter_matches_text_numbers_and_booleans(project, key, value, found):
    dataset = factories.make_dataset(project, items=4)
    extra = {1: {"turns": 6}, 2: {"contains": "x"}, 3: {"turns": "6", "flag": True}}
    for item in dataset.items.all():
        item.metadata |= extra.get(item.position, {})
        item.save()
    items = db.metadata_filter(dataset.items.order_by("position"), key=key, value=value)
    assert list(items.values_list("external_id", flat=True)) == found
