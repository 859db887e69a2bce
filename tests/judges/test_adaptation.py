"""A run that meets a refused parameter adapts once for all its calls; scoring never changes quietly."""

import pytest
from django.urls import reverse

from evaluations.models import Rating
from judges import probing, services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import make_judge


@pytest.fixture
def reasoning_server():
    server = FakeLLM(FakeConfig(latency_ms=0, profile="openai-reasoning")).start(stop_after=120)
    yield server
    server.stop()


def run_on(project, judge, *, items=6):
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=items), [version])
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    return run


def test_an_untested_judge_adapts_once_to_a_reasoning_model_and_every_call_is_done(project, reasoning_server):
    judge = make_judge(project, reasoning_server, model="fake-o4", temperature=0.0)
    run = run_on(project, judge, items=6)
    assert run.status == JudgeRun.Status.DONE, run.error
    assert [a["parameter"] for a in run.adaptations] == ["max_tokens", "temperature"]
    assert run.calls.filter(status=JudgeCall.Status.DONE).count() == 6
    assert Rating.objects.filter(rater=run.rater).count() == 6
    # six calls, two refused requests: the adaptation cost two requests, not one per item
    assert reasoning_server.stats.requests == 8
    assert run.calls.first().details["reasoning_tokens"] == 160
    assert services.run_progress(run).reasoning_tokens == 6 * 160


def test_the_run_page_lists_what_the_run_changed(researcher_client, project, reasoning_server):
    judge = make_judge(project, reasoning_server, model="fake-o4", temperature=0.0)
    run = run_on(project, judge, items=2)
    page = researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode()
    assert "the output-token limit is sent as max_completion_tokens" in page
    assert "temperature is no longer sent" in page
    assert "Unsupported parameter: &#x27;max_tokens&#x27;" in page


def test_a_tested_judge_sends_the_right_parameters_from_the_first_call(project, reasoning_server):
    judge = make_judge(project, reasoning_server, model="fake-o4")
    assert probing.test_connection(judge=judge).ok
    before = reasoning_server.stats.requests
    run = run_on(project, judge, items=4)
    assert run.status == JudgeRun.Status.DONE and run.adaptations == []
    assert reasoning_server.stats.requests - before == 4


def test_logprob_scoring_on_an_endpoint_that_refuses_logprobs_stops_the_run_with_that_reason(
    project, reasoning_server
):
    judge = make_judge(project, reasoning_server, model="fake-o4", logprobs=True)
    run = run_on(project, judge, items=5)
    assert run.status == JudgeRun.Status.FAILED
    assert "refuses logprobs" in run.error and "turn logprob scoring off" in run.error
    assert not Rating.objects.filter(rater=run.rater).exists()
    assert reasoning_server.stats.requests <= 3


def test_a_reasoning_model_that_spends_its_limit_thinking_stops_the_run_saying_so(project, reasoning_server):
    judge = make_judge(project, reasoning_server, model="fake-o4", max_tokens=100)
    run = run_on(project, judge, items=5)
    assert run.status == JudgeRun.Status.FAILED
    assert "too small for a reasoning model" in run.error and "100 of them on reasoning" in run.error
    assert run.calls.filter(status=JudgeCall.Status.FAILED).count() == 1


def test_a_chat_model_that_does_not_know_reasoning_effort_adapts_once(project):
    """OpenAI's chat models refuse reasoning_effort as an unrecognised argument (no param, no code): the
    run reads the parameter from the message, stops sending it, and every call is done."""
    server = FakeLLM(FakeConfig(latency_ms=0, profile="openai-chat")).start(stop_after=120)
    try:
        judge = make_judge(
            project, server, model="fake-4o", endpoint="openai-reasoning", reasoning_effort="low"
        )
        run = run_on(project, judge, items=4)
        assert run.status == JudgeRun.Status.DONE, run.error
        assert [a["parameter"] for a in run.adaptations] == ["reasoning_effort"]
        assert run.adaptations[0]["what"] == "reasoning_effort is no longer sent"
        assert server.stats.requests == 5
    finally:
        server.stop()
