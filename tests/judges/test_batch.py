"""Judge runs through the Batch API, polled in-process against the simulated model over HTTP; and the
simulated model's files and batches endpoints, as strict as OpenAI's."""

import json
import time
import uuid
from datetime import timedelta
from decimal import Decimal

import openai
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from evaluations.models import Rating
from judges import batch, services
from judges.calls import LaneContext
from judges.fake_llm import FakeConfig, FakeLLM
from judges.models import JudgeBatch, JudgeCall, JudgeRun
from judges.probing import test_connection as connection_test
from tests import factories
from tests.judges.conftest import make_judge


@pytest.fixture(autouse=True)
def polls_by_hand(monkeypatch):
    """Polls are made here (`poll_to_end`), not sent to a broker."""
    monkeypatch.setattr("judges.batch.send_poll", lambda *args, **kwargs: None)


def poll_to_end(run: JudgeRun, timeout: float = 20) -> JudgeRun:
    """Poll the run's batches as its task chain would, until the chain ends."""
    deadline = time.monotonic() + timeout
    run.refresh_from_db()
    poller = str(run.batch_poller)
    while poller:
        assert time.monotonic() < deadline, "the batch did not end in time"
        poller = batch.advance(run_id=run.pk, poller=poller) or ""
        time.sleep(0.02)
    run.refresh_from_db()
    return run


def setup(project, *, items=4, kind="likert", **judge_fields):
    version = factories.make_rubric(project=project, name=f"batch {kind}", kind=kind)
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=items), [version])
    return evaluation, version


def batch_judge(project, server, **fields):
    """A judge whose connection test found the Batch API."""
    return make_judge(project, server, capabilities={"batch": True}, **fields)


def launch(judge, evaluation, version) -> JudgeRun:
    return services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version, batch=True)


def test_batch_run_rates_every_item_once_at_half_the_price(project, fake_llm):
    evaluation, version = setup(project)
    judge = batch_judge(project, fake_llm, price_input_per_million=10, price_output_per_million=30)
    run = poll_to_end(launch(judge, evaluation, version))
    assert run.status == JudgeRun.Status.DONE, run.error
    assert run.mode == JudgeRun.Mode.BATCH
    remote = run.batches.get()
    assert remote.status == JudgeBatch.Status.COMPLETED and remote.collected and remote.requests == 4
    assert remote.remote_id.startswith("batch_")
    assert Rating.objects.filter(rater=run.rater).count() == 4
    assert run.calls.filter(status=JudgeCall.Status.DONE, batch=remote).count() == 4
    progress = services.run_progress(run)
    full = services.cost_of(
        run.frozen_parameters,
        prompt_tokens=progress.prompt_tokens,
        completion_tokens=progress.completion_tokens,
    )
    assert progress.cost == (full / 2).quantize(Decimal("0.0001")) and progress.cost > 0


def test_a_batch_request_is_the_live_request(project, fake_llm):
    """Same builder: the body of each line is what a live call of the run would send."""
    evaluation, version = setup(project, items=2)
    judge = batch_judge(project, fake_llm, temperature=0.3, max_tokens=77)
    run = launch(judge, evaluation, version)
    batch.advance(run_id=run.pk, poller=str(JudgeRun.objects.get(pk=run.pk).batch_poller))
    remote = run.batches.get()
    lines = [json.loads(line) for line in fake_llm.batches.files[remote.input_file_id].content.splitlines()]
    ctx = LaneContext.load(JudgeRun.objects.get(pk=run.pk))
    from judges.endpoints import build_request
    from rubrics.rendering import render_prompt

    for line in lines:
        call = JudgeCall.objects.select_related("item").get(pk=int(line["custom_id"]))
        prompt = render_prompt(version, call.item, swapped=call.swapped)
        expected = build_request(params=ctx.params, version=ctx.version, prompt=prompt, sample=call.sample)
        assert line == {
            "custom_id": str(call.pk),
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": expected,
        }
    assert {line["body"]["max_tokens"] for line in lines} == {77}


