"""The report's summary across rubrics, metric names that say what they are, and every disagreement paged."""

import pytest
from django.urls import reverse

from tests import factories
from tests.agreement.helpers import add_ratings, make_rated_evaluation

pytestmark = pytest.mark.django_db


def report_url(evaluation, name="agreement_report"):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk])


def two_rubric_evaluation(project):
    """A likert and a pairwise rubric over 60 items; the judge contradicts the people on 40 pairwise items."""
    pairwise, likert = (
        factories.make_rubric(project=project, name="Preference", kind="pairwise"),
        factories.make_rubric(project=project, name="Warmth", kind="likert"),
    )
    dataset = factories.make_dataset(project, items=60)
    evaluation = factories.make_evaluation(project, dataset, [pairwise, likert], overlap=2)
    people = {"anna": ["A"] * 60, "bob": ["A"] * 50 + ["B"] * 10}
    add_ratings(evaluation, pairwise, {**people, "judge": ["A"] * 20 + ["B"] * 40}, kind={"judge": "model"})
    warmth = {"anna": [1, 2, 3, 4, 5] * 12, "bob": [1, 2, 3, 4, 4] * 12, "judge": [2, 2, 3, 4, 5] * 12}
    add_ratings(evaluation, likert, warmth, kind={"judge": "model"})
    return evaluation, pairwise, likert


def test_summary_puts_each_models_verdict_beside_the_peoples_agreement(researcher_client, project):
    evaluation, _, _ = two_rubric_evaluation(project)
    response = researcher_client.get(report_url(evaluation))
    report, page = response.context["report"], response.content.decode()
    summary = page[page.index('id="overview"') : page.index('id="rubric-1"')]
    assert summary.count('data-role="overview-row"') == 2
    for block in report["rubrics"]:
        verdict = block["raters"][0]["verdict"]
        assert f"{verdict['model']:.3f}" in summary and f"{verdict['humans']:.3f}" in summary
        # The same figure on the same items as the rubric's own table: its interval, not a second one
        # (a browser review saw 0.926 [0.500 – 0.986] in the summary and 0.440 – 0.982 in the table).
        people = block["human_human"]
        assert people["items"] == verdict["items"] and people[verdict["metric"]] == pytest.approx(
            verdict["humans"]
        )
        low, high = people["ci"][verdict["metric"]]
        assert f"[{low:.3f} – {high:.3f}]" in summary
    assert "Cohen&#x27;s kappa, quadratic weights" in summary  # Warmth, likert
    assert "Cohen&#x27;s kappa, unweighted" in summary  # Preference, pairwise
    assert summary.index("Preference") < summary.index("Warmth")


def test_metric_tables_name_the_weights_and_the_level_of_measurement(researcher_client, project):
    evaluation, _ = make_rated_evaluation(
        project, kind="likert", table={"anna": [1, 2, 3, 4], "bob": [1, 2, 3, 5], "judge": [1, 3, 3, 4]},
        models=["judge"],
    )  # fmt: skip
    page = researcher_client.get(report_url(evaluation)).content.decode()
    assert "Krippendorff&#x27;s alpha, ordinal" in page
    assert "Cohen&#x27;s kappa, quadratic weights" in page


def test_every_disagreement_is_reachable_a_page_at_a_time(researcher_client, project):
    evaluation, pairwise, _ = two_rubric_evaluation(project)
    page = researcher_client.get(report_url(evaluation)).content.decode()
    query = f"version={pairwise.pk}&amp;model=judge"
    assert f'href="{report_url(evaluation, "agreement_disagreements")}?{query}"' in page
    listing = report_url(evaluation, "agreement_disagreements")
    first = researcher_client.get(listing, {"version": pairwise.pk, "model": "judge"}).content.decode()
    assert "40 items where judge differs from the people" in first
    assert first.count("<li>") == 25 and "page 1 of 2" in first
    second = researcher_client.get(
        listing, {"version": pairwise.pk, "model": "judge", "page": 2}
    ).content.decode()
    assert second.count("<li>") == 15
    assert researcher_client.get(listing, {"version": 0, "model": "judge"}).status_code == 404


def test_item_page_steps_to_the_previous_and_next_disagreement(researcher_client, project):
    evaluation, pairwise, _ = two_rubric_evaluation(project)
    listing = report_url(evaluation, "agreement_disagreements")
    first = researcher_client.get(listing, {"version": pairwise.pk, "model": "judge"})
    entries = first.context["page_obj"].object_list
    item_url = reverse("agreement_item", args=[project.slug, evaluation.pk, entries[1]["item_id"]])
    page = researcher_client.get(item_url, {"version": pairwise.pk, "model": "judge"}).content.decode()
    assert "Disagreement <strong>2</strong> of 40 for judge" in page
    for rel, neighbour in (("prev", entries[0]), ("next", entries[2])):
        href = reverse("agreement_item", args=[project.slug, evaluation.pk, neighbour["item_id"]])
        assert f'rel="{rel}" href="{href}?version={pairwise.pk}&amp;model=judge"' in page
    plain = researcher_client.get(item_url).content.decode()
    assert "disagreement-nav" not in plain


def test_the_summary_shows_the_peoples_figure_with_the_interval_of_the_rubrics_table(
    researcher_client, project
):
    """Three people who each rated some of the items and a judge who rated all: the verdict's interval of the
    people's kappa comes from other resamples than the table's. A browser review saw 0.239 [-0.000 - 0.338] in
    the summary and 0.239 with 0.018 - 0.337 in the rubric's table, for the same figure on the same items."""
    import numpy as np

    from tests.agreement.helpers import random_table

    rng = np.random.default_rng(3)
    table = random_table(rng, items=40, raters=["a", "b", "c"], labels=list("12345"), missing=0.35)
    table["judge"] = random_table(rng, items=40, raters=["judge"], labels=list("12345"), missing=0.0)["judge"]
    evaluation, _ = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    response = researcher_client.get(report_url(evaluation))
    block = response.context["report"]["rubrics"][0]
    verdict, people = block["raters"][0]["verdict"], block["human_human"]
    assert verdict["items"] == people["items"] and verdict["humans"] == pytest.approx(people["cohen_kappa"])
    assert verdict["humans_ci"] != people["ci"]["cohen_kappa"]  # two intervals of one figure
    low, high = people["ci"]["cohen_kappa"]
    page = response.content.decode()
    summary = page[page.index('id="overview"') : page.index('id="rubric-1"')]
    assert f"[{low:.3f} – {high:.3f}]" in summary
