"""Judge runs worked in-process (lanes called directly) against the simulated model in a thread."""

import pytest

from evaluations.models import Rating
from judges import services
from judges.calls import LaneContext
from judges.claims import claim_next_call
from judges.finishing import finish_call
from judges.models import CachedReply, JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import make_judge, run_to_end

ENQUEUE_LANES = services.enqueue_lanes  # the real one: the `no_enqueue` fixture replaces it in each test

PAIRWISE_TEMPLATE = (
    "Compare. Reply with JSON with pairwise_choice and explanation.\n{history}\n{prompt}\n"
    "### Response A\n{baseline_model_response}\n### Response B\n{response}"
)


def setup_evaluation(project, *, kind="likert", items=4, template=None):
    extra = {"template": template} if template else {}
    version = factories.make_rubric(project=project, name=f"{kind} rubric", kind=kind, **extra)
    dataset = factories.make_dataset(project, items=items)
    evaluation = factories.make_evaluation(project, dataset, [version])
    return version, evaluation


def test_likert_run_stores_one_rating_per_item_with_raw_output_tokens_and_attempts(project, fake_llm):
    version, evaluation = setup_evaluation(project)
    run = run_to_end(make_judge(project, fake_llm), evaluation, version)
    assert run.status == JudgeRun.Status.DONE
    ratings = Rating.objects.filter(rater=run.rater, evaluation=evaluation, rubric_version=version)
    assert ratings.count() == 4
    for rating in ratings:
        assert rating.value in {"1", "2", "3", "4", "5"}
        assert rating.raw_output
        assert rating.details["samples"][0]["attempts"] == 1
        assert rating.details["prompt_tokens"] > 0
    assert run.rater.kind == "model"


def test_first_lane_starts_the_other_lanes_after_its_first_call(project, fake_llm, no_enqueue):
    version, evaluation = setup_evaluation(project)
    run = run_to_end(make_judge(project, fake_llm, concurrency=3), evaluation, version)
    assert no_enqueue == [(run.pk, 1), (run.pk, 2)]


