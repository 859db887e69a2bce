"""The Excel workbook export: read back with openpyxl, sheet by sheet, as a spreadsheet would open it."""

import csv
import io

import openpyxl
import pytest
from django.core.management import call_command
from django.urls import reverse

from evaluations import exports, workbook
from tests import factories

HOSTILE = ['=HYPERLINK("http://evil.test","click")', "+cmd|' /C calc'!A0", "@SUM(A1:A2)", "-2 points", "\tx"]
UNICODE = "Björn sagt: 漢字 ✓ 🙂 «ok»"
LONG_TEXT = "w" * 40_000


@pytest.fixture
def study(project):
    dataset = factories.make_dataset(project, items=3, name="Chats")
    quality = factories.make_rubric(project=project, name="Quality")
    preference = factories.make_rubric(project=project, name="=Pref", kind="pairwise")
    evaluation = factories.make_evaluation(project, dataset, [quality, preference], name="Study")
    items = list(dataset.items.order_by("position"))
    dataset.items.filter(pk=items[0].pk).update(response={"speaker": "BOT", "text": "=1+1 " + UNICODE})
    ann, bob = factories.make_rater(project, name="ann"), factories.make_rater(project, name="@bob")
    judge = factories.make_rater(project, name="judge", kind="model")
    for item, mine, theirs in zip(items, HOSTILE[:3], [*HOSTILE[3:], ""], strict=True):
        factories.make_rating(evaluation, item, quality, ann, "4", explanation=mine)
        factories.make_rating(evaluation, item, quality, bob, "5", explanation=theirs)
    factories.make_rating(evaluation, items[0], quality, judge, "3.72", explanation=UNICODE)
    factories.make_rating(evaluation, items[1], quality, judge, "", parse_failed=True, explanation=LONG_TEXT)
    factories.make_rating(evaluation, items[0], preference, ann, "A", side_shown="response")
    return evaluation


def read_workbook(path):
    book = openpyxl.load_workbook(path, read_only=True)
    try:
        return {sheet.title: [list(row) for row in sheet.iter_rows(values_only=True)] for sheet in book}
    finally:
        book.close()


def read_workbook_rows(evaluation):
    """The long sheet's rows (no header) of a workbook with the usual limits."""
    path = workbook.write_workbook(evaluation)
    try:
        return read_workbook(path)["long"][1:]
    finally:
        path.unlink()


def csv_rows(chunks):
    return list(csv.reader(io.StringIO(b"".join(chunks).decode("utf-8"))))


def as_text(cell):
    """A workbook cell as the CSV writes it (empty for no value, numbers without a needless .0)."""
    if cell is None:
        return ""
    if isinstance(cell, float) and cell.is_integer():
        return str(int(cell))
    return str(cell)


@pytest.fixture
def sheets(study, tmp_path):
    path = workbook.write_workbook(study, item_texts=True)
    try:
        return read_workbook(path)
    finally:
        path.unlink()


def test_workbook_has_a_sheet_per_layout_and_one_naming_the_versions(sheets):
    assert list(sheets) == ["long", "wide", "rubric versions"]
    assert sheets["long"][0] == exports.LONG_COLUMNS
    assert sheets["wide"][0][:4] == ["item_id", "context", "response", "baseline"]
    assert sheets["rubric versions"][0] == workbook.VERSION_COLUMNS


def test_workbook_sheets_hold_what_the_csv_exports_hold(study, sheets):
    long_csv = csv_rows(exports.stream(study, "long"))
    wide_csv = csv_rows(exports.stream(study, "wide", item_texts=True))
    assert len(sheets["long"]) == len(long_csv) == 10
    assert len(sheets["wide"]) == len(wide_csv) == 4
    cut = workbook.MAX_CELL_CHARS
    for sheet, table in [(sheets["long"], long_csv), (sheets["wide"], wide_csv)]:
        for row, expected in zip(sheet, table, strict=True):
            assert [as_text(cell) for cell in row] == [text[:cut] if len(text) <= cut else row[n]
                                                       for n, text in enumerate(expected)]  # fmt: skip


def test_values_are_numbers_and_ids_and_labels_text(study, sheets):
    header, *rows = sheets["long"]
    column = {name: header.index(name) for name in header}
    judge = next(row for row in rows if row[column["rater"]] == "judge" and row[column["value"]])
    assert judge[column["value"]] == 3.72 and judge[column["rubric_version"]] == 1
    quality = study.rubric_versions.get(rubric__name="Quality")
    assert (judge[column["rubric_version_label"]], judge[column["rubric_version_id"]]) == (
        "Quality v1",
        quality.pk,
    )
    assert all(isinstance(row[column["item_id"]], str) for row in rows)
    failed = next(row for row in rows if row[column["parse_failed"]] == "true")
    assert failed[column["value"]] is None
    pairwise = next(row for row in rows if row[column["left_was"]] == "response")
    assert (pairwise[column["value"]], pairwise[column["value_as_shown"]]) == ("A", "B")
    wide_header, *items = sheets["wide"]
    mean = wide_header.index(f"{exports.version_heading(quality)} | human mean")
    assert [item[mean] for item in items] == [4.5, 4.5, 4.5]


