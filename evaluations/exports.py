"""Rating tables out of Concord: long CSV, wide CSV and JSONL, streamed in chunks.

- long: one row per rating, the columns of LONG_COLUMNS, ordered by item (dataset order), rubric,
  version (number, then id) and rater. `rubric_version_label` and `rubric_version_id` name the exact
  version (`RubricVersion.label`: a judge-only version with examples is a project copy with the
  name and number of the version it came from, "Quality v1 + 6 examples"). The ratings import reads
  it back (value_as_shown, created and updated are informational). `value` is in the dataset's terms
  (pairwise: A = baseline, B = response); `left_was` says what the rater saw on the left card
  (pairwise people: baseline or response) and `value_as_shown` is the value in the letters they saw,
  the ones their explanation uses (equal to `value` when nothing is recorded about sides).
- wide: one row per item of the dataset; a column per (rubric version, rater) present, the
  evaluation's own versions and its judge-only ones alike, named "Quality v1 (id 7) | rater"
  (`version_heading`); and per own rubric version the humans' mean (likert) or majority
  (categorical, pairwise) in "Quality v1 (id 7) | human mean" / "... | human majority". A tied
  majority is left empty; parse failures do not count. With `item_texts`, the item's context
  ("SPEAKER: text" lines, as the dataset import reads them), response and baseline text follow item_id.
- jsonl: the long rows as JSON objects (parse_failed a boolean, rubric_version and
  rubric_version_id numbers); JSON is not opened by spreadsheets, so its text is written unchanged.

The same rows also make the Excel workbook (`evaluations.workbook`).

Times are UTC in ISO 8601 with a Z and microseconds ("2026-11-21T07:09:07.500000Z"), the same
from PostgreSQL's COPY and from Python; pandas and `datetime.fromisoformat` read them as they are.

CSV is UTF-8 with a header row, quoted as RFC 4180 says; lines end in "\\n" in PostgreSQL's long
export and in "\\r\\n" elsewhere (Python's csv quotes a cell holding "\\r" only then). With
`excel`, a CSV starts with a UTF-8 byte order mark, which Excel needs to read it as UTF-8 rather than
the Windows code page (other readers skip it: Python's "utf-8-sig", pandas, LibreOffice).

Spreadsheet safety: every CSV is written through `evaluations.safe_csv` (a text cell that starts
like a formula gets one leading apostrophe, plain numbers stay numbers); the ratings import
removes exactly that apostrophe again, so the long export round-trips.

Memory stays flat: on PostgreSQL the long CSV is produced by `COPY (SELECT ...) TO STDOUT` and
passed on block by block; elsewhere (and for wide and JSONL) rows come from a chunked iterator
(a server-side cursor on PostgreSQL) and are written out in ~64 KB pieces.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from statistics import fmean

from django.db import connection, transaction
from django.db.models import QuerySet

from datasets.models import Item
from rubrics.models import Rubric, RubricVersion
from rubrics.rendering import turn_lines

from . import db, safe_csv
from .models import Evaluation, Rating
from .values import value_as_shown

LONG_COLUMNS = [
    "item_id", "rubric", "rubric_version", "rubric_version_label", "rubric_version_id", "rater", "rater_kind",
    "value", "value_as_shown", "left_was", "explanation", "parse_failed", "created", "updated",
]  # fmt: skip
ITEM_TEXT_COLUMNS = ["context", "response", "baseline"]
UTF8_BOM = "\ufeff".encode()
LAYOUTS = ("long", "wide", "jsonl")
CHUNK_BYTES = 64 * 1024
ROWS_PER_FETCH = 5000


def timestamp_text(moment: datetime) -> str:
    """A time in UTC as ISO 8601 with a Z, as `_SQL_TIMESTAMP` writes it: "2026-11-21T07:09:07.500000Z"."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_SQL_TIMESTAMP = """to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""


def filename(evaluation: Evaluation, layout: str) -> str:
    stem = (
        "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in evaluation.name).strip("-")
        or "evaluation"
    )
    if layout == "jsonl":
        return f"{evaluation.project.slug}-{stem}-ratings.jsonl"
    return f"{evaluation.project.slug}-{stem}-ratings-{layout}.csv"