def test_every_lane_task_carries_when_its_run_was_queued_and_one_queued_before_does_nothing(
    project, fake_llm, monkeypatch, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from judges.tasks import run_judge_lane

    sent: list[tuple] = []
    monkeypatch.setattr(services, "enqueue_lanes", ENQUEUE_LANES)
    monkeypatch.setattr(run_judge_lane, "delay", lambda *args: sent.append(args))
    version, evaluation = setup_evaluation(project, items=4)
    judge = make_judge(project, fake_llm, concurrency=3)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    launched = run.queue_stamp
    assert launched and sent == [(run.pk, 0, launched)]
    assert services.work_lane(run_id=run.pk, lane=0, queue_stamp=launched) == 4
    assert sent[1:] == [(run.pk, 1, launched), (run.pk, 2, launched)]
    # Another run's worker dies while its lanes work; a starting worker recovers the run.
    with django_capture_on_commit_callbacks(execute=True):
        run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    launched = run.queue_stamp
    JudgeRun.objects.filter(pk=run.pk).update(heartbeat=timezone.now() - timedelta(seconds=90))
    with django_capture_on_commit_callbacks(execute=True):
        assert services.recover_stalled_runs(stale_seconds=60) == [run.pk]
    run.refresh_from_db()
    assert run.queue_stamp != launched and sent[3:] == [(run.pk, 0, launched), (run.pk, 0, run.queue_stamp)]
    # The dead worker's lane tasks, delivered again after their visibility timeout: nothing sent or taken.
    requests = fake_llm.stats.requests
    assert services.work_lane(run_id=run.pk, lane=1, queue_stamp=launched) == 0
    assert fake_llm.stats.requests == requests
    assert run.calls.filter(status=JudgeCall.Status.PENDING).count() == 4
    assert services.work_lane(run_id=run.pk, lane=0, queue_stamp=run.queue_stamp) == 4


def test_a_first_lane_whose_run_was_resumed_meanwhile_starts_no_lanes(project, fake_llm, no_enqueue):
    version, evaluation = setup_evaluation(project, items=3)
    judge = make_judge(project, fake_llm, concurrency=3)
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    ctx = LaneContext.load(run)
    # Cancelled and resumed while its first call was out: the resumed run's own first lane starts them.
    assert services.cancel_run(run=run)
    services.resume_run(run=run)
    services.start_other_lanes(ctx)
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.RUNNING and not run.lanes_started and no_enqueue == []


def test_samples_are_each_stored_and_averaged_for_likert(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=2)
    run = run_to_end(make_judge(project, fake_llm, samples=3, temperature=1.0), evaluation, version)
    assert run.calls.count() == 6
    for rating in Rating.objects.filter(rater=run.rater):
        values = [float(s["value"]) for s in rating.details["samples"]]
        assert len(values) == 3
        assert float(rating.value) == pytest.approx(sum(values) / 3, abs=1e-4)


def test_logprob_scoring_stores_weighted_mean_and_argmax(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=3)
    run = run_to_end(make_judge(project, fake_llm, logprobs=True), evaluation, version)
    ratings = list(Rating.objects.filter(rater=run.rater))
    for rating in ratings:
        sample = rating.details["samples"][0]
        assert float(rating.value) == pytest.approx(sample["score"], abs=1e-4)
        assert rating.details["argmax"] == sample["argmax"]
    assert any("." in rating.value for rating in ratings)  # weighted means, not just the digits
    assert services.run_progress(run).logprobs_missing == 0


def test_logprob_run_stops_with_the_reason_when_the_endpoint_returns_none(project, fake_llm):
    """Never a quiet switch of scoring method: no logprobs back means the run stops, no rating stored."""
    version, evaluation = setup_evaluation(project, items=2)
    judge = make_judge(project, fake_llm, logprobs=True, model="fake-judge?logprobs=0")
    run = run_to_end(judge, evaluation, version)
    assert run.status == JudgeRun.Status.FAILED
    assert "sent no logprobs" in run.error and "logprob scoring" in run.error
    assert run.calls.exclude(status=JudgeCall.Status.PENDING).count() == 1
    assert not Rating.objects.filter(rater=run.rater).exists()


def test_pairwise_with_position_swap_judges_both_orders_and_reports_consistency(project, fake_llm):
    version, evaluation = setup_evaluation(project, kind="pairwise", items=6, template=PAIRWISE_TEMPLATE)
    run = run_to_end(make_judge(project, fake_llm), evaluation, version)
    assert run.calls.filter(swapped=True).count() == 6
    progress = services.run_progress(run)
    assert progress.consistency_pairs == 6
    for rating in Rating.objects.filter(rater=run.rater):
        original, swapped = sorted(rating.details["samples"], key=lambda s: s["swapped"])
        if original["value"] == swapped["value"]:
            assert rating.value == original["value"]
        else:
            assert rating.value == "SAME"
    consistent = sum(r.details["consistent_pairs"] for r in Rating.objects.filter(rater=run.rater))
    assert progress.consistent_pairs == consistent


def test_swapped_call_verdicts_are_stored_in_canonical_orientation(project, fake_llm):
    version, evaluation = setup_evaluation(project, kind="pairwise", items=1, template=PAIRWISE_TEMPLATE)
    run = run_to_end(make_judge(project, fake_llm, cache_enabled=False), evaluation, version)
    swapped = run.calls.get(swapped=True)
    shown = swapped.raw_output
    choice = next(v for v in ("SAME", "A", "B") if f'"{v}"' in shown)
    assert swapped.value == {"A": "B", "B": "A", "SAME": "SAME"}[choice]


def test_identical_calls_come_from_the_cache_on_a_second_run(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=3)
    judge = make_judge(project, fake_llm)
    first = run_to_end(judge, evaluation, version)
    second = run_to_end(judge, evaluation, version)
    assert services.run_progress(first).cached == 0
    assert services.run_progress(second).cached == 3
    assert CachedReply.objects.count() == 3
    assert list(
        Rating.objects.filter(rater=first.rater).order_by("item").values_list("value", flat=True)
    ) == list(Rating.objects.filter(rater=second.rater).order_by("item").values_list("value", flat=True))


def test_a_judge_with_the_cache_off_calls_the_endpoint_again(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=2)
    judge = make_judge(project, fake_llm, cache_enabled=False)
    run_to_end(judge, evaluation, version)
    second = run_to_end(judge, evaluation, version)
    assert services.run_progress(second).cached == 0
    assert CachedReply.objects.count() == 0


@pytest.mark.parametrize("fault", ["429", "500", "malformed"])
def test_transient_faults_are_retried_and_the_run_completes(project, fake_llm, fault):
    version, evaluation = setup_evaluation(project, items=3)
    run = run_to_end(
        make_judge(project, fake_llm, model=f"fake-judge?fault={fault}&retry_after=0.05"), evaluation, version
    )
    assert run.status == JudgeRun.Status.DONE
    assert set(run.calls.values_list("attempts", flat=True)) == {2}
    assert Rating.objects.filter(rater=run.rater, parse_failed=False).count() == 3


def test_a_429_waits_at_least_its_retry_after_before_trying_again(project, fake_llm):
    import time

    version, evaluation = setup_evaluation(project, items=1)
    judge = make_judge(project, fake_llm, model="fake-judge?fault=429&retry_after=0.6")
    started = time.monotonic()
    run = run_to_end(judge, evaluation, version)
    assert time.monotonic() - started >= 0.6
    assert run.calls.get().attempts == 2 and run.status == JudgeRun.Status.DONE


def test_timeouts_are_retried(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=1)
    judge = make_judge(project, fake_llm, model="fake-judge?fault=timeout", request_timeout=0.3)
    run = run_to_end(judge, evaluation, version)
    assert run.status == JudgeRun.Status.DONE
    assert run.calls.get().attempts == 2


@pytest.mark.parametrize("fault", ["empty", "refusal", "truncated_json"])
def test_unusable_content_is_a_parse_failure_with_raw_text_never_a_score(project, fake_llm, fault):
    version, evaluation = setup_evaluation(project, items=2)
    run = run_to_end(make_judge(project, fake_llm, model=f"fake-judge?fault={fault}"), evaluation, version)
    assert run.status == JudgeRun.Status.DONE
    for rating in Rating.objects.filter(rater=run.rater):
        assert rating.parse_failed and rating.value == ""
        assert rating.details["parse_error"]
    if fault == "refusal":
        refused = Rating.objects.filter(rater=run.rater).first()
        assert refused is not None and "sorry" in refused.raw_output
    assert services.run_progress(run).parse_failure_rate == 100.0


def test_wrong_key_stops_the_run_after_the_first_call_with_authentication_failed(
    project, monkeypatch, no_enqueue
):
    from judges.fake_llm import FakeConfig, FakeLLM

    server = FakeLLM(FakeConfig(latency_ms=0, api_key="right")).start(stop_after=60)
    try:
        version, evaluation = setup_evaluation(project, items=5)
        run = run_to_end(make_judge(project, server, concurrency=4), evaluation, version)
    finally:
        server.stop()
    assert run.status == JudgeRun.Status.FAILED
    assert "authentication failed" in run.error
    assert "1234" not in run.error and "sk-pro" not in run.error  # the server echoed a masked key
    assert server.stats.requests == 1
    assert run.calls.filter(status=JudgeCall.Status.FAILED).count() == 1
    assert no_enqueue == []


def test_unknown_model_stops_the_run_with_a_clear_message(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=3)
    run = run_to_end(make_judge(project, fake_llm, model="gpt-nonexistent"), evaluation, version)
    assert run.status == JudgeRun.Status.FAILED
    assert "not found (404)" in run.error
    assert run.calls.exclude(status=JudgeCall.Status.PENDING).count() == 1


def test_a_stale_claim_cannot_store_a_call_a_second_time(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=1)
    run = services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )
    ctx = LaneContext.load(run)
    claimed = claim_next_call(ctx)
    assert claimed is not None
    call, old_token = claimed
    services.resume_run(run=run)  # e.g. the worker was presumed dead
    assert services.work_lane(run_id=run.pk, lane=0) == 1
    late = finish_call(ctx, call, old_token, {"status": JudgeCall.Status.DONE, "value": "1"})
    assert late is False
    assert Rating.objects.filter(rater=run.rater).count() == 1
    assert run.calls.get().value != "" and run.calls.get().attempts == 1


