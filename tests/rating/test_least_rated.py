"""The "least rated first" order hands out the open item with the fewest ratings and reservations."""

import pytest

from rating import services
from rating.models import Slot
from tests import factories
from tests.rating.conftest import add_annotators

pytestmark = pytest.mark.django_db


def test_least_rated_first_hands_each_rater_an_item_nobody_holds_before_a_second_look(project, likert):
    dataset = factories.make_dataset(project, items=4)
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=2)
    services.update_assignment_settings(
        evaluation=evaluation, overlap=2, reservation_minutes=30, order="least_rated"
    )
    evaluation.refresh_from_db()
    people = add_annotators(evaluation, 4)
    handed = [services.next_assignment(evaluation=evaluation, user=person) for person in people]
    assert all(assignment is not None for assignment in handed)
    # Four people, four items: each gets one nobody holds (in dataset or shuffled order two would share).
    assert len({assignment.item_id for assignment in handed if assignment}) == 4
    assert sorted(Slot.objects.filter(evaluation=evaluation).values_list("claims", flat=True)) == [1, 1, 1, 1]
    more = add_annotators(evaluation, 4, prefix="late")
    again = [services.next_assignment(evaluation=evaluation, user=person) for person in more]
    assert len({assignment.item_id for assignment in again if assignment}) == 4  # then the second round
    assert set(Slot.objects.filter(evaluation=evaluation).values_list("claims", flat=True)) == {2}
    assert (
        services.next_assignment(evaluation=evaluation, user=add_annotators(evaluation, 1, prefix="x")[0])
        is None
    )
