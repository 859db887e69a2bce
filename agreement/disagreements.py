"""Every item where one model disagrees with the people under one rubric version, ranked, for paging.

The report keeps the first few per model; this list is computed on demand (one query for the
ratings, then NumPy) so the disagreements page and the item page's previous/next can walk all of them
in the report's order.
"""

from __future__ import annotations

from agreement.against_people import disagreement_list
from agreement.reading import load_ratings, rater_directory
from agreement.tables import Context, to_matrix
from datasets.models import Item
from evaluations.models import Evaluation
from rubrics.models import RubricVersion


def ranked_disagreements(*, evaluation: Evaluation, version: RubricVersion, model: str) -> list[dict]:
    """The items where rater `model` (a model rater's name) disagrees with the people, furthest first."""
    data = load_ratings(evaluation=evaluation, version=version)
    raters = rater_directory(evaluation)
    present = sorted(set(data.rater_ids.tolist()), key=lambda r: (raters[r]["kind"], raters[r]["name"]))
    humans = [r for r in present if raters[r]["kind"] == "human"]
    chosen = [r for r in present if raters[r]["kind"] != "human" and raters[r]["name"] == model]
    if not humans or not chosen:
        return []
    matrix = to_matrix(data, humans + chosen)
    context = Context(data=data, matrix=matrix, human_cols=list(range(len(humans))), resamples=0, seed=0)
    names = [raters[r]["name"] for r in humans]
    entries = disagreement_list(context, len(humans), model, names, limit=matrix.item_ids.shape[0])
    external = dict(
        Item.objects.filter(pk__in=[e["item_id"] for e in entries]).values_list("pk", "external_id")
    )
    for entry in entries:
        entry["external_id"] = external.get(entry["item_id"], "")
    return entries


def neighbours(entries: list[dict], item_id: int) -> tuple[int | None, dict | None, dict | None]:
    """(0-based position of `item_id`, the entry before it, the entry after it) in a ranked list."""
    for n, entry in enumerate(entries):
        if entry["item_id"] == item_id:
            before = entries[n - 1] if n > 0 else None
            after = entries[n + 1] if n + 1 < len(entries) else None
            return n, before, after
    return None, None, None