def test_a_redelivered_lane_does_nothing_twice(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=3)
    run = run_to_end(make_judge(project, fake_llm), evaluation, version)
    assert services.work_lane(run_id=run.pk, lane=0) == 0
    assert Rating.objects.filter(rater=run.rater).count() == 3
    assert set(run.calls.values_list("attempts", flat=True)) == {1}


def test_cancel_stops_the_lanes_and_resume_finishes_the_run(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=3)
    run = services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )
    assert services.cancel_run(run=run)
    assert services.work_lane(run_id=run.pk, lane=0) == 0
    services.resume_run(run=run)
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE
    assert Rating.objects.filter(rater=run.rater).count() == 3


def test_launch_writes_a_pending_call_per_item_sample_and_order_in_item_order(project, fake_llm):
    version, evaluation = setup_evaluation(project, kind="pairwise", items=3, template=PAIRWISE_TEMPLATE)
    judge = make_judge(project, fake_llm, samples=2)
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    fields = ("item__position", "sample", "swapped", "status", "attempts", "claim_token", "details", "value")
    calls = list(run.calls.order_by("id").values_list(*fields))
    assert calls == [
        (position, sample, swapped, JudgeCall.Status.PENDING, 0, None, {}, "")
        for position in range(3)
        for sample in range(2)
        for swapped in (False, True)
    ]
    assert run.total_calls == 12


