"""Streaming readers for dataset files: they yield one JSON-shaped object per item with its 1-based line.

Nothing here holds a whole file in memory: JSONL and CSV go line by line, a JSON array is decoded
one element at a time from a sliding buffer. Problems that make the rest of a file unreadable
(wrong encoding, binary data, a CSV without a needed column) raise `FileRefused`; problems with
one item are yielded beside it so the report lists every one of them.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from . import safe_json
from .records import MAX_SPEAKER_CHARS, MAX_TEXT_CHARS, RecordError

FORMATS = {
    "auto": "Detect from the file",
    "jsonl": "JSONL (one item a line)",
    "json": "JSON array of items",
    "csv-long": "CSV long (dialog_id, turn_index, speaker, text)",
    "csv-wide": "CSV wide (id, dialog, response, baseline, ...)",
}
SAMPLE_BYTES = 64 * 1024
SPACE = re.compile(r"\s*")
CHUNK_CHARS = 1024 * 1024
MAX_ITEM_CHARS = 32 * 1024 * 1024
LONG_COLUMNS = ["dialog_id", "turn_index", "speaker", "text"]
WIDE_ROLES = {
    "id": ["id", "item_id", "dialog_id", "external_id"],
    "dialog": ["dialog", "context", "history", "conversation", "turns"],
    "response": ["response", "answer", "reply"],
    "baseline": ["baseline", "baseline_response", "baseline_model_response"],
}
REQUIRED_WIDE_ROLES = ["id", "response"]
BINARY_MAGIC = {
    b"PK\x03\x04": "a ZIP archive (an .xlsx or .docx file is one)",
    b"\x1f\x8b": "a gzip archive",
    b"%PDF": "a PDF document",
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"SQLite format 3": "an SQLite database",
    b"\xd0\xcf\x11\xe0": "an old Microsoft Office file (.xls/.doc)",
    b"PAR1": "a Parquet file",
}
BOMS = [
    (codecs.BOM_UTF32_LE, "UTF-32 (little-endian, with BOM)", "utf-32"),
    (codecs.BOM_UTF32_BE, "UTF-32 (big-endian, with BOM)", "utf-32"),
    (codecs.BOM_UTF8, "UTF-8 with BOM", "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "UTF-16 (little-endian, with BOM)", "utf-16"),
    (codecs.BOM_UTF16_BE, "UTF-16 (big-endian, with BOM)", "utf-16"),
]
# csv refuses fields over 128 KiB by default; a dialog cell can hold many turns.
csv.field_size_limit(MAX_ITEM_CHARS)


class FileRefused(Exception):
    """The file as a whole cannot be read; `error` says where and why."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        self.error = RecordError(message, line=line, field=field)
        super().__init__(str(self.error))


@dataclass
class Encoding:
    codec: str  # what Python reads it with
    found: str  # what a person is told
    converted: bool = False


@dataclass
class Entry:
    """One item as read from the file: the object to parse, or the problems that prevented it."""

    line: int
    obj: Any = None
    errors: list[RecordError] = field(default_factory=list)


# ---------------------------------------------------------------- encoding
#
# Every upload (datasets, ratings, rubrics) is opened by these rules: UTF-8 with or without a BOM is
# read as it is; UTF-16/32 and legacy single-byte encodings are named and refused unless the caller
# converts them (`convert`, offered to people as HOW_TO_CONVERT); empty and binary files are refused;
# text that stops decoding part-way through is refused naming its line.

HOW_TO_CONVERT = "ask Concord to convert it (--convert-encoding, or the 'Convert the encoding' box)"


def detect_encoding(path: Path, *, convert: bool = False, how_to_convert: str = HOW_TO_CONVERT) -> Encoding:
    """The encoding to read `path` with. Refuses empty and binary files, and anything not UTF-8
    unless `convert` is true, naming the encoding it found (and `how_to_convert`, if anything)."""
    with open(path, "rb") as handle:
        head = handle.read(SAMPLE_BYTES)
        more = bool(handle.read(1))
    return encoding_of(head, more=more, convert=convert, how_to_convert=how_to_convert)


