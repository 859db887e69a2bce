"""Indexes the item browser needs at 100k items, on PostgreSQL only (SQLite scans instead).

- a trigram GIN index on Item.search_text, so `search_text LIKE '%words%'` does not scan the table;
- a jsonb_path_ops GIN index on Item.metadata, so `metadata @> '{"topic": "x"}'` filters by index.
"""

from django.db import migrations

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS item_search_text_trgm ON datasets_item USING gin (search_text gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS item_metadata_gin ON datasets_item USING gin (metadata jsonb_path_ops)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS item_metadata_gin",
    "DROP INDEX IF EXISTS item_search_text_trgm",
]


def run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [("datasets", "0002_import_support")]

    operations = [migrations.RunPython(run(FORWARD), run(BACKWARD))]