def stream(
    evaluation: Evaluation, layout: str, *, item_texts: bool = False, excel: bool = False
) -> Iterator[bytes]:
    """The export of `evaluation` in `layout` (long, wide or jsonl) as UTF-8 byte chunks.

    `item_texts` adds the items' texts to the wide layout; `excel` starts a CSV with a byte order mark.
    """
    if layout == "long":
        chunks = long_csv_copy(evaluation) if db.exports_with_copy() else long_csv(evaluation)
    elif layout == "wide":
        chunks = wide_csv(evaluation, item_texts=item_texts)
    elif layout == "jsonl":
        return long_jsonl(evaluation)
    else:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    return _with_bom(chunks) if excel else chunks


def _with_bom(chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield UTF8_BOM
    yield from chunks


# --- long ------------------------------------------------------------------------------------


class VersionLabels(dict[int, str]):
    """`RubricVersion.label` by version id, each read once when first asked for (an export meets a few)."""

    def __missing__(self, pk: int) -> str:
        label = self[pk] = RubricVersion.objects.select_related("rubric").get(pk=pk).label
        return label


def _long_queryset(evaluation: Evaluation) -> QuerySet[Rating, tuple]:
    # The version id breaks the tie between a built-in's v1 and a project copy's v1 of the same name.
    return (
        Rating.objects.filter(evaluation=evaluation)
        .order_by(
            "item__position", "rubric_version__rubric__name", "rubric_version__number", "rubric_version_id",
            "rater__name",
        )
        .values_list(
            "item__external_id", "rubric_version__rubric__name", "rubric_version__number",
            "rubric_version_id", "rater__name", "rater__kind", "value", "explanation", "parse_failed",
            "side_shown", "created", "updated",
        )
    )  # fmt: skip


def long_records(evaluation: Evaluation) -> Iterator[tuple]:
    """The long layout's rows as Python values, in LONG_COLUMNS order (parse_failed a bool)."""
    labels = VersionLabels()
    for row in _long_queryset(evaluation).iterator(chunk_size=ROWS_PER_FETCH):
        (
            item_id,
            rubric,
            number,
            version_id,
            rater,
            kind,
            value,
            explanation,
            failed,
            side,
            created,
            updated,
        ) = row
        yield (
            item_id, rubric, number, labels[version_id], version_id, rater, kind, value,
            value_as_shown(value, side), side, explanation, failed, timestamp_text(created),
            timestamp_text(updated),
        )  # fmt: skip


def long_rows(evaluation: Evaluation) -> Iterator[Iterable]:
    """The long layout as the CSV writes it: the header, then rows with parse_failed as true/false."""
    yield LONG_COLUMNS
    failed_at = LONG_COLUMNS.index("parse_failed")
    for record in long_records(evaluation):
        yield (*record[:failed_at], "true" if record[failed_at] else "false", *record[failed_at + 1 :])


def _csv_chunks(rows: Iterable[Iterable]) -> Iterator[bytes]:
    buffer = io.StringIO()
    # CRLF line ends: Python's csv quotes a cell holding "\r" only when "\r" is in the terminator.
    writer = safe_csv.writer(buffer, lineterminator="\r\n")
    for row in rows:
        writer.writerow(row)
        if buffer.tell() >= CHUNK_BYTES:
            yield buffer.getvalue().encode("utf-8")
            buffer.seek(0)
            buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue().encode("utf-8")


def long_csv(evaluation: Evaluation) -> Iterator[bytes]:
    """Long CSV through the ORM's chunked iterator (any database)."""
    return _csv_chunks(long_rows(evaluation))


_INNER_SQL = (
    "SELECT i.position, i.external_id AS item_id, rb.name AS rubric, rv.number AS rubric_version, "
    "rv.id AS rubric_version_id, ra.name AS rater, ra.kind AS rater_kind, r.value, r.explanation, "
    "r.parse_failed, r.side_shown, "
    "r.created, r.updated FROM evaluations_rating r "
    "JOIN datasets_item i ON i.id = r.item_id "
    "JOIN rubrics_rubricversion rv ON rv.id = r.rubric_version_id "
    "JOIN rubrics_rubric rb ON rb.id = rv.rubric_id "
    "JOIN evaluations_rater ra ON ra.id = r.rater_id "
    "WHERE r.evaluation_id = %s ORDER BY i.position, rb.name, rv.number, rv.id, ra.name"
)


# evaluations.values.value_as_shown in SQL: with the response on the left, A and B swap.
_SQL_VALUE_AS_SHOWN = (
    "(CASE WHEN s.side_shown = 'response' AND s.value = 'A' THEN 'B' "
    "WHEN s.side_shown = 'response' AND s.value = 'B' THEN 'A' ELSE s.value END)"
)


def long_sql(
    evaluation_id: int, *, labels: dict[int, str], neutralise_names: bool = True
) -> tuple[str, list]:
    """The SELECT of the long layout in PostgreSQL, and its parameters: the same rows and text as `long_csv`.

    The inner query joins and sorts plain columns (so PostgreSQL picks the plan a plain COPY gets:
    parallel hash joins and a sort); the outer one only formats, row by row, in the same order.
    `labels` are the versions' labels by id (`RubricVersion.label`); another version's label is
    its name and number, which is what `label` says for a version without examples.
    `neutralise_names=False` skips the check on item ids, rubric and rater names, for callers
    that know none of them needs it (`_names_need_neutralising`).
    """
    names = safe_csv.sql_neutralise if neutralise_names else str
    cases = " ".join("WHEN %s THEN %s" for _ in labels)
    plain_label = names("(s.rubric || ' v' || s.rubric_version)")
    # The labels' parameters come first: the outer SELECT's text comes before the inner query's.
    params = [value for pk, label in labels.items() for value in (pk, safe_csv.neutralise(label))]
    text = {
        "item_id": names("s.item_id"),
        "rubric": names("s.rubric"),
        "rubric_version": "s.rubric_version",
        "rubric_version_label": f"(CASE s.rubric_version_id {cases} ELSE {plain_label} END)"
        if labels
        else plain_label,
        "rubric_version_id": "s.rubric_version_id",
        "rater": names("s.rater"),
        "rater_kind": "s.rater_kind",
        "value": safe_csv.sql_neutralise("s.value"),
        "value_as_shown": safe_csv.sql_neutralise(_SQL_VALUE_AS_SHOWN),
        "left_was": "s.side_shown",
        "explanation": safe_csv.sql_neutralise("s.explanation"),
        "parse_failed": "CASE WHEN s.parse_failed THEN 'true' ELSE 'false' END",
        "created": _SQL_TIMESTAMP.format("s.created"),
        "updated": _SQL_TIMESTAMP.format("s.updated"),
    }
    # NULLIF: COPY writes NULL as an empty unquoted cell, like Python's csv writes "".
    numbers = {"rubric_version", "rubric_version_id"}
    columns = ", ".join(expression if name in numbers else f"NULLIF({expression}, '') AS {name}"
                        for name, expression in text.items())  # fmt: skip
    order = "s.position, s.rubric, s.rubric_version, s.rubric_version_id, s.rater"
    return f"SELECT {columns} FROM ({_INNER_SQL}) AS s ORDER BY {order}", [*params, evaluation_id]


def _names_need_neutralising(evaluation: Evaluation) -> bool:
    """Whether any item id, rubric name or rater name of the evaluation begins like a formula."""
    names = [*evaluation.judge_versions().values_list("rubric__name", flat=True)]
    names += evaluation.project.raters.values_list("name", flat=True)
    if any(map(safe_csv.needs_protection, names)):
        return True
    items = Item.objects.filter(dataset_id=evaluation.dataset_id)
    return items.filter(external_id__regex=safe_csv.DANGEROUS_START).exists()


def long_csv_copy(evaluation: Evaluation) -> Iterator[bytes]:
    """Long CSV produced by PostgreSQL's COPY and streamed in ~64 KB pieces."""
    labels = {version.pk: version.label for version in evaluation.judge_versions().select_related("rubric")}
    sql, params = long_sql(
        evaluation.pk, labels=labels, neutralise_names=_names_need_neutralising(evaluation)
    )
    yield (",".join(LONG_COLUMNS) + "\n").encode("utf-8")
    with transaction.atomic(), connection.cursor() as cursor:
        # JIT compilation costs more than it saves here.
        for setting in ["jit = off"]:
            cursor.execute(f"SET LOCAL {setting}")
        with cursor.cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv, ENCODING 'UTF8')", params) as copy:
            # libpq hands COPY data over a row at a time: gather rows into ~64 KB pieces.
            buffer = bytearray()
            for block in copy:
                buffer += block
                if len(buffer) >= CHUNK_BYTES:
                    yield bytes(buffer)
                    buffer.clear()
            if buffer:
                yield bytes(buffer)