def test_no_cell_is_a_formula_and_hostile_text_is_protected_as_in_the_csv(study, sheets, tmp_path):
    path = workbook.write_workbook(study, item_texts=True)
    book = openpyxl.load_workbook(path)  # not read-only: data_type tells formulas ("f") from text ("s")
    path.unlink()
    kinds = {
        cell.data_type
        for sheet in book
        for row in sheet.iter_rows()
        for cell in row
        if cell.value is not None
    }
    assert "f" not in kinds and kinds <= {"s", "n"}
    long_sheet = sheets["long"]
    explanations = {row[exports.LONG_COLUMNS.index("explanation")] for row in long_sheet[1:]}
    assert {"'" + text for text in HOSTILE[:3]} <= explanations
    assert {"'-2 points", "'\tx"} <= explanations  # "-2 points" is text, not the number -2
    header = long_sheet[0] + sheets["wide"][0]
    assert "'@bob" in {row[exports.LONG_COLUMNS.index("rater")] for row in long_sheet[1:]}
    assert any(name.startswith("'=Pref v1 (id ") for name in header)
    assert any(str(name).endswith(" | @bob") for name in sheets["wide"][0])  # starts with the rubric
    response = sheets["wide"][1][2]
    assert response == "'=1+1 " + UNICODE


def test_unicode_survives_and_a_text_longer_than_a_cell_is_cut_with_a_mark(sheets):
    explanations = [row[exports.LONG_COLUMNS.index("explanation")] for row in sheets["long"][1:]]
    assert UNICODE in explanations
    (cut,) = [text for text in explanations if text and text.startswith("www")]
    assert workbook.MAX_CELL_CHARS - 2 <= len(cut) <= workbook.MAX_CELL_CHARS
    kept = cut.index(" [")
    assert cut[kept:] == workbook.TRUNCATION_MARK.format(cut=len(LONG_TEXT) - kept)
    assert cut[:kept] == LONG_TEXT[:kept]


def test_rows_past_a_sheets_limit_go_on_in_a_second_sheet(study, monkeypatch):
    everything = read_workbook_rows(study)
    monkeypatch.setattr(workbook, "MAX_ROWS", 4)  # a header and 3 rows a sheet
    path = workbook.write_workbook(study)
    sheets = read_workbook(path)
    path.unlink()
    assert list(sheets) == ["long", "long (2)", "long (3)", "wide", "rubric versions"]
    parts = [sheets[name] for name in ["long", "long (2)", "long (3)"]]
    assert all(part[0] == exports.LONG_COLUMNS for part in parts)
    assert [len(part) - 1 for part in parts] == [3, 3, 3]
    assert [row for part in parts for row in part[1:]] == everything


def test_a_wide_layout_wider_than_a_sheet_is_refused_with_the_reason(study, monkeypatch, tmp_path):
    monkeypatch.setattr(workbook, "MAX_COLUMNS", 3)
    with pytest.raises(workbook.WorkbookTooWide, match="download the wide CSV instead"):
        workbook.write_workbook(study)


def test_spreadsheet_form_downloads_a_workbook_streamed_from_a_deleted_file(
    researcher_client, study, project
):
    detail = reverse("evaluation_detail", args=[project.slug, study.pk])
    page = researcher_client.get(detail).content.decode()
    assert 'name="layout" value="xlsx"' in page and 'name="item_text"' in page
    url = reverse("evaluation_export", args=[project.slug, study.pk])
    response = researcher_client.get(url, {"layout": "xlsx", "item_text": "1"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == workbook.CONTENT_TYPE
    assert response["Content-Disposition"] == 'attachment; filename="demo-study-Study-ratings.xlsx"'
    data = b"".join(response.streaming_content)
    assert int(response["Content-Length"]) == len(data)
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True)
    assert book.sheetnames == ["long", "wide", "rubric versions"]
    wide = [list(row) for row in book["wide"].iter_rows(values_only=True)]
    assert wide[1][2] == "'=1+1 " + UNICODE  # the item texts were asked for


def test_export_command_writes_the_workbook(study, tmp_path):
    path = tmp_path / "study.xlsx"
    call_command("export_ratings", "--evaluation", "Study", "--layout", "xlsx", "-o", str(path))
    assert list(read_workbook(path)) == ["long", "wide", "rubric versions"]


def test_the_page_sends_a_large_evaluation_to_the_command_instead_of_the_web_servers_timeout(
    researcher_client, study, project, monkeypatch
):
    monkeypatch.setattr(workbook, "WEB_MAX_RATINGS", 8)
    url = reverse("evaluation_export", args=[project.slug, study.pk])
    response = researcher_client.get(url, {"layout": "xlsx"})
    assert response.status_code == 400
    assert "this evaluation has 9 ratings" in response.content.decode()
    assert "manage.py export_ratings --evaluation NAME --layout xlsx" in response.content.decode()
    monkeypatch.setattr(workbook, "WEB_MAX_RATINGS", 9)
    assert researcher_client.get(url, {"layout": "xlsx"}).status_code == 200
