"""Exports: long/wide/JSONL layouts, spreadsheet safety, streaming and the long export's round-trip."""

import csv
import io
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.core.management import call_command

from evaluations import exports, safe_csv
from evaluations.models import Rater, Rating
from evaluations.ratings_import import import_ratings
from tests import factories


@pytest.fixture
def rated(project):
    dataset = factories.make_dataset(project, items=3, name="Chats")
    quality = factories.make_rubric(project=project, name="Quality")
    preference = factories.make_rubric(project=project, name="Pref", kind="pairwise")
    evaluation = factories.make_evaluation(project, dataset, [quality, preference], name="Study")
    items = list(dataset.items.order_by("position"))
    ann, bob, judge = (
        factories.make_rater(project, name=name, kind=kind)
        for name, kind in [("ann", "human"), ("bob", "human"), ("=judge", "model")]
    )
    for item, (a, b) in zip(items, [("4", "5"), ("2", "2"), ("1", "2")], strict=True):
        factories.make_rating(evaluation, item, quality, ann, a, explanation='=HYPERLINK("http://x")')
        factories.make_rating(evaluation, item, quality, bob, b, explanation='fine, "quoted"\nnext line')
    factories.make_rating(evaluation, items[0], quality, judge, "3.72", explanation="-2 points; @me\ttab")
    factories.make_rating(evaluation, items[0], preference, ann, "A", side_shown="response")
    factories.make_rating(evaluation, items[0], preference, bob, "B", side_shown="baseline")
    factories.make_rating(evaluation, items[1], preference, judge, "", parse_failed=True, explanation="'=odd")
    factories.make_rating(evaluation, items[1], preference, ann, "SAME", explanation="\tstarts with a tab")
    factories.make_rating(evaluation, items[2], preference, ann, "B", explanation="\rstarts with CR")
    return evaluation


def read_csv(chunks):
    return list(csv.DictReader(io.StringIO(b"".join(chunks).decode("utf-8"))))


def test_long_export_has_one_row_per_rating_in_item_rubric_rater_order(rated):
    rows = read_csv(exports.stream(rated, "long"))
    assert list(rows[0]) == exports.LONG_COLUMNS
    assert len(rows) == Rating.objects.count() == 12
    assert [(r["item_id"], r["rubric"], r["rater"], r["value"]) for r in rows[:5]] == [
        ("d-0", "Pref", "ann", "A"),
        ("d-0", "Pref", "bob", "B"),
        ("d-0", "Quality", "'=judge", "3.72"),
        ("d-0", "Quality", "ann", "4"),
        ("d-0", "Quality", "bob", "5"),
    ]
    first = rows[0]
    assert (first["rubric_version"], first["rater_kind"], first["left_was"], first["parse_failed"]) == (
        "1",
        "human",
        "response",
        "false",
    )
    assert first["created"].endswith("Z") and "T" in first["created"]
    assert (
        datetime.fromisoformat(first["created"]) == Rating.objects.get(rater__name="ann", value="A").created
    )


def test_cells_that_a_spreadsheet_would_run_are_neutralised(rated):
    rows = read_csv(exports.stream(rated, "long"))
    explanations = {r["explanation"] for r in rows}
    assert '\'=HYPERLINK("http://x")' in explanations
    assert "'-2 points; @me\ttab" in explanations
    assert "''=odd" in explanations
    assert 'fine, "quoted"\nnext line' in explanations
    for row in rows:
        for cell in row.values():
            assert cell.lstrip("'")[:1] not in set("=+-@\t\r") or cell.startswith("'")


@pytest.mark.postgres(reason="COPY ... TO STDOUT is PostgreSQL's faster long export")
def test_postgres_copy_and_the_orm_path_write_the_same_table(rated):
    assert read_csv(exports.long_csv_copy(rated)) == read_csv(exports.long_csv(rated))
    Rater.objects.filter(name="=judge").update(name="judge")  # no name needs neutralising now
    assert read_csv(exports.long_csv_copy(rated)) == read_csv(exports.long_csv(rated))


