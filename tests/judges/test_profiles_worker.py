"""A real Celery worker finishes the demo evaluation's four built-in rubrics against every provider
profile of the simulated model, untested judges included: the reasoning profile refuses max_tokens and
temperature, llama-cpp-python answers json_schema with a 500 validation error, and the run adapts with at
most a few extra requests, never one failure per item."""

import time

import pytest
from django.core.management import call_command

from evaluations.models import Evaluation, Rating
from judges import services
from judges.fake_llm import FakeConfig, FakeLLM
from judges.fake_profiles import PROFILE_NAMES
from judges.models import Judge, JudgeCall, JudgeRun
from rubrics.builtins import ensure_builtin_rubrics
from tests.judges.conftest import TEST_KEY_ENV

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PROFILES = [name for name in PROFILE_NAMES if name != "any"]
# What a judge for each profile is told about its endpoint: nothing (automatic) unless the family is not
# recognisable from a loopback URL and it matters for the request (Azure's URLs and key header).
ENDPOINT = {"azure": "azure", "anthropic-compat": "anthropic"}


@pytest.fixture
def no_enqueue():
    """Here lanes really go through the broker to the worker."""
    return None


def wait_until_finished(runs: list[JudgeRun], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not JudgeRun.objects.filter(pk__in=[r.pk for r in runs], status=JudgeRun.Status.RUNNING).exists():
            return
        time.sleep(0.2)
    raise AssertionError("the runs did not finish in time")


def test_every_profile_finishes_the_demo_evaluation_through_a_real_worker(celery_worker_process, monkeypatch):
    ensure_builtin_rubrics()
    call_command("setup_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    evaluation = Evaluation.objects.get(project__slug="demo", name="Demo evaluation")
    versions = list(evaluation.rubric_versions.select_related("rubric").order_by("rubric__name"))
    assert len(versions) == 4
    items = evaluation.dataset.items.count()
    for profile in PROFILES:
        server = FakeLLM(FakeConfig(latency_ms=5, profile=profile, api_key="test-key")).start(stop_after=300)
        try:
            judge = Judge.objects.create(
                project=evaluation.project,
                name=f"judge {profile}",
                base_url=server.base_url,
                model=f"fake-{profile}",
                api_key_env=TEST_KEY_ENV,
                endpoint=ENDPOINT.get(profile, "auto"),
                temperature=0.0,
                concurrency=4,
                request_timeout=5,
            )
            runs = services.launch_runs(judge=judge, evaluation=evaluation, rubric_versions=versions)
            wait_until_finished(runs)
        finally:
            server.stop()
        calls = sum(run.total_calls for run in runs)
        for run in runs:
            run.refresh_from_db()
            assert run.status == JudgeRun.Status.DONE, f"{profile}: {run.error}"
            assert run.calls.exclude(status=JudgeCall.Status.DONE).count() == 0
            assert Rating.objects.filter(rater=run.rater).count() == items
        adapted = server.stats.requests - calls
        assert adapted <= 2 * len(runs), f"{profile}: {adapted} extra requests"
        if profile == "openai-reasoning":
            assert all(
                {a["parameter"] for a in run.adaptations} == {"max_tokens", "temperature"} for run in runs
            )
        elif profile == "llama-cpp-python":
            # its 500 on json_schema (a validation error) makes the JSON rubric's run adapt once, no retries
            adapted_runs = {
                run.rubric_version.rubric.kind: run.adaptations for run in runs if run.adaptations
            }
            assert list(adapted_runs) == ["pairwise"], adapted_runs
            assert [a["parameter"] for a in adapted_runs["pairwise"]] == ["response_format"]
        else:
            assert all(run.adaptations == [] for run in runs), profile