def test_per_line_errors_fail_their_calls_and_resume_as_live_calls_finishes(project, fake_llm):
    evaluation, version = setup(project, items=6)
    judge = batch_judge(project, fake_llm, model="fake-judge?fault=500&fail_rate=0.5")
    run = poll_to_end(launch(judge, evaluation, version))
    failed = run.calls.filter(status=JudgeCall.Status.FAILED)
    assert 0 < failed.count() < 6
    assert all("the batch answered 500" in call.error for call in failed)
    assert run.status == JudgeRun.Status.FAILED and "failed" in run.error
    remote = run.batches.get()
    assert remote.failed == failed.count() and remote.completed == 6 - failed.count()
    services.resume_run(run=run, mode=JudgeRun.Mode.LIVE)
    services.work_lane(run_id=run.pk, lane=0)
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE
    assert Rating.objects.filter(rater=run.rater).count() == 6


@pytest.fixture
def expiring():
    server = FakeLLM(FakeConfig(latency_ms=1, batch_expire_after=3, batch_concurrency=1)).start(
        stop_after=120
    )
    yield server
    server.stop()


def test_an_expired_batch_keeps_its_results_and_a_new_batch_finishes_the_rest(project, expiring):
    evaluation, version = setup(project, items=5)
    judge = batch_judge(project, expiring)
    run = poll_to_end(launch(judge, evaluation, version))
    assert run.status == JudgeRun.Status.FAILED
    assert "expired" in run.error and "2 call(s) are pending" in run.error
    assert run.calls.filter(status=JudgeCall.Status.DONE).count() == 3
    assert run.calls.filter(status=JudgeCall.Status.PENDING, batch__isnull=True).count() == 2
    assert Rating.objects.filter(rater=run.rater).count() == 3
    services.resume_run(run=run, mode=JudgeRun.Mode.BATCH)
    run = poll_to_end(run)
    assert run.status == JudgeRun.Status.DONE, run.error
    assert list(run.batches.values_list("status", flat=True)) == ["expired", "completed"]
    assert Rating.objects.filter(rater=run.rater).count() == 5


def test_a_redelivered_poll_does_nothing_and_results_are_stored_once(project, fake_llm):
    evaluation, version = setup(project, items=3)
    run = launch(batch_judge(project, fake_llm), evaluation, version)
    first = str(JudgeRun.objects.get(pk=run.pk).batch_poller)
    following = batch.advance(run_id=run.pk, poller=first)
    assert following and batch.advance(run_id=run.pk, poller=first) is None  # the same message again
    assert run.batches.count() == 1
    run = poll_to_end(run)
    assert run.status == JudgeRun.Status.DONE
    stored = {c.pk: c.finished_at for c in run.calls.all()}
    remote = run.batches.get()
    ctx = LaneContext.load(run)
    JudgeBatch.objects.filter(pk=remote.pk).update(collected=False)  # as if a second poll read it again
    remote.refresh_from_db()
    batch.collect(ctx, remote)
    assert {c.pk: c.finished_at for c in run.calls.all()} == stored
    assert Rating.objects.filter(rater=run.rater).count() == 3


def test_cancel_cancels_the_remote_batch_and_keeps_what_it_answered(project):
    server = FakeLLM(FakeConfig(latency_ms=60, batch_concurrency=1)).start(stop_after=60)
    try:
        evaluation, version = setup(project, items=12)
        run = launch(batch_judge(project, server), evaluation, version)
        poller = batch.advance(run_id=run.pk, poller=str(JudgeRun.objects.get(pk=run.pk).batch_poller))
        time.sleep(0.35)
        assert services.cancel_run(run=run)
        run = poll_to_end(run)
    finally:
        server.stop()
    assert poller
    remote = run.batches.get()
    assert remote.status == JudgeBatch.Status.CANCELLED and remote.collected
    done = run.calls.filter(status=JudgeCall.Status.DONE).count()
    assert 0 < done < 12
    assert run.calls.filter(status=JudgeCall.Status.PENDING).count() == 12 - done
    assert run.status == JudgeRun.Status.CANCELLED
    assert Rating.objects.filter(rater=run.rater).count() == done


def test_batch_launch_is_refused_where_the_endpoint_has_no_batch_api(project, serve):
    evaluation, version = setup(project, items=1)
    judge = make_judge(project, serve("vllm"))
    with pytest.raises(ValidationError, match="not known: test its connection first"):
        launch(judge, evaluation, version)
    assert connection_test(judge=judge).ok
    assert judge.capabilities["batch"] is False
    with pytest.raises(ValidationError, match="has no Batch API"):
        launch(judge, evaluation, version)
    openai_like = make_judge(project, serve("openai-chat"), name="openai-like")
    assert connection_test(judge=openai_like).ok and openai_like.capabilities["batch"] is True
    assert launch(openai_like, evaluation, version).mode == JudgeRun.Mode.BATCH


