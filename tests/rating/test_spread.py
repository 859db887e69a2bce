"""The queue moves items with the same baseline apart, keeping the evaluation's order otherwise."""

import pytest

from datasets.models import Dataset, Item
from rating import services
from rating.spread import spread
from tests import factories


def test_an_item_with_the_same_baseline_as_the_last_waits_for_the_next_that_differs():
    assert spread(["x", "x", "y", "y", "z"]) == [0, 2, 1, 3, 4]
    assert spread(["x", "y", "z"]) == [0, 1, 2]  # nothing to move


def test_where_it_cannot_be_avoided_neighbours_share_a_baseline_at_the_end():
    assert spread(["x", "x", "x", "y"]) == [0, 3, 1, 2]


def test_items_without_a_baseline_never_count_as_the_same():
    assert spread([None, None, "x"]) == [0, 1, 2]
    assert spread(["x", None, "x"]) == [0, 1, 2]


@pytest.mark.django_db
@pytest.mark.parametrize("order", ["dataset", "shuffled"])
def test_a_rater_is_never_handed_the_same_baseline_twice_in_a_row(project, likert, annotator, order):
    dataset = Dataset.objects.create(project=project, name="Systems against one baseline")
    # Three dialogs, each answered by three systems against the dialog's one baseline reply, in a row.
    Item.objects.bulk_create(
        Item(
            dataset=dataset,
            external_id=f"c{dialog}-sys{system}",
            position=3 * dialog + system,
            context=[{"speaker": "USER", "text": f"Dialog {dialog}"}],
            response={"speaker": "BOT", "text": f"System {system} answers dialog {dialog}"},
            baseline={"speaker": "BOT", "text": f"The baseline's answer to dialog {dialog}"},
        )
        for dialog in range(3)
        for system in range(3)
    )
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=1, annotators=[annotator])
    evaluation.order = order
    evaluation.save()
    handed = []
    while (assignment := services.next_assignment(evaluation=evaluation, user=annotator)) is not None:
        handed.append((assignment.item.baseline or {})["text"])
        services.set_aside(
            evaluation=evaluation, item_id=assignment.item_id, user=annotator, reason="next", flag=False
        )
    assert len(handed) == 9
    assert all(before != after for before, after in zip(handed, handed[1:], strict=False)), handed
