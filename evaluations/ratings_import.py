"""Import existing ratings (an earlier human study, another judge) into an evaluation.

The file is CSV (comma; tab for .tsv) or JSONL (one object a line; chosen by the .jsonl suffix, or
by a first character `{`), UTF-8 with or without BOM, opened by the rules of every upload
(`datasets.readers`: other encodings and binary files are named and refused), with these columns:

- required: item_id (the item's external id), rubric (NAME or NAME@VERSION; one of the
  evaluation's rubric versions), rater (a name), rater_kind (human | model), value;
- optional: explanation; rubric_version (the version number, as the long export writes it);
  rubric_version_id and rubric_version_label (as the long export writes them: the id names the exact
  version, which rubric and number alone cannot when a judge-only version with examples is a project
  copy with the name and number of the version it came from; an id that is none of this evaluation's
  versions or judge-only versions, as in a file from another evaluation, falls back on rubric and
  number, and is refused when the label there differs; only model raters rate a judge-only version);
  parse_failed
  (true/false, 1/0, yes/no: a judge reply that could not be parsed, value may be empty then);
  left_was (pairwise only: baseline | response, what the rater saw on the left; the older name
  side_shown is read too).
- value_as_shown, created and updated (written by the long export:
  value_as_shown follows from value and left_was) and any other column are read but not used; the
  result lists them as ignored columns.
- CSV cells that the export protected for spreadsheets ("'=1+1") get their one added apostrophe
  removed (`evaluations.safe_csv.restore`).

Values are checked against the rubric's scale by `evaluations.values.canonical_value`.
Unknown raters become named raters of the given kind; a known rater of the other kind is an error.
The same (item, rubric, rater) twice in one file is an error.

Every problem of the whole file is reported with its line and column (the first 1,000 in full),
and then nothing is imported. Otherwise the file is read a second time and all rows are written
in one transaction, in batches of 5,000: new ratings go in with COPY on PostgreSQL (bulk_create
elsewhere); a rating that already exists with a different value, explanation, parse_failed or
side_shown is updated and its earlier value kept as a RatingRevision; an identical one is left
alone. If someone rates the same (item, rubric, rater) meanwhile, the unique constraint stops the
import and nothing of the file is kept. Memory holds the item-id map, the checks of repeated cells
and one integer per row (for duplicates), not the rows: 1M ratings take about 100 s and 91 MB
(bench/export_ratings.py --import-too).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from datasets import safe_json
from datasets.text_files import Encoding, FileRefused, detect_encoding, open_text, text_format
from rating.revisions import revise_ratings
from rubrics.models import Rubric, RubricVersion

from . import db
from .models import Evaluation, Rater, Rating
from .safe_csv import restore
from .values import canonical_value

REQUIRED_COLUMNS = ("item_id", "rubric", "rater", "rater_kind", "value")
OPTIONAL_COLUMNS = (
    "explanation",
    "rubric_version",
    "rubric_version_id",
    "rubric_version_label",
    "parse_failed",
    "left_was",
    "side_shown",
)
MAX_REPORTED = 1000
IMPORTED_FIELDS = ("value", "explanation", "parse_failed", "side_shown")  # what a later file may change
BATCH_SIZE = 5000
MAX_RATER_NAME = 200  # Rater.name
MEMO_LIMIT = 100_000  # remembered checks of repeated cells (rubric, rater, kind, value)
TRUE_WORDS = {"1", "true", "yes", "y", "t"}
FALSE_WORDS = {"", "0", "false", "no", "n", "f"}


@dataclass(frozen=True)
class Problem:
    line: int | None
    column: str | None
    message: str

    def __str__(self) -> str:
        where = [f"line {self.line}" if self.line else "", f"column {self.column}" if self.column else ""]
        prefix = ", ".join(part for part in where if part)
        return f"{prefix}: {self.message}" if prefix else self.message


class RatingsImportError(Exception):
    """The file was refused; `problems` holds the first MAX_REPORTED, `total` counts them all."""

    def __init__(self, problems: list[Problem], total: int | None = None):
        self.problems = problems
        self.total = len(problems) if total is None else total
        super().__init__(self.summary())

    @property
    def messages(self) -> list[str]:
        lines = [str(problem) for problem in self.problems]
        if self.total > len(self.problems):
            lines.append(f"... and {self.total - len(self.problems)} more problems.")
        return lines

    def summary(self) -> str:
        noun = "problem" if self.total == 1 else "problems"
        return f"{self.total} {noun}; nothing was imported.\n" + "\n".join(self.messages)


@dataclass
class RatingsImportResult:
    """What a ratings import wrote (a refused file raises RatingsImportError instead)."""

    rows: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    raters_created: list[str] = field(default_factory=list)
    ignored_columns: list[str] = field(default_factory=list)
    file_format: str = "csv"

    def summary(self) -> str:
        text = (
            f"{self.rows} ratings read: {self.created} new, {self.updated} updated (earlier values kept), "
            f"{self.unchanged} unchanged."
        )
        if self.raters_created:
            text += f" New raters: {', '.join(self.raters_created)}."
        if self.ignored_columns:
            text += f" Columns not used: {', '.join(self.ignored_columns)}."
        return text


@dataclass(frozen=True)
class _Row:
    line: int
    item_id: int
    version: RubricVersion
    rater_name: str
    rater_kind: str
    value: str
    explanation: str
    parse_failed: bool
    side_shown: str


# --- Reading ---------------------------------------------------------------------------------


def _encoding(path: Path) -> Encoding:
    """The upload's encoding by the rules every upload follows (UTF-8, with or without BOM)."""
    return detect_encoding(path, how_to_convert="")


