"""A project's rubric may not take a built-in's name (case-insensitive): two rubrics answering to
`Repetitiveness@1` made exports that could not be imported again. Rubrics that have one are renamed
`<name> (copy)` (numbered when taken), and a trigger refuses the name from then on."""

from django.db import migrations

POSTGRES_UP = """
CREATE OR REPLACE FUNCTION concord_refuse_builtin_rubric_name() RETURNS trigger AS $$
BEGIN
    IF NEW.project_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM rubrics_rubric WHERE project_id IS NULL AND lower(name) = lower(NEW.name)
    ) THEN
        RAISE EXCEPTION 'rubric name % is the name of a built-in rubric', NEW.name
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER rubric_name_apart_from_builtins BEFORE INSERT OR UPDATE OF name, project_id ON rubrics_rubric
    FOR EACH ROW EXECUTE FUNCTION concord_refuse_builtin_rubric_name();
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS rubric_name_apart_from_builtins ON rubrics_rubric;
DROP FUNCTION IF EXISTS concord_refuse_builtin_rubric_name();
"""
SQLITE_CHECK = """
WHEN NEW.project_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM rubrics_rubric WHERE project_id IS NULL AND lower(name) = lower(NEW.name)
)
BEGIN
    SELECT RAISE(ABORT, 'rubric name is the name of a built-in rubric');
END;
"""
SQLITE_UP = [
    "CREATE TRIGGER rubric_name_apart_from_builtins_insert BEFORE INSERT ON rubrics_rubric" + SQLITE_CHECK,
    "CREATE TRIGGER rubric_name_apart_from_builtins_update BEFORE UPDATE OF name, project_id ON rubrics_rubric"
    + SQLITE_CHECK,
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS rubric_name_apart_from_builtins_insert",
    "DROP TRIGGER IF EXISTS rubric_name_apart_from_builtins_update",
]
NAME_CHARS = 200  # rubrics.Rubric.name


def rename_copies(apps, schema_editor):
    Rubric = apps.get_model("rubrics", "Rubric")
    builtins = {
        name.lower() for name in Rubric.objects.filter(project__isnull=True).values_list("name", flat=True)
    }
    for rubric in Rubric.objects.filter(project__isnull=False).order_by("pk"):
        if rubric.name.lower() not in builtins:
            continue
        taken = {
            name.lower()
            for name in Rubric.objects.filter(project_id=rubric.project_id).values_list("name", flat=True)
        } | builtins
        number = 1
        while True:
            tail = " (copy)" if number == 1 else f" (copy {number})"
            head = (
                rubric.name
                if len(rubric.name) + len(tail) <= NAME_CHARS
                else rubric.name[: NAME_CHARS - len(tail) - 1] + "…"
            )
            if (head + tail).lower() not in taken:
                break
            number += 1
        rubric.name = head + tail
        rubric.save(update_fields=["name"])


def forwards(apps, schema_editor):
    rename_copies(apps, schema_editor)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(POSTGRES_UP, params=None)
    else:
        for statement in SQLITE_UP:
            schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        statements = [part.strip() for part in POSTGRES_DOWN.split(";") if part.strip()]
    else:
        statements = SQLITE_DOWN
    for statement in statements:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("rubrics", "0004_version_example_count"),
    ]
    operations = [migrations.RunPython(forwards, backwards)]