def test_estimate_says_batch_price_and_window(project, fake_llm):
    evaluation, version = setup(project, items=2)
    judge = batch_judge(project, fake_llm, price_input_per_million=10, price_output_per_million=30)
    live = services.estimate_run(judge=judge, evaluation=evaluation, rubric_version=version)
    batched = services.estimate_run(judge=judge, evaluation=evaluation, rubric_version=version, batch=True)
    assert batched.cost == (live.cost / 2).quantize(Decimal("0.0001")) and batched.duration == "within 24 h"


def test_run_judge_command_launches_a_batch_run(project, fake_llm, capsys):
    evaluation, version = setup(project, items=2)
    batch_judge(project, fake_llm, name="cmd judge")
    call_command(
        "run_judge", evaluation=evaluation.name, rubric=[version.rubric.name], judge="cmd judge", batch=True
    )
    assert "batch price" in capsys.readouterr().out
    assert JudgeRun.objects.get(evaluation=evaluation).mode == JudgeRun.Mode.BATCH


# -- the simulated model's Batch API ------------------------------------------------------------
def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)


def _line(custom_id: str, **changes) -> dict:
    body = {"model": "fake-judge", "messages": [{"role": "user", "content": "Rate 1-5"}]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body, **changes}


def _ended(client: openai.OpenAI, batch_id: str):
    for _ in range(200):
        remote = client.batches.retrieve(batch_id)
        if remote.status in ("completed", "failed", "expired", "cancelled"):
            return remote
        time.sleep(0.02)
    raise AssertionError("the batch did not end")


def _submit(client: openai.OpenAI, text: str):
    uploaded = client.files.create(file=("in.jsonl", text.encode()), purpose="batch")
    created = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert created.status == "validating"
    return _ended(client, created.id)


def test_fake_batch_fails_validation_like_openai_naming_each_line(fake_llm):
    client = _client(fake_llm)
    lines = [
        "{not json",
        json.dumps(_line("a")),
        json.dumps(_line("a")),
        json.dumps(_line("b", url="/v1/embeddings")),
        json.dumps(_line("c", body={"model": "fake-gpt", "messages": []})),
        json.dumps(_line("d", method="GET")),
        json.dumps({"custom_id": "e", "method": "POST", "url": "/v1/chat/completions"}),
    ]
    remote = _submit(client, "\n".join(lines) + "\n")
    assert remote.status == "failed" and remote.output_file_id is None
    assert [(e.code, e.line) for e in remote.errors.data] == [
        ("invalid_json_line", 1),
        ("duplicate_custom_id", 3),
        ("invalid_url", 4),
        ("mismatched_model", 5),
        ("invalid_method", 6),
        ("missing_required_parameter", 7),
    ]
    assert _submit(client, "\n").errors.data[0].code == "empty_file"


def test_fake_files_and_batches_refuse_bad_requests_with_openai_error_bodies(fake_llm):
    client = _client(fake_llm)
    with pytest.raises(openai.BadRequestError, match="Must be .jsonl"):
        client.files.create(file=("in.txt", b"{}"), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("in.jsonl", b"{}"), purpose="fine-tune")
    uploaded = client.files.create(file=("in.jsonl", json.dumps(_line("x")).encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="Supported values are: '24h'") as refused:
        client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="48h",  # type: ignore[arg-type]
        )
    assert refused.value.param == "completion_window"
    with pytest.raises(openai.NotFoundError, match="No such File object"):
        client.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    with pytest.raises(openai.NotFoundError, match="No batch found"):
        client.batches.retrieve("batch_nope")
    done = _submit(client, json.dumps(_line("x")) + "\n")
    assert done.status == "completed" and done.request_counts.completed == 1
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a batch with status 'completed'"):
        client.batches.cancel(done.id)
    output = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    assert output[0]["custom_id"] == "x" and output[0]["response"]["status_code"] == 200
    assert output[0]["response"]["body"]["object"] == "chat.completion" and output[0]["error"] is None