def test_timestamps_are_iso_8601_utc_with_z():
    moment = datetime(2026, 11, 21, 7, 9, 7, 500000, tzinfo=UTC)
    assert exports.timestamp_text(moment) == "2026-11-21T07:09:07.500000Z"
    berlin = moment.astimezone(timezone(timedelta(hours=1)))
    assert exports.timestamp_text(berlin) == "2026-11-21T07:09:07.500000Z"
    assert exports.timestamp_text(moment.replace(microsecond=0)) == "2026-11-21T07:09:07.000000Z"


@pytest.mark.postgres(reason="compares with COPY ... TO STDOUT, PostgreSQL's faster long export")
def test_copy_and_orm_paths_write_the_same_timestamps_and_pairwise_columns(rated):
    copied, plain = read_csv(exports.long_csv_copy(rated)), read_csv(exports.long_csv(rated))
    assert [(r["created"], r["updated"]) for r in copied] == [(r["created"], r["updated"]) for r in plain]
    rating = Rating.objects.get(rater__name="ann", value="A")
    row = next(r for r in copied if (r["rater"], r["value"]) == ("ann", "A"))
    assert row["created"] == rating.created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_long_export_puts_value_as_shown_and_left_was_beside_the_explanation(rated):
    rows = read_csv(exports.stream(rated, "long"))
    assert exports.LONG_COLUMNS[7:11] == ["value", "value_as_shown", "left_was", "explanation"]
    pairwise = {(r["item_id"], r["rater"]): (r["value"], r["value_as_shown"], r["left_was"]) for r in rows
                if r["rubric"] == "Pref"}  # fmt: skip
    assert pairwise[("d-0", "ann")] == ("A", "B", "response")  # saw the response on the left
    assert pairwise[("d-0", "bob")] == ("B", "B", "baseline")
    assert pairwise[("d-1", "ann")] == ("SAME", "SAME", "")
    likert = next(r for r in rows if r["rubric"] == "Quality")
    assert likert["value_as_shown"] == likert["value"] and likert["left_was"] == ""
    records = [json.loads(line) for line in b"".join(exports.stream(rated, "jsonl")).decode().splitlines()]
    ann = next(r for r in records if (r["item_id"], r["rubric"], r["rater"]) == ("d-0", "Pref", "ann"))
    assert (ann["value"], ann["value_as_shown"], ann["left_was"]) == ("A", "B", "response")


def test_wide_export_can_carry_the_item_texts(rated):
    item = rated.dataset.items.get(external_id="d-1")
    item.baseline = {"speaker": "BOT", "text": "=SUM(A1) baseline"}
    item.save()
    rows = read_csv(exports.stream(rated, "wide", item_texts=True))
    assert list(rows[0])[:4] == ["item_id", "context", "response", "baseline"]
    row = next(r for r in rows if r["item_id"] == "d-1")
    assert row["context"] == "\n".join(f"{t['speaker']}: {t['text']}" for t in item.context)
    assert (row["response"], row["baseline"]) == (item.response["text"], "'=SUM(A1) baseline")
    rated.dataset.items.filter(external_id="d-2").update(baseline=None)
    rows = read_csv(exports.stream(rated, "wide", item_texts=True))
    assert next(r for r in rows if r["item_id"] == "d-2")["baseline"] == ""
    assert "context" not in read_csv(exports.stream(rated, "wide"))[0]


@pytest.mark.parametrize("layout", ["long", "wide"])
def test_excel_download_starts_with_a_utf8_byte_order_mark(rated, layout):
    Rater.objects.filter(name="bob").update(name="Björn")
    data = b"".join(exports.stream(rated, layout, excel=True))
    assert data.startswith(b"\xef\xbb\xbf") and not data.startswith(b"\xef\xbb\xbf\xef\xbb\xbf")
    assert "Björn" in data.decode("utf-8-sig")
    assert not b"".join(exports.stream(rated, layout)).startswith(b"\xef\xbb\xbf")


