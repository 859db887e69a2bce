"""Position consistency of a pairwise judge run with position swap, in the agreement report's summary and in
its JSON and CSV downloads."""

import csv
import io
import json

from django.urls import reverse

from agreement.consistency import position_consistency
from judges import services
from judges.models import JudgeCall
from tests import factories
from tests.agreement.helpers import add_ratings
from tests.judges.conftest import make_judge


def test_summary_shows_the_share_of_items_where_both_orders_agree(project, fake_llm, researcher_client):
    version = factories.make_rubric(
        project=project,
        name="Preference",
        kind="pairwise",
        template="Which is better, A or B? Reply with JSON with pairwise_choice and explanation.\n"
        "{prompt}\nA: {baseline}\nB: {response}",
    )
    dataset = factories.make_dataset(project, items=12)
    evaluation = factories.make_evaluation(project, dataset, [version])
    add_ratings(evaluation, version, {"anna": ["A", "B"] * 6, "bob": ["A", "SAME"] * 6})
    run = services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )
    services.work_lane(run_id=run.pk, lane=0)

    # The same figure counted from the calls directly.
    calls = {(c.item_id, c.sample, c.swapped): c.value for c in JudgeCall.objects.filter(run=run) if c.value}
    pairs = [
        (v, calls[(i, s, True)])
        for (i, s, swapped), v in calls.items()
        if not swapped and (i, s, True) in calls
    ]
    assert len(pairs) == 12
    consistent = sum(1 for a, b in pairs if a == b)
    assert position_consistency([run.pk]) == {
        run.pk: {"pairs": 12, "consistent": consistent, "share": consistent / 12}
    }
    page = researcher_client.get(
        reverse("agreement_report", args=[project.slug, evaluation.pk])
    ).content.decode()
    cell = page[page.index('data-role="position-consistency"') :][:400]
    assert f"{100 * consistent / 12:.1f}%" in cell and "of 12" in cell

    args = [project.slug, evaluation.pk]
    report = json.loads(researcher_client.get(reverse("agreement_report_json", args=args)).content)
    raters = {r["rater"]: r for block in report["rubrics"] for r in block["raters"]}
    judge_rater = next(r for r in raters.values() if r.get("judge_run") == run.pk)
    assert judge_rater["position_consistency"] == {
        "pairs": 12,
        "consistent": consistent,
        "share": consistent / 12,
    }
    text = researcher_client.get(reverse("agreement_report_csv", args=args)).content.decode()
    (row,) = [r for r in csv.DictReader(io.StringIO(text)) if r["block"] == "position_consistency"]
    assert (row["rater"], row["items"], float(row["value"])) == (judge_rater["rater"], "12", consistent / 12)
    assert row["why"] == f"{consistent} of 12 verdicts the same with A and B swapped"
