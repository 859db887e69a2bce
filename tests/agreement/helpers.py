"""Build evaluations with ratings for the agreement tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evaluations.models import Rater, Rating
from tests import factories


def add_ratings(evaluation, version, table: Mapping[str, Any], *, kind: dict[str, str] | None = None) -> dict:
    """Ratings from {rater name: [value per item or None]} over the evaluation's items in order.

    A value of "!" stores a parse failure. Raters named in `kind` get that kind (default human).
    """
    items = list(evaluation.dataset.items.order_by("position"))
    raters = {}
    rows = []
    for name, values in table.items():
        rater_kind = (kind or {}).get(name, "human")
        rater, _ = Rater.objects.get_or_create(
            project=evaluation.project, name=name, defaults={"kind": rater_kind}
        )
        raters[name] = rater
        for item, value in zip(items, values, strict=False):
            if value is None:
                continue
            failed = value == "!"
            rows.append(
                Rating(
                    evaluation=evaluation,
                    item=item,
                    rubric_version=version,
                    rater=rater,
                    value="" if failed else str(value),
                    parse_failed=failed,
                )
            )
    Rating.objects.bulk_create(rows)
    return raters


def make_rated_evaluation(
    project, *, kind: str, table: Mapping[str, Any], models=(), scale=None, metadata=None
):
    """An evaluation of len(items) items with one rubric of `kind` and the ratings in `table`."""
    n = max((len(v) for v in table.values()), default=0)
    dataset = factories.make_dataset(project, items=n)
    if metadata is not None:
        for item, meta in zip(dataset.items.order_by("position"), metadata, strict=True):
            item.metadata = meta
            item.save(update_fields=["metadata"])
    # The scale sits in the prompt ({criterion}, {scale}), as every rubric version people and judges read
    # must have it: later versions made from this one (compare, examples) are checked for that.
    template = "Rate the last response for {criterion}.\n\n{scale}\n\n{{Dialog}}\n\nScore:"
    version = factories.make_rubric(project=project, kind=kind, scale=scale, template=template)
    evaluation = factories.make_evaluation(project, dataset, [version], overlap=3)
    add_ratings(evaluation, version, table, kind={name: "model" for name in models})
    return evaluation, version


def random_table(rng: np.random.Generator, *, items: int, raters: list[str], labels: list[str], missing=0.2):
    table = {}
    truth = rng.integers(0, len(labels), items)
    for name in raters:
        noise = rng.integers(-1, 2, items)
        codes = np.clip(truth + noise * (rng.random(items) < 0.4), 0, len(labels) - 1)
        values = [labels[c] for c in codes]
        table[name] = [None if rng.random() < missing else v for v in values]
    return table
