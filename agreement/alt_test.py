"""The alternative annotator test (Calderon, Reichart & Dror, ACL 2025), as pure functions over arrays.

Can a model stand in for the people? Leave one person out at a time. On each item that person
rated (among items the model rated and two or more people rated), score the model and the
left-out person by how well each represents the remaining people: accuracy (share of the
remaining people whose label it matches) or negative RMSE against their values. Indicator
"model >= person" and "person >= model" per item (a tie counts for both). A one-sided one-sample
t-test of (person indicator - model indicator) against epsilon (alternative: less) asks whether
the person's advantage is below epsilon, the benefit granted to the model for being cheap;
Benjamini-Yekutieli at q across the people tested; the winning rate is the share of people whose
null is rejected (the model passes at >= 0.5), the advantage probability the mean over people of
the model's indicator mean. Persons with fewer than `min_items` such items are left out (the
t-test needs about 30), and named.

Scores are compared without dividing: both sides of an item are averaged over the same remaining
people, so "model >= person" is "model's hits >= person's hits" (accuracy) or "model's squared
error <= person's" (RMSE), which is exactly what comparing the averages decides. Both come from
per-item sums over all people with the left-out person's own term taken away (RowSums), so every
person's scores cost O(items x people) together; with integer labels every sum is exact. The t-tests
need only each person's counts of strict wins either way (one_sided_p_from_counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ACCURACY = "accuracy"
NEG_RMSE = "neg_rmse"
METRICS = (ACCURACY, NEG_RMSE)
# The paper's rule of thumb for epsilon by who the people are.
EPSILON_BY_EXPERTISE = {"experts": 0.2, "skilled": 0.15, "crowd": 0.1}
Q_FDR = 0.05
MIN_PEOPLE_PER_ITEM = 2
MIN_ITEMS_PER_PERSON = 30
# The paper's guidance for a test with power: 50-100 items, three or more people.
POWER_ITEMS = 50
POWER_PEOPLE = 3


@dataclass(frozen=True)
class PersonResult:
    person: int  # column of `people`
    items: int
    p_value: float
    rejected: bool
    advantage: float  # mean of the model's indicator "model >= person" on this person's items


@dataclass(frozen=True)
class AltTestResult:
    epsilon: float
    metric: str
    q: float
    items: int  # items the model rated that two or more people rated
    people: list[PersonResult] = field(default_factory=list)
    left_out: list[tuple[int, int]] = field(default_factory=list)  # (column, items) below min_items

    @property
    def winning_rate(self) -> float | None:
        if not self.people:
            return None
        return sum(p.rejected for p in self.people) / len(self.people)

    @property
    def advantage_probability(self) -> float | None:
        if not self.people:
            return None
        return float(np.mean([p.advantage for p in self.people]))

    @property
    def passed(self) -> bool | None:
        rate = self.winning_rate
        return None if rate is None else rate >= 0.5


def alt_test(
    model: np.ndarray,
    people: np.ndarray,
    *,
    metric: str,
    epsilon: float,
    q: float = Q_FDR,
    min_people: int = MIN_PEOPLE_PER_ITEM,
    min_items: int = MIN_ITEMS_PER_PERSON,
    weights: np.ndarray | None = None,
) -> AltTestResult:
    """The alt-test of one model against the people.

    `model`: (items,) the model's value per item, NaN where it has none. `people`: (items, persons)
    each person's value, NaN where missing. For accuracy the values are compared for equality
    (pass category codes); for neg_rmse they are numbers. `weights`: (items,) how many items each row
    stands for (rows of distinct ratings), whole numbers; default one each.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown alt-test metric {metric!r}; use one of {', '.join(METRICS)}")
    weight = np.ones(model.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    present = np.isfinite(people)
    kept = np.isfinite(model) & (np.count_nonzero(present, axis=1) >= min_people)
    rated = people[kept]
    rows, persons = np.nonzero(np.isfinite(rated))  # every (item, person) rating, in one pass
    own = rated[rows, persons]
    sums = RowSums.of(model[kept], rows, own, metric)
    # Every person at once: per item and person, the strict wins of each side (a tie is neither);
    # the differences person - model indicator are then +1 (person wins), -1 (model wins) or 0, so
    # each person's t-test needs only the three counts.
    model_score, person_score = sums.scores(rows, own)
    width = people.shape[1]
    each = weight[kept][rows]

    def per_person(chosen: np.ndarray) -> np.ndarray:
        return np.bincount(persons[chosen], weights=each[chosen], minlength=width).astype(np.int64)

    person_wins = per_person(person_score > model_score)
    model_wins = per_person(model_score > person_score)
    counts = per_person(np.ones(persons.shape[0], dtype=bool))
    tested = np.flatnonzero(counts >= min_items)
    p_values = one_sided_p_from_counts(person_wins[tested], model_wins[tested], counts[tested], epsilon)
    results = [
        (
            int(person),
            int(counts[person]),
            float(p),
            float((counts[person] - person_wins[person]) / counts[person]),
        )
        for person, p in zip(tested, p_values, strict=True)
    ]
    left_out = [(person, int(counts[person])) for person in range(width) if counts[person] < min_items]
    rejected = benjamini_yekutieli([r[2] for r in results], q)
    return AltTestResult(
        epsilon=epsilon,
        metric=metric,
        q=q,
        items=int(weight[kept].sum()),
        people=[
            PersonResult(person=p, items=n, p_value=pv, rejected=bool(rej), advantage=adv)
            for (p, n, pv, adv), rej in zip(results, rejected, strict=True)
        ],
        left_out=left_out,
    )


@dataclass(frozen=True)
class RowSums:
    """Per item, sums over every person who rated it, from which one person's own term is removed.

    Accuracy: `model_hits` (people who gave the model's label) and `counts` (items x labels).
    Negative RMSE: the count, sum and sum of squares of the people's values.
    """

    metric: str
    model: np.ndarray
    count: np.ndarray
    total: np.ndarray | None = None
    squares: np.ndarray | None = None
    model_hits: np.ndarray | None = None
    labels: np.ndarray | None = None
    counts: np.ndarray | None = None

    @classmethod
    def of(cls, model: np.ndarray, rows: np.ndarray, values: np.ndarray, metric: str) -> RowSums:
        """From every rating as (item `rows`, `values`): the model's value on each item in `model`."""
        items = model.shape[0]
        count = np.bincount(rows, minlength=items)
        if metric != ACCURACY:
            total, squares = (np.bincount(rows, terms, minlength=items) for terms in (values, values**2))
            return cls(metric, model, count, total=total, squares=squares)
        labels, codes = np.unique(values, return_inverse=True)
        width = labels.shape[0]
        counts = np.bincount(rows * width + codes, minlength=items * width).reshape(items, width)
        hits = np.zeros(items, dtype=np.int64)
        if width:  # the people who gave the model's label, where it is among theirs
            at = np.minimum(np.searchsorted(labels, model), width - 1)
            hits = np.where(labels[at] == model, counts[np.arange(items), at], 0)
        return cls(metric, model, count, model_hits=hits, labels=labels, counts=counts)

    def scores(self, rows: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(model's score, person's score) on `rows` (repeats allowed), the left-out person giving `own`."""
        model = self.model[rows]
        if self.metric == ACCURACY:
            assert self.model_hits is not None and self.counts is not None and self.labels is not None
            model_score = self.model_hits[rows] - (model == own)
            person_score = self.counts[rows, np.searchsorted(self.labels, own)] - 1
        else:
            assert self.total is not None and self.squares is not None
            n, s, q = self.count[rows] - 1, self.total[rows] - own, self.squares[rows] - own**2
            # Minus the squared error against the others: sum (v - x)^2 = q - 2 x s + n x^2.
            model_score = -(q - 2 * model * s + n * model**2)
            person_score = -(q - 2 * own * s + n * own**2)
        return model_score, person_score


def one_sided_p_from_counts(plus: np.ndarray, minus: np.ndarray, n: np.ndarray, epsilon: float) -> np.ndarray:
    """p-value of H0: mean(person - model indicator) >= epsilon, against "less", of each sample of n
    differences of which `plus` are +1, `minus` -1, the rest 0: SciPy's one-sample t-test (mean, variance
    with ddof 1, Student's t CDF) from the counts, for all at once."""
    from scipy.special import stdtr

    n = n.astype(np.float64)
    mean = (plus - minus) / n
    zeros = n - plus - minus
    with np.errstate(divide="ignore", invalid="ignore"):  # n = 1 or identical differences: as SciPy
        variance = (plus * (1 - mean) ** 2 + minus * (1 + mean) ** 2 + zeros * mean**2) / n * (n / (n - 1))
        t = (mean - epsilon) / np.sqrt(variance / n)
    return stdtr(n - 1, t)


def benjamini_yekutieli(p_values: list[float], q: float) -> list[bool]:
    """Which nulls Benjamini-Yekutieli rejects at false discovery rate q (an undefined p never is)."""
    if not p_values:
        return []
    from scipy.stats import false_discovery_control

    p = np.array(p_values, dtype=np.float64)
    p = np.where(np.isfinite(p), p, 1.0)
    return (false_discovery_control(p, method="by") <= q).tolist()


def load_scipy() -> None:
    """Import what the report takes from SciPy on first use (scipy.stats: ~1-2 s of CPU) where a web server
    or worker starts, so that the first report a process computes does not wait for it (measured on a
    100k-item report: 3.0 s for the first in a process, 0.7-0.9 s for the next)."""
    import scipy.special  # noqa: F401
    import scipy.stats  # noqa: F401


def epsilon_for(expertise: str) -> float:
    return EPSILON_BY_EXPERTISE[expertise]
