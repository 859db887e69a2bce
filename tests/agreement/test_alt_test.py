"""agreement.alt_test against a plain per-item re-statement of the procedure and statsmodels' BY."""

import warnings

import numpy as np
import pytest
from scipy.stats import ttest_1samp
from statsmodels.stats.multitest import multipletests

from agreement.alt_test import alt_test, benjamini_yekutieli
from agreement.report import build_report
from agreement.stand_in import AltTestSettings
from tests.agreement.helpers import make_rated_evaluation


def indicators(
    model: np.ndarray, people: np.ndarray, person: int, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per item, (model >= person, person >= model) as 0/1 against the people other than `person`,
    summing over the others directly (the definition; alt_test's RowSums gives the same faster)."""
    others = np.isfinite(people)
    others[:, person] = False
    filled = np.where(others, people, 0.0)
    left_out = people[:, person]
    if metric == "accuracy":
        model_score = ((filled == model[:, None]) & others).sum(axis=1)
        person_score = ((filled == left_out[:, None]) & others).sum(axis=1)
    else:  # negative RMSE: a smaller squared error is a higher score
        model_score = -(np.where(others, (filled - model[:, None]) ** 2, 0.0)).sum(axis=1)
        person_score = -(np.where(others, (filled - left_out[:, None]) ** 2, 0.0)).sum(axis=1)
    return (model_score >= person_score).astype(np.float64), (person_score >= model_score).astype(np.float64)


def one_sided_p(differences: np.ndarray, epsilon: float) -> float:
    """p-value of H0: mean(person - model indicator) >= epsilon, against "less" (SciPy's t-test)."""
    with warnings.catch_warnings():
        # Identical differences (e.g. the model always at least as good) are a valid, extreme sample.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_1samp(differences, epsilon, alternative="less").pvalue)


def reference(model, people, metric, epsilon, q=0.05):
    """The procedure item by item with Python lists (scores as averages, not sums)."""

    def score(pred, others):
        if metric == "accuracy":
            return float(np.mean([pred == o for o in others]))
        return -float(np.sqrt(np.mean([(pred - o) ** 2 for o in others])))

    n, k = people.shape
    kept = [i for i in range(n) if np.isfinite(model[i]) and np.isfinite(people[i]).sum() >= 2]
    p_values, advantages = [], []
    for h in range(k):
        rows = [i for i in kept if np.isfinite(people[i, h])]
        if len(rows) < 30:
            continue
        model_ind, person_ind = [], []
        for i in rows:
            others = [people[i, g] for g in range(k) if g != h and np.isfinite(people[i, g])]
            m, p = score(model[i], others), score(people[i, h], others)
            model_ind.append(1 if m >= p else 0)
            person_ind.append(1 if p >= m else 0)
        p_values.append(one_sided_p(np.array(person_ind) - np.array(model_ind), epsilon))
        advantages.append(np.mean(model_ind))
    rejected = multipletests(np.nan_to_num(p_values, nan=1.0), alpha=q, method="fdr_by")[0]
    return rejected.sum() / len(p_values), float(np.mean(advantages)), list(rejected)


def random_people(rng, n, k, levels, missing):
    truth = rng.integers(1, levels + 1, n).astype(float)
    people = np.clip(truth[:, None] + rng.integers(-1, 2, (n, k)) * (rng.random((n, k)) < 0.5), 1, levels)
    people[rng.random((n, k)) < missing] = np.nan
    return truth, people


@pytest.mark.parametrize("metric", ["accuracy", "neg_rmse"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_alt_test_equals_the_item_by_item_procedure(metric, seed):
    rng = np.random.default_rng(seed)
    truth, people = random_people(rng, 150, 5, 5, 0.4)
    model = truth + rng.integers(-1, 2, 150) * (rng.random(150) < 0.3)
    if metric == "neg_rmse":
        model = model + rng.random(150) * 0.5  # fractional scores, as a logprob judge gives
    model[rng.random(150) < 0.1] = np.nan

    result = alt_test(model, people, metric=metric, epsilon=0.15)

    winning, advantage, rejected = reference(model, people, metric, 0.15)
    assert result.winning_rate == pytest.approx(winning)
    assert result.advantage_probability == pytest.approx(advantage)
    assert [p.rejected for p in result.people] == rejected


@pytest.mark.parametrize("metric", ["accuracy", "neg_rmse"])
def test_distinct_rows_weighted_by_their_items_equal_the_items_themselves(metric):
    # What the report passes: each distinct (people's ratings, model's rating) once, with how many items
    # have it; the same counts, so the same result as every item.
    rng = np.random.default_rng(21)
    truth, people = random_people(rng, 600, 5, 3, 0.4)
    model = truth + rng.integers(-1, 2, 600) * (rng.random(600) < 0.3)
    model[rng.random(600) < 0.1] = np.nan
    table = np.nan_to_num(np.column_stack([model, people]), nan=-1.0)
    _, first, inverse, counts = np.unique(
        table, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    assert counts.max() > 1 and inverse.shape[0] == 600  # rows do repeat
    whole = alt_test(model, people, metric=metric, epsilon=0.1)
    weighted = alt_test(model[first], people[first], metric=metric, epsilon=0.1, weights=counts)
    assert weighted == whole


def test_a_tie_counts_for_both_model_and_person():
    people = np.array([[1.0, 1.0, 2.0]])
    model_ind, person_ind = indicators(np.array([1.0]), people, 0, "accuracy")
    assert (model_ind[0], person_ind[0]) == (1.0, 1.0)
    model_ind, person_ind = indicators(np.array([3.0]), people, 0, "accuracy")
    assert (model_ind[0], person_ind[0]) == (0.0, 1.0)  # the person matches bob, the model nobody


def test_people_with_fewer_than_30_items_are_left_out_and_the_rest_decide():
    rng = np.random.default_rng(7)
    truth, people = random_people(rng, 60, 3, 3, 0.0)
    people[25:, 2] = np.nan  # the third person rated only 25 items
    result = alt_test(truth, people, metric="accuracy", epsilon=0.2)
    assert result.left_out == [(2, 25)]
    assert [p.person for p in result.people] == [0, 1]
    assert result.passed is True and result.winning_rate == 1.0  # the truth always represents the others


def test_benjamini_yekutieli_matches_statsmodels_and_never_rejects_an_undefined_p():
    p = [0.001, 0.01, 0.02, 0.04, float("nan"), 0.3]
    expected = multipletests([0.001, 0.01, 0.02, 0.04, 1.0, 0.3], alpha=0.05, method="fdr_by")[0]
    assert benjamini_yekutieli(p, 0.05) == expected.tolist()


def test_an_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown alt-test metric 'kappa'"):
        alt_test(np.zeros(3), np.zeros((3, 2)), metric="kappa", epsilon=0.1)


@pytest.mark.django_db
def test_report_names_left_out_people_and_warns_about_power(project):
    table = {"anna": [1, 2, 3, 4, 5, 2], "bob": [1, 2, 4, 4, 5, 3], "judge": ["1", "3", "3", "4", "5", "2"]}
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])

    (judge,) = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"]

    alt = judge["alt_test"]
    assert alt["winning_rate"] is None and alt["passed"] is None and alt["people"] == []
    assert alt["left_out"] == [{"rater": "anna", "items": 6}, {"rater": "bob", "items": 6}]
    assert "no person has 30 or more items" in alt["why"]
    assert "6 items rated by two or more people" in alt["warning"]
    assert alt["metric"] == "neg_rmse" and alt["epsilon"] == 0.15  # the evaluation's default: skilled


@pytest.mark.django_db
def test_report_uses_the_evaluations_epsilon_and_metric_and_the_override(project):
    rng = np.random.default_rng(3)
    truth, people = random_people(rng, 40, 3, 5, 0.0)
    table = {name: [str(int(v)) for v in people[:, n]] for n, name in enumerate(["ann", "bob", "cy"])}
    table["judge"] = [str(int(v)) for v in truth]
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    evaluation.annotator_expertise, evaluation.alt_test_epsilon, evaluation.alt_test_metric = (
        "crowd",
        0.1,
        "accuracy",
    )
    evaluation.save()

    alt = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"][0]["alt_test"]
    assert (alt["epsilon"], alt["metric"], alt["expertise"]) == (0.1, "accuracy", "crowd")
    assert [p["rater"] for p in alt["people"]] == ["ann", "bob", "cy"] and alt["warning"] is not None
    assert "crowd workers" in alt["text"] and "winning rate of" in alt["text"]

    override = AltTestSettings.of(evaluation, epsilon=0.3, metric="neg_rmse")
    alt = build_report(evaluation=evaluation, resamples=0, alt_test=override).as_json()["rubrics"][0][
        "raters"
    ][0]["alt_test"]
    assert (alt["epsilon"], alt["metric"], alt["expertise"]) == (0.3, "neg_rmse", "custom")


def test_no_item_with_two_people_leaves_everyone_out_without_error():
    people = np.array([[1.0, np.nan], [np.nan, 2.0]])
    result = alt_test(np.array([1.0, 2.0]), people, metric="accuracy", epsilon=0.1)
    assert result.items == 0 and result.left_out == [(0, 0), (1, 0)] and result.winning_rate is None


def per_person(model, people, metric, epsilon, min_items=30):
    """The former path: per left-out person, a mask, indicators and SciPy's t-test (the indicators
    from the definition, which RowSums matches exactly when the people's values are whole numbers)."""
    kept = np.isfinite(model) & (np.isfinite(people).sum(axis=1) >= 2)
    rated, model = people[kept], model[kept]
    found = []
    for person in range(people.shape[1]):
        mine = np.isfinite(rated[:, person])
        if mine.sum() < min_items:
            continue
        model_ind, person_ind = indicators(model[mine], rated[mine], person, metric)
        found.append(
            (person, int(mine.sum()), one_sided_p(person_ind - model_ind, epsilon), model_ind.mean())
        )
    return found


@pytest.mark.parametrize("metric", ["accuracy", "neg_rmse"])
@pytest.mark.parametrize("seed", range(6))
def test_all_people_at_once_equal_the_per_person_t_tests(metric, seed):
    rng = np.random.default_rng(seed)
    n, k = 400, 8
    truth, people = random_people(rng, n, k, 4, 0.5)  # few levels: many ties; half the ratings missing
    people[: 40 * (seed % 3), 0] = np.nan  # sometimes a person with too few items
    model = truth + rng.integers(-1, 2, n) * (rng.random(n) < 0.3)
    if metric == "neg_rmse" and seed % 2:
        model = model + rng.random(n) * 0.5
    model[rng.random(n) < 0.1] = np.nan
    if seed == 4:  # a person identical to the model (whole values): only ties, a constant sample
        people[:, 1] = model

    for epsilon in (0.0, 0.1, 0.2):
        result = alt_test(model, people, metric=metric, epsilon=epsilon, min_items=30)
        expected = per_person(model, people, metric, epsilon)
        assert [(p.person, p.items) for p in result.people] == [(e[0], e[1]) for e in expected]
        got = np.array([[p.p_value, p.advantage] for p in result.people])
        want = np.array([[e[2], e[3]] for e in expected])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