def test_neutralise_and_restore_are_inverse():
    for text in ["=1+1", "'=1+1", "''@x", "plain", "'quoted'", "", "'", "-", "\tx", "\r"]:
        assert safe_csv.restore(safe_csv.neutralise(text)) == text
    assert safe_csv.neutralise("+49 30") == "'+49 30"


def headings(evaluation):
    """The wide layout's name for each of the evaluation's rubrics: "Quality v1 (id 7)"."""
    return {v.rubric.name: exports.version_heading(v) for v in evaluation.rubric_versions.all()}


def test_wide_export_has_a_column_per_rater_and_the_human_summary(rated):
    rows = read_csv(exports.stream(rated, "wide"))
    pref, quality = headings(rated)["Pref"], headings(rated)["Quality"]
    assert pref.startswith("Pref v1 (id ") and quality.startswith("Quality v1 (id ")
    assert list(rows[0]) == [
        "item_id",
        f"{pref} | =judge",
        f"{pref} | ann",
        f"{pref} | bob",
        f"{quality} | =judge",
        f"{quality} | ann",
        f"{quality} | bob",
        f"{pref} | human majority",
        f"{quality} | human mean",
    ]
    by_item = {row["item_id"]: row for row in rows}
    assert len(rows) == 3
    assert by_item["d-0"][f"{quality} | human mean"] == "4.5"
    assert by_item["d-0"][f"{quality} | =judge"] == "3.72"
    assert by_item["d-0"][f"{pref} | human majority"] == ""  # A against B: a tie has no majority
    assert by_item["d-1"][f"{pref} | =judge"] == ""  # a parse failure has no value
    assert by_item["d-2"][f"{quality} | human mean"] == "1.5"


def test_jsonl_export_keeps_text_unchanged_with_typed_fields(rated):
    lines = b"".join(exports.stream(rated, "jsonl")).decode().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 12
    failed = next(r for r in records if r["parse_failed"])
    assert (failed["value"], failed["explanation"], failed["rubric_version"]) == ("", "'=odd", 1)
    assert any(r["explanation"] == '=HYPERLINK("http://x")' for r in records)


def test_exports_stream_in_chunks(rated, monkeypatch):
    monkeypatch.setattr(exports, "CHUNK_BYTES", 30)
    for layout in ["wide", "jsonl"]:
        assert len(list(exports.stream(rated, layout))) > 2
    assert len(list(exports.long_csv(rated))) > 2


def _ratings(evaluation):
    return sorted(
        evaluation.ratings.values_list(
            "item__external_id",
            "rubric_version_id",
            "rater__name",
            "rater__kind",
            "value",
            "explanation",
            "parse_failed",
            "side_shown",
        )
    )


@pytest.mark.parametrize("layout", ["long", "jsonl"])
def test_long_export_round_trips_into_a_fresh_evaluation(rated, tmp_path, layout):
    path = tmp_path / f"export.{'csv' if layout == 'long' else 'jsonl'}"
    call_command("export_ratings", "--evaluation", "Study", "--layout", layout, "-o", str(path))
    fresh = factories.make_evaluation(
        rated.project, rated.dataset, list(rated.rubric_versions.all()), name="Again"
    )
    result = import_ratings(evaluation=fresh, path=path)
    assert result.created == 12
    assert result.ignored_columns == ["created", "updated", "value_as_shown"]
    assert _ratings(fresh) == _ratings(rated)


def test_export_command_writes_to_standard_output_by_default(rated, capsysbinary):
    call_command("export_ratings", "--evaluation", "Study", "--layout", "wide")
    lines = capsysbinary.readouterr().out.decode().splitlines()
    assert lines[0].startswith(f"item_id,{headings(rated)['Pref']} | =judge,")
    assert len(lines) == 4
