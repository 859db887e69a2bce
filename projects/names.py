"""Names built from other names (a run's rater, a project's address, a rubric's copy), cut to fit the
column that stores them. What makes such a name unique ("· run 3", "-2", "(examples 2)") is its tail, so
the head is cut, with an ellipsis, and the tail is kept whole."""

from django.db import models

ELLIPSIS = "…"


def fit(head: str, tail: str = "", *, limit: int, ellipsis: str = ELLIPSIS) -> str:
    """`head + tail` in at most `limit` characters: `head` cut (ending in `ellipsis`) when it must be."""
    room = limit - len(tail)
    if len(head) <= room:
        return head + tail
    return head[: max(0, room - len(ellipsis))].rstrip() + ellipsis + tail


def max_length(model: type[models.Model], field: str) -> int:
    """The column width of a model's text field, for forms and built names to hold to."""
    length = getattr(model._meta.get_field(field), "max_length", None)
    assert length is not None, f"{model.__name__}.{field} has no max_length"
    return int(length)
