import json

import pytest

from datasets.models import Dataset, Item
from datasets.services import import_dataset

from .helpers import database_state, dialog, write_jsonl


def run(project, path, name="Study", **options):
    return import_dataset(project=project, name=name, path=path, **options)


def refused(project, path, **options):
    """Import `path`, assert it was refused without touching the database; the result."""
    before = database_state()
    result = run(project, path, **options)
    assert not result.ok
    assert result.error_count >= 1
    assert database_state() == before
    return result


# ---------------------------------------------------------------- formats


def test_jsonl_imports_every_item_in_order(project, researcher, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [dialog(n) for n in range(5)])
    result = run(project, path, user=researcher)
    assert result.ok and result.created == 5
    dataset = Dataset.objects.get(name="Study")
    assert (
        dataset.item_count == 5 and dataset.created_by == researcher and dataset.source_filename == "d.jsonl"
    )
    items = list(dataset.items.order_by("position"))
    assert [item.external_id for item in items] == [f"d-{n}" for n in range(5)]
    assert items[3].context == [{"speaker": "USER", "text": "Hello, I want to talk about topic 3."}]
    assert items[3].response == {"speaker": "BOT", "text": "Sure, topic 3 is a fine thing to talk about."}
    assert items[3].metadata == {"topic": "music"}
    assert "topic 3" in items[3].search_text


def test_json_array_is_read_item_by_item_with_line_numbers(project, tmp_path):
    objects = [dialog(n) for n in range(3)]
    objects[2]["turns"][0]["text"] = None
    path = tmp_path / "d.json"
    path.write_text("[\n" + ",\n".join(json.dumps(obj, indent=1) for obj in objects) + "\n]\n")
    result = refused(project, path)
    assert [(e.line, e.field) for e in result.errors] == [
        (2 + 2 * (len(json.dumps(objects[0], indent=1).splitlines())), "turns[0].text")
    ]
    objects[2]["turns"][0]["text"] = "fine"
    path.write_text(json.dumps(objects))
    assert run(project, path).created == 3


def test_json_array_larger_than_the_read_chunk_streams(project, tmp_path, monkeypatch):
    monkeypatch.setattr("datasets.readers.CHUNK_CHARS", 100)
    path = tmp_path / "d.json"
    path.write_text(json.dumps([dialog(n) for n in range(40)], indent=2))
    result = run(project, path)
    assert result.ok and result.created == 40


def test_openai_chat_messages_import(project, tmp_path):
    path = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {
                "id": "c1",
                "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
            }
        ],
    )
    assert run(project, path).ok
    item = Item.objects.get()
    assert item.context == [{"speaker": "USER", "text": "Hi"}] and item.response["speaker"] == "BOT"


def test_csv_long_groups_rows_by_dialog_and_orders_turns(project, tmp_path):
    path = tmp_path / "long.csv"
    path.write_text(
        "dialog_id,turn_index,speaker,text,topic\n"
        'a,1,BOT,"Hello,\nfriend",greeting\n'
        "a,0,USER,Hi,greeting\n"
        "b,0,USER,Bye,farewell\n"
        "b,1,BOT,See you,farewell\n"
    )
    result = run(project, path)
    assert result.ok and result.format == "csv-long"
    a, b = Item.objects.order_by("position")
    assert a.context == [{"speaker": "USER", "text": "Hi"}]
    assert a.response == {"speaker": "BOT", "text": "Hello,\nfriend"}
    assert a.metadata == {"topic": "greeting"} and b.external_id == "b"


