"""judges/db.py: claiming calls works the same on PostgreSQL and SQLite."""

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from evaluations.models import Rating
from judges import client, db, services
from judges.calls import LaneContext, done_fields
from judges.claims import ClaimAhead, claim_next_call, release_claim
from judges.finishing import Finish, store_finishes
from judges.models import JudgeCall, JudgeRun
from tests.judges.conftest import make_judge
from tests.judges.test_runs import setup_evaluation


@pytest.fixture
def run(project, fake_llm):
    version, evaluation = setup_evaluation(project, items=3)
    return services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )


def test_each_pending_call_is_claimed_once_in_order_with_its_item(run):
    ctx = LaneContext.load(run)
    claims = [claim_next_call(ctx) for _ in range(4)]
    assert claims[3] is None
    calls = [call for call, _token in claims[:3]]  # type: ignore[misc]
    assert [call.item.external_id for call in calls] == ["d-0", "d-1", "d-2"]
    assert all(call.item.response["text"] and call.item.metadata for call in calls)
    # Columns the claim does not read are fetched when read, never taken for their defaults.
    assert calls[2].item.position == 2 and calls[2].item.dataset_id == run.evaluation.dataset_id
    assert calls[2].claimed_at is not None and calls[2].run_id == run.pk
    stored = {c.pk: c.claim_token for c in run.calls.filter(status=JudgeCall.Status.CLAIMED)}
    assert stored == {call.pk: token for call, token in claims[:3]}  # type: ignore[misc]


def test_a_released_claim_is_claimed_again(run):
    ctx = LaneContext.load(run)
    first = claim_next_call(ctx)
    assert first is not None
    release_claim(*first)
    again = claim_next_call(ctx)
    assert again is not None and again[0].pk == first[0].pk and again[1] != first[1]


def test_only_claims_older_than_the_lease_are_taken_over(run):
    ctx = LaneContext.load(run)
    claims = [claim_next_call(ctx) for _ in range(3)]
    assert claim_next_call(ctx) is None  # every call is held, none for long
    stale_call = claims[1][0]  # type: ignore[index]
    JudgeCall.objects.filter(pk=stale_call.pk).update(
        claimed_at=timezone.now() - timedelta(seconds=ctx.lease_seconds + 5)
    )
    taken = claim_next_call(ctx)
    assert taken is not None and taken[0].pk == stale_call.pk
    assert JudgeCall.objects.get(pk=stale_call.pk).claim_token == taken[1]


@pytest.fixture
def eight_calls(project, fake_llm, monkeypatch):
    """A run of 8 calls, one lane, claimed 2 at a time while more than 2 x 2 x 1 are left after them."""
    monkeypatch.setattr("judges.claims.CLAIM_BATCH", 2, raising=False)
    version, evaluation = setup_evaluation(project, items=8)
    run = services.launch_run(
        judge=make_judge(project, fake_llm), evaluation=evaluation, rubric_version=version
    )
    return LaneContext.load(run)


def claimed_calls(ctx: LaneContext) -> int:
    return JudgeCall.objects.filter(run_id=ctx.run_id, status=JudgeCall.Status.CLAIMED).count()


def test_a_lane_claims_several_calls_a_statement_while_many_are_left_then_one_at_a_time(eight_calls):
    ahead = ClaimAhead(eight_calls)
    handed_out, claimed = [], []
    while (claim := ahead.next()) is not None:
        handed_out.append(claim.call.item.external_id)
        claimed.append(claimed_calls(eight_calls))
    assert handed_out == [f"d-{n}" for n in range(8)]  # each once, in order, with its item
    if db.claims_in_one_statement():
        assert claimed == [2, 2, 4, 4, 5, 6, 7, 8]  # the last 4 one at a time
    else:
        assert claimed == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_lane_that_sent_another_lanes_retry_near_the_end_claims_one_at_a_time(eight_calls):
    """A lane that sent other lanes' retries for a while has an old last claim of its own: four calls
    claimed then would keep it busy at the run's end while the other lanes idle."""
    idle, busy = ClaimAhead(eight_calls), ClaimAhead(eight_calls)
    assert idle.count() == busy.count() == 2
    while (claim := busy.next()) is not None and claim.call.pk < eight_calls.call_ids[1] - 2:
        pass
    assert claim is not None and idle.count() == 2
    idle.prefetch(claim)  # busy's call, refused and due again, sent by the idle lane
    assert idle.count() == 1
    busy.release()


