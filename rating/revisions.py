"""Revising ratings: the one place a rating gets a new value, its earlier value kept as a RatingRevision.

Used by the rating page (a person revises an item), the ratings import (a file with other values for
ratings already stored) and judge runs (an item's rating written again, e.g. after a resume). A
rating whose compared fields already hold the new values is left alone, so replays change nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from evaluations.models import Rating, RatingRevision

# What a person's or an import's revision compares; judges compare every field they write.
VALUE_FIELDS = ("value", "explanation")

RatingKey = tuple[int, int, int, int]  # evaluation, rater, item, rubric version


def key_of(rating: Rating) -> RatingKey:
    return (rating.evaluation_id, rating.rater_id, rating.item_id, rating.rubric_version_id)


@dataclass
class Saved:
    """How each rating given to `save_ratings` went."""

    created: int = 0
    revised: int = 0
    unchanged: int = 0


def revise_ratings(
    changes: Sequence[tuple[Rating, Mapping[str, Any]]],
    *,
    compared: Collection[str] = VALUE_FIELDS,
    now: datetime | None = None,
) -> list[Rating]:
    """Give each stored rating its new values, keeping its earlier value as a RatingRevision.

    `changes` pairs a current rating row (read by the caller, locked or in the caller's transaction)
    with the fields to write. A rating whose `compared` fields already equal the new values is left
    as it is. One INSERT of the revisions and one UPDATE of the ratings for the whole batch.
    Returns the ratings that were revised.
    """
    now = now or timezone.now()
    revised, revisions, written = [], [], {"updated"}
    for rating, values in changes:
        if all(getattr(rating, name) == values[name] for name in compared):
            continue
        revisions.append(
            RatingRevision(
                rating=rating,
                value=rating.value,
                explanation=rating.explanation,
                side_shown=rating.side_shown,
                seconds_spent=rating.seconds_spent,
                created=rating.updated,
            )
        )
        for name, value in values.items():
            setattr(rating, name, value)
        rating.updated = now
        written.update(values)
        revised.append(rating)
    if revised:
        RatingRevision.objects.bulk_create(revisions, batch_size=1000)
        Rating.objects.bulk_update(revised, sorted(written), batch_size=1000)
    return revised


def save_ratings(
    ratings: Sequence[Rating],
    *,
    fields: Collection[str],
    compared: Collection[str] | None = None,
    none_stored: bool = False,
) -> Saved:
    """Store `ratings` (unsaved, each with its key and values): new ones are created, stored ones revised.

    `fields` are the fields a revision writes; `compared` decides whether a stored rating differs
    (default: all of `fields`). The stored ratings are read with FOR UPDATE, so call this inside a
    transaction. `none_stored`: the caller knows none exists yet (a person's reserved item), so
    nothing is read; the unique constraint still refuses a second rating.
    """
    result = Saved()
    stored: dict[RatingKey, Rating] = {}
    if not none_stored and ratings:
        match = Q()
        for rating in ratings:
            match |= Q(
                evaluation_id=rating.evaluation_id,
                rater_id=rating.rater_id,
                item_id=rating.item_id,
                rubric_version_id=rating.rubric_version_id,
            )
        stored = {key_of(row): row for row in Rating.objects.select_for_update().filter(match)}
    new = [rating for rating in ratings if key_of(rating) not in stored]
    if new:
        Rating.objects.bulk_create(new)
    changes = [
        (stored[key_of(rating)], {name: getattr(rating, name) for name in fields})
        for rating in ratings
        if key_of(rating) in stored
    ]
    revised = revise_ratings(changes, compared=fields if compared is None else compared)
    result.created, result.revised = len(new), len(revised)
    result.unchanged = len(changes) - len(revised)
    return result
