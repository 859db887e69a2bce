"""Invariants that live in the database, checked by writing past the ORM's good manners."""

import pytest
from django.db import IntegrityError, transaction

from evaluations.models import Rating
from rubrics.models import RubricVersion
from tests import factories


@pytest.fixture
def rated(project):
    version = factories.make_rubric(project=project)
    dataset = factories.make_dataset(project, items=2)
    evaluation = factories.make_evaluation(project, dataset, [version])
    rater = factories.make_rater(project)
    item = dataset.items.first()
    assert item is not None
    rating = factories.make_rating(evaluation, item, version, rater, "4")
    return rating


@pytest.mark.django_db(transaction=True)
def test_second_current_rating_for_same_rater_item_and_version_is_refused(rated):
    with pytest.raises(IntegrityError), transaction.atomic():
        Rating.objects.create(
            evaluation=rated.evaluation,
            item=rated.item,
            rubric_version=rated.rubric_version,
            rater=rated.rater,
            value="5",
        )


@pytest.mark.django_db(transaction=True)
def test_rubric_version_with_ratings_is_frozen_in_the_database(rated):
    with pytest.raises(Exception, match="frozen"), transaction.atomic():
        RubricVersion.objects.filter(pk=rated.rubric_version_id).update(prompt_template="changed")
    assert RubricVersion.objects.get(pk=rated.rubric_version_id).prompt_template != "changed"


@pytest.mark.django_db
def test_unrated_rubric_version_can_still_be_corrected(project):
    version = factories.make_rubric(project=project)
    RubricVersion.objects.filter(pk=version.pk).update(criterion="Typo fixed")
    assert RubricVersion.objects.get(pk=version.pk).criterion == "Typo fixed"


@pytest.mark.django_db(transaction=True)
def test_rating_without_value_must_be_a_parse_failure(rated):
    with pytest.raises(IntegrityError), transaction.atomic():
        Rating.objects.create(
            evaluation=rated.evaluation,
            item=rated.item,
            rubric_version=rated.rubric_version,
            rater=factories.make_rater(rated.evaluation.project),
            value="",
        )


@pytest.mark.django_db
def test_user_rater_does_not_take_over_an_imported_rater_with_the_same_name(project, annotator):
    from evaluations.models import Rater

    imported = factories.make_rater(project, name=annotator.username)
    rater = Rater.for_user(project, annotator)
    assert rater != imported
    assert rater.user == annotator
    assert rater.name == f"{annotator.username} (account {annotator.pk})"
    assert Rater.for_user(project, annotator) == rater
