"""Every CSV Concord writes goes through this module, so that no cell runs as a spreadsheet formula.

A text cell is protected when, after any leading apostrophes, it begins with = + - @ (or their
full-width forms, which some spreadsheets also take as a formula), a tab or a carriage return,
unless the whole cell is a plain number ("-1", "+2.5", "-3e4" stay numbers, which they already are
to a spreadsheet). Protection is one more leading apostrophe, as OWASP recommends: "=1+1" is
written "'=1+1" and "'=1+1" is written "''=1+1". `restore` removes exactly that one apostrophe, so
the ratings import reads back the text that was exported, leading and trailing spaces included.

`writer` wraps `csv.writer` and protects every text cell of every row (headers too); numbers and
other non-text cells are written as they are. `sql_neutralise` is the same rule as a PostgreSQL
expression, for exports that PostgreSQL's COPY writes itself.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any

DANGEROUS_FIRST = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# The same two rules as regular expressions for the database (in PostgreSQL `$` is the end of the text only).
DANGEROUS_START = "^'*[-=+@\t\r\uff1d\uff0b\uff0d\uff20]"
NUMBER_AFTER_APOSTROPHES = "^'*[-+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?$"


def needs_protection(text: str) -> bool:
    """Whether `text`, apostrophes aside, starts like a formula (see the module docstring)."""
    bare = text.lstrip("'")
    return bare[:1] in DANGEROUS_FIRST and bare != "" and PLAIN_NUMBER.fullmatch(bare) is None


def neutralise(text: str) -> str:
    """`text` made safe to open in a spreadsheet; `restore` gives it back."""
    return "'" + text if needs_protection(text) else text


def restore(text: str) -> str:
    """Undo `neutralise`: drop the one apostrophe it added, and nothing else."""
    if text.startswith("'") and needs_protection(text[1:]):
        return text[1:]
    return text


def cell(value: Any) -> Any:
    return neutralise(value) if isinstance(value, str) else value


class SafeWriter:
    """`csv.writer` whose rows are protected cell by cell."""

    def __init__(self, file: Any, **options: Any) -> None:
        self._writer = csv.writer(file, **options)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(file: Any, **options: Any) -> SafeWriter:
    return SafeWriter(file, **options)


def sql_neutralise(column: str) -> str:
    """A PostgreSQL expression giving `neutralise(column)`; one regular expression for most cells."""
    dangerous, number = (_sql_text(pattern) for pattern in (DANGEROUS_START, NUMBER_AFTER_APOSTROPHES))
    protected = _sql_text("'") + f" || {column}"
    return f"CASE WHEN {column} ~ {dangerous} AND {column} !~ {number} THEN {protected} ELSE {column} END"


def _sql_text(text: str) -> str:
    """`text` as a PostgreSQL string literal (standard_conforming_strings: only apostrophes double)."""
    return "'" + text.replace("'", "''") + "'"
