"""judges/db.py: claiming calls works the same on PostgreSQL and SQLite."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judges import db, services
from judges.calls import LaneContext
from judges.claims import claim_next_call, release_claim
from judges.models import JudgeCall
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


@pytest.mark.django_db
def test_helper_threads_are_not_used_inside_an_open_transaction():
    assert db.helper_threads_see_our_writes() is False


@pytest.mark.django_db(transaction=True)
def test_helper_threads_are_used_outside_a_transaction():
    assert db.helper_threads_see_our_writes() is True
