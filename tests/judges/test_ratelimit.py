import time
import uuid

import pytest

from judges.ratelimit import RateLimiter, redis_connection


@pytest.fixture
def judge_id(settings):
    """A judge id no other test uses, whose buckets are removed afterwards."""
    if not settings.REDIS_URL:
        pytest.skip("needs Redis (REDIS_URL)")
    judge_id = uuid.uuid4().int % 10**12
    yield judge_id
    connection = redis_connection()
    assert connection is not None
    connection.delete(f"concord:judge:{judge_id}:rpm", f"concord:judge:{judge_id}:tpm")


def test_request_limit_holds_across_two_workers_sharing_redis(judge_id):
    # 600 requests a minute: 10 a second, a burst of 100 (ten seconds' worth).
    first = RateLimiter(judge_id=judge_id, requests_per_minute=600, tokens_per_minute=0)
    second = RateLimiter(judge_id=judge_id, requests_per_minute=600, tokens_per_minute=0)
    started = time.monotonic()
    for n in range(110):
        (first if n % 2 else second).acquire(tokens=10)
    elapsed = time.monotonic() - started
    assert 0.8 <= elapsed < 4.0  # the last ten waited for the bucket to refill at 10/s


def test_token_limit_makes_a_large_request_wait_for_tokens(judge_id):
    limiter = RateLimiter(
        judge_id=judge_id, requests_per_minute=0, tokens_per_minute=6000
    )  # 100/s, 1000 burst
    started = time.monotonic()
    limiter.acquire(tokens=1000)
    limiter.acquire(tokens=100)
    assert time.monotonic() - started >= 0.8


def test_without_limits_nothing_waits_or_touches_redis():
    limiter = RateLimiter(judge_id=1, requests_per_minute=0, tokens_per_minute=0)
    assert not limiter.active
    assert limiter.acquire(tokens=10**6) == 0.0


def test_without_redis_the_bucket_lives_in_the_process(settings):
    settings.REDIS_URL = ""
    limiter = RateLimiter(judge_id=uuid.uuid4().int % 10**12, requests_per_minute=60, tokens_per_minute=0)
    started = time.monotonic()
    for _ in range(11):  # a burst of 10, then one a second
        limiter.acquire(tokens=1)
    assert time.monotonic() - started >= 0.8
