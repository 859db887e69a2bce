"""Request and token rate limits shared by every worker, kept in Redis.

One token bucket per judge and limit (requests per minute, tokens per minute), both taken together
by one Lua script so a call either gets both or waits. A bucket holds ten seconds' worth so bursts stay
small; a call bigger than the bucket may run when the bucket is full and leaves it in debt.
Without Redis (the embedded default) the buckets live in this process and the page says so.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings

BURST_SECONDS = 10.0
REDIS_RETRY_SECONDS = 0.5

# KEYS: one bucket per limit. ARGV: per key (rate per second, capacity, cost). Returns seconds to wait
# (as a string), "0" when taken. Uses the server clock, so workers on different machines agree.
TAKE_SCRIPT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local wait = 0
local levels = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[i * 3 - 2])
  local capacity = tonumber(ARGV[i * 3 - 1])
  local cost = tonumber(ARGV[i * 3])
  local state = redis.call('HMGET', key, 'level', 'at')
  local level = tonumber(state[1]) or capacity
  local at = tonumber(state[2]) or now
  level = math.min(capacity, level + (now - at) * rate)
  levels[i] = level
  local need = math.min(cost, capacity)
  if level < need then
    wait = math.max(wait, (need - level) / rate)
  end
end
if wait > 0 then
  return tostring(wait)
end
for i, key in ipairs(KEYS) do
  local cost = tonumber(ARGV[i * 3])
  local rate = tonumber(ARGV[i * 3 - 2])
  local capacity = tonumber(ARGV[i * 3 - 1])
  redis.call('HSET', key, 'level', levels[i] - cost, 'at', now)
  redis.call('EXPIRE', key, math.ceil(capacity / rate) + 60)
end
return "0"
"""


class RateLimiter:
    def __init__(self, *, judge_id: int, requests_per_minute: int, tokens_per_minute: int):
        self.limits = []
        if requests_per_minute:
            self.limits.append((f"concord:judge:{judge_id}:rpm", requests_per_minute / 60.0, "requests"))
        if tokens_per_minute:
            self.limits.append((f"concord:judge:{judge_id}:tpm", tokens_per_minute / 60.0, "tokens"))

    @property
    def active(self) -> bool:
        return bool(self.limits)

    def acquire(self, *, tokens: int, should_stop: Callable[[], bool] = lambda: False) -> float:
        """Block until one request of `tokens` tokens may go; returns the seconds waited."""
        if not self.limits:
            return 0.0
        started = time.monotonic()
        while not should_stop():
            wait = self._try(tokens)
            if wait <= 0:
                break
            time.sleep(min(wait, 5.0) * random.uniform(1.0, 1.1))
        return time.monotonic() - started

    def _try(self, tokens: int) -> float:
        keys, args = [], []
        for key, rate, unit in self.limits:
            keys.append(key)
            args += [rate, max(1.0, rate * BURST_SECONDS), 1 if unit == "requests" else max(1, tokens)]
        connection = redis_connection()
        if connection is None:
            return _local_take(keys, args)
        try:
            return float(connection.eval(TAKE_SCRIPT, len(keys), *keys, *args))
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            # Redis restarting: wait for it rather than run unlimited.
            return REDIS_RETRY_SECONDS


_connection: redis.Redis | None = None
_connection_lock = threading.Lock()


def redis_connection() -> redis.Redis | None:
    global _connection
    if not settings.REDIS_URL:
        return None
    with _connection_lock:
        if _connection is None:
            _connection = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2, health_check_interval=10
            )
        return _connection


_local: dict[str, tuple[float, float]] = {}
_local_lock = threading.Lock()


def _local_take(keys: list[str], args: list) -> float:
    """The same bucket arithmetic in this process, for installs without Redis."""
    now = time.monotonic()
    with _local_lock:
        levels, wait = [], 0.0
        for index, key in enumerate(keys):
            rate, capacity, cost = args[index * 3 : index * 3 + 3]
            level, at = _local.get(key, (capacity, now))
            level = min(capacity, level + (now - at) * rate)
            levels.append(level)
            if level < min(cost, capacity):
                wait = max(wait, (min(cost, capacity) - level) / rate)
        if wait > 0:
            return wait
        for index, key in enumerate(keys):
            _local[key] = (levels[index] - args[index * 3 + 2], now)
        return 0.0
