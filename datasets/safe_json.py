"""JSON from uploads, refused when lists and objects nest deeper than MAX_JSON_DEPTH.

No item or rating needs more than a few levels; a document built to nest thousands deep would
otherwise crash the parser (RecursionError) or whatever walks the stored value later. The depth
walk is iterative, and runs only when the text holds enough brackets to be that deep.

orjson parses (several times faster than json, which matters for 100k-line uploads); json parses
what orjson refuses or would read differently, so the values and error messages are json's: invalid JSON,
and integers past 64 bits, which orjson reads as floats. What JSON has no value for is refused with the
place it is at, as a JSONDecodeError: NaN and Infinity (which json would read), numbers too large for a
float (1e999, which json reads as infinity) and escapes of half a UTF-16 pair (\\ud800 alone, no character;
the database refuses it later, past the point where the upload could say where it was). An integer of more
digits than Python reads (4,300) is refused naming where it is (NumberTooLong), not as a crash.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import orjson

MAX_JSON_DEPTH = 64
TOO_DEEP = f"the JSON nests lists and objects more than {MAX_JSON_DEPTH} levels deep"


class Unreadable(ValueError):
    """JSON that parses but cannot be taken; its text says why (and where, when it can)."""


class NestedTooDeep(Unreadable):
    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


# Python refuses to read an integer of more digits (int() raises ValueError, a DoS guard of its own).
MAX_INT_DIGITS = sys.get_int_max_str_digits() or sys.int_info.default_max_str_digits


class NumberTooLong(Unreadable):
    def __init__(self, where: str, digits: int) -> None:
        field = f"{where}: " if where else ""
        super().__init__(
            f"{field}a number with {digits:,} digits, too long to read (at most {MAX_INT_DIGITS:,} digits)"
        )


class _LongNumber:
    """An integer too long to read, held in the parsed value until check_numbers names its place."""

    def __init__(self, literal: str) -> None:
        self.digits = len(literal.lstrip("-"))


def _bounded_int(literal: str) -> Any:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        return _LongNumber(literal)
    return int(literal)


# Twenty digits in a row may be an integer beyond 64 bits (2**64 has 20): such text goes to json. Found by
# mapping every digit to 0 and looking for twenty zeros (all at C speed; a regular expression took 60 us).
_ZEROS = b"0" * 20
_DIGITS_AS_ZEROS = bytes.maketrans(b"0123456789", _ZEROS[:10])


def _long_digits(text: str) -> bool:
    return _ZEROS in text.encode(errors="surrogatepass").translate(_DIGITS_AS_ZEROS)


class NotJsonValue(ValueError):
    """A NaN, an Infinity or a number too large for a float, met by `decoder`'s hooks."""

    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal

    @property
    def message(self) -> str:
        if self.literal in ("NaN", "Infinity", "-Infinity"):
            return f"{self.literal} is not a JSON number"
        return f"the number {self.literal[:40]} is too large (JSON numbers here must fit a float)"


def _refuse_constant(literal: str) -> Any:
    raise NotJsonValue(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise NotJsonValue(literal)
    return value


def decoder() -> json.JSONDecoder:
    """json's decoder, raising NotJsonValue where JSON has no value (see the module's text)."""
    return json.JSONDecoder(
        parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int
    )


_DECODER = decoder()
SURROGATE_MESSAGE = "a \\u escape of half a UTF-16 pair (a lone surrogate), which is no character"


def loads(text: str) -> Any:
    """json.loads, raising NestedTooDeep for a value nested deeper than MAX_JSON_DEPTH and NumberTooLong
    for an integer too long to read."""
    try:
        value = _json_loads(text) if _long_digits(text) else orjson.loads(text)
    except orjson.JSONDecodeError as refused:
        if "surrogate" in refused.msg:
            raise json.JSONDecodeError(SURROGATE_MESSAGE, text, refused.pos) from None
        value = _json_loads(text, at=refused.pos)  # json's value, or json's error with its message
    check_depth(value, text)
    check_numbers(value, text)
    return value


def _json_loads(text: str, *, at: int | None = None) -> Any:
    """json's value; `at`: where orjson stopped, the place of a value refused here."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise NestedTooDeep() from None
    except NotJsonValue as error:
        raise json.JSONDecodeError(
            error.message, text, text.find(error.literal) if at is None else at
        ) from None
    if "\\ud" in text.lower() and has_lone_surrogate(value):
        raise json.JSONDecodeError(SURROGATE_MESSAGE, text, text.lower().find("\\ud"))
    return value


def has_lone_surrogate(value: Any) -> bool:
    """Whether a text in `value` (keys too) holds half of a UTF-16 pair: text that cannot be stored."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode()
                except UnicodeEncodeError:
                    return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def check_depth(value: Any, text: str) -> None:
    """Raise NestedTooDeep if `value`, parsed from `text`, nests deeper than MAX_JSON_DEPTH."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _deeper_than(value, MAX_JSON_DEPTH):
        raise NestedTooDeep()


def check_numbers(value: Any, text: str) -> None:
    """Raise NumberTooLong, naming its place (`metadata.x`, `turns[2]`), if `value`, parsed from `text` by
    `decoder()`, holds an integer too long to read."""
    if not _long_digits(text):
        return
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, _LongNumber):
            raise NumberTooLong(where, node.digits)
        if isinstance(node, dict):
            stack.extend((child, f"{where}.{key}" if where else str(key)) for key, child in node.items())
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{n}]") for n, child in enumerate(node))


def _deeper_than(value: Any, limit: int) -> bool:
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
