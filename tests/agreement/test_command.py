"""manage.py agreement: the JSON of the issue, slices, and clear errors."""

import json

import pytest
from django.core.management import CommandError, call_command

from tests.agreement.helpers import make_rated_evaluation

pytestmark = pytest.mark.django_db


@pytest.fixture
def evaluation(project):
    table = {"anna": [1, 2, 3, 4, 5, 2], "bob": [1, 2, 4, 4, 5, 3], "judge": ["1", "3", "3", "4", "!", "2.5"]}
    metadata = [{"bot": "x"}, {"bot": "x"}, {"bot": "y"}, {"bot": "y"}, {"bot": "x"}, {"bot": "y"}]
    evaluation, _ = make_rated_evaluation(
        project, kind="likert", table=table, models=["judge"], metadata=metadata
    )
    evaluation.name = "Pilot"
    evaluation.save()
    return evaluation


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("agreement", *args, "--resamples", "50", stdout=out)
    return out.getvalue()


def test_json_output_has_the_keys_of_the_issue(evaluation):
    report = json.loads(run("--evaluation", "Pilot", "--json"))
    assert report["evaluation"] == "Pilot"
    block = report["rubrics"][0]
    assert block["kind"] == "likert" and block["items"] == 6
    hh = block["human_human"]
    assert {"krippendorff_alpha", "percent_agreement", "cohen_kappa", "fleiss_kappa", "pairs"} <= set(hh)
    assert set(hh["pairs"][0]) >= {"a", "b", "items", "percent_agreement", "cohen_kappa"}
    (judge,) = block["raters"]
    assert judge["rater"] == "judge" and judge["kind"] == "model" and judge["parse_failures"] == 1
    metrics = {
        "percent_agreement",
        "cohen_kappa",
        "spearman",
        "kendall_tau_b",
        "pearson",
        "within_one",
        "mae",
        "bias",
    }
    assert metrics <= set(judge["vs_each_human"]) and metrics <= set(judge["vs_majority"])
    assert all(len(interval) == 2 for interval in judge["ci"].values())


def test_where_and_by_slice_the_report(evaluation):
    only_x = json.loads(run("--evaluation", "Pilot", "--where", "bot=x", "--json"))
    assert only_x["where"] == {"bot": "x"} and only_x["rubrics"][0]["items"] == 3
    by = json.loads(run("--evaluation", "Pilot", "--by", "bot", "--json"))
    assert [(s["value"], s["rubrics"][0]["items"]) for s in by["slices"]] == [("x", 3), ("y", 3)]


def test_text_output_names_each_model_and_its_verdict(evaluation):
    text = run("--evaluation", "Pilot")
    assert "judge: vs majority agreement" in text and "people: alpha" in text


def test_unknown_evaluation_rubric_or_bad_where_are_clear_errors(evaluation):
    with pytest.raises(CommandError, match="no evaluation named 'Nope'"):
        run("--evaluation", "Nope")
    with pytest.raises(CommandError, match="has no rubric 'Fluency'"):
        run("--evaluation", "Pilot", "--rubric", "Fluency")
    with pytest.raises(CommandError, match="key=value"):
        run("--evaluation", "Pilot", "--where", "bot")
