"""Done when: both ../shared/data datasets go in through the CLI and their long exports round-trip."""

import csv
from collections import Counter

from django.core.management import call_command

from evaluations import exports
from evaluations.models import Evaluation, Rater, Rating
from rubrics.models import RubricVersion
from tests import shared_data


def cli_import(tmp_path, project, written, name):
    """import_dataset, import_rubric per spec, create_evaluation and import_ratings, all through the CLI."""
    call_command("import_dataset", str(written.items_path), "--project", project.slug, "--name", name)
    rubric_args = []
    for rubric_name, path in written.rubric_paths.items():
        call_command("import_rubric", str(path), "--project", project.slug)
        rubric_args += ["--rubric", rubric_name]
    call_command(
        "create_evaluation",
        "--project",
        project.slug,
        "--dataset",
        name,
        *rubric_args,
        "--name",
        f"{name} study",
        "--overlap",
        "3",
    )
    call_command(
        "import_ratings",
        str(written.ratings_path),
        "--evaluation",
        f"{name} study",
        "--project",
        project.slug,
    )
    return Evaluation.objects.get(project=project, name=f"{name} study")


def ratings_of(evaluation):
    return Counter(
        evaluation.ratings.values_list(
            "item__external_id",
            "rubric_version_id",
            "rater__name",
            "rater__kind",
            "value",
            "explanation",
            "parse_failed",
            "side_shown",
        )
    )


def round_trip(tmp_path, project, evaluation):
    """Export long through the CLI, import it into a fresh evaluation of the same dataset and rubrics."""
    export = tmp_path / "long.csv"
    call_command(
        "export_ratings",
        "--evaluation",
        evaluation.name,
        "--project",
        project.slug,
        "--layout",
        "long",
        "-o",
        str(export),
    )
    rubric_args = []
    for version in evaluation.rubric_versions.all():
        rubric_args += ["--rubric", f"{version.rubric.name}@{version.number}"]
    call_command(
        "create_evaluation",
        "--project",
        project.slug,
        "--dataset",
        evaluation.dataset.name,
        *rubric_args,
        "--name",
        "fresh",
    )
    fresh = Evaluation.objects.get(project=project, name="fresh")
    call_command("import_ratings", str(export), "--evaluation", "fresh", "--project", project.slug)
    with export.open(encoding="utf-8") as handle:
        exported = sum(1 for _ in csv.DictReader(handle))
    return fresh, exported


def test_pandalm_imports_as_pairwise_with_three_annotators_two_judges_and_round_trips(project, tmp_path):
    written = shared_data.write_pandalm(tmp_path)
    evaluation = cli_import(tmp_path, project, written, "PandaLM")
    assert evaluation.dataset.items.count() == 999
    assert all(item.has_baseline for item in evaluation.dataset.items.all())
    assert [v.rubric.kind for v in evaluation.rubric_versions.all()] == ["pairwise"]
    raters = dict(Rater.objects.filter(project=project).values_list("name", "kind"))
    assert raters == {
        "annotator1": "human",
        "annotator2": "human",
        "annotator3": "human",
        "gpt-3.5-turbo": "model",
        "pandalm-7b": "model",
    }
    assert evaluation.ratings.count() == 999 * 5
    assert evaluation.ratings.filter(parse_failed=True, value="").count() == 25
    assert Counter(evaluation.ratings.filter(rater__name="annotator1").values_list("value", flat=True)) == {
        "A": 427,
        "B": 475,
        "SAME": 97,
    }
    fresh, exported = round_trip(tmp_path, project, evaluation)
    assert exported == 999 * 5
    assert ratings_of(fresh) == ratings_of(evaluation)


def test_usr_imports_six_likert_rubrics_with_their_scales_and_named_raters_and_round_trips(project, tmp_path):
    written = shared_data.write_usr(tmp_path)
    evaluation = cli_import(tmp_path, project, written, "USR")
    versions = {v.rubric.name: v for v in evaluation.rubric_versions.all()}
    assert set(versions) == set(shared_data.USR_CRITERIA)
    assert {name: (v.rubric.kind, v.scale_values) for name, v in versions.items()} == {
        "Understandable": ("likert", ["0", "1"]),
        "Natural": ("likert", ["1", "2", "3"]),
        "Maintains Context": ("likert", ["1", "2", "3"]),
        "Engaging": ("likert", ["1", "2", "3"]),
        "Uses Knowledge": ("likert", ["0", "1"]),
        "Overall": ("likert", ["1", "2", "3", "4", "5"]),
    }
    assert evaluation.dataset.items.count() == 300
    assert set(Rater.objects.filter(project=project).values_list("name", "kind")) == {
        (name, "human") for name in shared_data.USR_ANNOTATORS
    }
    assert evaluation.ratings.count() == 5400
    assert (
        Rating.objects.filter(evaluation=evaluation, rubric_version=versions["Overall"], value="5").count()
        == 294
    )
    fresh, exported = round_trip(tmp_path, project, evaluation)
    assert exported == 5400
    assert ratings_of(fresh) == ratings_of(evaluation)


def test_usr_wide_export_has_one_row_per_item_with_human_means(project, tmp_path):
    cli_import(tmp_path, project, shared_data.write_usr(tmp_path, limit=2), "USR")
    export = tmp_path / "wide.csv"
    call_command("export_ratings", "--evaluation", "USR study", "--layout", "wide", "-o", str(export))
    with export.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 10
    first = rows[0]
    assert first["item_id"] == "usr-00-0"
    overall = exports.version_heading(
        RubricVersion.objects.get(rubric__name="Overall", rubric__project=project)
    )
    assert (first[f"{overall} | shikib"], first[f"{overall} | maxine"], first[f"{overall} | mckenna"]) == (
        "3",
        "4",
        "4",
    )
    assert first[f"{overall} | human mean"] == "3.667"
