"""A broker that cannot be reached when a run's work is queued: Celery's own publish to a closed port
raises kombu's OperationalError (the edge we do not own); Concord says so instead of a run stuck running."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from evaluations.models import Rating
from judges import services
from judges.models import JudgeRun
from judges.tasks import poll_judge_batches, run_judge_lane
from tests.judges.conftest import make_judge
from tests.workers import unreachable_broker

ENQUEUE_LANES = services.enqueue_lanes  # the real one: the `no_enqueue` fixture replaces it in each test


@pytest.fixture
def broker_down(monkeypatch):
    """Lane and poll tasks go to a Redis broker on a port nothing listens on, through Celery's own publish."""
    down = unreachable_broker(monkeypatch)
    tried: list[tuple] = []

    def send(name):
        def publish(*args, **kwargs):
            tried.append((name, args))
            down.send_task(name, args=kwargs.get("args", args))

        return publish

    monkeypatch.setattr(services, "enqueue_lanes", ENQUEUE_LANES)
    monkeypatch.setattr(run_judge_lane, "delay", send(run_judge_lane.name))
    monkeypatch.setattr(poll_judge_batches, "apply_async", send(poll_judge_batches.name))
    return tried


@pytest.mark.django_db(transaction=True)  # as the server runs a view: the lane is sent as the run commits
def test_a_launch_the_broker_refuses_fails_the_run_saying_so_and_a_resume_starts_it(
    researcher_client, project, judge, evaluation_setup, broker_down, monkeypatch
):
    evaluation, version = evaluation_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    response = researcher_client.post(
        url, {"judge": judge.pk, "rubric_versions": version.pk, "confirm": "yes"}
    )
    run = JudgeRun.objects.get()
    assert broker_down == [(run_judge_lane.name, (run.pk, 0, run.queue_stamp))]  # it was really tried
    assert response.status_code == 302 and response.url == reverse(
        "judge_run_detail", args=[project.slug, run.pk]
    )
    assert run.status == JudgeRun.Status.FAILED and run.error == services.QUEUE_REFUSED
    page = researcher_client.get(response.url).content.decode()
    assert "The task queue did not take this run" in page and "Resume" in page
    assert "Judge run launched" not in page  # no flash that says otherwise

    sent: list[tuple] = []
    monkeypatch.setattr(run_judge_lane, "delay", lambda *args: sent.append(args))  # the queue is back
    researcher_client.post(reverse("judge_run_resume", args=[project.slug, run.pk]))
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.RUNNING and run.error == ""
    assert sent == [(run.pk, 0, run.queue_stamp)]
    assert "Run resumed" in researcher_client.get(response.url).content.decode()


@pytest.mark.django_db(transaction=True)  # as the command runs: the lane is sent as the run commits
def test_the_run_judge_command_exits_with_the_reason_when_the_broker_refuses(
    project, judge, evaluation_setup, broker_down
):
    evaluation, version = evaluation_setup
    args = ["--evaluation", evaluation.name, "--judge", judge.name, "--rubric", version.rubric.name]
    with pytest.raises(CommandError, match="The task queue did not take this run's work"):
        call_command("run_judge", *args, stdout=StringIO())
    assert JudgeRun.objects.get().status == JudgeRun.Status.FAILED


def test_a_batch_run_whose_first_poll_the_broker_refuses_fails_saying_so(
    project, fake_llm, evaluation_setup, broker_down, django_capture_on_commit_callbacks
):
    evaluation, version = evaluation_setup
    judge = make_judge(project, fake_llm, capabilities={"batch": True})
    with django_capture_on_commit_callbacks(execute=True):
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version, batch=True)
    run.refresh_from_db()
    assert [name for name, _ in broker_down] == [poll_judge_batches.name]
    assert run.status == JudgeRun.Status.FAILED and run.error == services.QUEUE_REFUSED


def test_when_the_broker_refuses_the_other_lanes_the_first_finishes_the_run_alone(
    project, fake_llm, evaluation_setup, broker_down
):
    evaluation, version = evaluation_setup
    run = services.launch_run(
        judge=make_judge(project, fake_llm, concurrency=4), evaluation=evaluation, rubric_version=version
    )
    assert services.work_lane(run_id=run.pk, lane=0, queue_stamp=run.queue_stamp) == 3
    run.refresh_from_db()
    assert broker_down == [(run_judge_lane.name, (run.pk, 1, run.queue_stamp))]  # tried, refused at the first
    assert run.status == JudgeRun.Status.DONE and Rating.objects.filter(rater=run.rater).count() == 3


def test_lanes_the_broker_refused_are_sent_again_once_it_is_back(
    project, fake_llm, evaluation_setup, broker_down, monkeypatch
):
    evaluation, version = evaluation_setup
    monkeypatch.setattr(services, "LANES_TRY_AGAIN_SECONDS", 0)
    refused = run_judge_lane.delay  # the broker_down fixture's: to a closed port, recorded
    sent: list[int] = []

    def broker_back_after_one_refusal(run_id, lane, queue_stamp):
        if not broker_down:
            refused(run_id, lane, queue_stamp)
        sent.append(lane)

    monkeypatch.setattr(run_judge_lane, "delay", broker_back_after_one_refusal)
    run = services.launch_run(
        judge=make_judge(project, fake_llm, concurrency=4), evaluation=evaluation, rubric_version=version
    )
    assert services.work_lane(run_id=run.pk, lane=0, queue_stamp=run.queue_stamp) == 3
    # Refused at lane 1 after the first call; all three sent after the second.
    assert [lane for _, (_, lane, _) in broker_down] == [1] and sent == [1, 2, 3]
