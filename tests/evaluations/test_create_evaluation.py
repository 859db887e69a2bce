"""create_evaluation refuses, before storing anything, when items lack what a rubric needs."""

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from datasets.models import Item
from evaluations.models import Evaluation
from evaluations.services import create_evaluation, resolve_rubric_version, template_placeholders
from tests import factories


def test_pairwise_rubric_without_baseline_is_refused_naming_items_and_count(project):
    dataset = factories.make_dataset(project, items=8, baseline=False)
    version = factories.make_rubric(project=project, name="Preference", kind="pairwise")
    with pytest.raises(ValidationError) as caught:
        create_evaluation(project=project, dataset=dataset, rubric_versions=[version], name="E")
    message = " ".join(caught.value.messages)
    assert "Preference@1 (pairwise) needs a baseline" in message
    assert "8 of 8 items" in message
    assert "first: d-0, d-1, d-2, d-3, d-4)" in message
    assert not Evaluation.objects.exists()


def test_partly_missing_baselines_are_counted(project):
    dataset = factories.make_dataset(project, items=5)
    Item.objects.filter(external_id__in=["d-1", "d-3"]).update(baseline=None)
    Item.objects.filter(external_id="d-4").update(baseline={"speaker": "BOT", "text": "  "})  # empty answer
    version = factories.make_rubric(project=project, kind="pairwise")
    with pytest.raises(ValidationError, match=r"2 of 5 items lack it \(first: d-1, d-3\)"):
        create_evaluation(project=project, dataset=dataset, rubric_versions=[version], name="E")


def test_template_naming_a_metadata_key_needs_it_on_every_item(project):
    dataset = factories.make_dataset(project, items=4)
    Item.objects.filter(external_id="d-2").update(metadata={})
    ok = factories.make_rubric(project=project, name="Topical", template="Topic {{Topic}}:\n{{Dialog}}")
    missing = factories.make_rubric(
        project=project, name="Moody", template='Mood {metadata.mood} {{Dialog}} {"a": 1}'
    )
    with pytest.raises(ValidationError) as caught:
        create_evaluation(project=project, dataset=dataset, rubric_versions=[ok, missing], name="E")
    messages = caught.value.messages
    assert messages == [
        "Rubric Topical@1 needs metadata key 'topic' on every item: 1 of 4 items lack it (first: d-2).",
        "Rubric Moody@1 needs metadata key 'mood' on every item: 4 of 4 items lack it "
        "(first: d-0, d-1, d-2, d-3).",
    ]


def test_empty_response_is_an_answer_but_a_missing_one_is_refused(project):
    dataset = factories.make_dataset(project, items=2)
    Item.objects.filter(external_id="d-1").update(response={"speaker": "BOT", "text": ""})
    version = factories.make_rubric(project=project, template="{sentence}")
    create_evaluation(project=project, dataset=dataset, rubric_versions=[version], name="Empty is fine")
    Item.objects.filter(external_id="d-1").update(response={"speaker": "BOT"})
    with pytest.raises(ValidationError, match="needs a response on every item: 1 of 2 items lack it"):
        create_evaluation(project=project, dataset=dataset, rubric_versions=[version], name="E")


def test_fitting_items_make_an_evaluation_with_its_versions(project, researcher):
    dataset = factories.make_dataset(project, items=3)
    pairwise = factories.make_rubric(project=project, kind="pairwise")
    likert = factories.make_rubric(project=project, template="{{Topic}} {{Dialog}}")
    evaluation = create_evaluation(
        project=project,
        dataset=dataset,
        rubric_versions=[pairwise, likert],
        name=" Pilot ",
        overlap=2,
        created_by=researcher,
    )
    assert evaluation.name == "Pilot"
    assert set(evaluation.rubric_versions.all()) == {pairwise, likert}
    assert (evaluation.overlap, evaluation.created_by) == (2, researcher)


def test_duplicate_name_two_versions_of_one_rubric_and_foreign_dataset_are_refused(project):
    dataset = factories.make_dataset(project, items=1)
    other = factories.make_dataset(factories.make_project(), items=1)
    version = factories.make_rubric(project=project, name="R")
    second = version.rubric.versions.create(number=2, criterion="R", scale=version.scale, prompt_template="x")
    create_evaluation(project=project, dataset=dataset, rubric_versions=[version], name="Taken")
    with pytest.raises(ValidationError) as caught:
        create_evaluation(
            project=project, dataset=other, rubric_versions=[version, second], name="Taken", overlap=0
        )
    assert caught.value.messages == [
        "Project 'demo-study' already has an evaluation named 'Taken'.",
        f"Dataset '{other.name}' belongs to another project.",
        "Overlap must be at least 1, not 0.",
        "Pick one version of rubric 'R', not R@1 and R@2.",
    ]


def test_placeholders_ignore_json_braces_and_match_both_syntaxes():
    assert template_placeholders('{{Dialog}} {prompt} {"score": 1} {{ Topic }}') == {
        "dialog",
        "prompt",
        "topic",
    }


def test_rubric_spec_resolves_latest_or_named_version_of_the_project_or_a_builtin(project):
    # A project's rubric never has a built-in's name (issue 34): each name points at one rubric.
    builtin = factories.make_rubric(project=None, name="Shared")
    own = factories.make_rubric(project=project, name="Own")
    own.rubric.versions.create(number=2, criterion="x", scale=own.scale, prompt_template="y")
    assert resolve_rubric_version(project, "Own").number == 2
    assert resolve_rubric_version(project, "Own@1") == own
    assert resolve_rubric_version(project, "Shared") == builtin
    assert resolve_rubric_version(factories.make_project(), "Shared") == builtin
    with pytest.raises(ValidationError, match=r"has no version 7 \(versions: 1, 2\)"):
        resolve_rubric_version(project, "Own@7")
    with pytest.raises(ValidationError, match="No rubric named 'Nope'"):
        resolve_rubric_version(project, "Nope@1")


def test_command_creates_an_evaluation_and_reports_refusals(project):
    factories.make_dataset(project, items=2, name="Chats", baseline=False)
    factories.make_rubric(project=project, name="Quality")
    factories.make_rubric(project=project, name="Pref", kind="pairwise")
    call_command(
        "create_evaluation",
        "--project",
        "demo-study",
        "--dataset",
        "Chats",
        "--rubric",
        "Quality@1",
        "--name",
        "Run 1",
        "--overlap",
        "2",
    )
    assert Evaluation.objects.get(name="Run 1").overlap == 2
    with pytest.raises(CommandError, match=r"Pref@1 \(pairwise\) needs a baseline on every item: 2 of 2"):
        call_command(
            "create_evaluation",
            "--project",
            "demo-study",
            "--dataset",
            "Chats",
            "--rubric",
            "Quality",
            "--rubric",
            "Pref",
            "--name",
            "Run 2",
        )
    with pytest.raises(CommandError, match="has no dataset named 'Nope'"):
        call_command(
            "create_evaluation",
            "--project",
            "demo-study",
            "--dataset",
            "Nope",
            "--rubric",
            "Quality",
            "--name",
            "Run 3",
        )
    assert Evaluation.objects.count() == 1
