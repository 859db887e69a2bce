"""A rubric version is immutable once a rating points at it: enforced by a database trigger."""

from django.db import migrations

POSTGRES_UP = """
CREATE OR REPLACE FUNCTION concord_refuse_frozen_rubric_version() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM evaluations_rating WHERE rubric_version_id = OLD.id) THEN
        RAISE EXCEPTION 'rubric version % is frozen: ratings point at it; edit the rubric to make a new version', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER rubric_version_frozen BEFORE UPDATE ON rubrics_rubricversion
    FOR EACH ROW EXECUTE FUNCTION concord_refuse_frozen_rubric_version();
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS rubric_version_frozen ON rubrics_rubricversion;
DROP FUNCTION IF EXISTS concord_refuse_frozen_rubric_version();
"""
SQLITE_UP = """
CREATE TRIGGER rubric_version_frozen BEFORE UPDATE ON rubrics_rubricversion
WHEN EXISTS (SELECT 1 FROM evaluations_rating WHERE rubric_version_id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'rubric version is frozen: ratings point at it; edit the rubric to make a new version');
END;
"""
SQLITE_DOWN = "DROP TRIGGER IF EXISTS rubric_version_frozen;"


def forwards(apps, schema_editor):
    sql = POSTGRES_UP if schema_editor.connection.vendor == "postgresql" else SQLITE_UP
    schema_editor.execute(sql, params=None)


def backwards(apps, schema_editor):
    sql = POSTGRES_DOWN if schema_editor.connection.vendor == "postgresql" else SQLITE_DOWN
    for statement in filter(None, (part.strip() for part in sql.split(";"))):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("evaluations", "0001_initial"),
        ("rubrics", "0001_initial"),
    ]
    operations = [migrations.RunPython(forwards, backwards)]