def test_fake_batch_expiry_writes_batch_expired_lines_and_keeps_the_output(expiring):
    client = _client(expiring)
    remote = _submit(client, "".join(json.dumps(_line(str(i))) + "\n" for i in range(5)))
    assert remote.status == "expired" and remote.expired_at
    assert (remote.request_counts.completed, remote.request_counts.failed) == (3, 2)
    errors = [json.loads(line) for line in client.files.content(remote.error_file_id).text.splitlines()]
    assert {e["error"]["code"] for e in errors} == {"batch_expired"} and all(
        e["response"] is None for e in errors
    )
    assert len(client.files.content(remote.output_file_id).text.splitlines()) == 3


def test_profiles_without_a_batch_api_answer_404(serve):
    client = _client(serve("vllm"))
    with pytest.raises(openai.NotFoundError):
        client.batches.list(limit=1)


def test_launch_form_estimates_at_the_batch_price_and_launches_a_batch_run(
    researcher_client, project, fake_llm
):
    from django.urls import reverse

    evaluation, version = setup(project, items=2)
    judge = batch_judge(project, fake_llm, price_input_per_million=10, price_output_per_million=30)
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    choice = {"judge": judge.pk, "rubric_versions": [version.pk], "batch": "on"}
    page = researcher_client.get(url, choice).content.decode()
    assert "batch price, half of the judge" in page and "within 24 h" in page and "as batches" in page
    response = researcher_client.post(url, {**choice, "confirm": "yes"})
    run = JudgeRun.objects.get(evaluation=evaluation)
    assert response.status_code == 302 and run.mode == JudgeRun.Mode.BATCH
    detail = reverse("judge_run_detail", args=[project.slug, run.pk])
    batch.advance(run_id=run.pk, poller=str(JudgeRun.objects.get(pk=run.pk).batch_poller))
    partial = researcher_client.get(detail, headers={"HX-Request": "true"}).content.decode()
    assert 'id="run-batches"' in partial and "every 2s" in partial
    assert run.batches.get().remote_id in partial
    run = poll_to_end(run)
    page = researcher_client.get(detail).content.decode()
    assert "batch-completed" in page and "2 answered" in page and "every 2s" not in page


def test_a_poll_that_took_over_waits_while_an_older_poll_is_at_work(project, fake_llm):
    """Cancel and recovery start a new chain; it must not submit or collect beside a poll still working."""
    from django.utils import timezone

    evaluation, version = setup(project, items=2)
    run = launch(batch_judge(project, fake_llm), evaluation, version)
    JudgeRun.objects.filter(pk=run.pk).update(batch_polling_since=timezone.now())  # a poll at work
    taken_over = batch.new_poller(run.pk)
    assert batch.advance(run_id=run.pk, poller=taken_over) == taken_over  # look again later
    assert run.batches.count() == 0
    JudgeRun.objects.filter(pk=run.pk).update(batch_polling_since=None)  # the older poll is through
    assert poll_to_end(run).status == JudgeRun.Status.DONE
    tokens = {str(token) for token in run.batches.values_list("token", flat=True)}
    assert len([b for b in fake_llm.batches.batches.values() if b.metadata["concord_batch"] in tokens]) == 1


def test_a_poll_taken_over_while_at_work_hands_over_to_the_new_chain(project, fake_llm, monkeypatch):
    evaluation, version = setup(project, items=2)
    run = launch(batch_judge(project, fake_llm), evaluation, version)
    looked = batch.look

    def cancelled_meanwhile(run_id: int) -> bool:
        more = looked(run_id)
        services.cancel_run(run=JudgeRun.objects.get(pk=run_id))  # a new chain starts during this poll
        return more

    monkeypatch.setattr("judges.batch.look", cancelled_meanwhile)
    old = str(JudgeRun.objects.get(pk=run.pk).batch_poller)
    assert batch.advance(run_id=run.pk, poller=old) is None  # the old chain ends
    monkeypatch.setattr("judges.batch.look", looked)
    run.refresh_from_db()
    assert run.batch_polling_since is None and str(run.batch_poller) != old
    run = poll_to_end(run)  # the new chain works at once: it cancels and collects the batch
    assert run.status == JudgeRun.Status.CANCELLED and run.batches.get().collected


