"""rating/db.py queues the same slots, in the same order, on PostgreSQL and SQLite."""

from datasets.models import Item
from evaluations.models import Evaluation
from rating import db
from rating.models import Slot, shuffled_rank
from tests import factories


def test_slots_are_queued_once_in_dataset_order(evaluation):
    db.insert_slots(evaluation=evaluation, shuffled=False)
    db.insert_slots(evaluation=evaluation, shuffled=False)  # nothing new: nothing added
    ranks = dict(Slot.objects.filter(evaluation=evaluation).values_list("item__position", "rank"))
    assert ranks == {n: n for n in range(4)}


def test_shuffled_ranks_are_the_same_as_python_computes_them(evaluation):
    # The PostgreSQL INSERT ... SELECT computes the rank in SQL; it must agree with shuffled_rank.
    db.insert_slots(evaluation=evaluation, shuffled=True)
    slots = Slot.objects.filter(evaluation=evaluation).values_list("item_id", "rank")
    assert {item: rank for item, rank in slots} == {
        item: shuffled_rank(evaluation_id=evaluation.pk, item_id=item)
        for item in Item.objects.filter(dataset=evaluation.dataset).values_list("pk", flat=True)
    }


def test_items_appended_later_join_the_queue(evaluation):
    db.insert_slots(evaluation=evaluation, shuffled=False)
    Item.objects.create(
        dataset=evaluation.dataset, external_id="late", position=4, context=[], response={"text": "x"}
    )
    db.insert_slots(evaluation=evaluation, shuffled=False)
    assert Slot.objects.filter(evaluation=evaluation).count() == 5
    assert Slot.objects.get(evaluation=evaluation, item__external_id="late").rank == 4


def test_each_evaluation_has_its_own_queue(project, evaluation, likert):
    other = factories.make_evaluation(project, evaluation.dataset, [likert], name="Other")
    db.insert_slots(evaluation=evaluation, shuffled=True)
    db.insert_slots(evaluation=other, shuffled=True)
    assert Slot.objects.filter(evaluation=other).count() == 4
    assert Evaluation.objects.count() == 2