def test_estimate_counts_calls_tokens_and_cost_before_launch(project, fake_llm):
    version, evaluation = setup_evaluation(project, kind="pairwise", items=4, template=PAIRWISE_TEMPLATE)
    judge = make_judge(project, fake_llm, samples=2, price_input_per_million=10, price_output_per_million=30)
    estimate = services.estimate_run(judge=judge, evaluation=evaluation, rubric_version=version)
    assert estimate.calls == 4 * 2 * 2
    assert estimate.prompt_tokens > 0 and estimate.completion_tokens > 0
    expected = (estimate.prompt_tokens * 10 + estimate.completion_tokens * 30) / 1_000_000
    assert float(estimate.cost) == pytest.approx(expected, abs=1e-4)
    assert JudgeRun.objects.count() == 0


def test_launch_refuses_a_rubric_version_outside_the_evaluation(project, fake_llm):
    from django.core.exceptions import ValidationError

    _, evaluation = setup_evaluation(project, items=1)
    other = factories.make_rubric(project=project, name="Other")
    with pytest.raises(ValidationError, match="not part of evaluation"):
        services.launch_run(judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=other)
    assert JudgeRun.objects.count() == 0 and JudgeCall.objects.count() == 0


def test_a_starting_worker_takes_over_only_runs_whose_heartbeat_went_stale(project, fake_llm, no_enqueue):
    from datetime import timedelta

    from django.utils import timezone

    version, evaluation = setup_evaluation(project, items=2)
    judge = make_judge(project, fake_llm)
    stalled = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    alive = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    ctx = LaneContext.load(stalled)
    claim_next_call(ctx)
    JudgeRun.objects.filter(pk=stalled.pk).update(heartbeat=timezone.now() - timedelta(seconds=90))
    JudgeRun.objects.filter(pk=alive.pk).update(heartbeat=timezone.now())
    assert services.recover_stalled_runs(stale_seconds=60) == [stalled.pk]
    assert not stalled.calls.filter(status=JudgeCall.Status.CLAIMED).exists()
    assert services.recover_stalled_runs(stale_seconds=60) == []  # taken over once


def test_an_item_the_prompt_cannot_be_rendered_for_fails_its_call_not_the_run(project, fake_llm):
    from datasets.models import Item

    version, evaluation = setup_evaluation(project, kind="pairwise", items=3, template=PAIRWISE_TEMPLATE)
    run = services.launch_run(
        judge=make_judge(project, fake_llm, position_swap=False),
        evaluation=evaluation,
        rubric_version=version,
    )
    broken = Item.objects.filter(dataset=evaluation.dataset).order_by("position").first()
    assert broken is not None
    Item.objects.filter(pk=broken.pk).update(baseline=None)  # changed after launch
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    failed = run.calls.get(status=JudgeCall.Status.FAILED)
    assert failed.item_id == broken.pk and "could not be rendered" in failed.error
    assert Rating.objects.filter(rater=run.rater).count() == 2
    assert run.status == JudgeRun.Status.FAILED and "1 call(s) failed" in run.error


def test_a_lane_leaves_no_connection_open_once_its_run_is_over(project, serve):
    """A worker thread may not send to this endpoint again for days: an idle keep-alive socket per thread and
    endpoint would pile up until the worker ran out of file descriptors."""
    import psutil

    server = serve("any")
    version, evaluation = setup_evaluation(project, items=3)
    run = run_to_end(make_judge(project, server), evaluation, version)
    assert run.status == JudgeRun.Status.DONE and server.stats.requests == 3
    port = int(server.base_url.split(":")[2].split("/")[0])
    connections = psutil.Process().net_connections(kind="tcp")
    assert [c for c in connections if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"] == []
