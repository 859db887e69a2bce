"""Prediction-powered estimates in the report equal ppi-python called directly (to 1e-9)."""

import numpy as np
import pytest
from ppi_py import classical_mean_ci, ppi_mean_ci, ppi_mean_pointestimate

from agreement.estimates import majority_shares
from agreement.report import build_report
from tests.agreement.helpers import make_rated_evaluation

pytestmark = pytest.mark.django_db


def _table(rng, items, rated, labels):
    """Three people on the first `rated` items, a judge on every item but the last."""
    truth = rng.integers(0, len(labels), items)
    table = {}
    for name in ("ann", "bob", "cy"):
        noisy = np.clip(truth + rng.integers(-1, 2, items) * (rng.random(items) < 0.3), 0, len(labels) - 1)
        table[name] = [labels[c] if n < rated and rng.random() < 0.8 else None for n, c in enumerate(noisy)]
    judged = np.clip(truth + rng.integers(-1, 2, items) * (rng.random(items) < 0.2), 0, len(labels) - 1)
    table["judge"] = [labels[c] for c in judged[:-1]] + [None]
    return table


def _close(entry, y, yhat, yhat_unlabeled):
    low, high = ppi_mean_ci(y, yhat, yhat_unlabeled, alpha=0.05)
    c_low, c_high = classical_mean_ci(y, alpha=0.05)
    assert entry["ppi"] == pytest.approx(float(ppi_mean_pointestimate(y, yhat, yhat_unlabeled)[0]), abs=1e-9)
    assert entry["ppi_ci"] == pytest.approx([low[0], high[0]], abs=1e-9)
    assert entry["classical"] == pytest.approx(y.mean(), abs=1e-9)
    assert entry["classical_ci"] == pytest.approx([c_low, c_high], abs=1e-9)
    n = y.shape[0]
    expected = n * ((c_high - c_low) / (high[0] - low[0])) ** 2
    assert entry["effective_labels"] == pytest.approx(expected, rel=1e-9)
    assert entry["labels_gained"] == pytest.approx(expected - n, rel=1e-9)


def _rows(table, names, items):
    return np.array(
        [[np.nan if table[h][i] is None else float(table[h][i]) for h in names] for i in range(items)]
    )


def test_likert_mean_equals_ppi_python_on_the_same_labels(project):
    rng = np.random.default_rng(5)
    table = _table(rng, 200, 60, ["1", "2", "3", "4", "5"])
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])

    (judge,) = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"]

    people = _rows(table, ["ann", "bob", "cy"], 200)
    model = _rows(table, ["judge"], 200)[:, 0]
    has_people = np.isfinite(people).any(axis=1)
    labeled, unlabeled = np.isfinite(model) & has_people, np.isfinite(model) & ~has_people
    ppi = judge["ppi"]
    assert (ppi["labeled"], ppi["unlabeled"], ppi["why"]) == (int(labeled.sum()), int(unlabeled.sum()), None)
    (mean,) = ppi["estimates"]
    assert mean["quantity"] == "mean"
    _close(mean, np.nanmean(people[labeled], axis=1), model[labeled], model[unlabeled])


def test_category_shares_equal_ppi_python_with_ties_split_evenly(project):
    rng = np.random.default_rng(8)
    labels = ["A", "SAME", "B"]
    table = _table(rng, 150, 50, labels)
    evaluation, _ = make_rated_evaluation(project, kind="pairwise", table=table, models=["judge"])

    (judge,) = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"]

    code = {label: n for n, label in enumerate(labels)}
    people = np.array([[code.get(table[h][i], -1) for h in ("ann", "bob", "cy")] for i in range(150)])
    model = np.array([code.get(v, -1) for v in table["judge"]])
    has_people = (people >= 0).any(axis=1)
    labeled, unlabeled = (model >= 0) & has_people, (model >= 0) & ~has_people
    shares = majority_shares(people[labeled], 3)
    assert [e["label"] for e in judge["ppi"]["estimates"]] == labels
    for n, entry in enumerate(judge["ppi"]["estimates"]):
        _close(entry, shares[:, n], (model[labeled] == n) * 1.0, (model[unlabeled] == n) * 1.0)


def test_majority_share_splits_a_tie_and_ignores_missing_people():
    codes = np.array([[0, 0, 2], [0, 2, -1], [1, -1, -1]])
    assert majority_shares(codes, 3).tolist() == [[1, 0, 0], [0.5, 0, 0.5], [0, 1, 0]]


def test_no_estimate_when_every_judged_item_has_a_human_label(project):
    table = {"ann": ["1", "2", "3"], "bob": ["1", "3", "3"], "judge": ["1", "2", "4"]}
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    ppi = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"][0]["ppi"]
    assert ppi["estimates"] == [] and ppi["unlabeled"] == 0 and "judge alone (3 and 0)" in ppi["why"]


def test_report_page_shows_people_only_and_prediction_powered_intervals(researcher_client, project):
    from django.urls import reverse

    table = _table(np.random.default_rng(2), 80, 30, ["1", "2", "3", "4", "5"])
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    page = researcher_client.get(
        reverse("agreement_report", args=[project.slug, evaluation.pk])
    ).content.decode()
    assert "prediction-powered inference" in page and "Mean score" in page
    assert "With judge on 49 more items" in page and "Worth human labels" in page


def test_the_csv_download_carries_the_ppi_estimates_and_the_alternative_annotator_test(
    researcher_client, project
):
    """Each figure of the page's PPI and alt-test panels is a row of the CSV, equal to the report's JSON."""
    import csv
    import io

    from django.urls import reverse

    table = _table(np.random.default_rng(5), 200, 60, ["1", "2", "3", "4", "5"])
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    (judge,) = build_report(evaluation=evaluation).as_json()["rubrics"][0]["raters"]
    url = reverse("agreement_report_csv", args=[project.slug, evaluation.pk])
    rows = list(csv.DictReader(io.StringIO(researcher_client.get(url).content.decode())))

    ppi = {r["metric"]: r for r in rows if r["block"] == "ppi" and r["rater"] == "judge"}
    (mean,) = judge["ppi"]["estimates"]
    assert float(ppi["ppi_mean"]["value"]) == pytest.approx(mean["ppi"], abs=1e-12)
    low, high = float(ppi["ppi_mean"]["ci_low"]), float(ppi["ppi_mean"]["ci_high"])
    assert [low, high] == pytest.approx(mean["ppi_ci"], abs=1e-12)
    assert float(ppi["people_only_mean"]["value"]) == pytest.approx(mean["classical"], abs=1e-12)
    assert float(ppi["effective_labels"]["value"]) == pytest.approx(mean["effective_labels"], abs=1e-9)

    alt = judge["alt_test"]
    verdict = {r["metric"]: r for r in rows if r["block"] == "alt_test" and r["metric"] != "p_value"}
    assert verdict["winning_rate"]["other"] == f"epsilon={alt['epsilon']} {alt['metric']}"
    assert float(verdict["winning_rate"]["value"]) == pytest.approx(alt["winning_rate"], abs=1e-12)
    assert verdict["passed"]["value"] == str(alt["passed"])
    people = {r["other"]: r for r in rows if r["block"] == "alt_test" and r["metric"] == "p_value"}
    assert set(people) == {p["rater"] for p in alt["people"]} and people
    for person in alt["people"]:
        assert float(people[person["rater"]]["value"]) == pytest.approx(person["p_value"], abs=1e-12)