def test_calls_claimed_ahead_and_not_handed_out_are_given_back(eight_calls):
    ahead = ClaimAhead(eight_calls)
    first = ahead.next()
    assert first is not None
    ahead.release()
    assert claimed_calls(eight_calls) == 1
    assert JudgeCall.objects.get(status=JudgeCall.Status.CLAIMED).claim_token == first.token
    again = ClaimAhead(eight_calls).next()
    assert again is not None and again.call.item.external_id == "d-1"


def test_a_batch_of_done_calls_is_stored_as_sent_with_ratings_only_where_the_claim_held(run):
    ctx = LaneContext.load(run)
    claims = [claim_next_call(ctx) for _ in range(3)]
    # What an array literal must quote: quotes, braces, backslashes, commas, NULL, new lines, non-ASCII.
    text = 'Rating: 4\n"quoted" {braces} back\\slash, comma; NULL ünïcødé 😀 '
    finishes = []
    for n, (call, token) in enumerate(claims):  # type: ignore[misc]
        reply = client.Reply(
            content=text + str(n),
            finish_reason="stop",
            prompt_tokens=10 + n,
            completion_tokens=3,
            latency_ms=12.5 + n,
            reasoning_tokens=n,
        )
        fields = done_fields(ctx, call, reply, want_logprobs=False, cached=False, attempts=1 + n)
        finishes.append(Finish(ctx, call, uuid.uuid4() if n == 1 else token, fields))
    assert store_finishes(finishes) == [True, False, True]
    for n, (call, token) in enumerate(claims):  # type: ignore[misc]
        row = JudgeCall.objects.get(pk=call.pk)
        if n == 1:  # someone else's claim now: left alone
            assert (row.status, row.claim_token, row.raw_output) == (JudgeCall.Status.CLAIMED, token, "")
            continue
        assert (row.status, row.claim_token, row.value) == (JudgeCall.Status.DONE, None, "4")
        assert (row.raw_output, row.prompt_tokens, row.latency_ms, row.attempts) == (
            text + str(n),
            10 + n,
            12.5 + n,
            1 + n,
        )
        assert row.details == finishes[n].fields["details"] and row.finished_at is not None
        rating = Rating.objects.get(rater_id=run.rater_id, item_id=call.item_id)
        assert (rating.value, rating.raw_output) == ("4", text + str(n))
    assert Rating.objects.filter(rater_id=run.rater_id).count() == 2


@pytest.mark.django_db
def test_helper_threads_are_not_used_inside_an_open_transaction():
    assert db.helper_threads_see_our_writes() is False


@pytest.mark.django_db(transaction=True)
def test_helper_threads_are_used_outside_a_transaction():
    assert db.helper_threads_see_our_writes() is True


def test_lanes_of_a_run_read_what_does_not_change_once_until_it_is_queued_again(
    run, django_assert_num_queries
):
    first = LaneContext.load(run)
    with django_assert_num_queries(
        0
    ):  # its rubric version, project and call ids, as the first lane read them
        second = LaneContext.load(run)
    assert second.version is first.version and second.call_ids == first.call_ids
    assert second.project_id == run.evaluation.project_id
    # Queued again (resumed, recovered) with a call less: read again.
    run.calls.filter(pk=first.call_ids[1]).delete()
    JudgeRun.objects.filter(pk=run.pk).update(queued_at=timezone.now())
    run.refresh_from_db()
    again = LaneContext.load(run)
    assert again.call_ids == (first.call_ids[0], first.call_ids[1] - 1)


def test_a_lane_that_read_its_run_running_at_its_start_does_not_ask_again_at_once(
    run, django_assert_num_queries
):
    ctx = LaneContext.load(run, read_at=time.monotonic())
    with django_assert_num_queries(0):
        assert not ctx.stopped()
    # A lane that read it running before another saw it stop still stops.
    read_at = time.monotonic()
    LaneContext.load(run).mark_stopped()
    with django_assert_num_queries(0):
        assert LaneContext.load(run, read_at=read_at).stopped()
