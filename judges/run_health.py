"""What one worker process has seen of a run's endpoint, shared by the run's lanes there: whether the
endpoint ever answered (a run whose first requests all fail to connect stops), which calls of one kind of
request ended on a repeated server error, and whether it is overloaded (then fewer requests at once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# A run whose first requests all fail to connect stops (nothing answered yet): after this many in a row,
# or after this long since the first of them.
CONNECT_FAILURES_TO_STOP = 20
CONNECT_FAILURE_SECONDS = 60.0
# An overloaded endpoint (429, 503, llama.cpp's full KV cache) gets half the requests at once for this long.
OVERLOAD_SECONDS = 30.0


class RunHealth:
    """What this process's lanes of one run have seen of its endpoint: whether it ever answered (a run
    whose first requests all fail to connect stops), server errors repeated for one kind of request, and
    whether it is overloaded (then at most `allowed` requests at once here until `calm_at`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered = False
        self.connect_failures = 0
        self.first_failure_at: float | None = None
        self.repeats: dict[str, tuple[str, int]] = {}  # request shape -> (error message, times in a row)
        self.in_flight = 0
        self.allowed: int | None = None
        self.calm_at = 0.0
        self.overload_noted = False

    def answer(self, shape: str | None = None) -> None:
        """The endpoint answered (with a reply, or for `shape` None an HTTP error)."""
        with self.lock:
            self.answered = True
            if shape is not None:
                self.repeats.pop(shape, None)

    def connect_failed(self) -> bool:
        """Count a failure to connect; True when the run should stop (nothing ever answered)."""
        with self.lock:
            if self.answered:
                return False
            now = time.monotonic()
            self.first_failure_at = self.first_failure_at or now
            self.connect_failures += 1
            return (
                self.connect_failures >= CONNECT_FAILURES_TO_STOP
                or now - self.first_failure_at >= CONNECT_FAILURE_SECONDS
            )

    def repeated(self, shape: str, message: str) -> int:
        """Count a call given up for repeating `message`; returns how many calls of this kind of request in
        a row ended so (a reply for that kind resets it)."""
        with self.lock:
            last, count = self.repeats.get(shape, ("", 0))
            count = count + 1 if last == message else 1
            self.repeats[shape] = (message, count)
            return count

    def overloaded(self, lanes: int) -> int | None:
        """Halve the requests at once here (from the lanes working, or the current cap) for OVERLOAD_SECONDS;
        returns the new cap when it changed or was not yet said (for the run page)."""
        with self.lock:
            before = self.allowed if self.allowed is not None else max(lanes, self.in_flight, 1)
            self.allowed = max(1, before // 2)
            self.calm_at = time.monotonic() + OVERLOAD_SECONDS
            if self.allowed < before or not self.overload_noted:
                self.overload_noted = True
                return self.allowed
            return None

    def wait_for_room(self, should_stop: Callable[[], bool]) -> bool:
        """Wait while an overloaded endpoint's cap of requests at once is reached, then count one more in
        flight (`sending` counts it out); False, counting nothing, when `should_stop` says so first."""
        while True:
            with self.lock:
                if self.allowed is not None and time.monotonic() >= self.calm_at:
                    self.allowed = None
                if self.allowed is None or self.in_flight < self.allowed:
                    self.in_flight += 1
                    return True
            if should_stop():
                return False
            time.sleep(0.05)

    @contextmanager
    def sending(self) -> Iterator[None]:
        """The request `wait_for_room` counted in is in flight until the block ends."""
        try:
            yield
        finally:
            with self.lock:
                self.in_flight -= 1


_health: dict[int, RunHealth] = {}


_health_lock = threading.Lock()


def health_of(run_id: int) -> RunHealth:
    """The run's `RunHealth` in this process (made on first use)."""
    with _health_lock:
        return _health.setdefault(run_id, RunHealth())


def forget_health(run_id: int) -> None:
    """The run's last lane here has ended: what it saw is not carried into a resumed run."""
    with _health_lock:
        _health.pop(run_id, None)


def request_shape(request: dict[str, Any]) -> str:
    """The parameters a request sends (not its prompt): requests of one shape meet the same refusals."""
    kind = (request.get("response_format") or {}).get("type", "")
    return ",".join(sorted(name for name in request if name not in ("messages", "seed"))) + f":{kind}"
