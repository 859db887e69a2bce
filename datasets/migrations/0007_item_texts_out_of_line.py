"""PostgreSQL only: an item's dialog (context, response, baseline) is kept out of line, its search columns in
the row (issue 12).

A search that the words index cannot narrow (a phrase of common words, the count of a frequent phrase) reads
every row of the dataset. With the dialog in the row, a six-turn item took ~4 KB of its 8 KB page (two rows a
page, 373 MB for 100k items); the search reads only search_text and search_words, so the dialog's JSON is
moved to the TOAST table, uncompressed, once a row passes 2 KB, and the search columns stay in the row
(compressed with lz4 where the row is still too long): four rows a page, half the pages to read. A page of the
item browser fetches the dialogs of the 50 items it shows. Rows already stored keep their layout until
rewritten. Replaces 0006's toast_tuple_target = 8160 (rows were kept uncompressed to spare pglz's CPU during
an import; nothing is compressed with pglz here either).
"""

from django.db import migrations

OUT_OF_LINE = ("context", "response", "baseline")
IN_ROW = ("search_text", "search_words", "metadata")


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE datasets_item RESET (toast_tuple_target)")
    for column in OUT_OF_LINE:
        schema_editor.execute(f"ALTER TABLE datasets_item ALTER {column} SET STORAGE EXTERNAL")
    for column in IN_ROW:
        schema_editor.execute(f"ALTER TABLE datasets_item ALTER {column} SET STORAGE MAIN")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        (lz4,) = cursor.fetchone()
    if lz4:  # a server built without lz4 keeps pglz for the rare row that is still too long
        for column in IN_ROW[:2]:
            schema_editor.execute(f"ALTER TABLE datasets_item ALTER {column} SET COMPRESSION lz4")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for column in OUT_OF_LINE + IN_ROW:
        schema_editor.execute(f"ALTER TABLE datasets_item ALTER {column} SET STORAGE EXTENDED")
    for column in IN_ROW[:2]:
        schema_editor.execute(f"ALTER TABLE datasets_item ALTER {column} SET COMPRESSION DEFAULT")
    schema_editor.execute("ALTER TABLE datasets_item SET (toast_tuple_target = 8160)")


class Migration(migrations.Migration):
    dependencies = [("datasets", "0006_item_rows_uncompressed")]

    operations = [migrations.RunPython(forward, backward)]