def encoding_of(head: bytes, *, more: bool, convert: bool, how_to_convert: str) -> Encoding:
    """`detect_encoding` of a file that starts with `head` (`more`: and goes on after it)."""
    if not head.strip() or head.strip() in {codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE}:
        raise FileRefused("the file is empty: there is nothing to import")
    for bom, found, codec in BOMS:
        if head.startswith(bom):
            return _accept(codec, found, convert=convert, how_to_convert=how_to_convert)
    _refuse_binary(head)
    if b"\x00" in head:
        codec, found = _utf16_without_bom(head)
        return _accept(codec, found, convert=convert, how_to_convert=how_to_convert)
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(head, final=not more)
        return Encoding("utf-8", "UTF-8")
    except UnicodeDecodeError as error:
        line = head[: error.start].count(b"\n") + 1
        codec, found = _guess_legacy(head)
        if not convert:
            raise FileRefused(
                f"the file is not UTF-8: it looks like {found} "
                f"(byte 0x{head[error.start]:02X} on line {line}). {_save_as_utf8(how_to_convert)}",
                line=line,
            ) from None
        return Encoding(codec, found, converted=True)


def _save_as_utf8(how_to_convert: str) -> str:
    return f"Save it as UTF-8, or {how_to_convert}." if how_to_convert else "Save it as UTF-8."


def _accept(codec: str, found: str, *, convert: bool, how_to_convert: str) -> Encoding:
    if codec in {"utf-8", "utf-8-sig"}:
        return Encoding(codec, found)
    if not convert:
        raise FileRefused(f"the file is encoded as {found}, not UTF-8. {_save_as_utf8(how_to_convert)}")
    return Encoding(codec, found, converted=True)


