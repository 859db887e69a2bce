"""Can a model stand in for the people? The alt-test of one model rater, as the report's JSON and text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agreement import statistics as st
from agreement.alt_test import (
    ACCURACY,
    MIN_ITEMS_PER_PERSON,
    NEG_RMSE,
    POWER_ITEMS,
    POWER_PEOPLE,
    AltTestResult,
    alt_test,
)
from agreement.tables import Context
from evaluations.models import Evaluation

METRIC_NAMES = {ACCURACY: "accuracy", NEG_RMSE: "negative RMSE"}
EXPERTISE_NAMES = {
    "experts": "expert annotators",
    "skilled": "skilled annotators",
    "crowd": "crowd workers",
    "custom": "a custom choice",
}


@dataclass(frozen=True)
class AltTestSettings:
    """Epsilon and the scoring metric ("" = by rubric kind) of an evaluation, or given on the command line."""

    epsilon: float = 0.15
    metric: str = ""
    expertise: str = "skilled"

    @classmethod
    def of(
        cls, evaluation: Evaluation, *, epsilon: float | None = None, metric: str | None = None
    ) -> AltTestSettings:
        chosen_epsilon = evaluation.alt_test_epsilon if epsilon is None else epsilon
        return cls(
            epsilon=float(chosen_epsilon),
            metric=evaluation.alt_test_metric if metric is None else metric,
            expertise=evaluation.annotator_expertise if epsilon is None else "custom",
        )

    def metric_for(self, kind: str) -> str:
        """Negative RMSE only means something on a likert scale; other kinds always use accuracy."""
        if kind != "likert":
            return ACCURACY
        return self.metric or NEG_RMSE


def alt_test_entry(ctx: Context, col: int, human_names: list[str], settings: AltTestSettings) -> dict:
    """`rubrics[].raters[].alt_test` of the model in column `col` (docs/agreement.md)."""
    metric = settings.metric_for(ctx.data.kind)
    cols = ctx.human_cols
    # Items with the same people's pattern and the same model value compare alike: each such pair once,
    # weighted by its items (the same counts, so the same p-values, as item by item).
    distinct, items = st.unique_rows(np.stack([ctx.patterns.of_item, ctx.matrix.value_codes[:, col]], axis=1))
    patterns, model_values = distinct[:, 0], distinct[:, 1]
    if metric == ACCURACY:
        codes = ctx.matrix.categories[model_values], ctx.patterns.codes[patterns]
        model, people = (np.where(c >= 0, c, np.nan) for c in codes)
    else:
        model, people = ctx.numbers(model_values), ctx.numbers(ctx.patterns.value_codes[patterns])
    result = alt_test(model, people, metric=metric, epsilon=settings.epsilon, weights=items)
    entry = {
        "epsilon": settings.epsilon,
        "expertise": settings.expertise,
        "metric": metric,
        "q": result.q,
        "items": result.items,
        "winning_rate": result.winning_rate,
        "advantage_probability": result.advantage_probability,
        "passed": result.passed,
        "people": [
            {
                "rater": human_names[p.person],
                "items": p.items,
                "p_value": p.p_value,
                "rejected": p.rejected,
                "advantage_probability": p.advantage,
            }
            for p in result.people
        ],
        "left_out": [{"rater": human_names[person], "items": items} for person, items in result.left_out],
        "why": _why(result, len(cols)),
        "warning": power_warning(result),
    }
    entry["text"] = alt_test_text(entry)
    return entry


def _why(result: AltTestResult, people: int) -> str | None:
    if result.people:
        return None
    if people < 2:
        return "the test needs two or more people: each left-out person is compared with the others"
    return (
        f"no person has {MIN_ITEMS_PER_PERSON} or more items that the model and at least one other person "
        f"also rated ({result.items} such items in all)"
    )


def power_warning(result: AltTestResult) -> str | None:
    """The paper's guidance: 50-100 items and three or more people for the test to have power."""
    problems = []
    if result.items < POWER_ITEMS:
        problems.append(f"{result.items} items rated by two or more people (the paper advises 50-100)")
    if len(result.people) < POWER_PEOPLE:
        problems.append(f"{len(result.people)} people tested (the paper advises 3 or more)")
    if not problems:
        return None
    return "Too little data for the test to have power: " + " and ".join(problems) + "."


def alt_test_text(entry: dict) -> str:
    """A sentence a researcher can paste into a paper."""
    if entry["winning_rate"] is None:
        return f"The alternative annotator test could not be run: {entry['why']}."
    tested = len(entry["people"])
    won = sum(person["rejected"] for person in entry["people"])
    outcome = "passes" if entry["passed"] else "does not pass"
    expertise = EXPERTISE_NAMES.get(entry["expertise"], entry["expertise"])
    left_out = ""
    if entry["left_out"]:
        names = ", ".join(person["rater"] for person in entry["left_out"])
        left_out = f" ({names} left out: fewer than {MIN_ITEMS_PER_PERSON} such items)"
    return (
        f"Following the alternative annotator test (Calderon, Reichart & Dror, ACL 2025), with "
        f"epsilon = {entry['epsilon']:g} ({expertise}), {METRIC_NAMES[entry['metric']]} against the "
        f"remaining annotators as the alignment score and Benjamini-Yekutieli correction at "
        f"q = {entry['q']:g}, the model "
        f"{outcome} the test: it wins against {won} of {tested} annotators{left_out}, a winning rate of "
        f"{entry['winning_rate']:.2f}, on {entry['items']} items rated by two or more annotators. "
        f"Its advantage probability is {entry['advantage_probability']:.2f}."
    )
