"""Versions are append-only: edits make new versions, rated versions are frozen, built-ins are copied."""

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, transaction

from rubrics.builtins import ensure_builtin_rubrics
from rubrics.models import Rubric, RubricVersion
from rubrics.services import edit_rubric, new_version
from tests import factories

FIELDS_TEMPLATE = "Rate {criterion}.\n{scale}\n\n{{Dialog}}\n\nScore:"


def test_new_version_copies_the_latest_and_applies_changes(project):
    first = factories.make_rubric(project=project, name="Warmth", template=FIELDS_TEMPLATE)
    second = new_version(first.rubric, criterion="Warmth, revised")
    assert (second.number, second.criterion, second.prompt_template) == (
        2,
        "Warmth, revised",
        first.prompt_template,
    )
    first.refresh_from_db()
    assert first.criterion == "Warmth"


def test_new_version_with_a_bad_scale_is_refused_and_nothing_is_saved(project):
    first = factories.make_rubric(project=project, kind="pairwise")
    with pytest.raises(ValidationError, match='exactly "A", "SAME", "B"'):
        new_version(first.rubric, scale=[{"value": "A"}, {"value": "B"}])
    assert first.rubric.versions.count() == 1


def test_rated_version_is_frozen_in_the_database_and_an_edit_makes_a_new_one(project, annotator):
    version = factories.make_rubric(project=project, template=FIELDS_TEMPLATE)
    dataset = factories.make_dataset(project, items=1)
    evaluation = factories.make_evaluation(project, dataset, [version])
    rater = factories.make_rater(project, user=annotator)
    factories.make_rating(evaluation, dataset.items.get(), version, rater, "4")
    with pytest.raises(DatabaseError, match="frozen"), transaction.atomic():
        RubricVersion.objects.filter(pk=version.pk).update(criterion="changed behind the ratings' back")
    edited = edit_rubric(rubric=version.rubric, project=project, changes={"criterion": "Changed"})
    assert (edited.number, edited.criterion) == (2, "Changed")
    assert RubricVersion.objects.get(pk=version.pk).criterion == version.criterion


def test_editing_a_builtin_makes_a_project_copy_and_leaves_the_builtin_alone(builtins, project):
    builtin = builtins["Repetitiveness"]
    text = builtin.prompt_template.replace(
        "the degree to which the chatbot was repetitive.", "How repetitive."
    )
    copy = edit_rubric(rubric=builtin.rubric, project=project, changes={"prompt_template": text})
    assert copy.rubric.project == project
    # Named apart from the built-in: two rubrics answering to Repetitiveness@1 could not be told apart.
    assert (copy.rubric.name, copy.rubric.kind, copy.number) == ("Repetitiveness (copy)", "likert", 1)
    assert copy.rubric.copied_from == builtin
    assert (copy.prompt_template, copy.description) == (text, "How repetitive.")
    assert copy.notes == "Project copy of the built-in rubric Repetitiveness@1."
    builtin.refresh_from_db()
    assert builtin.description == "the degree to which the chatbot was repetitive."
    assert builtin.rubric.versions.count() == 1
    with pytest.raises(ValidationError, match=r"already has a rubric named Repetitiveness \(copy\)"):
        edit_rubric(rubric=builtin.rubric, project=project, changes={"prompt_template": text + " "})


def test_a_form_field_read_from_the_text_cannot_be_changed_apart_from_it(builtins, project):
    builtin = builtins["Repetitiveness"]
    scale = [{**option, "description": "Changed only on the form."} for option in builtin.scale]
    for changes in ({"description": "How repetitive."}, {"scale": scale}, {"steps": ["One step."]}):
        with pytest.raises(ValidationError, match="read from the prompt text; change it there"):
            edit_rubric(rubric=builtin.rubric, project=project, changes=changes)
    assert not Rubric.objects.filter(project=project).exists()


def test_editing_a_scale_description_in_the_text_changes_the_form_and_the_prompt(builtins, project):
    builtin = builtins["Repetitiveness"]
    old = "The response is free from repetition"
    text = builtin.prompt_template.replace(old, "Nothing is said twice")
    copy = edit_rubric(rubric=builtin.rubric, project=project, changes={"prompt_template": text})
    assert copy.scale[4]["description"].startswith("Nothing is said twice")
    assert old not in copy.prompt_template


