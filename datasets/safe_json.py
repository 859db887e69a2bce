"""JSON from uploads, refused when lists and objects nest deeper than MAX_JSON_DEPTH.

No item or rating needs more than a few levels; a document built to nest thousands deep would
otherwise crash the parser (RecursionError) or whatever walks the stored value later. The depth
walk is iterative, and runs only when the text holds enough brackets to be that deep.

orjson parses (several times faster than json, which matters for 100k-line uploads); json parses
what orjson refuses or would read differently, so the values and error messages are json's: NaN,
Infinity, lone surrogates, invalid JSON, and integers past 64 bits, which orjson reads as floats.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

MAX_JSON_DEPTH = 64
TOO_DEEP = f"the JSON nests lists and objects more than {MAX_JSON_DEPTH} levels deep"


class NestedTooDeep(ValueError):
    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


# Twenty digits in a row may be an integer beyond 64 bits (2**64 has 20): such text goes to json. Found by
# mapping every digit to 0 and looking for twenty zeros (all at C speed; a regular expression took 60 us).
_ZEROS = b"0" * 20
_DIGITS_AS_ZEROS = bytes.maketrans(b"0123456789", _ZEROS[:10])


def _long_digits(text: str) -> bool:
    return _ZEROS in text.encode(errors="surrogatepass").translate(_DIGITS_AS_ZEROS)


def loads(text: str) -> Any:
    """json.loads, raising NestedTooDeep for a value nested deeper than MAX_JSON_DEPTH."""
    try:
        value = _json_loads(text) if _long_digits(text) else orjson.loads(text)
    except orjson.JSONDecodeError:
        value = _json_loads(text)  # json's value, or json's error with its message
    check_depth(value, text)
    return value


def _json_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise NestedTooDeep() from None


def check_depth(value: Any, text: str) -> None:
    """Raise NestedTooDeep if `value`, parsed from `text`, nests deeper than MAX_JSON_DEPTH."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _deeper_than(value, MAX_JSON_DEPTH):
        raise NestedTooDeep()


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
