"""A judge's rating written again (a resumed or repeated run) keeps its earlier value, as people's do."""

from evaluations.models import Rating, RatingRevision
from judges import services
from judges.calls import LaneContext
from judges.finishing import rating_for, store_ratings
from judges.models import JudgeCall
from tests.judges.conftest import make_judge
from tests.judges.test_runs import setup_evaluation


def test_a_judge_rating_written_again_keeps_its_earlier_value(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=1)
    run = services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )
    ctx = LaneContext.load(run)
    call = run.calls.get()
    call.status, call.value, call.raw_output = JudgeCall.Status.DONE, "2", "Rating: 2"
    store_ratings([rating_for(ctx, call.item_id, [call])])
    rating = Rating.objects.get(rater_id=run.rater_id)
    assert rating.value == "2" and not rating.revisions.exists()

    store_ratings([rating_for(ctx, call.item_id, [call])])  # the same result again: nothing changes
    assert not RatingRevision.objects.exists()

    call.value, call.raw_output = "4", "Rating: 4"
    store_ratings([rating_for(ctx, call.item_id, [call])])
    rating.refresh_from_db()
    assert (rating.value, Rating.objects.count()) == ("4", 1)
    (earlier,) = rating.revisions.all()
    assert earlier.value == "2" and earlier.created <= rating.updated
