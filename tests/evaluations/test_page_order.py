"""The evaluation page follows the work: items, annotators and progress, judge runs (live counts and a
bar), agreement, exports."""

from django.urls import reverse

from judges import services
from judges.models import JudgeCall
from tests import factories
from tests.judges.conftest import make_judge


def test_sections_come_in_the_order_of_the_work(researcher_client, project):
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    page = researcher_client.get(
        reverse("evaluation_detail", args=[project.slug, evaluation.pk])
    ).content.decode()
    ids = ['id="summary"', "<h2>Annotators", 'id="evaluation_judge_runs"', "<h2>Agreement", 'id="exports"']
    positions = [page.index(marker) for marker in ids]
    assert positions == sorted(positions)


def test_running_runs_show_their_counts_and_a_bar(researcher_client, project, monkeypatch):
    monkeypatch.setattr("judges.services.enqueue_lanes", lambda *args: None)
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=4), [version])
    judge = make_judge(project, type("Server", (), {"base_url": "http://127.0.0.1:9/v1"})())
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    first, second = run.calls.order_by("id")[:2]
    JudgeCall.objects.filter(pk=first.pk).update(status=JudgeCall.Status.DONE)
    JudgeCall.objects.filter(pk=second.pk).update(status=JudgeCall.Status.FAILED)
    section = researcher_client.get(reverse("evaluation_judge_runs", args=[project.slug, evaluation.pk]))
    html = section.content.decode()
    assert "<strong>1</strong> of 4 calls done" in html and "1 failed" in html
    assert 'style="width: 25.0%"' in html and 'hx-trigger="every 3s"' in html