# --- JSONL -----------------------------------------------------------------------------------


def long_jsonl(evaluation: Evaluation) -> Iterator[bytes]:
    pieces: list[str] = []
    size = 0
    for record in long_records(evaluation):
        line = json.dumps(dict(zip(LONG_COLUMNS, record, strict=True)), ensure_ascii=False) + "\n"
        pieces.append(line)
        size += len(line)
        if size >= CHUNK_BYTES:
            yield "".join(pieces).encode("utf-8")
            pieces, size = [], 0
    if pieces:
        yield "".join(pieces).encode("utf-8")


# --- wide ------------------------------------------------------------------------------------


def version_heading(version: RubricVersion) -> str:
    """A rubric version in the wide layout's headers: its label and id, "Quality v2 (id 7)"."""
    return f"{version.label} (id {version.pk})"


def _wide_columns(evaluation: Evaluation) -> tuple[list[tuple[int, int]], list[str], list]:
    """(rubric version id, rater id) pairs present, their headers, and the versions people rate.

    Every version with ratings gets its raters' columns, the evaluation's own and its judge-only
    versions alike; the human mean or majority is for the evaluation's own versions, which people rate.
    """
    own = evaluation.ordered_versions()
    pairs = set(
        Rating.objects.filter(evaluation=evaluation).values_list("rubric_version_id", "rater_id").distinct()
    )
    rated = RubricVersion.objects.filter(pk__in={v for v, _ in pairs} - {v.pk for v in own})
    versions = sorted([*own, *rated.select_related("rubric")], key=lambda v: (v.rubric.name, v.number, v.pk))
    headings = {version.pk: version_heading(version) for version in versions}
    raters = dict(evaluation.project.raters.values_list("pk", "name"))
    keys, headers = [], []
    for version in versions:
        for rater_id in sorted((r for v, r in pairs if v == version.pk), key=lambda pk: raters[pk]):
            keys.append((version.pk, rater_id))
            headers.append(f"{headings[version.pk]} | {raters[rater_id]}")
    for version in own:
        summary = "mean" if version.kind == Rubric.Kind.LIKERT else "majority"
        headers.append(f"{headings[version.pk]} | human {summary}")
    return keys, headers, own


