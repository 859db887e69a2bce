"""Streaming readers for dataset files: they yield one JSON-shaped object per item with its 1-based line.

Nothing here holds a whole file in memory: JSONL and CSV go line by line, a JSON array is decoded
one element at a time from a sliding buffer. Problems that make the rest of a file unreadable
(wrong encoding, binary data, a CSV without a needed column) raise `FileRefused`; problems with
one item are yielded beside it so the report lists every one of them.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from . import safe_json
from .records import MAX_METADATA_KEY_CHARS, MAX_SPEAKER_CHARS, MAX_TEXT_CHARS, MAX_TURNS, RecordError
from .text_files import Encoding, FileRefused, open_text, text_format

FORMATS = {
    "auto": "Detect from the file",
    "jsonl": "JSONL (one item a line)",
    "json": "JSON array of items",
    "csv-long": "CSV long (dialog_id, turn_index, speaker, text)",
    "csv-wide": "CSV wide (id, dialog, response, baseline, ...)",
}
SPACE = re.compile(r"\s*")
CHUNK_CHARS = 1024 * 1024
MAX_ITEM_CHARS = 32 * 1024 * 1024
MAX_CSV_COLUMNS = 1_000
LONG_COLUMNS = ["dialog_id", "turn_index", "speaker", "text"]
WIDE_ROLES = {
    "id": ["id", "item_id", "dialog_id", "external_id"],
    "dialog": ["dialog", "context", "history", "conversation", "turns"],
    "response": ["response", "answer", "reply"],
    "baseline": ["baseline", "baseline_response", "baseline_model_response"],
}
REQUIRED_WIDE_ROLES = ["id", "response"]
# csv refuses fields over 128 KiB by default; a dialog cell can hold many turns.
csv.field_size_limit(MAX_ITEM_CHARS)


@dataclass
class Entry:
    """One item as read from the file: the object to parse, or the problems that prevented it."""

    line: int
    obj: Any = None
    errors: list[RecordError] = field(default_factory=list)


# ---------------------------------------------------------------- format


def detect_format(path: Path, encoding: Encoding, requested: str = "auto") -> str:
    """The dataset format (FORMATS) of `path`: `requested`, or told by `text_format` and a CSV's header."""
    if requested != "auto":
        if requested not in FORMATS:
            raise FileRefused(f"unknown format {requested!r}; choose one of {', '.join(FORMATS)}")
        return requested
    found = text_format(path, encoding)
    if found is None:
        raise FileRefused(
            "cannot tell the format: the file starts with neither '{' (JSONL), '[' (a JSON array) "
            "nor a CSV header",
            line=1,
        )
    if found in {"csv", "tsv"}:
        columns = {name.strip().lower() for name in wide_header(path, encoding)}
        return "csv-long" if {"dialog_id", "turn_index"} <= columns else "csv-wide"
    return found


class EntryStream:
    """Every item of the file, in order, with its line; `bytes_read()` tells how far it has got."""

    def __init__(
        self, path: Path, encoding: Encoding, fmt: str, *, mapping: dict[str, str] | None = None
    ) -> None:
        self.path, self.encoding, self.fmt, self.mapping = path, encoding, fmt, mapping or {}
        self._raw: Any = None

    def bytes_read(self) -> int:
        try:
            return self._raw.tell() if self._raw is not None else 0
        except ValueError:  # closed
            return 0

    def __iter__(self) -> Iterator[Entry]:
        readers = {"jsonl": _read_jsonl, "json": _read_json_array, "csv-long": _read_csv_long}
        newline = "" if self.fmt.startswith("csv") else None
        with open_text(self.path, self.encoding, newline=newline) as stream:
            self._raw = getattr(stream, "buffer", None)
            counter = _LineCounter(stream)
            if self.fmt == "csv-wide":
                yield from _read_csv_wide(counter, self.mapping)
            else:
                yield from readers[self.fmt](counter)


def read_entries(path: Path, encoding: Encoding, fmt: str, *, mapping: dict | None = None) -> Iterator[Entry]:
    return iter(EntryStream(path, encoding, fmt, mapping=mapping))