def test_a_run_larger_than_the_request_limit_goes_out_in_several_batches(project, fake_llm, settings):
    settings.JUDGE_BATCH_MAX_REQUESTS = 2
    evaluation, version = setup(project, items=5)
    run = poll_to_end(launch(batch_judge(project, fake_llm), evaluation, version))
    assert run.status == JudgeRun.Status.DONE, run.error
    assert list(run.batches.values_list("requests", flat=True)) == [2, 2, 1]
    assert Rating.objects.filter(rater=run.rater).count() == 5


def test_a_batch_status_the_api_does_not_have_ends_the_batch_with_that_sentence(
    project, fake_llm, monkeypatch
):
    evaluation, version = setup(project, items=2)
    run = launch(batch_judge(project, fake_llm), evaluation, version)
    batch.advance(run_id=run.pk, poller=str(JudgeRun.objects.get(pk=run.pk).batch_poller))
    monkeypatch.setattr("judges.batch.retrieve", lambda ctx, remote_id: {"id": remote_id, "status": "queued"})
    run = poll_to_end(run)
    assert run.status == JudgeRun.Status.FAILED
    assert "batch status 'queued'" in run.error and "2 call(s) are pending" in run.error
    assert run.batches.get().status == JudgeBatch.Status.FAILED
    assert run.calls.filter(status=JudgeCall.Status.PENDING, batch__isnull=True).count() == 2


def test_a_batch_adapts_to_a_reasoning_model_once_and_sends_the_refused_lines_again(project, serve):
    """Each line refused for an unsupported parameter goes back to pending; the run records the change once
    and its next batch sends them with it, so every call is done."""
    server = serve("openai-reasoning")
    evaluation, version = setup(project, items=5)
    judge = batch_judge(project, server, model="fake-o4", temperature=0.0)
    run = poll_to_end(launch(judge, evaluation, version))
    assert run.status == JudgeRun.Status.DONE, run.error
    assert [a["parameter"] for a in run.adaptations] == ["max_tokens", "temperature"]
    assert list(run.batches.order_by("id").values_list("status", "requests")) == [("completed", 5)] * 3
    assert run.calls.filter(status=JudgeCall.Status.DONE).count() == 5
    assert Rating.objects.filter(rater=run.rater).count() == 5


def test_a_batch_whose_lines_refuse_logprobs_stops_the_run_with_that_reason(project, serve):
    server = serve("openai-reasoning")
    evaluation, version = setup(project, items=3)
    # probed earlier as accepting logprobs (the endpoint changed since), so the launch is not refused
    accepts = {"batch": True, "logprobs": True}
    judge = make_judge(project, server, model="fake-o4", logprobs=True, capabilities=accepts)
    run = poll_to_end(launch(judge, evaluation, version))
    assert run.status == JudgeRun.Status.FAILED
    assert "refuses logprobs" in run.error and "turn logprob scoring off" in run.error
    assert not Rating.objects.filter(rater=run.rater).exists()


def test_a_cancel_whose_poll_the_broker_refuses_leaves_the_running_chain_to_cancel_the_batch(
    project, monkeypatch, django_capture_on_commit_callbacks
):
    from judges.tasks import poll_judge_batches
    from tests.workers import unreachable_broker

    server = FakeLLM(FakeConfig(latency_ms=60, batch_concurrency=1)).start(stop_after=60)
    try:
        evaluation, version = setup(project, items=12)
        run = launch(batch_judge(project, server), evaluation, version)
        first = str(JudgeRun.objects.get(pk=run.pk).batch_poller)
        chain = batch.advance(run_id=run.pk, poller=first)
        assert chain  # submitted; the chain's next poll is queued
        down = unreachable_broker(monkeypatch)
        monkeypatch.setattr(
            "judges.batch.send_poll",
            lambda run_id, poller, countdown=0: down.send_task(poll_judge_batches.name, (run_id, poller)),
        )
        with django_capture_on_commit_callbacks(execute=True):
            assert services.cancel_run(run=run)
        run.refresh_from_db()
        assert run.status == JudgeRun.Status.CANCELLED and str(run.batch_poller) == chain  # the run's again
        monkeypatch.setattr("judges.batch.send_poll", lambda *args, **kwargs: None)
        run = poll_to_end(run)  # the chain's next poll cancels the batch at the endpoint
    finally:
        server.stop()
    remote = run.batches.get()
    assert remote.status == JudgeBatch.Status.CANCELLED and remote.collected
    assert run.status == JudgeRun.Status.CANCELLED


