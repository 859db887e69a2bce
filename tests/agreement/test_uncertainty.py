"""The rating queue's "judge least sure first" order: samples, logprobs and judges disagreeing."""

import pytest

from agreement.uncertainty import item_uncertainty, off_mode, rating_uncertainty, unsure_first_rank
from evaluations.models import Rating
from rating import services
from tests import factories
from tests.agreement.helpers import add_ratings

pytestmark = pytest.mark.django_db

SCALE = [1.0, 2.0, 3.0, 4.0, 5.0]


def test_signals_are_zero_when_sure_and_grow_with_disagreement():
    assert off_mode(["3", "3", "3"]) == 0 and off_mode(["3", "3", "4", "5"]) == 0.5
    samples = {"samples": [{"value": "2"}, {"value": "2"}, {"value": "4"}, {"value": "2"}]}
    assert rating_uncertainty(samples, SCALE) == 0.25
    logprobs = {"samples": [{"value": "3.6", "score": 3.6, "argmax": "3"}]}
    assert rating_uncertainty(logprobs, SCALE) == pytest.approx(0.6 / 2)
    assert unsure_first_rank(0.9, 2**60 - 1) < unsure_first_rank(0.1, 0)  # less sure always first


def test_queue_hands_out_the_items_the_judges_are_least_sure_about_first(project, annotator):
    dataset = factories.make_dataset(project, items=6)
    version = factories.make_rubric(project=project, name="Fluency")
    evaluation = factories.make_evaluation(project, dataset, [version], overlap=1, annotators=[annotator])
    evaluation.order = "judge_unsure"
    evaluation.save()
    # Two judges: they disagree on item 4; one judge's samples split on item 2; the rest is sure.
    add_ratings(
        evaluation,
        version,
        {"a": ["1", "2", "3", "4", "5", "3"], "b": ["1", "2", "3", "4", "1", "3"]},
        kind={"a": "model", "b": "model"},
    )
    item2 = dataset.items.get(position=1)
    Rating.objects.filter(item=item2, rater__name="a").update(
        details={"samples": [{"value": "2"}, {"value": "5"}, {"value": "2"}]}
    )

    unsure = item_uncertainty(evaluation)
    assert unsure[dataset.items.get(position=4).pk] == 0.5 and unsure[item2.pk] == pytest.approx(1 / 3)
    first = services.next_assignment(evaluation=evaluation, user=annotator)
    assert first is not None and first.item.position == 4
    services.set_aside(
        evaluation=evaluation, item_id=first.item_id, user=annotator, reason="later", flag=False
    )
    second = services.next_assignment(evaluation=evaluation, user=annotator)
    assert second is not None and second.item_id == item2.pk