def detect_format(path: Path, encoding: Encoding) -> str:
    """jsonl, csv or tsv (`datasets.text_files.text_format`; a file it cannot tell is read as CSV, whose
    header check then names the missing columns)."""
    found = text_format(path, encoding)
    if found == "json":
        raise FileRefused("this is one JSON array; write one JSON object a line (JSONL)", line=1)
    return found or "csv"


def _lines(path: Path, encoding: Encoding) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line; csv wants newline="" and handles CRLF itself."""
    with open_text(path, encoding, newline="") as stream:
        yield from enumerate(stream, start=1)


Record = dict[str, str] | Problem


def _csv_records(path: Path, encoding: Encoding, delimiter: str) -> Iterator[tuple[int, Record]]:
    current = {"line": 0}

    def lines() -> Iterator[str]:
        for number, text in _lines(path, encoding):
            current["line"] = number
            yield text

    reader = csv.reader(lines(), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise FileRefused("the file is empty") from None
    header = [name.strip() for name in header]
    _check_header(header)
    while True:
        start = current["line"] + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise FileRefused(f"malformed CSV: {error}", line=start) from None
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            yield (
                start,
                Problem(start, None, f"{len(cells)} cells where the header has {len(header)} columns"),
            )
            continue
        # Undo the export's spreadsheet protection ("'=x" -> "=x"), so the long export round-trips.
        yield (
            start,
            {
                name: restore(cell) if cell[:1] == "'" else cell
                for name, cell in zip(header, cells, strict=True)
            },
        )


def _jsonl_records(path: Path, encoding: Encoding) -> Iterator[tuple[int, Record]]:
    header_checked = False
    for number, text in _lines(path, encoding):
        if not text.strip():
            continue
        try:
            obj = safe_json.loads(text)
        except json.JSONDecodeError as error:
            yield number, Problem(number, None, f"malformed JSON: {error.msg} at column {error.colno}")
            continue
        except safe_json.Unreadable as error:
            yield number, Problem(number, None, str(error))
            continue
        if not isinstance(obj, dict):
            yield number, Problem(number, None, f"expected a JSON object, found a {type(obj).__name__}")
            continue
        if not header_checked:
            _check_header(list(obj))
            header_checked = True
        missing = [name for name in REQUIRED_COLUMNS if name not in obj]
        if missing:
            yield number, Problem(number, ", ".join(missing), "missing key(s) in this object")
            continue
        yield number, {key: _json_text(value) for key, value in obj.items()}
    if not header_checked:
        raise FileRefused("the file is empty")


def _json_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return (
        value
        if isinstance(value, str)
        else json.dumps(value)
        if isinstance(value, dict | list)
        else str(value)
    )


def _check_header(columns: list[str]) -> None:
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise FileRefused(
            f"missing column(s); the file needs {', '.join(REQUIRED_COLUMNS)}",
            line=1,
            field=", ".join(missing),
        )


def read_records(path: Path, encoding: Encoding, file_format: str) -> Iterator[tuple[int, Record]]:
    if file_format == "jsonl":
        return _jsonl_records(path, encoding)
    return _csv_records(path, encoding, "\t" if file_format == "tsv" else ",")


# --- Resolving rows --------------------------------------------------------------------------


class _Resolver:
    """Turns one record into a _Row, or into the problems it has."""

    def __init__(self, evaluation: Evaluation):
        self.evaluation = evaluation
        self.items = dict(evaluation.items().values_list("external_id", "pk").iterator())
        self.versions = evaluation.ordered_versions()
        own = {version.pk for version in self.versions}
        judges = evaluation.judge_versions().exclude(pk__in=own).select_related("rubric")
        self.judge_only = {version.pk: version for version in judges}
        self.by_id = {**{version.pk: version for version in self.versions}, **self.judge_only}
        self.labels = {pk: version.label for pk, version in self.by_id.items()}
        self.by_name: dict[str, list[RubricVersion]] = {}
        for version in self.versions:
            self.by_name.setdefault(version.rubric.name.lower(), []).append(version)
        self.known_raters = {
            name: (pk, kind)
            for name, pk, kind in Rater.objects.filter(project_id=evaluation.project_id).values_list(
                "name", "pk", "kind"
            )
        }
        self.new_raters: dict[str, str] = {}
        self.memo: dict[tuple, tuple[Any, str | None]] = {}

    def item_for(self, text: str) -> int | None:
        """The item with exactly this id (an exported " d-1 " keeps its spaces), else with it trimmed."""
        found = self.items.get(text)
        return found if found is not None else self.items.get(text.strip())

    def rater_name(self, text: str) -> str:
        """A known rater's exact name, else the trimmed one if known; a new rater keeps it as written."""
        if text in self.known_raters or text.strip() not in self.known_raters:
            return text
        return text.strip()

    def version_for(self, rubric: str, number_text: str, id_text: str = "", label: str = "") -> RubricVersion:
        """The version a row names: by rubric_version_id when it is one of this evaluation's, else by
        rubric name and number, when the row's rubric_version_label (if any) agrees with that version's."""
        name, number = rubric.strip(), number_text.strip()
        head, at, tail = name.rpartition("@")
        if at and tail.strip().isdigit():
            if number and number != tail.strip():
                raise ValueError(f"'{name}' disagrees with rubric_version {number}")
            name, number = head.strip(), tail.strip()
        id_text, label = id_text.strip(), label.strip()
        if id_text and not id_text.isdigit():
            raise ValueError(f"rubric_version_id must be a whole number, not '{id_text}'")
        found = self.by_id.get(int(id_text)) if id_text else None
        if found is not None:
            if name.lower() != found.rubric.name.lower() or (number and number != str(found.number)):
                written = f"{name}@{number}" if number else name
                raise ValueError(f"'{written}' disagrees with rubric_version_id {id_text} ({found.label})")
            return found
        version = self.version_by_name(name, number)
        # A file from another evaluation or installation names versions by ids unknown here; its label says
        # whether the version of that name and number here is the same text (a judge-only copy with
        # examples has the name and number of the version it came from, but not its label).
        if id_text and label and label != self.labels[version.pk]:
            raise ValueError(
                f"rubric_version_id {id_text} ({label}) is not a version of this evaluation, and "
                f"{self.labels[version.pk]} here is another one: add that version to this evaluation (as a "
                f"judge-only version), or empty rubric_version_id and rubric_version_label to put these "
                f"ratings on {self.labels[version.pk]}"
            )
        return version

    def version_by_name(self, name: str, number: str) -> RubricVersion:
        candidates = self.by_name.get(name.lower(), [])
        listed = ", ".join(str(version) for version in self.versions)
        if not candidates:
            raise ValueError(f"rubric '{name}' is not in this evaluation (its rubrics: {listed})")
        if number:
            if not number.isdigit():
                raise ValueError(f"rubric_version must be a whole number, not '{number}'")
            matching = [version for version in candidates if version.number == int(number)]
            if not matching:
                raise ValueError(f"'{name}@{number}' is not in this evaluation (its rubrics: {listed})")
            return matching[0]
        if len(candidates) > 1:
            raise ValueError(f"'{name}' is ambiguous here: write one of {', '.join(map(str, candidates))}")
        return candidates[0]

    def rater_kind(self, name: str, kind: str) -> str:
        kind = kind.strip().lower()
        if kind not in Rater.Kind.values:
            raise ValueError(f"rater_kind must be human or model, not '{kind}'")
        known = self.known_raters.get(name)
        if known and known[1] != kind:
            raise ValueError(f"rater '{name}' is a {known[1]} rater in this project, not {kind}")
        earlier = self.new_raters.setdefault(name, kind) if not known else kind
        if earlier != kind:
            raise ValueError(f"rater '{name}' is {earlier} on an earlier line and {kind} here")
        return kind

    def _memo(
        self, key: tuple, function: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> tuple[Any, str | None]:
        """(result, None) or (None, message) of `function(*args)`, remembered for repeated cells."""
        found = self.memo.get(key)
        if found is None:
            try:
                found = (function(*args, **kwargs), None)
            except ValueError as error:
                found = (None, str(error))
            if len(self.memo) < MEMO_LIMIT:
                self.memo[key] = found
        return found

    def resolve(self, line: int, record: dict[str, str]) -> tuple[_Row | None, list[Problem]]:
        problems: list[Problem] = []

        def check(column: str, found: tuple[Any, str | None]) -> Any:
            if found[1] is not None:
                problems.append(Problem(line, column, found[1]))
            return found[0]

        item_id = self.item_for(record["item_id"])
        if item_id is None:
            problems.append(
                Problem(
                    line, "item_id", f"no item '{record['item_id'].strip()}' in dataset '{self.dataset_name}'"
                )
            )
        rubric, number = record["rubric"], record.get("rubric_version") or ""
        version_id, label = record.get("rubric_version_id") or "", record.get("rubric_version_label") or ""
        version = check(
            "rubric",
            self._memo(
                ("rubric", rubric, number, version_id, label),
                self.version_for,
                rubric,
                number,
                version_id,
                label,
            ),
        )
        rater_name = self.rater_name(record["rater"])
        if not rater_name.strip():
            problems.append(Problem(line, "rater", "the rater's name is empty"))
        elif len(rater_name) > MAX_RATER_NAME:
            problems.append(Problem(line, "rater", f"the name has more than {MAX_RATER_NAME} characters"))
        raw_kind = record["rater_kind"]
        kind = check(
            "rater_kind", self._memo(("kind", rater_name, raw_kind), self.rater_kind, rater_name, raw_kind)
        )
        if version is not None and version.pk in self.judge_only and kind == Rater.Kind.HUMAN:
            problems.append(
                Problem(line, "rater_kind", f"{version.label} is judge-only here: people do not rate it")
            )
        failed_text = record.get("parse_failed") or ""
        side_column = "left_was" if record.get("left_was") else "side_shown"
        side_text = record.get(side_column) or ""
        parse_failed = check("parse_failed", self._memo(("failed", failed_text), _boolean, failed_text))
        side_shown = check(
            side_column, self._memo(("side", side_text, version), _side_shown, side_text, version)
        )
        value, raw = "", record["value"]
        if version is not None and kind is not None and not (parse_failed and not raw.strip()):
            found = self._memo(
                ("value", version.pk, kind, raw), canonical_value, version, raw, rater_kind=kind
            )
            value = check("value", found) or ""
        if problems:
            return None, problems
        assert version is not None and item_id is not None and kind is not None
        explanation = record.get("explanation") or ""
        return _Row(
            line, item_id, version, rater_name, kind, value, explanation, bool(parse_failed), side_shown
        ), []

    @property
    def dataset_name(self) -> str:
        return self.evaluation.dataset.name


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ValueError(f"parse_failed must be true or false, not '{text}'")


def _side_shown(text: str, version: RubricVersion | None) -> str:
    side = text.strip().lower()
    if side not in {"", "baseline", "response"}:
        raise ValueError(f"left_was must be baseline, response or empty, not '{text}'")
    if side and version is not None and version.rubric.kind != Rubric.Kind.PAIRWISE:
        raise ValueError(f"left_was is only for pairwise rubrics; {version} is {version.rubric.kind}")
    return side


# --- The import ------------------------------------------------------------------------------


def _validate(path: Path, encoding: Encoding, file_format: str, resolver: _Resolver) -> tuple[int, list[str]]:
    """Read the whole file once; raise RatingsImportError with every problem, else (rows, ignored columns)."""
    problems: list[Problem] = []
    total = 0
    seen: set[int] = set()
    rater_index: dict[str, int] = {}
    version_index = {pk: n for n, pk in enumerate(resolver.by_id)}
    rows = 0
    columns: set[str] = set()
    try:
        for line, record in read_records(path, encoding, file_format):
            rows += 1
            if isinstance(record, Problem):
                total += 1
                problems.extend([record][: max(0, MAX_REPORTED - len(problems))])
                continue
            if not columns or file_format == "jsonl":
                columns |= set(record)
            row, found = resolver.resolve(line, record)
            if row is not None:
                rater = rater_index.setdefault(row.rater_name, len(rater_index))
                key = (row.item_id * len(version_index) + version_index[row.version.pk]) * 1_000_003 + rater
                if key in seen:
                    found = [
                        Problem(
                            line,
                            None,
                            f"a second rating by '{row.rater_name}' for item "
                            f"'{record['item_id'].strip()}' under {row.version} in this file",
                        )
                    ]
                seen.add(key)
            total += len(found)
            problems.extend(found[: max(0, MAX_REPORTED - len(problems))])
    except FileRefused as refused:
        problems.append(_problem(refused))
        total += 1
    if rows == 0 and not problems:
        problems, total = [Problem(None, None, "the file has a header but no ratings")], 1
    if problems:
        raise RatingsImportError(problems, total)
    ignored = sorted(columns - set(REQUIRED_COLUMNS) - set(OPTIONAL_COLUMNS))
    return rows, ignored


def _problem(refused: FileRefused) -> Problem:
    return Problem(refused.error.line, refused.error.field, refused.error.message)


def import_ratings(
    *, evaluation: Evaluation, path: str | Path, file_format: str | None = None
) -> RatingsImportResult:
    """Import every rating in `path` into `evaluation`, or none (RatingsImportError lists why)."""
    path = Path(path)
    try:
        encoding = _encoding(path)
        file_format = file_format or detect_format(path, encoding)
    except FileRefused as refused:
        raise RatingsImportError([_problem(refused)]) from None
    resolver = _Resolver(evaluation)
    rows, ignored = _validate(path, encoding, file_format, resolver)
    result = RatingsImportResult(rows=rows, ignored_columns=ignored, file_format=file_format)
    try:
        with transaction.atomic():
            _write(evaluation, path, encoding, file_format, resolver, result)
    except IntegrityError as error:
        # Someone rated or imported the same (item, rubric, rater) meanwhile; nothing of this file is kept.
        raise RatingsImportError(
            [Problem(None, None, f"the ratings changed while this file was imported ({error}); try again")]
        ) from None
    return result


def _write(
    evaluation: Evaluation,
    path: Path,
    encoding: Encoding,
    file_format: str,
    resolver: _Resolver,
    result: RatingsImportResult,
) -> None:
    """Second pass over a validated file: create the new raters, then write the rows in batches."""
    raters = {name: pk for name, (pk, _kind) in resolver.known_raters.items()}
    for name, kind in resolver.new_raters.items():
        raters[name] = Rater.objects.create(project_id=evaluation.project_id, name=name, kind=kind).pk
        result.raters_created.append(name)
    fresh = not evaluation.ratings.exists()
    batch: list[_Row] = []
    for line, record in read_records(path, encoding, file_format):
        assert not isinstance(record, Problem), "validated files have no malformed records"
        row, _problems = resolver.resolve(line, record)
        assert row is not None, "validated rows resolve again"
        batch.append(row)
        if len(batch) >= BATCH_SIZE:
            _write_batch(evaluation, batch, raters, result, fresh=fresh)
            batch = []
    _write_batch(evaluation, batch, raters, result, fresh=fresh)


def _write_batch(
    evaluation: Evaluation,
    batch: list[_Row],
    raters: dict[str, int],
    result: RatingsImportResult,
    *,
    fresh: bool,
) -> None:
    if not batch:
        return
    existing: dict[tuple[int, int, int], Rating] = {}
    if not fresh:
        found = Rating.objects.filter(
            evaluation=evaluation,
            item_id__in={row.item_id for row in batch},
            rater_id__in={raters[row.rater_name] for row in batch},
            rubric_version_id__in={row.version.pk for row in batch},
        )
        existing = {(r.item_id, r.rubric_version_id, r.rater_id): r for r in found}
    now = timezone.now()
    new, changes = [], []
    for row in batch:
        rater_id = raters[row.rater_name]
        rating = existing.get((row.item_id, row.version.pk, rater_id))
        if rating is None:
            new.append((row, rater_id))
            continue
        changes.append((rating, {name: getattr(row, name) for name in IMPORTED_FIELDS}))
    db.insert_imported_ratings(evaluation, new, now)
    revised = revise_ratings(changes, compared=IMPORTED_FIELDS, now=now)
    result.unchanged += len(changes) - len(revised)
    result.created += len(new)
    result.updated += len(revised)
