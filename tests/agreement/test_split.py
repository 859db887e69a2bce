"""The fixed tune / held-out split of an evaluation's items, and each model's figures on both parts."""

import numpy as np
import pytest
from django.urls import reverse

from agreement.report import build_report
from agreement.split import held_out, part_of
from tests.agreement.helpers import make_rated_evaluation


def test_split_is_about_half_fixed_per_item_and_differs_between_evaluations():
    ids = np.arange(1, 20001)
    first = held_out(3, ids)
    assert 0.48 < first.mean() < 0.52
    assert np.array_equal(held_out(3, ids[::-1]), first[::-1])  # depends on the item, not its position
    assert np.array_equal(held_out(3, np.arange(1, 40001))[:20000], first)  # adding items changes nothing
    assert 0.45 < (held_out(4, ids) != first).mean() < 0.55  # another evaluation, another split
    assert part_of(3, 17) == ("held_out" if first[16] else "tune")


@pytest.mark.django_db
def test_report_gives_each_models_agreement_on_tune_and_held_out_items(project, researcher_client):
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 2, 60)
    labels = ["no", "yes"]
    scale = [{"value": v, "label": v, "description": v} for v in labels]
    judge = np.where(rng.random(60) < 0.8, truth, 1 - truth)
    table = {
        "ann": [labels[t] for t in truth],
        "bob": [labels[t] for t in truth],
        "judge": [labels[j] for j in judge],
    }
    evaluation, _ = make_rated_evaluation(
        project, kind="categorical", table=table, models=["judge"], scale=scale
    )

    (rater,) = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"]

    item_ids = np.array(list(evaluation.dataset.items.order_by("position").values_list("pk", flat=True)))
    held = held_out(evaluation.pk, item_ids)
    agree = judge == truth
    assert rater["split"]["held_out"]["items"] == int(held.sum())
    assert rater["split"]["tune"]["items"] == int((~held).sum())
    assert rater["split"]["held_out"]["percent_agreement"] == pytest.approx(agree[held].mean())
    assert rater["split"]["tune"]["percent_agreement"] == pytest.approx(agree[~held].mean())
    page = researcher_client.get(
        reverse("agreement_report", args=[project.slug, evaluation.pk])
    ).content.decode()
    assert f"{int((~held).sum())} tune · {int(held.sum())} held out" in page


@pytest.mark.django_db
def test_growth_shows_agreement_on_more_and_more_human_rated_items(project, researcher_client):
    labels = ["no", "yes"]
    scale = [{"value": v, "label": v, "description": v} for v in labels]
    truth = [labels[n % 2] for n in range(30)]
    judge = [t if n % 4 else labels[1 - n % 2] for n, t in enumerate(truth)]  # wrong on every 4th
    table = {"ann": truth, "bob": truth, "judge": judge}
    evaluation, _ = make_rated_evaluation(
        project, kind="categorical", table=table, models=["judge"], scale=scale
    )

    (rater,) = build_report(evaluation=evaluation, resamples=0).as_json()["rubrics"][0]["raters"]

    points = rater["growth"]["points"]
    assert [p["labeled_items"] for p in points] == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30]
    assert points[-1]["percent_agreement"] == pytest.approx(22 / 30)
    widths = [p["ci"][1] - p["ci"][0] for p in points]
    assert widths[-1] < widths[0] and all(p["ci"][0] <= p["percent_agreement"] <= p["ci"][1] for p in points)
    page = researcher_client.get(
        reverse("agreement_report", args=[project.slug, evaluation.pk])
    ).content.decode()
    assert "As human labels are added" in page
