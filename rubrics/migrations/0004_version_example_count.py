import importlib

from django.db import migrations, models

# SQLite adds a NOT NULL column by rebuilding the table, which drops its triggers: the one that freezes rated
# versions (evaluations 0002) is made again after the column is added. PostgreSQL keeps it.
frozen = importlib.import_module("evaluations.migrations.0002_frozen_rubric_versions")


def refreeze(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(frozen.SQLITE_DOWN, params=None)
        schema_editor.execute(frozen.SQLITE_UP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("rubrics", "0003_builtin_rubrics"),
        ("evaluations", "0002_frozen_rubric_versions"),
    ]

    operations = [
        migrations.AddField(
            model_name="rubricversion",
            name="example_count",
            field=models.PositiveIntegerField(
                default=0, help_text="Items from disagreements its prompt shows as examples (agreement.examples)."
            ),
        ),
        migrations.RunPython(refreeze, migrations.RunPython.noop),
    ]
