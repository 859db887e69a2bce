"""What the rating app does differently on PostgreSQL and on SQLite; nothing else in it asks which."""

from django.db import connection

from agreement.uncertainty import item_uncertainty, unsure_first_rank
from datasets.models import Item
from evaluations.models import Evaluation, ExcludedItem

from .models import Slot, shuffled_rank


def insert_slots(*, evaluation: Evaluation, shuffled: bool, unsure_first: bool = False) -> None:
    """Queue the evaluation's items that have no slot yet and are not excluded (all of them, the first
    time): one INSERT ... SELECT on PostgreSQL (its md5 gives the same shuffled rank as `shuffled_rank`),
    bulk_create elsewhere and for `unsure_first` (ranked by the judges' uncertainty, computed in Python)."""
    if connection.vendor == "postgresql" and not unsure_first:
        _insert_in_sql(evaluation=evaluation, shuffled=shuffled)
    else:
        _insert_in_python(evaluation=evaluation, shuffled=shuffled, unsure_first=unsure_first)


def _insert_in_sql(*, evaluation: Evaluation, shuffled: bool) -> None:
    """Slots for the dataset's items that have none yet (all of them, the first time)."""
    rank = (
        "('x' || substr(md5(%s::text || ':' || i.id::text), 1, 15))::bit(60)::bigint"
        if shuffled
        else "i.position"
    )
    params: list[int] = [evaluation.pk] + ([evaluation.pk] if shuffled else [])
    params += [evaluation.dataset_id, evaluation.pk, evaluation.pk]
    table = Slot._meta.db_table
    excluded = ExcludedItem._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (evaluation_id, item_id, rank, claims, is_open) "
            f"SELECT %s, i.id, {rank}, 0, true FROM {Item._meta.db_table} i WHERE i.dataset_id = %s "
            f"AND NOT EXISTS (SELECT 1 FROM {table} s WHERE s.evaluation_id = %s AND s.item_id = i.id) "
            f"AND NOT EXISTS (SELECT 1 FROM {excluded} e WHERE e.evaluation_id = %s AND e.item_id = i.id)",
            params,
        )


def _insert_in_python(*, evaluation: Evaluation, shuffled: bool, unsure_first: bool = False) -> None:
    """Slots for the items without one; `unsure_first`: by the judges' uncertainty (agreement.uncertainty)."""
    queued = set(Slot.objects.filter(evaluation=evaluation).values_list("item_id", flat=True))
    items = evaluation.items().values_list("id", "position")
    unsure = item_uncertainty(evaluation) if unsure_first else {}

    def rank(item_id: int, position: int) -> int:
        if not shuffled:
            return position
        tie = shuffled_rank(evaluation_id=evaluation.pk, item_id=item_id)
        return unsure_first_rank(unsure.get(item_id, 0.0), tie) if unsure_first else tie

    Slot.objects.bulk_create(
        (
            Slot(evaluation=evaluation, item_id=item_id, rank=rank(item_id, position))
            for item_id, position in items.iterator(chunk_size=5000)
            if item_id not in queued
        ),
        batch_size=2000,
    )