def test_csv_wide_with_column_mapping(project, tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text(
        "conv,history,answer_a,answer_b,topic\n"
        'x1,"USER: Hi there\nBOT: Hello\nUSER: How are you?",Great!,Fine.,smalltalk\n'
    )
    result = run(
        project,
        path,
        mapping={"id": "conv", "dialog": "history", "response": "answer_a", "baseline": "answer_b"},
    )
    assert result.ok, result.errors
    item = Item.objects.get()
    assert item.external_id == "x1"
    assert [turn["speaker"] for turn in item.context] == ["USER", "BOT", "USER"]
    assert item.response == {"speaker": "BOT", "text": "Great!"}
    assert item.baseline == {"speaker": "BOT", "text": "Fine."}
    assert item.metadata == {"topic": "smalltalk"}


def test_append_adds_after_the_last_position_and_checks_ids_against_the_dataset(project, tmp_path):
    assert run(project, write_jsonl(tmp_path / "a.jsonl", [dialog(0), dialog(1)])).ok
    assert run(project, write_jsonl(tmp_path / "b.jsonl", [dialog(2)]), append=True).ok
    dataset = Dataset.objects.get()
    assert list(dataset.items.values_list("position", flat=True)) == [0, 1, 2]
    assert dataset.item_count == 3
    result = refused(project, write_jsonl(tmp_path / "c.jsonl", [dialog(3), dialog(1)]), append=True)
    assert result.errors[0].line == 2 and "already has an item" in result.errors[0].message


def test_an_existing_name_without_append_is_refused(project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [dialog(0)])
    assert run(project, path).ok
    result = refused(project, path)
    assert "already exists" in result.errors[0].message


# ---------------------------------------------------------------- bad input


def test_empty_file(project, tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert "empty" in refused(project, path).errors[0].message
    path.write_bytes(b"\n \r\n")
    assert "empty" in refused(project, path).errors[0].message


def test_binary_file(project, tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 20)
    assert "binary file" in refused(project, path).errors[0].message
    path.write_bytes(bytes(range(256)) * 20)
    assert "binary file" in refused(project, path).errors[0].message


def test_file_over_the_size_limit_is_refused_unread(project, tmp_path, settings, monkeypatch):
    settings.CONCORD_MAX_UPLOAD_BYTES = 100
    path = write_jsonl(tmp_path / "big.jsonl", [dialog(n) for n in range(5)])

    def no_reading(*args, **kwargs):
        raise AssertionError("the file was opened")

    monkeypatch.setattr("datasets.services.detect_encoding", no_reading)
    message = refused(project, path).errors[0].message
    assert "over the limit of 100 bytes" in message


def test_truncated_last_line(project, tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(dialog(0)) + "\n" + json.dumps(dialog(1))[:40])
    error = refused(project, path).errors[0]
    assert error.line == 2 and "truncated last line" in error.message


def test_a_line_that_is_a_json_list(project, tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text(json.dumps(dialog(0)) + "\n" + json.dumps([dialog(1), dialog(2)]) + "\n")
    error = refused(project, path).errors[0]
    assert error.line == 2 and "JSON list" in error.message


def test_malformed_json_names_line_and_column(project, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(dialog(0)) + '\n{"id": 1,, "turns": []}\n')
    error = refused(project, path).errors[0]
    assert error.line == 2 and "malformed JSON" in error.message and "(column 10)" in error.message


def test_a_line_whose_brackets_are_not_closed_is_named_at_its_end_not_column_one(project, tmp_path):
    """Seen in a browser review: the error said column 1 where the line simply ended too soon."""
    path = tmp_path / "open.jsonl"
    path.write_text(json.dumps(dialog(0)) + '\n{"id": "x2", "turns": [ {"speaker": "USER", "text": "oops"}\n')
    error = refused(project, path).errors[0]
    assert (
        error.line == 2
        and "at the end of the line, column 60: is a bracket or brace not closed?" in error.message
    )


def test_crlf_line_ends_are_fine(project, tmp_path):
    path = write_jsonl(tmp_path / "crlf.jsonl", [dialog(n) for n in range(3)], newline="\r\n")
    assert run(project, path).created == 3
    csv_path = tmp_path / "crlf.csv"
    csv_path.write_bytes(b"dialog_id,turn_index,speaker,text\r\na,0,USER,Hi\r\na,1,BOT,Hello\r\n")
    assert run(project, csv_path, name="csv").ok
    assert Item.objects.get(external_id="a").response["text"] == "Hello"


def test_utf16_is_refused_naming_it_or_converted_when_asked(project, tmp_path):
    path = tmp_path / "utf16.jsonl"
    path.write_bytes(json.dumps(dialog(0), ensure_ascii=False).encode("utf-16"))
    assert "UTF-16" in refused(project, path).errors[0].message
    result = run(project, path, convert_encoding=True)
    assert result.ok and "UTF-16" in result.encoding and "converted" in result.encoding


def test_latin1_is_refused_naming_it_or_converted_when_asked(project, tmp_path):
    path = tmp_path / "latin1.jsonl"
    item = dialog(0, response={"speaker": "BOT", "text": "Le café était très bon, à côté de la rivière."})
    path.write_bytes((json.dumps(item, ensure_ascii=False) + "\n").encode("latin-1"))
    error = refused(project, path).errors[0]
    assert "not UTF-8" in error.message and "Latin-1" in error.message and error.line == 1
    assert run(project, path, convert_encoding=True).ok
    assert Item.objects.get().response["text"] == "Le café était très bon, à côté de la rivière."


def test_utf8_with_bom_is_fine(project, tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(dialog(0)).encode())
    assert run(project, path).ok


def test_mojibake_is_listed_refused_and_repaired_on_request(project, tmp_path):
    item = dialog(0, response={"speaker": "BOT", "text": "I canâ€™t say, it was cafÃ© time."})
    path = write_jsonl(tmp_path / "moji.jsonl", [dialog(1), item])
    error = refused(project, path).errors[0]
    assert (error.line, error.field) == (2, "response.text") and "mojibake" in error.message
    result = run(project, path, repair_text=True)
    assert result.ok and result.repair_count == 1
    repair = result.repairs[0]
    assert (repair.line, repair.field) == (2, "response.text")
    assert "â€™" in repair.before and "’" in repair.after
    assert Item.objects.get(external_id="d-0").response["text"] == "I can’t say, it was café time."


def test_mojibake_can_be_kept_unchanged_with_a_warning(project, tmp_path):
    item = dialog(0, response={"speaker": "BOT", "text": "I canâ€™t"})
    result = run(project, write_jsonl(tmp_path / "m.jsonl", [item]), keep_mojibake=True)
    assert result.ok and result.warnings
    assert Item.objects.get().response["text"] == "I canâ€™t"


def test_html_and_script_are_stored_as_text(project, tmp_path):
    text = '<script>alert("x")</script><b>bold</b>'
    path = write_jsonl(tmp_path / "html.jsonl", [dialog(0, response={"speaker": "BOT", "text": text})])
    assert run(project, path).ok
    assert Item.objects.get().response["text"] == text


def test_ten_thousand_duplicate_ids_are_all_reported_quickly(project, tmp_path):
    import time

    lines = [json.dumps(dialog(0))] + [json.dumps(dialog(0)) for _ in range(10_000)]
    path = tmp_path / "dups.jsonl"
    path.write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    result = refused(project, path)
    assert time.monotonic() - started < 5
    assert result.error_count == 10_000
    assert len(result.errors) == 1000  # displayed; the count is complete
    assert result.errors[0].line == 2 and "first used on line 1" in result.errors[0].message


def test_csv_with_a_missing_column(project, tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("dialog_id,turn_index,text\na,0,Hi\n")
    error = refused(project, path, format="csv-long").errors[0]
    assert error.line == 1 and "no column speaker" in error.message
    wide = tmp_path / "wide.csv"
    wide.write_text("id,dialog\nx,USER: hi\n")
    assert "no column for response" in refused(project, wide).errors[0].message


def test_every_problem_in_a_file_is_reported_not_only_the_first(project, tmp_path):
    objects = [dialog(0), {"id": "x", "turns": []}, dialog(2, turns=[{"speaker": "USER"}]), dialog(0)]
    path = write_jsonl(tmp_path / "many.jsonl", objects)
    result = refused(project, path)
    assert [(e.line, e.field) for e in result.errors] == [(2, "turns"), (3, "turns[0].text"), (4, "id")]


@pytest.mark.parametrize("content", ["not json at all\n", "[1, 2\n"])
def test_json_array_errors_are_refused_with_a_line(project, tmp_path, content):
    path = tmp_path / "x.json"
    path.write_text(content)
    error = refused(project, path, format="json").errors[0]
    assert error.line == 1


def test_with_a_progress_callback_the_import_goes_through_a_spool_and_reports_progress(project, tmp_path):
    calls = []
    path = write_jsonl(tmp_path / "p.jsonl", [dialog(n) for n in range(5)])
    result = run(project, path, progress=lambda done, items: calls.append((done, items)))
    assert result.ok and result.created == 5
    assert calls[0] == (0, 0) or calls[0][1] == 0
    assert calls[-1] == (path.stat().st_size, 5)
    more = write_jsonl(tmp_path / "q.jsonl", [dialog(9)])
    assert run(project, more, append=True, progress=lambda done, items: None).ok
    assert list(Dataset.objects.get().items.values_list("position", flat=True)) == [0, 1, 2, 3, 4, 5]


def test_with_a_progress_callback_a_refused_file_changes_nothing(project, tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [dialog(0), dialog(0)])
    result = refused(project, path, progress=lambda done, items: None)
    assert result.errors[0].line == 2


def test_a_file_that_stops_being_utf8_half_way_is_refused_at_that_line(project, tmp_path):
    good = [json.dumps(dialog(n)) for n in range(800)]  # about 180 kB, past the sniffed head
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        ("\n".join(good) + "\n").encode() + json.dumps(dialog(800)).encode().replace(b"topic", b"t\xe9pic")
    )
    error = refused(project, path).errors[-1]
    assert "stops being valid UTF-8" in error.message and error.line == 801


def test_a_json_array_cut_off_in_an_item_is_refused_as_truncated(project, tmp_path):
    path = tmp_path / "cut.json"
    path.write_text("[\n" + json.dumps(dialog(0)) + ",\n" + json.dumps(dialog(1))[:50])
    error = refused(project, path).errors[-1]
    assert "truncated file" in error.message and error.line == 3


def test_a_long_csv_dialog_of_too_many_rows_is_refused_naming_it_without_quadratic_work(project, tmp_path):
    """One dialog of 40,000 rows took 26 s of a web worker (each row checked against every row before)."""
    import time

    rows = "".join(f"d,{n},USER,x\n" for n in range(40_000)) + "e,0,USER,fine\ne,0,BOT,twice\n"
    path = tmp_path / "long.csv"
    path.write_text("dialog_id,turn_index,speaker,text\n" + rows)
    started = time.monotonic()
    result = refused(project, path)
    assert time.monotonic() - started < 5
    messages = [(error.line, error.field, error.message) for error in result.errors]
    assert (2, "turn_index", "dialog 'd' has 40,000 turns; at most 1,000 are allowed") in messages
    assert (40_003, "turn_index", "turn_index 0 appears twice in dialog 'e'") in messages


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("-Infinity", "-Infinity is not a JSON number"),
        ("1e999", "the number 1e999 is too large"),
        ('"hi \\ud800"', "half a UTF-16 pair (a lone surrogate)"),
    ],
)
def test_values_json_has_no_place_for_are_refused_with_their_line(project, tmp_path, value, message):
    """json read NaN and 1e999 (infinity), which the database then refused for the whole file without a
    line; a lone surrogate crashed the import ('internal error')."""
    good = json.dumps(dialog(0))
    bad = '{"id": "x", "turns": [{"speaker": "USER", "text": "hi"}], "metadata": {"score": ' + value + "}}"
    path = tmp_path / "values.jsonl"
    path.write_text(good + "\n" + bad + "\n")
    result = refused(project, path)
    assert [(error.line, message in error.message) for error in result.errors] == [(2, True)]
    array = tmp_path / "values.json"
    array.write_text("[\n" + good + ",\n" + bad + "\n]\n")
    result = refused(project, array)
    assert [(error.line, message in error.message) for error in result.errors] == [(3, True)]


def test_a_line_longer_than_an_item_may_be_is_refused_without_being_held_whole(
    project, tmp_path, monkeypatch
):
    """A single 100 MB line (a metadata string) took 800 MB of memory and made a 104 MB item page."""
    from datasets import readers

    monkeypatch.setattr(readers, "MAX_ITEM_CHARS", 2_000)
    monkeypatch.setattr(readers, "CHUNK_CHARS", 100)  # the rest of the line is read past in small pieces
    long = json.dumps(dialog(1, metadata={"blob": "x" * 10_000}))
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(dialog(0)) + "\n" + long + "\n" + json.dumps(dialog(0)) + "\n")
    result = refused(project, path)
    messages = [(error.line, error.message) for error in result.errors]
    assert (2, "this line is over 0 MB long: an item may be at most that") in messages
    assert any(line == 3 and "first used on line 1" in message for line, message in messages)  # read on


@pytest.mark.parametrize(
    ("item", "field", "message"),
    [
        ({"turns": [{"speaker": "US\u0000ER", "text": "hi"}]}, "turns[0].speaker", "speaker contains a NUL"),
        ({"metadata": {"k\u0000": 1}}, "metadata", "contains a NUL character"),
        ({"metadata": {"k": "a\u0000b"}}, "metadata", "a metadata value contains a NUL character"),
        ({"metadata": {"k" * 300: 1}}, "metadata", "a metadata key is 300 characters long; at most 200"),
        (
            {"metadata": {"k": "x" * 200_000}},
            "metadata",
            "the metadata is 200,008 bytes of JSON; at most 100,000",
        ),
    ],
)
def test_speakers_and_metadata_that_cannot_be_stored_or_shown_are_refused_naming_the_field(
    project, tmp_path, item, field, message
):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**dialog(0), **item}) + "\n")
    result = refused(project, path)
    assert [(e.line, e.field, message in e.message) for e in result.errors] == [(1, field, True)]
