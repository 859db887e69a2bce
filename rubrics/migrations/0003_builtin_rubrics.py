"""Load the four built-in rubrics from rubrics/seeds on a fresh install (idempotent)."""

from django.db import migrations


def load_builtins(apps, schema_editor):
    from rubrics.builtins import ensure_builtin_rubrics

    ensure_builtin_rubrics(apps.get_model("rubrics", "Rubric"), apps.get_model("rubrics", "RubricVersion"))


class Migration(migrations.Migration):
    dependencies = [
        ("rubrics", "0002_rubric_copied_from"),
    ]
    operations = [migrations.RunPython(load_builtins, migrations.RunPython.noop)]
