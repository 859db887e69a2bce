"""PostgreSQL only: keep an item's row in the table page, uncompressed, up to 8 KB (issue 12).

By default PostgreSQL compresses (pglz) a row's largest values once the row passes 2 KB, which a six-turn
dialog with its search text and words does: ~30% of the server's CPU during a large import. Rows stored
as they are also make the item browser's searches cheaper: checking the words of 10,000 items no longer
reads and decompresses each one. The table takes ~30% more disk; rows over 8 KB are still compressed.
"""

from django.db import migrations


def run(statement):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [("datasets", "0005_item_search_words")]

    operations = [
        migrations.RunPython(
            run("ALTER TABLE datasets_item SET (toast_tuple_target = 8160)"),
            run("ALTER TABLE datasets_item RESET (toast_tuple_target)"),
        )
    ]
