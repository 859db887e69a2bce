"""JSON from uploads, refused when lists and objects nest deeper than MAX_JSON_DEPTH.

No item or rating needs more than a few levels; a document built to nest thousands deep would
otherwise crash the parser (RecursionError) or whatever walks the stored value later. The depth
walk is iterative, and runs only when the text holds enough brackets to be that deep.
"""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 64
TOO_DEEP = f"the JSON nests lists and objects more than {MAX_JSON_DEPTH} levels deep"


class NestedTooDeep(ValueError):
    def __init__(self) -> None:
        super().__init__(TOO_DEEP)


def loads(text: str) -> Any:
    """json.loads, raising NestedTooDeep for a value nested deeper than MAX_JSON_DEPTH."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise NestedTooDeep() from None
    check_depth(value, text)
    return value


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
