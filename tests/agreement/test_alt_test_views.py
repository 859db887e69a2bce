"""The alt-test on the report page (beside the verdict) and its settings on the evaluation page."""

import numpy as np
import pytest
from django.urls import reverse

from agreement.models import ReportCache
from evaluations.models import Evaluation
from tests.agreement.helpers import make_rated_evaluation

pytestmark = pytest.mark.django_db


@pytest.fixture
def evaluation(project):
    rng = np.random.default_rng(11)
    truth = rng.integers(1, 6, 40)
    table = {
        name: [str(int(np.clip(v + rng.integers(-1, 2) * (rng.random() < 0.4), 1, 5))) for v in truth]
        for name in ("ann", "bob", "cy")
    }
    table["judge"] = [str(int(v)) for v in truth]
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    return evaluation


def _url(evaluation, name):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk])


def test_report_page_shows_the_alt_test_in_words_for_a_paper_with_a_power_warning(
    researcher_client, evaluation
):
    page = researcher_client.get(_url(evaluation, "agreement_report")).content.decode()
    assert "alternative annotator test" in page
    assert "Following the alternative annotator test (Calderon, Reichart &amp; Dror, ACL 2025)" in page
    assert "on 40 items rated by two or more annotators" in page
    assert "Too little data for the test to have power: 40 items" in page
    assert _url(evaluation, "alt_test_settings") in page


def test_evaluation_page_offers_the_epsilon_by_who_the_people_are(researcher_client, evaluation):
    page = researcher_client.get(_url(evaluation, "evaluation_detail")).content.decode()
    assert 'id="alt-test-settings"' in page and "Crowd workers (epsilon 0.1)" in page


def test_choosing_crowd_workers_sets_epsilon_and_the_report_is_recomputed(researcher_client, evaluation):
    researcher_client.get(_url(evaluation, "agreement_report"))
    response = researcher_client.post(
        _url(evaluation, "alt_test_settings"), {"annotator_expertise": "crowd", "alt_test_metric": "accuracy"}
    )
    assert response.status_code == 302
    evaluation.refresh_from_db()
    assert (evaluation.alt_test_epsilon, evaluation.alt_test_metric) == (0.1, "accuracy")
    page = researcher_client.get(_url(evaluation, "agreement_report")).content.decode()
    assert "epsilon = 0.1 (crowd workers), accuracy against the remaining annotators" in page
    assert ReportCache.objects.filter(evaluation=evaluation).count() == 1


def test_custom_epsilon_is_saved_through_htmx_and_a_missing_one_is_a_clear_error(
    researcher_client, evaluation
):
    url = _url(evaluation, "alt_test_settings")
    response = researcher_client.post(url, {"annotator_expertise": "custom"}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Give epsilon when the people are" in response.content.decode()
    assert Evaluation.objects.get(pk=evaluation.pk).alt_test_epsilon == 0.15
    response = researcher_client.post(
        url, {"annotator_expertise": "custom", "custom_epsilon": "0.05"}, headers={"HX-Request": "true"}
    )
    assert "Saved: the report uses epsilon 0.05" in response.content.decode()
    assert Evaluation.objects.get(pk=evaluation.pk).alt_test_epsilon == 0.05
    response = researcher_client.post(url, {"annotator_expertise": "custom", "custom_epsilon": "1.5"})
    assert response.status_code == 400 and Evaluation.objects.get(pk=evaluation.pk).alt_test_epsilon == 0.05


def test_annotators_cannot_change_the_alt_test_settings(annotator_client, evaluation):
    response = annotator_client.post(_url(evaluation, "alt_test_settings"), {"annotator_expertise": "crowd"})
    assert response.status_code == 403
    assert Evaluation.objects.get(pk=evaluation.pk).annotator_expertise == "skilled"


def test_a_filter_that_keeps_no_item_says_so_instead_of_one_rater_and_bars_of_zero(
    researcher_client, evaluation
):
    """Seen in a browser review: 'one rater: nothing to compare' for 0 raters, and every bar at 0.0%."""
    page = researcher_client.get(
        _url(evaluation, "agreement_report"), {"key": "app", "value": "NoSuchApp"}
    ).content.decode()
    assert "no human ratings: nothing to compare" in page and "one rater" not in page
    assert "No ratings here with this filter." in page and "0.0%" not in page
