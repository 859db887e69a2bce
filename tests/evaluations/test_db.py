"""evaluations/db.py stores imported ratings the same way on PostgreSQL and SQLite."""

import datetime as dt

from evaluations import db
from evaluations.models import Rating
from evaluations.ratings_import import _Row
from tests import factories


def row(item_id, version, value, *, explanation="", parse_failed=False, side_shown="") -> _Row:
    return _Row(
        line=1,
        item_id=item_id,
        version=version,
        rater_name="ann",
        rater_kind="human",
        value=value,
        explanation=explanation,
        parse_failed=parse_failed,
        side_shown=side_shown,
    )


def test_imported_ratings_are_stored_with_every_field(project):
    version = factories.make_rubric(project=project, name="Quality")
    dataset = factories.make_dataset(project, items=2)
    evaluation = factories.make_evaluation(project, dataset, [version])
    rater = factories.make_rater(project, name="ann")
    items = list(dataset.items.order_by("position"))
    explanation = 'tab\there, "quoted"\nnew line'
    rows = [
        (row(items[0].pk, version, "4", explanation=explanation), rater.pk),
        (row(items[1].pk, version, "n/a", parse_failed=True, side_shown="response"), rater.pk),
    ]
    now = dt.datetime(2026, 11, 23, 5, 0, tzinfo=dt.UTC)
    db.insert_imported_ratings(evaluation, rows, now)
    db.insert_imported_ratings(evaluation, [], now)  # nothing to insert: nothing happens
    stored = Rating.objects.filter(evaluation=evaluation).order_by("item__position")
    assert [
        (
            r.item_id,
            r.rubric_version_id,
            r.rater_id,
            r.value,
            r.explanation,
            r.parse_failed,
            r.side_shown,
            r.details,
        )
        for r in stored
    ] == [
        (items[0].pk, version.pk, rater.pk, "4", explanation, False, "", {"imported": True}),
        (items[1].pk, version.pk, rater.pk, "n/a", "", True, "response", {"imported": True}),
    ]
