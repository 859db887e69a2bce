"""Importing a dataset file: validate it all in one streaming pass, then write it all in one transaction.

The first pass parses every item, collects every problem (capped for display, counted in full) and
writes the accepted rows to a spool file on disk, so memory does not grow with the file and a
progress callback can report while no transaction is open. Only when the whole file is clean does
the second pass open one transaction and load the spool: PostgreSQL COPY (the fastest way in),
bulk_create elsewhere. An import therefore lands completely or not at all.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict

import ftfy
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from . import db
from .models import Dataset
from .readers import EntryStream, detect_format
from .records import ItemRecord, RecordError, check_item_object
from .text_files import Encoding, FileRefused, detect_encoding

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from projects.models import Project

MAX_REPORTED = 1000  # problems and repairs kept for display; counts are always complete
PROGRESS_EVERY = 2000  # items between progress callbacks

# UTF-8 read as Latin-1/Windows-1252 leaves a lead byte (Â..ô) before a continuation byte (U+0080..U+00BF
# or its Windows-1252 look-alikes). Text without such a pair cannot be that mojibake, so ftfy (slow) is
# only asked about texts that have one.
MOJIBAKE_HINT = re.compile(
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc"
    "\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]"
)

# In UTF-8 every such pair starts with one of these bytes: a cheap first look before MOJIBAKE_HINT.
MOJIBAKE_BYTES = re.compile(rb"\xc3[\x82-\xb4][\xc2\xc5\xc6\xcb\xe2]")

Progress = Callable[[int, int], None]  # (bytes read so far, items accepted so far)
BeforeCommit = Callable[["ImportResult"], None]  # called inside the transaction that stores the items


@dataclass
class Repair:
    line: int | None
    field: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"line {self.line}, field {self.field}: {self.before!r} -> {self.after!r}"


@dataclass
class ImportResult:
    """What an import did, or why it did nothing."""

    dataset: Dataset | None = None
    created: int = 0
    errors: list[RecordError] = field(default_factory=list)
    error_count: int = 0
    repairs: list[Repair] = field(default_factory=list)
    repair_count: int = 0
    empty_text_count: int = 0  # turns imported with an empty text (an empty answer is data, not an error)
    warnings: list[str] = field(default_factory=list)
    encoding: str = ""
    format: str = ""

    @property
    def ok(self) -> bool:
        return self.error_count == 0 and self.dataset is not None

    def add_error(self, error: RecordError) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(error)

    def add_repair(self, repair: Repair) -> None:
        self.repair_count += 1
        if len(self.repairs) < MAX_REPORTED:
            self.repairs.append(repair)

    def as_report(self, limit: int = 200) -> dict[str, Any]:
        """A JSON-able summary for an UploadJob row."""
        return {
            "created": self.created,
            "error_count": self.error_count,
            "errors": [{"line": e.line, "field": e.field, "message": e.message} for e in self.errors[:limit]],
            "repair_count": self.repair_count,
            "repairs": [r.__dict__ for r in self.repairs[:limit]],
            "empty_text_count": self.empty_text_count,
            "warnings": self.warnings,
            "encoding": self.encoding,
            "format": self.format,
        }


def import_dataset(
    *,
    project: Project,
    name: str,
    path: str | Path,
    user: User | None = None,
    repair_text: bool = False,
    keep_mojibake: bool = False,
    convert_encoding: bool = False,
    format: str = "auto",
    mapping: dict[str, str] | None = None,
    append: bool = False,
    progress: Progress | None = None,
    before_commit: BeforeCommit | None = None,
    source_filename: str = "",
) -> ImportResult:
    """Validate `path` and import it as dataset `name` of `project` (or append to it), all or nothing.

    Returns an ImportResult; `result.ok` is false when anything was refused, and then the
    database is unchanged. Mojibake is an error unless `repair_text` (fix it with ftfy and list
    every change) or `keep_mojibake` (import the text as it is, with a warning). `before_commit`
    is called with the finished result inside the transaction that stores the items, so what it
    writes (an upload job's outcome) commits with them or not at all. `source_filename`: the name the
    dataset says it came from (an upload's own, not the name it was stored under), else the path's.
    """
    path = Path(path)
    result = ImportResult()
    target = _check_target(project=project, name=name, append=append, result=result)
    if result.error_count:
        return result
    try:
        _check_size(path)
        encoding = detect_encoding(path, convert=convert_encoding)
        result.encoding = encoding.found + (", converted to UTF-8" if encoding.converted else "")
        result.format = detect_format(path, encoding, format)
        checker = _Checker(
            path, encoding, result, mapping=mapping, repair_text=repair_text, keep_mojibake=keep_mojibake
        )
        destination: _Destination = {
            "project": project,
            "name": name.strip(),
            "target": target,
            "user": user,
            "filename": source_filename or path.name,
        }
        if db.loads_while_checking() and progress is None:
            _import_while_copying(checker, before_commit=before_commit, **destination)
        else:
            _import_through_spool(checker, progress=progress, before_commit=before_commit, **destination)
    except FileRefused as refused:
        result.add_error(refused.error)
    if result.error_count:
        result.created, result.dataset = 0, None
    else:
        db.refresh_statistics(loaded=result.created)
    return result


class _Destination(TypedDict):
    project: Project
    name: str
    target: Dataset | None
    user: User | None
    filename: str


def _check_target(*, project: Project, name: str, append: bool, result: ImportResult) -> Dataset | None:
    name = name.strip()
    existing = Dataset.objects.filter(project=project, name=name).first()
    if not name:
        result.add_error(RecordError("the dataset needs a name", field="name"))
    elif len(name) > 200:
        result.add_error(RecordError("the dataset name is longer than 200 characters", field="name"))
    elif append and existing is None:
        result.add_error(RecordError(f"there is no dataset named {name!r} to append to", field="name"))
    elif existing is not None and not append:
        result.add_error(
            RecordError(
                f"a dataset named {name!r} already exists in this project; choose another name, "
                "or append to it (--append)",
                field="name",
            )
        )
    return existing if append else None


def _check_size(path: Path) -> None:
    limit = settings.CONCORD_MAX_UPLOAD_BYTES
    size = path.stat().st_size
    if size > limit:
        raise FileRefused(f"the file is {size:,} bytes, over the limit of {limit:,} bytes; it was not read")


class _Checker:
    """Reads the file and checks every item: ids unique in the file and against the dataset, text
    free of (or repaired from) mojibake. Yields the accepted records with their positions while it
    records every problem in the result."""

    def __init__(
        self,
        path: Path,
        encoding: Encoding,
        result: ImportResult,
        *,
        mapping: dict[str, str] | None,
        repair_text: bool,
        keep_mojibake: bool,
    ):
        self.path, self.encoding, self.result = path, encoding, result
        self.mapping, self.repair_text, self.keep_mojibake = mapping, repair_text, keep_mojibake
        self.existing_ids: set[str] = set()
        self.base = 0

    def against(self, dataset: Dataset | None) -> None:
        """Check ids against `dataset` and number new items after its last one."""
        if dataset is None:
            return
        self.existing_ids = set(dataset.items.values_list("external_id", flat=True))
        top = dataset.items.aggregate(top=Max("position"))["top"]
        self.base = 0 if top is None else top + 1

    def records(self, progress: Progress | None = None) -> Iterator[tuple[ItemRecord, int]]:
        result = self.result
        seen: dict[str, int | None] = {}
        kept_mojibake = 0
        total = self.path.stat().st_size
        entries = EntryStream(self.path, self.encoding, result.format, mapping=self.mapping)
        for count, entry in enumerate(entries):
            if progress and count % PROGRESS_EVERY == 0:
                progress(min(total, entries.bytes_read()), result.created)
            for error in entry.errors:
                result.add_error(error)
            record, errors = (None, []) if entry.errors else check_item_object(entry.obj, line=entry.line)
            for error in errors:
                result.add_error(error)
            if record is None or not _check_id(record, seen, self.existing_ids, result):
                continue
            kept_mojibake += _check_text(
                record, result, repair_text=self.repair_text, keep_mojibake=self.keep_mojibake
            )
            result.empty_text_count += record.empty_texts()
            yield record, self.base + result.created
            result.created += 1
        if kept_mojibake:
            result.warnings.append(
                f"{kept_mojibake} text(s) look like mojibake and were imported unchanged (keep mojibake)."
            )
        if result.error_count == 0 and result.created == 0:
            result.add_error(RecordError("the file has no items: there is nothing to import"))
        if progress:
            progress(total, result.created)


class _Refused(Exception):
    """Raised inside the import transaction to roll it back once the file turned out to have problems."""


def _import_while_copying(
    checker: _Checker,
    *,
    before_commit: BeforeCommit | None,
    project: Project,
    name: str,
    target: Dataset | None,
    user: User | None,
    filename: str,
) -> None:
    """PostgreSQL, one pass: COPY rows while later ones are still being checked, so checking (Python)
    and loading (the server) overlap. The first problem stops the writing, the checking goes on so the
    report is complete, and then the whole transaction is rolled back."""
    result = checker.result
    try:
        with transaction.atomic():
            dataset = _open_dataset(project=project, name=name, target=target, user=user, filename=filename)
            checker.against(dataset if target is not None else None)
            with db.item_copy(dataset.pk) as write:
                for record, position in checker.records():
                    if result.error_count == 0:
                        write(record, position)
                if result.error_count:
                    raise _Refused
            _finish(dataset, result, before_commit)
    except _Refused:
        return
    except IntegrityError as error:
        raise FileRefused(f"the database refused the items ({error}); nothing was imported") from None


def _import_through_spool(
    checker: _Checker,
    *,
    progress: Progress | None,
    before_commit: BeforeCommit | None,
    project: Project,
    name: str,
    target: Dataset | None,
    user: User | None,
    filename: str,
) -> None:
    """Two passes: check everything while writing accepted rows to a spool file (no transaction is
    open, so progress saved by the caller is visible), then load the spool in one transaction."""
    result = checker.result
    checker.against(target)
    with _spool() as spool:
        writer = _row_writer(spool)
        for record, position in checker.records(progress):
            if result.error_count == 0:
                writer(record, position)
        if result.error_count:
            return
        spool.flush()
        try:
            with transaction.atomic():
                dataset = _open_dataset(
                    project=project, name=name, target=target, user=user, filename=filename
                )
                if target is not None:
                    top = dataset.items.aggregate(top=Max("position"))["top"]
                    if (top if top is not None else -1) + 1 != checker.base:
                        raise FileRefused("the dataset changed while this file was checked; import it again")
                spool.seek(0)
                db.load_spool(spool, dataset)
                _finish(dataset, result, before_commit)
        except IntegrityError as error:
            raise FileRefused(f"the database refused the items ({error}); nothing was imported") from None


def _open_dataset(
    *, project: Project, name: str, target: Dataset | None, user: User | None, filename: str
) -> Dataset:
    if target is None:
        return Dataset.objects.create(
            project=project, name=name, source_filename=filename[:300], created_by=user
        )
    return Dataset.objects.select_for_update().get(pk=target.pk)


def _finish(dataset: Dataset, result: ImportResult, before_commit: BeforeCommit | None) -> None:
    """The last step inside the import's transaction: count the items, then the caller's own record."""
    Dataset.objects.filter(pk=dataset.pk).update(item_count=dataset.items.count())
    dataset.refresh_from_db()
    result.dataset = dataset
    if before_commit is not None:
        before_commit(result)


def _check_id(
    record: ItemRecord, seen: dict[str, int | None], existing: set[str], result: ImportResult
) -> bool:
    external_id = record.external_id
    if external_id in existing:
        result.add_error(
            RecordError(
                f"duplicate id {external_id!r}: the dataset already has an item with this id",
                line=record.line,
                field="id",
            )
        )
        return False
    if external_id in seen:
        first = seen[external_id]
        result.add_error(
            RecordError(
                f"duplicate id {external_id!r}: first used on line {first}", line=record.line, field="id"
            )
        )
        return False
    seen[external_id] = record.line
    return True


def _check_text(record: ItemRecord, result: ImportResult, *, repair_text: bool, keep_mojibake: bool) -> int:
    """Find mojibake (UTF-8 read as Windows-1252 and saved again); repair it, keep it or refuse it."""
    if not _may_hold_mojibake(record):
        return 0
    kept = 0
    for where, turn in _turns(record):
        text = turn["text"]
        if text.isascii() or not MOJIBAKE_HINT.search(text):
            continue
        fixed = ftfy.fix_encoding(text)
        if fixed == text:
            continue
        before, after = _difference(text, fixed)
        if repair_text:
            turn["text"] = fixed
            result.add_repair(Repair(record.line, where, before, after))
        elif keep_mojibake:
            kept += 1
        else:
            result.add_error(
                RecordError(
                    f"mojibake (text decoded with the wrong encoding): {before!r} would be repaired to "
                    f"{after!r}; import with --repair-text (the 'Repair mojibake' box) to fix it",
                    line=record.line,
                    field=where,
                )
            )
    return kept


_TEXT = itemgetter("text")


def _may_hold_mojibake(record: ItemRecord) -> bool:
    """Whether any text of `record` may hold mojibake: one look at all of them together, since nearly
    none has (a hint spanning two texts only costs the look at each text that follows)."""
    baseline = "" if record.baseline is None else record.baseline["text"]
    texts = "".join(map(_TEXT, record.context)) + record.response["text"] + baseline
    return not texts.isascii() and MOJIBAKE_BYTES.search(texts.encode(errors="surrogatepass")) is not None


def _turns(record: ItemRecord) -> Iterator[tuple[str, dict[str, str]]]:
    for n, turn in enumerate(record.context):
        yield f"turns[{n}].text", turn
    yield "response.text", record.response
    if record.baseline is not None:
        yield "baseline.text", record.baseline


def _difference(before: str, after: str, context: int = 12) -> tuple[str, str]:
    """The changed part of a repaired text with a little context, so a report shows what changed."""
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end_b, end_a = len(before), len(after)
    while end_b > start and end_a > start and before[end_b - 1] == after[end_a - 1]:
        end_b, end_a = end_b - 1, end_a - 1
    left = max(0, start - context)
    return before[left : end_b + context], after[left : end_a + context]


# ---------------------------------------------------------------- spool


class _spool:
    """A temporary file for the accepted rows, removed afterwards whatever happens."""

    def __enter__(self) -> IO[str]:
        directory = Path(settings.VAR_DIR) / "tmp"
        directory.mkdir(parents=True, exist_ok=True)
        self.file = tempfile.TemporaryFile("w+", encoding="utf-8", dir=directory, newline="\n")
        return self.file

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def _row_writer(spool: IO[str]) -> Callable[[ItemRecord, int], None]:
    line = db.spool_line

    def write(record: ItemRecord, position: int) -> None:
        spool.write(line(record, position))

    return write
