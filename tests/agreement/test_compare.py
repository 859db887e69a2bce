"""The compare page: two runs against the same people on the same items, with a paired bootstrap CI."""

import numpy as np
import pytest
from django.urls import reverse

from agreement.compare import compare_runs, find_run, paired_difference, runs_of, verdict
from agreement.split import held_out
from rubrics.services import new_version
from tests.agreement.helpers import add_ratings, make_rated_evaluation

pytestmark = pytest.mark.django_db

PEOPLE = {
    "ann": ["1", "2", "3", "4", "5", "2", "3", "4"],
    "bob": ["1", "2", "4", "4", "5", "3", "3", "5"],
}
JUDGE_A = ["2", "2", "3", "5", "5", "1", "3", "3"]
JUDGE_B = ["1", "2", "3.5", "4", "4", "2.5", "3", "4.5"]


@pytest.fixture
def evaluation(project):
    evaluation, version = make_rated_evaluation(
        project, kind="likert", table={**PEOPLE, "judge-a": JUDGE_A}, models=["judge-a"]
    )
    # The second judge rates a later version of the rubric (as after "examples from disagreements").
    later = new_version(version.rubric, prompt_template=version.prompt_template + "\n\nExamples: none.")
    add_ratings(evaluation, later, {"judge-b": JUDGE_B}, kind={"judge-b": "model"})
    return evaluation


def test_runs_of_lists_each_model_on_each_version(evaluation):
    assert [str(run) for run in runs_of(evaluation)] == [
        f"judge-a on {evaluation.rubric_versions.get().label}",
        f"judge-b on {evaluation.rubric_versions.get().rubric.name} v2",
    ]


def test_compare_gives_both_errors_from_the_peoples_mean_and_the_difference_per_part(evaluation):
    a, b = runs_of(evaluation)
    result = compare_runs(evaluation=evaluation, a=a, b=b, resamples=200)
    mean = (np.array(PEOPLE["ann"], float) + np.array(PEOPLE["bob"], float)) / 2
    err_a, err_b = np.abs(np.array(JUDGE_A, float) - mean), np.abs(np.array(JUDGE_B, float) - mean)
    whole = result["parts"]["all"]
    assert result["metric"] == "mae" and whole["items"] == 8
    assert whole["a"] == pytest.approx(err_a.mean()) and whole["b"] == pytest.approx(err_b.mean())
    assert whole["difference"] == pytest.approx(err_b.mean() - err_a.mean())
    assert whole["difference_ci"][0] <= whole["difference"] <= whole["difference_ci"][1]
    items = np.array(list(evaluation.dataset.items.order_by("position").values_list("pk", flat=True)))
    held = held_out(evaluation.pk, items)
    assert result["parts"]["held_out"]["items"] == int(held.sum())
    if held.any():
        expected = err_b[held].mean() - err_a[held].mean()
        assert result["parts"]["held_out"]["difference"] == pytest.approx(expected)


def test_a_run_against_itself_differs_by_exactly_zero():
    scores = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    same = paired_difference(scores, scores, resamples=100, seed=1)
    assert same["difference"] == 0 and same["difference_ci"] == [0.0, 0.0]


def test_compare_page_shows_the_difference_and_refuses_an_unknown_run(researcher_client, evaluation):
    a, b = runs_of(evaluation)
    url = reverse("compare_runs", args=[evaluation.project.slug, evaluation.pk])
    page = researcher_client.get(url, {"a": a.key, "b": b.key}).content.decode()
    assert f'{b} <span class="muted">minus</span> {a}' in page and "held out" in page
    response = researcher_client.get(url, {"a": a.key, "b": "999:999"})
    assert response.status_code == 400 and "no model run" in response.content.decode()
    # With JavaScript the comparison is swapped in, and htmx swaps only 2xx answers: the reason came back
    # in a 400 the page ignored ("Choose two runs." stayed, and so did the address of the last comparison).
    htmx = researcher_client.get(url, {"a": a.key, "b": "999:999"}, headers={"HX-Request": "true"})
    assert htmx.status_code == 200 and "no model run" in htmx.content.decode()
    with pytest.raises(ValueError):
        find_run([a, b], "1:2:3")


def _result(metric, a, b, ci, items=40, held=20):
    part = {"items": held, "a": a, "b": b, "difference": b - a, "difference_ci": ci}
    other = {"items": items, "a": a, "b": b, "difference": b - a, "difference_ci": ci}
    return {"metric": metric, "a": "judge-a on R v1", "b": "judge-a on R v2 + 6 examples",
            "parts": {"all": other, "tune": other, "held_out": part}}  # fmt: skip


def test_the_verdict_names_the_better_run_on_held_out_items_and_whether_it_may_be_chance():
    sure = verdict(_result("agreement_with_majority", 0.6, 0.8, [0.05, 0.35]))
    assert sure == (
        "judge-a on R v2 + 6 examples agrees better with the people than judge-a on R v1 on the 20 held-out "
        "items (matches the people's majority on 80% of them against 60%), beyond the uncertainty (the 95% "
        "interval of B − A, 0.050 to 0.350, leaves out 0)."
    )
    chance = verdict(_result("mae", 0.5, 0.7, [-0.1, 0.5]))  # B's error is larger: A is better
    assert chance.startswith(
        "judge-a on R v1 agrees better with the people than judge-a on R v2 + 6 examples"
    )
    assert "mean absolute error 0.500 against 0.700" in chance and "within the uncertainty" in chance
    assert "on all 40 items" in verdict(
        _result("mae", 0.5, 0.4, [-0.2, -0.01], held=0)
        | {"parts": {**_result("mae", 0.5, 0.4, [-0.2, -0.01])["parts"], "held_out": {"items": 0}}}
    )


def test_the_compare_page_says_its_verdict(researcher_client, evaluation):
    a, b = runs_of(evaluation)
    url = reverse("compare_runs", args=[evaluation.project.slug, evaluation.pk])
    page = researcher_client.get(url, {"a": a.key, "b": b.key}).content.decode()
    assert 'id="compare-verdict"' in page and "agrees better with the people than" in page
