"""A run on v1 and a run on a judge-only version with examples are told apart in run names and in every
export, and the wide and spreadsheet exports include both.

The judge-only version is what "Make a new version with these examples" makes from a built-in rubric: a
project copy with the built-in's name that starts again at v1 (rubrics.services.edit_rubric), so rubric
name and number alone cannot tell the two runs apart.
"""

import csv
import io
import json

import openpyxl
import pytest

from evaluations import exports, workbook
from evaluations.models import JudgeOnlyVersion
from evaluations.ratings_import import RatingsImportError, import_ratings
from tests import factories
from tests.judges.conftest import make_judge, run_to_end

ITEMS = 4


@pytest.fixture
def two_runs(project, fake_llm):
    builtin = factories.make_rubric(project=None, name="Chat quality")
    dataset = factories.make_dataset(project, items=ITEMS)
    evaluation = factories.make_evaluation(project, dataset, [builtin], name="Iteration")
    copy = factories.make_rubric(
        project=project, name="Chat quality (examples)"
    )  # the project copy, v1 again
    copy.example_count = 2  # as agreement.examples stores it
    copy.save(update_fields=["example_count"])
    examples = list(dataset.items.order_by("position").values_list("pk", flat=True)[:2])
    JudgeOnlyVersion.objects.create(evaluation=evaluation, rubric_version=copy, example_items=examples)
    judge = make_judge(project, fake_llm, name="sim")
    first, second = run_to_end(judge, evaluation, builtin), run_to_end(judge, evaluation, copy)
    assert first.status == second.status == "done" and evaluation.ratings.count() == 2 * ITEMS
    return evaluation, builtin, copy, first, second


def test_versions_have_distinct_labels_and_run_names_carry_label_and_id(two_runs):
    _, builtin, copy, first, second = two_runs
    assert (builtin.label, copy.label) == ("Chat quality v1", "Chat quality (examples) v1 + 2 examples")
    assert first.rater.name == f"sim · Chat quality v1 (id {builtin.pk}) · run 1"
    assert second.rater.name == f"sim · Chat quality (examples) v1 + 2 examples (id {copy.pk}) · run 2"


def _long(evaluation):
    return list(csv.DictReader(io.StringIO(b"".join(exports.stream(evaluation, "long")).decode())))


def test_long_csv_and_jsonl_carry_the_version_label_and_id(two_runs):
    evaluation, builtin, copy, first, second = two_runs
    expected = {
        (first.rater.name, "Chat quality v1", builtin.pk),
        (second.rater.name, "Chat quality (examples) v1 + 2 examples", copy.pk),
    }
    rows = _long(evaluation)
    assert len(rows) == 2 * ITEMS
    assert {(r["rater"], r["rubric_version_label"], int(r["rubric_version_id"])) for r in rows} == expected
    lines = b"".join(exports.stream(evaluation, "jsonl")).decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 2 * ITEMS
    assert {(r["rater"], r["rubric_version_label"], r["rubric_version_id"]) for r in records} == expected


@pytest.mark.postgres(reason="the long CSV from PostgreSQL's COPY writes the labels in SQL")
def test_copy_and_orm_paths_write_the_same_labels(two_runs):
    evaluation = two_runs[0]
    read = lambda chunks: list(csv.DictReader(io.StringIO(b"".join(chunks).decode())))  # noqa: E731
    assert read(exports.long_csv_copy(evaluation)) == read(exports.long_csv(evaluation))


def test_wide_csv_has_a_column_for_each_run_headed_by_label_and_id(two_runs):
    evaluation, builtin, copy, first, second = two_runs
    rows = list(csv.DictReader(io.StringIO(b"".join(exports.stream(evaluation, "wide")).decode())))
    columns = [
        f"Chat quality v1 (id {builtin.pk}) | {first.rater.name}",
        f"Chat quality (examples) v1 + 2 examples (id {copy.pk}) | {second.rater.name}",
    ]
    assert list(rows[0]) == ["item_id", *columns, f"Chat quality v1 (id {builtin.pk}) | human mean"]
    assert len(rows) == ITEMS and all(row[column] for row in rows for column in columns)


def test_workbook_sheets_include_both_runs_and_name_the_versions(two_runs):
    evaluation, builtin, copy, first, second = two_runs
    path = workbook.write_workbook(evaluation)
    book = openpyxl.load_workbook(path, read_only=True)
    path.unlink()
    long = [list(row) for row in book["long"].iter_rows(values_only=True)]
    at = {name: long[0].index(name) for name in ("rater", "rubric_version_label", "rubric_version_id")}
    assert {
        (r[at["rater"]], r[at["rubric_version_label"]], r[at["rubric_version_id"]]) for r in long[1:]
    } == {
        (first.rater.name, "Chat quality v1", builtin.pk),
        (second.rater.name, "Chat quality (examples) v1 + 2 examples", copy.pk),
    }
    wide_header = next(book["wide"].iter_rows(values_only=True))
    assert f"Chat quality (examples) v1 + 2 examples (id {copy.pk}) | {second.rater.name}" in wide_header
    versions = [list(row) for row in book["rubric versions"].iter_rows(values_only=True)][1:]
    assert versions == [
        [builtin.pk, "Chat quality v1", "Chat quality", 1, "no", 0],
        [copy.pk, "Chat quality (examples) v1 + 2 examples", "Chat quality (examples)", 1, "yes", 2],
    ]


def test_long_export_imports_back_onto_the_exact_versions(two_runs, project, tmp_path):
    evaluation, builtin, copy, *_ = two_runs
    path = tmp_path / "long.csv"
    path.write_bytes(b"".join(exports.stream(evaluation, "long")))
    again = factories.make_evaluation(project, evaluation.dataset, [builtin], name="Again")
    JudgeOnlyVersion.objects.create(evaluation=again, rubric_version=copy, example_items=[])
    assert import_ratings(evaluation=again, path=path).created == 2 * ITEMS
    ratings = "item__external_id", "rubric_version_id", "rater__name", "value"
    assert sorted(again.ratings.values_list(*ratings)) == sorted(evaluation.ratings.values_list(*ratings))


def test_long_export_is_refused_where_the_judge_only_version_is_missing_never_put_on_v1(
    two_runs, project, tmp_path
):
    evaluation, builtin, copy, *_ = two_runs
    path = tmp_path / "long.csv"
    path.write_bytes(b"".join(exports.stream(evaluation, "long")))
    elsewhere = factories.make_evaluation(project, evaluation.dataset, [builtin], name="Elsewhere")
    with pytest.raises(RatingsImportError) as refused:
        import_ratings(evaluation=elsewhere, path=path)
    assert (
        "rubric 'Chat quality (examples)' is not in this evaluation (its rubrics: Chat quality@1)"
    ) in str(refused.value)
    assert refused.value.total == ITEMS  # the rows of the v1 run were fine
    assert not elsewhere.ratings.exists()
