"""The agreement report page, its downloads, the item page, the cache and the evaluation-page section."""

import csv
import io
import json
import re

import pytest
from django.template import Context, Template
from django.test import Client
from django.urls import reverse

from agreement.models import ReportCache
from agreement.report import build_report
from evaluations.models import Rating
from tests.agreement.helpers import make_rated_evaluation

pytestmark = pytest.mark.django_db

TABLE = {
    "anna": ["A", "B", "SAME", "A", "B", "A"],
    "bob": ["A", "B", "SAME", "B", "B", "A"],
    "judge": ["A", "SAME", "SAME", "A", "!", "B"],
}


@pytest.fixture
def evaluation(project):
    evaluation, _ = make_rated_evaluation(
        project,
        kind="pairwise",
        table=TABLE,
        models=["judge"],
        metadata=[{"topic": "music"}, {"topic": "music"}, {"topic": "food"}] * 2,
    )
    return evaluation


def _url(evaluation, name="agreement_report", **extra):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk], **extra)


def test_researcher_sees_figures_heat_map_distributions_and_disagreements(researcher_client, evaluation):
    response = researcher_client.get(_url(evaluation))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Krippendorff&#x27;s alpha" in page
    assert "Agreement without ties (S2)" in page
    assert 'class="heat"' in page and "--shade:" in page
    assert 'class="bars"' in page
    first_disagreement = reverse(
        "agreement_item",
        args=[evaluation.project.slug, evaluation.pk, evaluation.dataset.items.get(position=1).pk],
    )
    assert first_disagreement in page
    assert "1 parse failure" in page


def test_annotators_are_refused_and_outsiders_do_not_learn_the_evaluation_exists(
    annotator, outsider, evaluation
):
    annotator_client, outsider_client = Client(), Client()
    annotator_client.force_login(annotator)
    outsider_client.force_login(outsider)
    item = evaluation.dataset.items.first()
    item_url = reverse("agreement_item", args=[evaluation.project.slug, evaluation.pk, item.pk])
    for url in [
        _url(evaluation),
        _url(evaluation, "agreement_report_json"),
        _url(evaluation, "agreement_report_csv"),
        item_url,
    ]:
        assert annotator_client.get(url).status_code == 403
        assert outsider_client.get(url).status_code == 404
        assert Client().get(url).status_code == 302  # to the login page


