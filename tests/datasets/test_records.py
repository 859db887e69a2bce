import pytest

from datasets.records import ItemRecord, RecordError, check_item_object, parse_item_object


def test_without_response_the_last_turn_is_the_rated_response():
    record = parse_item_object(
        {"id": "d-1", "turns": [{"speaker": "USER", "text": "Hi"}, {"speaker": "BOT", "text": "Hello"}]},
        line=4,
    )
    assert record == ItemRecord(
        external_id="d-1",
        context=[{"speaker": "USER", "text": "Hi"}],
        response={"speaker": "BOT", "text": "Hello"},
        baseline=None,
        metadata={},
        line=4,
    )


def test_explicit_response_and_baseline_keep_all_turns_as_context():
    record = parse_item_object(
        {
            "id": 7,
            "turns": [{"speaker": "A", "text": "one"}, {"speaker": "B", "text": "two"}],
            "response": {"speaker": "B", "text": "three"},
            "baseline": "other",
            "metadata": {"topic": "Concert"},
        }
    )
    assert record.external_id == "7"
    assert [turn["text"] for turn in record.context] == ["one", "two"]
    assert record.response == {"speaker": "B", "text": "three"}
    assert record.baseline == {"speaker": "BOT", "text": "other"}
    assert record.metadata == {"topic": "Concert"}


def test_openai_roles_become_speakers():
    record = parse_item_object(
        {
            "id": "x",
            "messages": [
                {"role": "system", "content": "Be kind."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
            ],
        }
    )
    assert [turn["speaker"] for turn in record.context] == ["SYSTEM", "USER"]
    assert record.response == {"speaker": "BOT", "text": "Hello"}


def test_speakers_are_kept_exactly_as_given():
    record = parse_item_object(
        {"id": "x", "turns": [{"speaker": "Human", "text": "a"}, {"speaker": "gpt-4", "text": "b"}]}
    )
    assert record.context[0]["speaker"] == "Human" and record.response["speaker"] == "gpt-4"


def test_unknown_top_level_keys_are_kept_as_metadata():
    record = parse_item_object({"id": "x", "turns": [{"speaker": "U", "text": "a"}], "topic": "Concert"})
    assert record.metadata == {"topic": "Concert"}


def test_every_problem_of_an_object_is_reported_with_line_and_field():
    record, errors = check_item_object(
        {
            "turns": [
                {"speaker": "USER", "text": None},
                "plain string",
                {"who": "x"},
                {"speaker": "BOT", "text": 5},
            ]
        },
        line=12,
    )
    assert record is None
    assert [(e.line, e.field) for e in errors] == [
        (12, "id"),
        (12, "turns[0].text"),
        (12, "turns[1]"),
        (12, "turns[2]"),
        (12, "turns[3].text"),
    ]
    assert "unknown turn shape" in errors[2].message
    assert "missing text" in errors[1].message


def test_a_json_list_is_not_an_item():
    with pytest.raises(RecordError) as raised:
        parse_item_object([{"id": 1}], line=3)
    assert raised.value.line == 3
    assert "JSON list" in raised.value.message


def test_empty_turns_without_response_is_refused():
    _, errors = check_item_object({"id": "a", "turns": []})
    assert errors[0].field == "turns" and "empty turns" in errors[0].message


def test_over_long_fields_are_refused():
    _, errors = check_item_object({"id": "x" * 201, "turns": [{"speaker": "U", "text": "y" * 100_001}]})
    assert [e.field for e in errors] == ["id", "turns[0].text"]
    assert "at most 200" in errors[0].message


PLAIN = {"id": "d-1", "turns": [{"speaker": "USER", "text": "Hi"}, {"speaker": "BOT", "text": ""}]}


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"metadata": None},
        {"metadata": {"topic": "x"}},
        {"extra": 1},  # an unknown key: the full check (kept as metadata)
        {"id": 5},  # a number id: the full check
    ],
)
def test_a_plain_item_gives_the_record_the_full_check_gives(change):
    # The full check is what parse_item_object does for an item that is not plain: an unknown key
    # ("x_" below) sends it there, and it goes into the metadata, which is then the only difference.
    obj = {**PLAIN, **change}
    record, errors = check_item_object(obj, line=3)
    full, full_errors = check_item_object({**obj, "x_": 0}, line=3)
    assert errors == full_errors == []
    assert record is not None and full is not None
    full.metadata.pop("x_")
    assert record == full


@pytest.mark.parametrize(
    ("turn", "field"),
    [
        ({"speaker": " ", "text": "a"}, "turns[1].speaker"),
        ({"speaker": "BOT", "text": "a\x00b"}, "turns[1].text"),
        ({"speaker": "BOT", "text": None}, "turns[1].text"),
        ({"speaker": "B" * 101, "text": "a"}, "turns[1].speaker"),
        ({"speaker": "BOT", "text": 3}, "turns[1].text"),
    ],
)
def test_a_turn_with_a_problem_is_reported_whatever_the_shape_of_the_item(turn, field):
    record, errors = check_item_object({"id": "d-1", "turns": [PLAIN["turns"][0], turn]}, line=9)
    assert record is None
    assert [(error.line, error.field) for error in errors] == [(9, field)]
