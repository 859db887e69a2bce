"""Ratings import: every problem reported with its line, nothing stored; re-imports keep revisions."""

import json

import pytest
from django.core.management import CommandError, call_command

from evaluations.models import Rater, Rating, RatingRevision
from evaluations.ratings_import import RatingsImportError, import_ratings
from tests import factories

HEADER = "item_id,rubric,rater,rater_kind,value,explanation\n"


@pytest.fixture
def evaluation(project):
    dataset = factories.make_dataset(project, items=3, name="Chats")
    quality = factories.make_rubric(project=project, name="Quality")
    preference = factories.make_rubric(project=project, name="Pref", kind="pairwise")
    return factories.make_evaluation(project, dataset, [quality, preference], name="Study")


def write(tmp_path, text, name="ratings.csv", encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def stored():
    return sorted(
        Rating.objects.values_list(
            "item__external_id", "rubric_version__rubric__name", "rater__name", "value", "explanation"
        )
    )


def test_csv_ratings_are_stored_in_canonical_form_with_new_named_raters(evaluation, tmp_path):
    path = write(
        tmp_path,
        HEADER + "d-0,Quality,old study,human,4.0,fine\n"
        'd-0,Pref@1,old study,human,tie,\nd-1,Pref,gpt-4,model,b,"because, well"\n'
        "d-2,Quality,gpt-4,model,3.72,\n",
    )
    result = import_ratings(evaluation=evaluation, path=path)
    assert (result.rows, result.created, result.updated) == (4, 4, 0)
    assert result.raters_created == ["old study", "gpt-4"]
    assert stored() == [
        ("d-0", "Pref", "old study", "SAME", ""),
        ("d-0", "Quality", "old study", "4", "fine"),
        ("d-1", "Pref", "gpt-4", "B", "because, well"),
        ("d-2", "Quality", "gpt-4", "3.72", ""),
    ]
    assert dict(Rater.objects.values_list("name", "kind")) == {"old study": "human", "gpt-4": "model"}


def test_every_bad_row_is_reported_with_its_line_and_nothing_is_stored(evaluation, tmp_path):
    path = write(
        tmp_path,
        HEADER + "d-0,Quality,ann,human,4,\n"
        "d-9,Quality,ann,human,4,\n"  # line 3: unknown item
        "d-1,Quality,ann,human,6,\n"  # line 4: outside the scale
        "d-1,Fluency,ann,human,2,\n"  # line 5: unknown rubric
        "d-2,Quality,ann,human,3.5,\n"  # line 6: people pick scale values
        "d-2,Pref,ann,robot,1,\n"  # line 7: kind and an ambiguous number
        "d-0,Quality,ann,human,2,\n",
    )  # line 8: a second rating for line 2
    with pytest.raises(RatingsImportError) as caught:
        import_ratings(evaluation=evaluation, path=path)
    assert caught.value.messages == [
        "line 3, column item_id: no item 'd-9' in dataset 'Chats'",
        "line 4, column value: '6' is outside the scale: expected one of 1, 2, 3, 4, 5",
        "line 5, column rubric: rubric 'Fluency' is not in this evaluation (its rubrics: Pref@1, Quality@1)",
        "line 6, column value: '3.5' is outside the scale: expected one of 1, 2, 3, 4, 5",
        "line 7, column rater_kind: rater_kind must be human or model, not 'robot'",
        "line 8: a second rating by 'ann' for item 'd-0' under Quality@1 in this file",
    ]
    assert caught.value.total == 6
    assert not Rating.objects.exists()
    assert not Rater.objects.exists()


def test_pairwise_numbers_are_refused_as_ambiguous(evaluation, tmp_path):
    path = write(tmp_path, HEADER + "d-0,Pref,ann,human,1,\n")
    with pytest.raises(
        RatingsImportError,
        match=r"line 2, column value: '1' is not a pairwise choice: expected "
        r"one of A, SAME, B \(numbers are ambiguous",
    ):
        import_ratings(evaluation=evaluation, path=path)


def test_a_missing_column_is_named_before_any_row_is_read(evaluation, tmp_path):
    path = write(tmp_path, "item_id,rubric,rater,value\nd-0,Quality,ann,4\n")
    with pytest.raises(RatingsImportError, match="line 1, column rater_kind: missing column"):
        import_ratings(evaluation=evaluation, path=path)


@pytest.mark.parametrize(
    ("content", "encoding", "message"),
    [
        ("", "utf-8", "the file is empty"),
        (HEADER, "utf-8", "the file has a header but no ratings"),
        (
            HEADER + "d-0,Quality,ann,human,4,\n",
            "utf-16",
            r"the file is encoded as UTF-16 \(little-endian, with BOM\), not UTF-8. Save it as UTF-8.$",
        ),
        (
            HEADER + "d-0,Quality,Jürgen,human,4,\n",
            "latin-1",
            r"line 2: the file is not UTF-8: it looks like Latin-1 \(ISO-8859-1\) \(byte 0xFC on line 2\)",
        ),
        (HEADER + "d-0,Quality,ann,human\n", "utf-8", "line 2: 4 cells where the header has 6 columns"),
    ],
)
def test_unreadable_files_are_refused_with_a_clear_message(evaluation, tmp_path, content, encoding, message):
    with pytest.raises(RatingsImportError, match=message):
        import_ratings(evaluation=evaluation, path=write(tmp_path, content, encoding=encoding))
    assert not Rating.objects.exists()


def test_text_that_stops_being_utf8_after_the_first_64_kib_is_refused_naming_its_line(evaluation, tmp_path):
    rows = "".join(f"d-0,Quality,rater {n},human,4,{'x' * 100}\n" for n in range(1000))
    path = tmp_path / "ratings.csv"
    path.write_bytes((HEADER + rows).encode() + "d-1,Quality,Jürgen,human,4,\n".encode("latin-1"))
    with pytest.raises(RatingsImportError, match=r"line 1002: the text stops being valid UTF-8 on line 1002"):
        import_ratings(evaluation=evaluation, path=path)
    assert not Rating.objects.exists()


def test_a_binary_file_is_refused_as_such(evaluation, tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    with pytest.raises(RatingsImportError, match=r"this is a binary file \(a ZIP archive"):
        import_ratings(evaluation=evaluation, path=path)


def test_bom_and_crlf_are_accepted(evaluation, tmp_path):
    path = write(
        tmp_path, "\ufeff" + HEADER.replace("\n", "\r\n") + 'd-0,Quality,ann,human,5,"two\r\nlines"\r\n'
    )
    import_ratings(evaluation=evaluation, path=path)
    assert stored() == [("d-0", "Quality", "ann", "5", "two\r\nlines")]


def test_reimporting_a_changed_rating_updates_it_and_keeps_the_earlier_value(evaluation, tmp_path):
    import_ratings(
        evaluation=evaluation,
        path=write(tmp_path, HEADER + "d-0,Quality,ann,human,2,first\nd-1,Quality,ann,human,3,\n"),
    )
    result = import_ratings(
        evaluation=evaluation,
        path=write(
            tmp_path,
            HEADER + "d-0,Quality,ann,human,4,second\nd-1,Quality,ann,human,3,\nd-2,Quality,ann,human,1,\n",
        ),
    )
    assert (result.created, result.updated, result.unchanged) == (1, 1, 1)
    assert Rating.objects.get(item__external_id="d-0").value == "4"
    revision = RatingRevision.objects.get()
    assert (revision.rating.item.external_id, revision.value, revision.explanation) == ("d-0", "2", "first")


def test_jsonl_with_parse_failures_and_side_shown(evaluation, tmp_path):
    rows = [
        {
            "item_id": "d-0",
            "rubric": "Pref",
            "rater": "judge",
            "rater_kind": "model",
            "value": None,
            "parse_failed": True,
            "explanation": "",
        },
        {
            "item_id": "d-1",
            "rubric": "Pref",
            "rater": "ann",
            "rater_kind": "human",
            "value": "A",
            "side_shown": "response",
        },
        {
            "item_id": "d-2",
            "rubric": "Quality",
            "rater": "ann",
            "rater_kind": "human",
            "value": 5,
            "extra": 1,
        },
    ]
    path = write(tmp_path, "\n".join(json.dumps(row) for row in rows) + "\n", name="ratings.jsonl")
    result = import_ratings(evaluation=evaluation, path=path)
    assert result.ignored_columns == ["extra"]
    failed = Rating.objects.get(rater__name="judge")
    assert (failed.value, failed.parse_failed) == ("", True)
    assert Rating.objects.get(item__external_id="d-1").side_shown == "response"
    assert Rating.objects.get(item__external_id="d-2").value == "5"


def test_jsonl_errors_name_their_lines(evaluation, tmp_path):
    first = {"item_id": "d-0", "rubric": "Quality", "rater": "a", "rater_kind": "human", "value": 2}
    text = json.dumps(first) + "\n[1, 2]\n{oops\n"
    with pytest.raises(RatingsImportError) as caught:
        import_ratings(evaluation=evaluation, path=write(tmp_path, text, name="r.jsonl"))
    assert caught.value.messages[0] == "line 2: expected a JSON object, found a list"
    assert caught.value.messages[1].startswith("line 3: malformed JSON")


def test_a_known_rater_of_the_other_kind_is_refused(evaluation, project, tmp_path):
    factories.make_rater(project, name="gpt-4", kind="model")
    with pytest.raises(RatingsImportError, match="rater 'gpt-4' is a model rater in this project, not human"):
        import_ratings(evaluation=evaluation, path=write(tmp_path, HEADER + "d-0,Quality,gpt-4,human,3,\n"))


def test_command_reports_success_and_refusal(evaluation, tmp_path, capsys):
    call_command(
        "import_ratings", str(write(tmp_path, HEADER + "d-0,Quality,ann,human,3,\n")), "--evaluation", "Study"
    )
    assert "Study: 1 ratings read: 1 new" in capsys.readouterr().out
    with pytest.raises(CommandError, match="line 2, column value: '9' is outside the scale"):
        call_command(
            "import_ratings",
            str(write(tmp_path, HEADER + "d-0,Quality,ann,human,9,\n")),
            "--evaluation",
            "Study",
            "--project",
            "demo-study",
        )
    with pytest.raises(CommandError, match="No evaluation named 'Nope'"):
        call_command("import_ratings", "x.csv", "--evaluation", "Nope")


def test_batches_mix_new_changed_and_unchanged_ratings(evaluation, tmp_path, monkeypatch):
    from evaluations import ratings_import

    monkeypatch.setattr(ratings_import, "BATCH_SIZE", 2)
    rows = [f"d-{n},Quality,r{k},human,{1 + (n + k) % 5},\n" for n in range(3) for k in range(3)]
    import_ratings(evaluation=evaluation, path=write(tmp_path, HEADER + "".join(rows[:5])))
    changed = [row.replace(",human,1,", ",human,5,") for row in rows]
    result = import_ratings(evaluation=evaluation, path=write(tmp_path, HEADER + "".join(changed)))
    assert (result.created, result.updated, result.unchanged) == (4, 1, 4)
    assert Rating.objects.count() == 9
    assert RatingRevision.objects.count() == 1


def test_databases_without_copy_insert_through_bulk_create(evaluation, tmp_path, monkeypatch):
    from evaluations import db

    monkeypatch.setattr(db, "_postgresql", lambda: False)  # on PostgreSQL too, the path SQLite takes
    result = import_ratings(
        evaluation=evaluation, path=write(tmp_path, HEADER + "d-0,Quality,ann,human,4,ok\n")
    )
    assert result.created == 1
    assert stored() == [("d-0", "Quality", "ann", "4", "ok")]
    assert Rating.objects.get().details == {"imported": True}


def test_a_rating_written_meanwhile_refuses_the_whole_file(evaluation, project, tmp_path, monkeypatch):
    from evaluations import ratings_import

    path = write(tmp_path, HEADER + "d-0,Quality,ann,human,4,\nd-1,Quality,ann,human,2,\n")
    rater = factories.make_rater(project, name="ann")
    quality = evaluation.rubric_versions.get(rubric__name="Quality")
    write_batch = ratings_import._write_batch

    def someone_rates_first(*args, **kwargs):
        factories.make_rating(
            evaluation, evaluation.dataset.items.get(external_id="d-1"), quality, rater, "5"
        )
        write_batch(*args, **kwargs)

    monkeypatch.setattr(ratings_import, "_write_batch", someone_rates_first)
    with pytest.raises(RatingsImportError, match="the ratings changed while this file was imported"):
        import_ratings(evaluation=evaluation, path=path)
    assert not Rating.objects.exists()  # the whole import, and what happened inside it, rolled back