def test_a_fields_rubric_must_render_every_text_people_see(project):
    first = factories.make_rubric(project=project, name="Warmth", template=FIELDS_TEMPLATE)
    with pytest.raises(
        ValidationError, match=r"scale 1 description: “Cold\.” is not in the prompt the judge"
    ):
        scale = [{"value": "1", "description": "Cold."}, {"value": "2", "description": "Warm."}]
        new_version(first.rubric, prompt_template="Rate {criterion}.\n\n{{Dialog}}", scale=scale)
    assert first.rubric.versions.count() == 1


def test_notes_do_not_carry_over_and_a_renamed_copy_keeps_its_new_name(builtins, project):
    builtin = builtins["Context fit and emotion attention"]
    assert "Repaired mojibake" in builtin.notes
    copy = edit_rubric(
        rubric=builtin.rubric, project=project, changes={"prompt_template": builtin.prompt_template + "\n"},
        name="Context fit (ours)",
    )  # fmt: skip
    assert copy.rubric.name == "Context fit (ours)" and "Repaired mojibake" not in copy.notes
    second = edit_rubric(
        rubric=copy.rubric, project=project, changes={"prompt_template": copy.prompt_template + "\n"}
    )
    assert second.notes == "" and second.rubric.name == "Context fit (ours)"


def test_an_edit_that_changes_nothing_is_refused(project):
    version = factories.make_rubric(project=project)
    with pytest.raises(ValidationError, match="Nothing changed: version 1"):
        edit_rubric(rubric=version.rubric, project=project, changes={"criterion": version.criterion})


def test_another_projects_rubric_cannot_be_edited(project, researcher):
    other = factories.make_project(name="Other", researchers=[researcher])
    version = factories.make_rubric(project=other)
    with pytest.raises(ValidationError, match="another project"):
        edit_rubric(rubric=version.rubric, project=project, changes={"criterion": "x"})


def test_builtins_load_once_with_names_kinds_targets_and_the_repair_note(db):
    Rubric.objects.filter(project__isnull=True).delete()
    created = ensure_builtin_rubrics()
    assert ensure_builtin_rubrics() == []
    found = {(v.rubric.name, v.rubric.kind, v.target) for v in created}
    assert found == {
        ("Repetitiveness", "likert", "last_turn"),
        ("Empathetical understanding", "likert", "last_turn"),
        ("Multi-turn chat quality", "pairwise", "pairwise"),
        ("Context fit and emotion attention", "likert", "sentence"),
    }
    context_fit = next(v for v in created if v.rubric.name == "Context fit and emotion attention")
    assert "can’t" in context_fit.prompt_template and "canâ€™t" not in context_fit.prompt_template
    assert "Repaired mojibake" in context_fit.notes
    assert [v.notes for v in created if v != context_fit] == ["", "", ""]


def test_renaming_a_project_rubric_alone_makes_no_new_version(project):
    first = factories.make_rubric(project=project, name="Warmth", template=FIELDS_TEMPLATE)
    factories.make_rubric(project=project, name="Taken", template=FIELDS_TEMPLATE)
    same = edit_rubric(rubric=first.rubric, project=project, changes={}, name="Kindness")
    assert same == first and Rubric.objects.get(pk=first.rubric_id).name == "Kindness"
    with pytest.raises(ValidationError, match="already has a rubric named Taken"):
        edit_rubric(rubric=first.rubric, project=project, changes={}, name="taken")


class _Editor:
    """What the migration's functions use of a schema editor, on the test's own transaction."""

    def __init__(self, connection):
        self.connection = connection

    def execute(self, sql, params=None):
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)


def test_the_migration_renames_project_rubrics_that_had_a_builtins_name(builtins, project):
    import importlib

    from django.apps import apps
    from django.db import connection

    migration = importlib.import_module("rubrics.migrations.0005_rubric_names_apart_from_builtins")
    editor = _Editor(connection)
    migration.backwards(apps, editor)  # as before it: the name could be taken
    taken = factories.make_rubric(project=project, name="repetitiveness")
    factories.make_rubric(project=project, name="Repetitiveness (copy)")
    other = factories.make_rubric(project=factories.make_project(name="Other"), name="Repetitiveness")
    migration.forwards(apps, editor)
    taken.rubric.refresh_from_db()
    other.rubric.refresh_from_db()
    assert (taken.rubric.name, other.rubric.name) == ("repetitiveness (copy 2)", "Repetitiveness (copy)")
    with pytest.raises(IntegrityError), transaction.atomic():
        Rubric.objects.create(project=project, name="Repetitiveness", kind="likert")
