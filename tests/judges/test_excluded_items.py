"""Judges never get the items an evaluation excluded."""

from datasets.models import Item
from evaluations.services import create_evaluation
from judges import services
from judges.models import JudgeCall
from tests import factories
from tests.judges.conftest import make_judge


def test_judge_runs_skip_excluded_items(project, fake_llm):
    dataset = factories.make_dataset(project, items=4)
    Item.objects.filter(external_id="d-2").update(baseline=None)
    version = factories.make_rubric(project=project, name="Preference", kind="pairwise")
    evaluation = create_evaluation(
        project=project, dataset=dataset, rubric_versions=[version], name="E", exclude_lacking=True
    )
    judge = make_judge(project, fake_llm)
    estimate = services.estimate_run(judge=judge, evaluation=evaluation, rubric_version=version)
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    judged = set(JudgeCall.objects.filter(run=run).values_list("item__external_id", flat=True))
    assert judged == {"d-0", "d-1", "d-3"}
    assert estimate.calls == JudgeCall.objects.filter(run=run).count()
