"""The rating tables as one Excel workbook (.xlsx): a sheet per layout of the CSV exports.

Sheets: "long" (one row per rating, the long CSV's columns), "wide" (one row per item, the wide
CSV's columns, with the item texts when asked) and "rubric versions" (each version's id, label,
rubric, number and examples, so the labels in the other two sheets can be looked up).

Written by XlsxWriter in constant-memory mode: each row goes to a temporary file as it is written,
so memory does not grow with the ratings; the finished workbook is a temporary file the caller
streams and deletes (`write_workbook`).

Cells are what the CSV exports hold, with the same spreadsheet safety: every text cell goes through
`safe_csv.neutralise` (one leading apostrophe before = + - @, tab or CR), and text is always written
as a text cell (never as a formula, URL or number: XlsxWriter's `strings_to_*` off). Numbers are
numbers: the version's number and id, and in the value and human summary columns a value that is
a plain decimal number ("4", "3.72"; not "007" or "1e3", which stay text).

Limits of the format, so nothing is left out silently:
- a cell holds at most 32,767 characters: a longer text keeps its first part and ends with
  TRUNCATION_MARK saying how many characters were cut (the CSV and JSONL exports have the whole text);
- a sheet holds at most 1,048,576 rows: more rows go on to "long (2)", "long (3)", ..., each with
  the header again;
- a sheet holds at most 16,384 columns: a wide layout with more raters is refused with
  WorkbookTooWide (the wide CSV has no such limit).

The evaluation page offers the workbook up to WEB_MAX_RATINGS ratings; `manage.py export_ratings
--layout xlsx` writes one of any size.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import xlsxwriter
from xlsxwriter.worksheet import Worksheet

from . import exports, safe_csv
from .models import Evaluation

LAYOUT = "xlsx"
CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# XlsxWriter is pure Python: ~10-30 s per 100k ratings on this project's 2-core machines (bench/
# export_workbook.py). The page builds the workbook while the request waits, so past this many ratings it
# sends people to the command (or the CSVs) rather than into the web server's timeout.
WEB_MAX_RATINGS = 200_000
MAX_CELL_CHARS = 32_767
MAX_ROWS = 1_048_576
MAX_COLUMNS = 16_384
TRUNCATION_MARK = " [... {cut:,} more characters: the CSV export has the whole text]"
# Written as numbers: plain decimals without a leading zero; "007", "1e3", "+2" and "4.50" stay text.
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{0,14}[1-9])?")
OPTIONS = {
    "constant_memory": True,
    "strings_to_formulas": False,
    "strings_to_urls": False,
    "strings_to_numbers": False,
}
VERSION_COLUMNS = ["rubric_version_id", "rubric_version_label", "rubric", "rubric_version", "judge_only",
                   "examples"]  # fmt: skip
LONG_NUMBERS = {exports.LONG_COLUMNS.index(name) for name in ("value", "value_as_shown")}


class WorkbookTooWide(ValueError):
    """The wide layout has more columns than a worksheet holds."""


def filename(evaluation: Evaluation) -> str:
    return exports.filename(evaluation, "wide").removesuffix("-wide.csv") + ".xlsx"


def write_workbook(evaluation: Evaluation, *, item_texts: bool = True) -> Path:
    """The workbook of `evaluation` in a new temporary file; the caller deletes it (or streams and
    deletes it: `open_workbook`). Raises WorkbookTooWide before writing anything when it cannot fit."""
    wide = exports.wide_rows(evaluation, item_texts=item_texts)
    header = next(wide)
    if len(header) > MAX_COLUMNS:
        raise WorkbookTooWide(
            f"the wide layout has {len(header):,} columns and a worksheet holds {MAX_COLUMNS:,}: "
            "download the wide CSV instead"
        )
    handle, name = tempfile.mkstemp(prefix="concord-", suffix=".xlsx")
    os.close(handle)
    path = Path(name)
    try:
        workbook = xlsxwriter.Workbook(str(path), OPTIONS)
        bold = workbook.add_format({"bold": True})
        _write_sheets(workbook, "long", exports.long_rows(evaluation), LONG_NUMBERS, bold)
        # item_id and the item texts are text; every rater and summary column after them holds values.
        first_value = 1 + (len(exports.ITEM_TEXT_COLUMNS) if item_texts else 0)
        wide_numbers = set(range(first_value, len(header)))
        _write_sheets(workbook, "wide", _with_first(header, wide), wide_numbers, bold)
        _write_sheets(workbook, "rubric versions", _version_rows(evaluation), set(), bold)
        workbook.close()
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def open_workbook(evaluation: Evaluation, *, item_texts: bool = True) -> Any:
    """The workbook as an open binary file whose name is already deleted: it goes away when closed."""
    path = write_workbook(evaluation, item_texts=item_texts)
    try:
        return path.open("rb")
    finally:
        path.unlink()


def _with_first(first: list, rest: Iterator[list]) -> Iterator[list]:
    yield first
    yield from rest


def _write_sheets(
    workbook: xlsxwriter.Workbook, name: str, rows: Iterable[Iterable], numbers: set[int], bold: Any
) -> None:
    """Rows (the first is the header) on sheet `name`, going on to "name (2)" ... past a sheet's rows."""
    iterator = iter(rows)
    header = list(next(iterator))
    part, sheet, row_number = 1, _new_sheet(workbook, name, header, bold), 1
    for row in iterator:
        if row_number == MAX_ROWS:
            part += 1
            sheet, row_number = _new_sheet(workbook, f"{name} ({part})", header, bold), 1
        _write_row(sheet, row_number, row, numbers)
        row_number += 1


def _new_sheet(workbook: xlsxwriter.Workbook, name: str, header: list, bold: Any) -> Worksheet:
    sheet = workbook.add_worksheet(name)
    for column, title in enumerate(header):
        sheet.write_string(0, column, _text(title), bold)
    sheet.freeze_panes(1, 0)
    return sheet


def _write_row(sheet: Worksheet, row_number: int, row: Iterable, numbers: set[int]) -> None:
    for column, value in enumerate(row):
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            sheet.write_boolean(row_number, column, value)
        elif isinstance(value, int | float):
            sheet.write_number(row_number, column, value)
        elif column in numbers and NUMBER.fullmatch(value):
            sheet.write_number(row_number, column, float(value))
        else:
            sheet.write_string(row_number, column, _text(str(value)))


def _text(value: str) -> str:
    """A text cell as the CSVs write it (protected), cut to what one cell holds, with a mark."""
    text = safe_csv.neutralise(value)
    if len(text) <= MAX_CELL_CHARS:
        return text
    keep = MAX_CELL_CHARS - len(TRUNCATION_MARK.format(cut=len(text)))
    return text[:keep] + TRUNCATION_MARK.format(cut=len(text) - keep)


def _version_rows(evaluation: Evaluation) -> Iterator[list]:
    yield VERSION_COLUMNS
    judge_only = set(evaluation.judge_only_versions.values_list("rubric_version_id", flat=True))
    versions = evaluation.judge_versions().select_related("rubric").order_by("rubric__name", "number", "pk")
    for version in versions:
        examples = version.example_count
        yield [version.pk, version.label, version.rubric.name, version.number,
               "yes" if version.pk in judge_only else "no", examples]  # fmt: skip
