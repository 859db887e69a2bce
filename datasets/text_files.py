"""How every upload (datasets, ratings, rubrics) is opened as text: one set of encoding rules.

UTF-8 with or without a BOM is read as it is; UTF-16/32 and legacy single-byte encodings are named and
refused unless the caller converts them (`convert`, offered to people as HOW_TO_CONVERT); empty and binary
files are refused; text that stops decoding part-way through is refused naming its line.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .records import RecordError

SAMPLE_BYTES = 64 * 1024
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
