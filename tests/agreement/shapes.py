"""Ratings of a given shape without a database, for what a report costs (tests/agreement, bench/).

`ratings_of_shape` gives a RubricRatings of `people` people and `models` models on `items` items, each
item rated by `per_item` of the people (all of them by default) and by every model, values near a
hidden truth: what `agreement.report.rubric_report` reads from `load_ratings`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import numpy as np

from agreement.reading import RubricRatings
from rubrics.models import RubricVersion

LIKERT = ["1", "2", "3", "4", "5"]
PAIRWISE = ["A", "SAME", "B"]


def ratings_of_shape(
    *,
    people: int,
    items: int,
    models: int = 0,
    per_item: int | None = None,
    kind: str = "likert",
    seed: int = 7,
) -> tuple[RubricRatings, dict[int, dict]]:
    """(ratings, rater directory) of one rubric: people are raters 1..people, models the next ids."""
    rng = np.random.default_rng(seed)
    labels = LIKERT if kind == "likert" else PAIRWISE
    truth = rng.integers(0, len(labels), items)
    per_item = people if per_item is None else min(per_item, people)
    chosen = np.argsort(rng.random((items, people)), axis=1)[:, :per_item] if people else np.zeros((items, 0))
    item_ids, rater_ids, codes = [], [], []
    for rater in range(people + models):
        mine = (chosen == rater).any(axis=1) if rater < people else np.ones(items, dtype=bool)
        noise = rng.choice([-1, 1], items) * (rng.random(items) < (0.3 if rater < people else 0.5))
        item_ids.append(np.flatnonzero(mine) + 1)
        rater_ids.append(np.full(int(mine.sum()), rater + 1))
        codes.append(np.clip(truth + noise, 0, len(labels) - 1)[mine])
    value_codes = np.concatenate(codes).astype(np.int64)
    label_values = np.arange(1, len(labels) + 1, dtype=np.float64) if kind == "likert" else np.arange(3.0)
    version = SimpleNamespace(rubric=SimpleNamespace(name=f"Shape {kind}"), number=1)
    data = RubricRatings(
        version=cast(RubricVersion, version),
        kind=kind,
        labels=labels,
        label_values=label_values,
        item_ids=np.concatenate(item_ids).astype(np.int64),
        rater_ids=np.concatenate(rater_ids).astype(np.int64),
        values=label_values[value_codes],
        levels=label_values.copy(),
        value_codes=value_codes,
        parse_failed=np.zeros(value_codes.shape[0], dtype=bool),
        invalid=np.zeros(value_codes.shape[0], dtype=bool),
    )
    directory = {
        rater + 1: {
            "name": f"person-{rater + 1}" if rater < people else f"judge-{rater + 1 - people}",
            "kind": "human" if rater < people else "model",
            "judge_run": None,
            "simulated": False,
        }
        for rater in range(people + models)
    }
    return data, directory
