from evaluations.models import Rating
from judges import services
from judges.models import JudgeRun
from tests import factories
from tests.judges.conftest import make_judge


def likert_setup(project, items=4):
    version = factories.make_rubric(project=project, name="Quality")
    dataset = factories.make_dataset(project, items=items)
    evaluation = factories.make_evaluation(project, dataset, [version])
    return version, evaluation


def test_likert_run_stores_one_rating_per_item_with_raw_output(project, fake_llm):
    version, evaluation = likert_setup(project)
    judge = make_judge(project, fake_llm)
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    assert services.work_lane(run_id=run.pk, lane=0) == 4
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE
    ratings = Rating.objects.filter(rater=run.rater)
    assert ratings.count() == 4
    for rating in ratings:
        assert rating.value in {"1", "2", "3", "4", "5"}
        assert rating.raw_output
        assert rating.details["samples"][0]["attempts"] == 1
    assert run.rater.kind == "model"