def _refuse_binary(head: bytes) -> None:
    for magic, what in BINARY_MAGIC.items():
        if head.startswith(magic):
            raise FileRefused(f"this is a binary file ({what}), not text")
    controls = sum(1 for byte in head if byte < 32 and byte not in (9, 10, 12, 13, 27, 0))
    if controls > max(8, len(head) // 100):
        raise FileRefused("this is a binary file (it is full of control bytes), not text")


def _utf16_without_bom(head: bytes) -> tuple[str, str]:
    even_zeros, odd_zeros = head[0::2].count(0), head[1::2].count(0)
    half = max(1, len(head) // 2)
    if odd_zeros > 0.3 * half and even_zeros < 0.05 * half:
        return "utf-16-le", "UTF-16 (little-endian, no BOM)"
    if even_zeros > 0.3 * half and odd_zeros < 0.05 * half:
        return "utf-16-be", "UTF-16 (big-endian, no BOM)"
    raise FileRefused("this is a binary file (it contains NUL bytes), not text")


def _guess_legacy(head: bytes) -> tuple[str, str]:
    """Name a single-byte encoding. Western text (the common case) is checked first because
    charset-normalizer often names a Baltic or Central European code page for short French or
    German samples."""
    high = [byte for byte in head if byte >= 0x80]
    try:
        decoded = head.decode("cp1252")
    except UnicodeDecodeError:
        decoded = ""
    letters = [char for char in decoded if ord(char) >= 0x80]
    if decoded and sum(char.isalpha() for char in letters) >= 0.6 * len(letters):
        if all(byte >= 0xA0 for byte in high):
            return "latin-1", "Latin-1 (ISO-8859-1)"
        return "cp1252", "Windows-1252"
    import charset_normalizer

    best = charset_normalizer.from_bytes(head).best()
    if best is None:
        raise FileRefused("this is a binary file or text in an encoding Concord cannot recognise")
    return best.encoding, best.encoding.replace("_", "-").upper()


@contextmanager
def open_text(path: Path, encoding: Encoding, *, newline: str | None = None) -> Iterator[IO[str]]:
    """The file as text. Text that stops decoding part-way through becomes FileRefused naming the line.

    newline=None turns CRLF into LF for JSON; csv wants newline="" and handles CRLF itself."""
    with open(path, encoding=encoding.codec, errors="strict", newline=newline) as stream:
        try:
            yield stream
        except UnicodeDecodeError as error:
            line, byte = _first_undecodable(path, encoding.codec)
            raise FileRefused(
                f"the text stops being valid {encoding.found} on line {line} (byte 0x{byte:02X}: "
                f"{error.reason}); the file seems to mix encodings",
                line=line,
            ) from None


def decode_text(data: bytes, *, how_to_convert: str = "") -> str:
    """A small upload held in memory (a rubric), decoded by the same rules as a file on disk."""
    encoding = encoding_of(
        data[:SAMPLE_BYTES], more=len(data) > SAMPLE_BYTES, convert=False, how_to_convert=how_to_convert
    )
    try:
        return data.decode(encoding.codec)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise FileRefused(
            f"the text stops being valid {encoding.found} on line {line} (byte 0x{data[error.start]:02X}: "
            f"{error.reason}); the file seems to mix encodings",
            line=line,
        ) from None


# ---------------------------------------------------------------- format


def text_format(path: Path, encoding: Encoding) -> str | None:
    """What the text is, by its suffix or else its first characters: "jsonl", "json" (one array),
    "csv" or "tsv"; None when neither tells."""
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".ndjson"}:
        return "jsonl"
    if suffix == ".tsv":
        return "tsv"
    with open_text(path, encoding, newline="") as stream:
        head = stream.read(SAMPLE_BYTES)
    stripped = head.lstrip()
    if stripped.startswith("["):
        return "json"
    if stripped.startswith("{"):
        return "jsonl"
    if suffix == ".csv" or "," in head.split("\n", 1)[0]:
        return "csv"
    return None


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


def _first_undecodable(path: Path, codec: str) -> tuple[int, int]:
    """(line, byte value) of the first byte that does not decode; the text reader reads ahead in
    blocks, so only a second pass over the bytes can say exactly where."""
    decoder = codecs.getincrementaldecoder(codec)()
    line = 1
    with open(path, "rb") as handle:
        while block := handle.read(SAMPLE_BYTES):
            for start in range(0, len(block), 4096):
                piece = block[start : start + 4096]
                try:
                    text = decoder.decode(piece)
                except UnicodeDecodeError as error:
                    pending = decoder.getstate()[0] if hasattr(decoder, "getstate") else b""
                    good = (pending + piece)[: error.start]
                    return line + good.count(b"\n"), (pending + piece)[error.start]
                line += text.count("\n")
    return line, 0


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

    def read(self, size: int) -> str:
        return self.stream.read(size)


# ---------------------------------------------------------------- JSON


def _read_jsonl(lines: _LineCounter) -> Iterator[Entry]:
    for text in lines:
        number = lines.line
        if not text.strip():
            continue
        try:
            yield Entry(number, safe_json.loads(text))
        except json.JSONDecodeError as error:
            yield Entry(number, errors=[_json_error(error, text, number)])
        except safe_json.NestedTooDeep as error:
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
    return RecordError(f"malformed JSON: {error.msg} (column {error.colno})", line=number)


def _read_json_array(lines: _LineCounter) -> Iterator[Entry]:
    """Decode `[item, item, ...]` one element at a time; memory holds one item plus a chunk."""
    return iter(_ArrayReader(lines))


class _ArrayReader:
    def __init__(self, lines: _LineCounter) -> None:
        self.lines = lines
        self.decoder = json.JSONDecoder()
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
            try:
                safe_json.check_depth(obj, self.buffer[start : self.position])
            except safe_json.NestedTooDeep as error:
                yield Entry(start_line, errors=[RecordError(str(error), line=start_line)])
                continue
            yield Entry(start_line, obj)

    def decode_one(self) -> Any:
        """raw_decode one value at the current position, reading more text while it is incomplete."""
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buffer, self.position)
            except RecursionError:
                raise FileRefused(safe_json.TOO_DEEP, line=self.line) from None
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
        self.errors: list[RecordError] = []

    def add(self, number: int, row: list[str], index: dict[str, int]) -> None:
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
        if any(existing == turn_index for existing, _ in self.turns):
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
        self.turns.append((turn_index, {"speaker": speaker, "text": text}))

    def entry(self) -> Entry:
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
        except safe_json.NestedTooDeep as error:
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