def test_the_filter_restricts_the_report_and_htmx_gets_only_the_report_region(researcher_client, evaluation):
    response = researcher_client.get(
        _url(evaluation), {"key": "topic", "value": "food"}, headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="report">')
    assert "<strong>2</strong> items" in page
    assert "<html" not in page


def test_json_download_is_the_documented_shape(researcher_client, evaluation):
    response = researcher_client.get(_url(evaluation, "agreement_report_json"))
    assert response["Content-Disposition"].startswith("attachment;")
    report = json.loads(response.content)
    block = report["rubrics"][0]
    assert {"rubric", "version", "kind", "items", "human_human", "raters"} <= set(block)
    assert {
        "krippendorff_alpha",
        "percent_agreement",
        "cohen_kappa",
        "fleiss_kappa",
        "agreement_with_ties",
        "agreement_without_ties",
        "pairs",
    } <= set(block["human_human"])
    judge = block["raters"][0]
    assert {"rater", "kind", "vs_each_human", "vs_majority", "ci", "parse_failures"} <= set(judge)
    assert judge["parse_failures"] == 1


def test_csv_download_has_a_row_per_figure_and_quotes_formula_like_names(researcher_client, project):
    table = {"=cmd()": ["A", "B"], "bob": ["A", "B"], "judge": ["A", "A"]}
    evaluation, _ = make_rated_evaluation(project, kind="pairwise", table=table, models=["judge"])
    response = researcher_client.get(_url(evaluation, "agreement_report_csv"))
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    pair = next(r for r in rows if r["block"] == "pair" and r["metric"] == "percent_agreement")
    assert pair["rater"] == "'=cmd()" and float(pair["value"]) == 1.0
    assert any(r["block"] == "vs_majority" and r["rater"] == "judge" for r in rows)
    # A browser review saw no verdict in the CSV, and a pair's rater names as rows of numbers.
    assert not any(r["block"] == "pair" and r["metric"] in {"a", "b"} for r in rows)
    verdict = {r["metric"]: r for r in rows if r["block"] == "verdict" and r["rater"] == "judge"}
    report = build_report(evaluation=evaluation).as_json()["rubrics"][0]
    expected = next(r for r in report["raters"] if r["rater"] == "judge")["verdict"]
    assert verdict, rows
    for row in verdict.values():
        assert row["other"] == expected["label"] and row["why"] == expected["text"]
    if "metric" in expected:
        difference = verdict[f"{expected['metric']}_difference"]
        assert float(difference["value"]) == pytest.approx(expected["difference"])


def test_the_report_is_cached_until_a_rating_changes(
    researcher_client, evaluation, django_assert_max_num_queries
):
    researcher_client.get(_url(evaluation))
    computed = ReportCache.objects.get(evaluation=evaluation).computed
    with django_assert_max_num_queries(12):
        page = researcher_client.get(_url(evaluation)).content.decode()
    assert ReportCache.objects.get(evaluation=evaluation).computed == computed
    assert re.search(r"Computed (now|\d+ seconds? ago) in", page)  # not "0 minutes ago"

    rating = Rating.objects.filter(evaluation=evaluation, rater__name="judge", parse_failed=False).first()
    assert rating is not None
    rating.value = "B"
    rating.save()
    report = json.loads(researcher_client.get(_url(evaluation, "agreement_report_json")).content)
    assert ReportCache.objects.get(evaluation=evaluation).computed > computed
    assert report["rubrics"][0]["distribution"]["judge"] != [2, 2, 1]


def test_item_page_shows_every_rating_with_explanations_and_parse_failures(researcher_client, evaluation):
    item = evaluation.dataset.items.get(position=4)
    Rating.objects.filter(item=item, rater__name="anna").update(explanation="B is clearer.")
    response = researcher_client.get(
        reverse("agreement_item", args=[evaluation.project.slug, evaluation.pk, item.pk])
    )
    page = response.content.decode()
    assert "B is clearer." in page and "parse failure" in page
    assert page.count('class="rating ') == 3
    # Metadata as the dataset's item page shows it (a browser review saw raw JSON here, a table there).
    assert '<table class="metadata"><tbody><tr><th>topic</th><td>music</td></tr></tbody></table>' in page


def test_item_of_another_dataset_is_not_found(researcher_client, evaluation, project):
    other, _ = make_rated_evaluation(project, kind="likert", table={"x": [1]})
    item = other.dataset.items.get()
    url = reverse("agreement_item", args=[project.slug, evaluation.pk, item.pk])
    assert researcher_client.get(url).status_code == 404


def test_evaluation_section_links_the_report_and_shows_headlines_once_cached(researcher_client, evaluation):
    template = Template("{% load agreement_tags %}{% evaluation_agreement_summary evaluation %}")
    before = template.render(Context({"evaluation": evaluation}))
    assert _url(evaluation) in before and "alpha" not in before
    researcher_client.get(_url(evaluation))
    after = template.render(Context({"evaluation": evaluation}))
    assert "people's alpha" in after and "judge:" in after


@pytest.fixture
def simulated_run_evaluation(project):
    """An evaluation whose model rater is a judge run on Concord's simulated model."""
    from evaluations.models import Rater
    from judges.models import Judge, JudgeRun

    evaluation, version = make_rated_evaluation(project, kind="pairwise", table=TABLE, models=["judge"])
    judge = Judge.objects.create(
        project=project, name="Sim", model="fake-judge-1", base_url="http://127.0.0.1:9/v1"
    )
    JudgeRun.objects.create(
        judge=judge,
        evaluation=evaluation,
        rubric_version=version,
        rater=Rater.objects.get(project=project, name="judge"),
        parameters=judge.parameters().to_json(),
    )
    return evaluation


def test_a_judge_run_on_the_simulated_model_is_labelled_as_such(researcher_client, simulated_run_evaluation):
    page = researcher_client.get(_url(simulated_run_evaluation)).content.decode()
    assert "simulated model" in page
    report = json.loads(
        researcher_client.get(_url(simulated_run_evaluation, "agreement_report_json")).content
    )
    assert [rater["simulated"] for rater in report["rubrics"][0]["raters"]] == [True]


def test_imported_model_raters_are_not_labelled_simulated(researcher_client, evaluation):
    assert "simulated model" not in researcher_client.get(_url(evaluation)).content.decode()


def test_item_page_labels_the_simulated_judge(researcher_client, project, simulated_run_evaluation):
    item = simulated_run_evaluation.dataset.items.first()
    url = reverse("agreement_item", args=[project.slug, simulated_run_evaluation.pk, item.pk])
    assert "simulated model" in researcher_client.get(url).content.decode()
