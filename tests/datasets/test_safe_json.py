import json

import pytest

from datasets import db, safe_json


@pytest.mark.parametrize(
    "text",
    [
        '{"id": "a", "n": 18446744073709551616, "m": -18446744073709551617}',  # past 64 bits: still ints
        '{"s": "\\ud83d\\ude00 a surrogate pair is one character"}',
        '{"a": 1, "a": 2}',
        '{"f": 1e300, "g": 0.1, "h": 12345678901234567890.5}',
        '{"t": "caf\\u00e9 \\"quoted\\" \\\\ back\\tslash"}',
    ],
)
def test_uploads_are_read_as_json_reads_them(text):
    parsed = safe_json.loads(text)
    expected = json.loads(text)
    assert repr(parsed) == repr(expected)  # repr: NaN != NaN, and 1 == 1.0 would hide a float


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ('{"x": NaN, "y": Infinity}', "NaN is not a JSON number", 6),
        ('{"x": 1, "y": -Infinity}', "-Infinity is not a JSON number", 15),  # orjson: at the I
        ('{"s": "\\ud800 lone surrogate"}', "half a UTF-16 pair", 7),
        ('{"f": 1e400, "g": 0.1}', "the number 1e400 is too large", 6),
        ('{"n": 18446744073709551616, "f": 1e400}', "the number 1e400 is too large", 33),  # json alone
        ('{"n": 18446744073709551616, "s": "\\udc00"}', "half a UTF-16 pair", 34),
    ],
)
def test_values_json_has_none_for_are_refused_saying_where(text, message, position):
    """json reads them (NaN, infinity, text that is no characters) and the database refuses them later,
    for the whole file and without a line."""
    with pytest.raises(json.JSONDecodeError) as raised:
        safe_json.loads(text)
    assert message in raised.value.msg and raised.value.pos == position


def test_malformed_json_gets_json_own_message():
    with pytest.raises(json.JSONDecodeError) as raised:
        safe_json.loads('{"id": "a", }')
    assert raised.value.msg == "Expecting property name enclosed in double quotes"
    assert raised.value.pos == 12


@pytest.mark.parametrize(
    "value",
    [
        {"text": 'say "hi"\n\ttab \\ back', "n": 2**70, "f": 0.1, "u": "\u2028 é 🙂", "none": None},
        [{"speaker": "BOT", "text": "\x01\x7f"}],
        {"nan": float("nan")},
    ],
)
def test_item_json_for_copy_is_the_json_json_writes(value):
    field = db._json_field(value)
    assert "\n" not in field and "\t" not in field and "\r" not in field
    text = field.replace("\\\\", "\\")
    assert repr(json.loads(text)) == repr(json.loads(json.dumps(value, ensure_ascii=False)))
