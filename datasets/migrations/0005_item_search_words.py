"""PostgreSQL only: the item browser searches a GIN index of each item's words instead of a trigram index
of its whole text (see datasets/search.py: the trigram index made most of a large import's time).

Adds datasets_item.search_words (tsvector), fills it for the items already there, indexes it and drops
the trigram index. SQLite has neither and keeps scanning search_text.
"""

from django.db import migrations

from datasets.search import search_words

BATCH = 2000


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE datasets_item ADD COLUMN IF NOT EXISTS search_words tsvector")
    Item = apps.get_model("datasets", "Item")
    last = 0
    while True:
        rows = list(
            Item.objects.filter(pk__gt=last).order_by("pk").values_list("pk", "search_text")[:BATCH]
        )
        if not rows:
            break
        with schema_editor.connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE datasets_item SET search_words = %s::tsvector WHERE id = %s",
                [(search_words(text), pk) for pk, text in rows],
            )
        last = rows[-1][0]
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS item_search_words ON datasets_item USING gin (search_words)"
    )
    schema_editor.execute("DROP INDEX IF EXISTS item_search_text_trgm")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS item_search_text_trgm ON datasets_item USING gin (search_text gin_trgm_ops)"
    )
    schema_editor.execute("DROP INDEX IF EXISTS item_search_words")
    schema_editor.execute("ALTER TABLE datasets_item DROP COLUMN IF EXISTS search_words")


class Migration(migrations.Migration):
    dependencies = [("datasets", "0004_upload_job_heartbeat")]

    operations = [migrations.RunPython(forward, backward)]