class _LineCounter:
    """Iterates a text stream by lines, remembering how many it has handed out."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.line = 0

    def __iter__(self) -> Iterator[str]:
        for text in self.stream:
            self.line += 1
            yield text

    def bounded(self, limit: int) -> Iterator[str | None]:
        """The lines, each read only up to `limit` characters: None for a longer one, whose rest is read
        past a chunk at a time (a single line of hundreds of MB would otherwise be held whole)."""
        while text := self.stream.readline(limit + 1):
            self.line += 1
            if len(text) <= limit or text.endswith("\n"):
                yield text
                continue
            while (rest := self.stream.readline(CHUNK_CHARS)) and not rest.endswith("\n"):
                pass
            yield None

    def read(self, size: int) -> str:
        return self.stream.read(size)


# ---------------------------------------------------------------- JSON


def _read_jsonl(lines: _LineCounter) -> Iterator[Entry]:
    for text in lines.bounded(MAX_ITEM_CHARS):
        number = lines.line
        if text is None:
            message = f"this line is over {MAX_ITEM_CHARS // 2**20} MB long: an item may be at most that"
            yield Entry(number, errors=[RecordError(message, line=number)])
            continue
        if not text.strip():
            continue
        try:
            yield Entry(number, safe_json.loads(text))
        except json.JSONDecodeError as error:
            yield Entry(number, errors=[_json_error(error, text, number)])
        except safe_json.Unreadable as error:
            yield Entry(number, errors=[RecordError(str(error), line=number)])


def _json_error(error: json.JSONDecodeError, text: str, number: int) -> RecordError:
    incomplete = (
        error.msg.startswith(("Unterminated string", "Expecting")) and error.pos >= len(text.rstrip()) - 1
    )
    if not text.endswith("\n") and (incomplete or error.msg.startswith("Unterminated string")):
        return RecordError(
            "truncated last line: the file ends in the middle of an item (was the upload cut short?)",
            line=number,
        )
    if text.lstrip().startswith("[") and error.msg.startswith("Extra data"):
        return RecordError("this line holds more than one JSON value; put one item per line", line=number)
    line_text = text.rstrip("\r\n")
    if error.pos >= len(line_text):  # json counts the line's end as column 1 of the next line
        where = f"at the end of the line, column {len(line_text) + 1}: is a bracket or brace not closed?"
        return RecordError(f"malformed JSON: {error.msg} {where}", line=number)
    return RecordError(f"malformed JSON: {error.msg} (column {error.pos + 1})", line=number)


def _read_json_array(lines: _LineCounter) -> Iterator[Entry]:
    """Decode `[item, item, ...]` one element at a time; memory holds one item plus a chunk."""
    return iter(_ArrayReader(lines))


class _ArrayReader:
    def __init__(self, lines: _LineCounter) -> None:
        self.lines = lines
        self.decoder = safe_json.decoder()
        self.buffer, self.position, self.line, self.eof = "", 0, 1, False

    def fill(self) -> bool:
        chunk = self.lines.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        self.buffer = self.buffer[self.position :] + chunk
        self.position = 0
        return True

    def skip_space(self) -> str:
        """Move past whitespace (counting lines); the next character, or "" at the end of the file."""
        while True:
            match = SPACE.match(self.buffer, self.position)
            assert match is not None
            self.line += self.buffer.count("\n", self.position, match.end())
            self.position = match.end()
            if self.position < len(self.buffer) or not self.fill():
                return self.buffer[self.position : self.position + 1]

    def __iter__(self) -> Iterator[Entry]:
        if self.skip_space() != "[":
            raise FileRefused("a JSON array file must start with '['", line=self.line)
        self.position += 1
        expect_item, first = True, True
        while True:
            char = self.skip_space()
            if char == "":
                raise FileRefused("truncated file: the JSON array is never closed with ']'", line=self.line)
            if not expect_item or (char == "]" and first):
                if char == "]":
                    self.position += 1
                    if self.skip_space():
                        raise FileRefused(
                            "extra text after the closing ']' of the JSON array", line=self.line
                        )
                    return
                if char != ",":
                    raise FileRefused(
                        f"malformed JSON: expected ',' or ']' between items, found {char!r}", line=self.line
                    )
                self.position += 1
                expect_item = True
                continue
            if char == "]":
                raise FileRefused(
                    "malformed JSON: a ',' before the closing ']' (trailing comma)", line=self.line
                )
            start_line, start = self.line, self.position
            obj = self.decode_one()
            expect_item, first = False, False
            text = self.buffer[start : self.position]
            try:
                safe_json.check_depth(obj, text)
                safe_json.check_numbers(obj, text)
            except safe_json.Unreadable as error:
                yield Entry(start_line, errors=[RecordError(str(error), line=start_line)])
                continue
            if "\\ud" in text.lower() and safe_json.has_lone_surrogate(obj):
                yield Entry(start_line, errors=[RecordError(safe_json.SURROGATE_MESSAGE, line=start_line)])
                continue
            yield Entry(start_line, obj)

    def decode_one(self) -> Any:
        """raw_decode one value at the current position, reading more text while it is incomplete."""
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buffer, self.position)
            except RecursionError:
                raise FileRefused(safe_json.TOO_DEEP, line=self.line) from None
            except safe_json.NotJsonValue as error:
                raise FileRefused(f"{error.message}, in the item that starts here", line=self.line) from None
            except json.JSONDecodeError as error:
                near_end = error.pos >= len(self.buffer) - 1 or error.msg.startswith("Unterminated string")
                too_big = len(self.buffer) - self.position >= MAX_ITEM_CHARS
                if near_end and not too_big and not self.eof and self.fill():
                    continue
                where = self.line + self.buffer.count("\n", self.position, error.pos)
                if near_end and self.eof:
                    raise FileRefused(
                        "truncated file: it ends in the middle of an item", line=where
                    ) from None
                raise FileRefused(
                    f"malformed JSON: {error.msg}; the rest of the array cannot be read", line=where
                ) from None
            self.line += self.buffer.count("\n", self.position, end)
            self.position = end
            return obj


# ---------------------------------------------------------------- CSV


def _csv_rows(lines: _LineCounter) -> Iterator[tuple[int, list[str]]]:
    """(line where the row starts, cells); a quoted cell may span lines."""
    reader = csv.reader(lines)
    start = 1
    try:
        for row in reader:
            yield start, row
            start = lines.line + 1
    except csv.Error as error:
        raise FileRefused(f"malformed CSV: {error}", line=start) from None


def _header(rows: Iterator[tuple[int, list[str]]]) -> list[str]:
    first = next(rows, None)
    if first is None:
        raise FileRefused("the file is empty: there is nothing to import")
    if len(first[1]) > MAX_CSV_COLUMNS:
        raise FileRefused(
            f"the header has {len(first[1]):,} columns; at most {MAX_CSV_COLUMNS:,} are accepted (every "
            "column but the dialog's own becomes a metadata field of each item)",
            line=1,
        )
    for name in first[1]:
        if len(name) > MAX_METADATA_KEY_CHARS:
            raise FileRefused(
                f"a column name is {len(name):,} characters long; at most {MAX_METADATA_KEY_CHARS} are "
                f"accepted (it starts {name[:40]!r})",
                line=1,
            )
    return [name.strip() for name in first[1]]


def _read_csv_long(lines: _LineCounter) -> Iterator[Entry]:
    rows = _csv_rows(lines)
    header = _header(rows)
    lowered = [name.lower() for name in header]
    missing = [name for name in LONG_COLUMNS if name not in lowered]
    if missing:
        raise FileRefused(
            f"the CSV has no column {', '.join(missing)} (the long format needs {', '.join(LONG_COLUMNS)}; "
            f"found {', '.join(header) or 'no columns'})",
            line=1,
        )
    index = {name: lowered.index(name) for name in LONG_COLUMNS}
    extra = [(n, name) for n, name in enumerate(header) if name.lower() not in LONG_COLUMNS]
    group: _LongGroup | None = None
    for number, row in rows:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield Entry(number, errors=[_width_error(number, row, header)])
            continue
        dialog_id = row[index["dialog_id"]]
        if group is not None and dialog_id != group.dialog_id:
            yield group.entry()
            group = None
        if group is None:
            metadata = {name: row[n] for n, name in extra}
            group = _LongGroup(dialog_id, number, metadata)
        group.add(number, row, index)
    if group is not None:
        yield group.entry()


def _width_error(number: int, row: list[str], header: list[str]) -> RecordError:
    return RecordError(f"this row has {len(row)} cells but the header has {len(header)} columns", line=number)


class _LongGroup:
    """The consecutive rows of one dialog in a long CSV."""

    def __init__(self, dialog_id: str, line: int, metadata: dict[str, str]) -> None:
        self.dialog_id, self.line, self.metadata = dialog_id, line, metadata
        self.turns: list[tuple[int, dict]] = []
        self.seen: set[int] = set()
        self.rows = 0  # past MAX_TURNS rows are counted, not kept: the dialog is refused whole
        self.errors: list[RecordError] = []

    def add(self, number: int, row: list[str], index: dict[str, int]) -> None:
        self.rows += 1
        if self.rows > MAX_TURNS:
            return
        raw_index, speaker, text = row[index["turn_index"]], row[index["speaker"]], row[index["text"]]
        try:
            turn_index = int(raw_index.strip())
        except ValueError:
            self.errors.append(
                RecordError(
                    f"turn_index {raw_index!r} is not a whole number", line=number, field="turn_index"
                )
            )
            return
        if turn_index in self.seen:
            self.errors.append(
                RecordError(
                    f"turn_index {turn_index} appears twice in dialog {self.dialog_id!r}",
                    line=number,
                    field="turn_index",
                )
            )
        for name, value, limit in (("speaker", speaker, MAX_SPEAKER_CHARS), ("text", text, MAX_TEXT_CHARS)):
            if name == "speaker" and not value.strip():  # an empty text is an empty turn, not an error
                self.errors.append(RecordError(f"missing {name}", line=number, field=name))
            elif len(value) > limit:
                self.errors.append(
                    RecordError(
                        f"{name} is {len(value):,} characters long; at most {limit:,} are allowed",
                        line=number,
                        field=name,
                    )
                )
        self.seen.add(turn_index)
        self.turns.append((turn_index, {"speaker": speaker, "text": text}))

    def entry(self) -> Entry:
        if self.rows > MAX_TURNS:
            message = f"dialog {self.dialog_id!r} has {self.rows:,} turns; at most {MAX_TURNS:,} are allowed"
            self.errors.append(RecordError(message, line=self.line, field="turn_index"))
        if self.errors:
            return Entry(self.line, errors=self.errors)
        turns = [turn for _, turn in sorted(self.turns, key=lambda pair: pair[0])]
        obj: dict[str, Any] = {"id": self.dialog_id, "turns": turns}
        if self.metadata:
            obj["metadata"] = self.metadata
        return Entry(self.line, obj)


def wide_header(path: Path, encoding: Encoding) -> list[str]:
    with open_text(path, encoding, newline="") as stream:
        return _header(_csv_rows(_LineCounter(stream)))


def default_wide_mapping(header: list[str]) -> dict[str, str]:
    """Role -> column for the columns whose names say what they are."""
    lowered = {name.lower(): name for name in header}
    mapping = {}
    for role, aliases in WIDE_ROLES.items():
        for alias in aliases:
            if alias in lowered:
                mapping[role] = lowered[alias]
                break
    return mapping


def _read_csv_wide(lines: _LineCounter, mapping: dict) -> Iterator[Entry]:
    rows = _csv_rows(lines)
    header = _header(rows)
    mapping = {**default_wide_mapping(header), **{k: v for k, v in mapping.items() if v}}
    speaker = str(mapping.pop("response_speaker", "") or "BOT")
    for role in REQUIRED_WIDE_ROLES:
        if role not in mapping:
            raise FileRefused(
                f"the CSV has no column for {role} (found {', '.join(header) or 'no columns'}); "
                f"name a column {WIDE_ROLES[role][0]!r} or map one (--column {role}=NAME)",
                line=1,
            )
    for role, column in mapping.items():
        if column not in header:
            raise FileRefused(f"the CSV has no column {column!r} (mapped to {role})", line=1)
    position = {role: header.index(column) for role, column in mapping.items() if role in WIDE_ROLES}
    used = set(position.values())
    for number, row in rows:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield Entry(number, errors=[_width_error(number, row, header)])
            continue
        yield _wide_entry(number, row, header, position, used, speaker)


def _wide_entry(
    number: int,
    row: list[str],
    header: list[str],
    position: dict[str, int],
    used: set[int],
    speaker: str,
) -> Entry:
    obj: dict[str, Any] = {
        "id": row[position["id"]],
        "response": {"speaker": speaker, "text": row[position["response"]]},
    }
    if "baseline" in position and row[position["baseline"]].strip():
        obj["baseline"] = {"speaker": speaker, "text": row[position["baseline"]]}
    obj["turns"] = []
    if "dialog" in position:
        try:
            obj["turns"] = parse_dialog_cell(row[position["dialog"]])
        except ValueError as error:
            return Entry(
                number, errors=[RecordError(str(error), line=number, field=header[position["dialog"]])]
            )
    obj["metadata"] = {name: row[n] for n, name in enumerate(header) if n not in used}
    return Entry(number, obj)


SPEAKER_LINE = re.compile(r"^([^:\n]{1,100}):[ \t]?(.*)$")


def parse_dialog_cell(cell: str) -> list:
    """The turns of a wide CSV's dialog cell: a JSON list of turns, or `SPEAKER: text` lines
    (a line without a speaker continues the turn before it)."""
    if not cell.strip():
        return []
    if cell.lstrip().startswith("["):
        try:
            return safe_json.loads(cell)
        except json.JSONDecodeError as error:
            raise ValueError(f"the dialog cell looks like JSON but is malformed: {error.msg}") from None
        except safe_json.Unreadable as error:
            raise ValueError(f"the dialog cell: {error}") from None
    turns: list[dict[str, str]] = []
    for n, text in enumerate(cell.splitlines(), start=1):
        match = SPEAKER_LINE.match(text)
        if match:
            turns.append({"speaker": match.group(1).strip(), "text": match.group(2)})
        elif turns:
            turns[-1]["text"] += "\n" + text
        elif text.strip():
            raise ValueError(f"line {n} of the dialog cell does not start with 'SPEAKER:'")
    return turns