def _summary(kind: str, values: list[str]) -> str:
    if not values:
        return ""
    if kind == Rubric.Kind.LIKERT:
        try:
            return f"{fmean(float(value) for value in values):.4g}"
        except ValueError:
            return ""
    ranked = Counter(values).most_common(2)
    return ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else ""


def _item_texts(context: list, response: dict, baseline: dict | None) -> list[str]:
    """The item text cells of the wide layout: context as "SPEAKER: text" lines, response, baseline."""
    return [turn_lines(context or []), (response or {}).get("text", ""), (baseline or {}).get("text", "")]


def wide_csv(evaluation: Evaluation, *, item_texts: bool = False) -> Iterator[bytes]:
    return _csv_chunks(wide_rows(evaluation, item_texts=item_texts))


def wide_rows(evaluation: Evaluation, *, item_texts: bool = False) -> Iterator[list]:
    """The wide layout: the header, then one row per item in dataset order."""
    keys, headers, versions = _wide_columns(evaluation)
    position = {key: n for n, key in enumerate(keys)}
    kinds = {version.pk: version.kind for version in versions}

    def rows() -> Iterator[list]:
        yield ["item_id", *(ITEM_TEXT_COLUMNS if item_texts else []), *headers]
        ratings = (
            Rating.objects.filter(evaluation=evaluation)
            .order_by("item__position")
            .values_list("item_id", "rubric_version_id", "rater_id", "rater__kind", "value", "parse_failed")
            .iterator(chunk_size=ROWS_PER_FETCH)
        )
        pending = next(ratings, None)
        items = evaluation.items().order_by("position")
        fields = ["pk", "external_id", *(["context", "response", "baseline"] if item_texts else [])]
        for item_id, external_id, *texts in items.values_list(*fields).iterator(chunk_size=ROWS_PER_FETCH):
            cells = [""] * len(keys)
            human: dict[int, list[str]] = {version.pk: [] for version in versions}
            while pending is not None and pending[0] == item_id:
                _, version_id, rater_id, kind, value, failed = pending
                if (version_id, rater_id) in position:
                    cells[position[(version_id, rater_id)]] = value
                if kind == "human" and not failed and version_id in human:
                    human[version_id].append(value)
                pending = next(ratings, None)
            summaries = [_summary(kinds[version.pk], human[version.pk]) for version in versions]
            text_cells = list(_item_texts(*texts)) if item_texts else []
            yield [external_id, *text_cells, *cells, *summaries]

    return rows()