@pytest.fixture
def sent_polls(monkeypatch) -> list[tuple[int, str]]:
    """Polls sent to the broker, recorded (and made here by `poll_to_end`)."""
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(
        "judges.batch.send_poll", lambda run_id, poller, countdown=0: sent.append((run_id, poller))
    )
    return sent


def cancelled_with_a_dead_chain(
    project, server, *, last_poll_seconds_ago: float
) -> tuple[JudgeRun, uuid.UUID]:
    """A batch run cancelled while its batch ran at the endpoint, whose chain's messages were then lost (a
    broker restarted without keeping them): its token is one no message carries any more."""
    evaluation, version = setup(project, items=12)
    run = launch(batch_judge(project, server), evaluation, version)
    assert batch.advance(run_id=run.pk, poller=str(JudgeRun.objects.get(pk=run.pk).batch_poller))
    assert services.cancel_run(run=run)
    lost = uuid.uuid4()
    last_poll = timezone.now() - timedelta(seconds=last_poll_seconds_ago)
    JudgeRun.objects.filter(pk=run.pk).update(batch_poller=lost, heartbeat=last_poll)
    return run, lost


def test_a_cancelled_run_whose_poll_chain_died_gets_a_new_one_that_cancels_its_batch(
    project, sent_polls, django_capture_on_commit_callbacks, researcher_client, settings
):
    """Nothing else would cancel the batch at the endpoint, and resume waits for it: the run page says so,
    and a worker's start-up recovery starts a new chain once the old one has shown no life for the stale
    time."""
    settings.JUDGE_STALE_SECONDS = 60
    warning = "no worker has polled this run&#x27;s batches for 1 min, so nothing stops them at the endpoint"
    server = FakeLLM(FakeConfig(latency_ms=60, batch_concurrency=1)).start(stop_after=60)
    try:
        run, lost = cancelled_with_a_dead_chain(project, server, last_poll_seconds_ago=30)
        page = reverse("judge_run_detail", args=[project.slug, run.pk])
        with django_capture_on_commit_callbacks(execute=True):
            assert services.recover_stalled_runs(stale_seconds=60) == []  # polled 30 s ago: alive
        assert warning not in researcher_client.get(page).content.decode()
        JudgeRun.objects.filter(pk=run.pk).update(heartbeat=timezone.now() - timedelta(seconds=61))
        assert warning in researcher_client.get(page).content.decode()
        with django_capture_on_commit_callbacks(execute=True):
            assert services.recover_stalled_runs(stale_seconds=60) == [run.pk]
            assert services.recover_stalled_runs(stale_seconds=60) == []  # taken over once
        assert warning not in researcher_client.get(page).content.decode()
        run.refresh_from_db()
        assert run.batch_poller != lost and sent_polls == [(run.pk, str(run.batch_poller))]
        run = poll_to_end(run)  # the new chain cancels the batch at the endpoint
    finally:
        server.stop()
    assert run.batches.get().status == JudgeBatch.Status.CANCELLED and run.status == JudgeRun.Status.CANCELLED


def test_a_resume_asked_while_a_dead_chain_holds_the_batches_starts_a_new_chain(
    project, settings, sent_polls, django_capture_on_commit_callbacks
):
    server = FakeLLM(FakeConfig(latency_ms=60, batch_concurrency=1)).start(stop_after=60)
    try:
        run, lost = cancelled_with_a_dead_chain(
            project, server, last_poll_seconds_ago=settings.JUDGE_STALE_SECONDS + 1
        )
        with (
            django_capture_on_commit_callbacks(execute=True),
            pytest.raises(ValidationError, match="still being stopped"),
        ):
            services.resume_run(run=run)
        run.refresh_from_db()
        assert run.batch_poller != lost and sent_polls == [(run.pk, str(run.batch_poller))]
        run = poll_to_end(run)
    finally:
        server.stop()
    assert run.batches.get().status == JudgeBatch.Status.CANCELLED
    services.resume_run(run=run)
    assert JudgeRun.objects.get(pk=run.pk).status == JudgeRun.Status.RUNNING
