"""agreement/db.py reads the same ratings on PostgreSQL and SQLite."""

import numpy as np
import pytest

from agreement import db
from evaluations.models import Rating
from tests import factories


@pytest.fixture
def ratings(project):
    version = factories.make_rubric(project=project, name="Quality")
    dataset = factories.make_dataset(project, items=3)
    evaluation = factories.make_evaluation(project, dataset, [version])
    raters = [factories.make_rater(project, name=name) for name in ("a", "b")]
    values = {("d-0", "a"): "1", ("d-0", "b"): "2", ("d-1", "a"): "2", ("d-2", "b"): "bad"}
    for (item, rater), value in values.items():
        factories.make_rating(
            evaluation,
            dataset.items.get(external_id=item),
            version,
            next(r for r in raters if r.name == rater),
            value,
            parse_failed=value == "bad",
        )
    return Rating.objects.filter(evaluation=evaluation, rubric_version=version)


def as_rows(read: tuple) -> set[tuple]:
    """The arrays of a read as one (item, rater, value text, parse_failed) per rating, order aside."""
    item_ids, rater_ids, texts, codes, failed = read
    return {
        (int(item), int(rater), texts[code], bool(bad))
        for item, rater, code, bad in zip(item_ids, rater_ids, codes, failed, strict=True)
    }


def test_read_ratings_gives_every_rating_once(ratings):
    expected = set(ratings.values_list("item_id", "rater_id", "value", "parse_failed"))
    read = db.read_ratings(ratings)
    assert as_rows(read) == expected
    assert read[0].dtype == np.int64 and read[4].dtype == bool


def test_read_ratings_of_nothing_is_empty(ratings):
    item_ids, rater_ids, texts, codes, failed = db.read_ratings(ratings.none())
    assert (len(item_ids), len(rater_ids), len(texts), len(codes), len(failed)) == (0, 0, 0, 0, 0)


@pytest.mark.postgres(reason="grouping with packed ids is PostgreSQL's faster read")
def test_grouped_read_equals_the_row_by_row_read(ratings):
    grouped = db.read_grouped(ratings)
    assert as_rows(grouped) == as_rows(db._read_rows(ratings))
    texts = grouped[2]
    assert sorted(texts) == ["1", "2", "bad"]  # "2" of two raters: one text


@pytest.mark.postgres(reason="two halves at once are PostgreSQL's read outside a transaction")
@pytest.mark.django_db(transaction=True)
def test_ratings_read_in_two_halves_at_once_are_the_ratings_read_in_one_query(ratings, monkeypatch):
    halves = []
    read_in_thread = db._read_in_thread

    def half_in_thread(half):
        halves.append(half)
        return read_in_thread(half)

    monkeypatch.setattr(db, "_read_in_thread", half_in_thread)
    a, b = sorted(set(ratings.values_list("rater_id", flat=True)))
    whole = as_rows(db.read_grouped(ratings))
    assert as_rows(db.read_ratings(ratings, raters=[a, b])) == whole
    # A rater the caller did not know of (here b) is read with the rest: nothing is left out.
    other = factories.make_rater(ratings.first().evaluation.project, name="c").pk
    assert as_rows(db.read_ratings(ratings, raters=[a, other])) == whole
    assert len(halves) == 2
    assert as_rows(db.read_ratings(ratings.none(), raters=[a, b])) == set()


def test_load_ratings_places_each_usable_value_among_the_distinct_ones_and_the_matrix_keeps_those_given(
    ratings,
):
    from agreement.reading import load_ratings
    from agreement.tables import to_matrix

    first = ratings.first()
    data = load_ratings(evaluation=first.evaluation, version=first.rubric_version)
    assert data.levels.tolist() == [1.0, 2.0]
    usable = np.isfinite(data.values)
    assert np.array_equal(data.value_codes >= 0, usable)  # "bad" failed to parse: no code
    assert np.array_equal(data.levels[data.value_codes[usable]], data.values[usable])
    # Only the item rated "2": the matrix's levels are the values still given, its codes index them.
    item = first.evaluation.dataset.items.get(external_id="d-1").pk
    matrix = to_matrix(data.only_items(np.array([item])), sorted(set(data.rater_ids.tolist())))
    assert matrix.levels.tolist() == [2.0]
    assert np.array_equal(matrix.value_codes >= 0, np.isfinite(matrix.values))
    assert matrix.levels[matrix.value_codes[np.isfinite(matrix.values)]].tolist() == [2.0]
