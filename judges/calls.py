"""One judge call from claim to rating: render, ask (cache or endpoint, with retries), parse, store.

Retries live here and only here (the openai client's are off): a call that met a transient error waits
in its lane's `Retries`, still claimed, while the lane sends other calls. Requests are built by the run's
endpoint family (`judges.endpoints`), calls are claimed in `judges.claims` and an item's calls become one
rating in `judges.aggregate`, and calls and ratings are stored in `judges.finishing`.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import Max, Min
from django.utils import timezone

from evaluations.models import Evaluation
from rubrics.models import RubricVersion
from rubrics.rendering import RenderError, render_prompt

from . import adapting, client, db
from .claims import Claim
from .credentials import Credential, credential_for
from .endpoints import build_request, family_of
from .finishing import finish_call, finish_later, store_gathered_now
from .models import CachedReply, JudgeCall, JudgeRun
from .parameters import RunParameters
from .parsing import Parsed, format_score, geval_score, parse_reply
from .ratelimit import RateLimiter
from .run_health import OVERLOAD_SECONDS, RunHealth, forget_health, health_of, request_shape

BACKOFF_BASE_SECONDS = 0.25
BACKOFF_CAP_SECONDS = 20.0
# A longer Retry-After (a quota window, or a hostile endpoint's "a day") is waited this long at most, so a
# waiting call stays within its claim's lease (`LaneContext.lease_seconds`) and a run never sleeps for hours.
RETRY_AFTER_CAP_SECONDS = 60.0
STATUS_CHECK_SECONDS = 0.5
# Claimed calls a lane keeps waiting for their retry while it sends others (`Retries`).
MAX_WAITING_CALLS = 4
FLIP = {"A": "B", "B": "A", "SAME": "SAME"}
MAX_ADAPTATIONS_PER_CALL = 4
# A call whose request got the same server error this many times in a row is not sent again; when this
# many calls of one kind of request in a row end so, the run stops (the others would too).
SAME_SERVER_ERRORS_TO_STOP = 3
SAME_ERROR_CALLS_TO_STOP = 2
# A call an overloaded endpoint turned away is sent again without using up one of its attempts, this many
# times at most (`run_health.RunHealth.overloaded` halves the requests at once meanwhile).
MAX_FREE_OVERLOADS = 6
# Behind a proxy that retries by itself (LiteLLM), Concord sends a call at most this many times.
PROXY_MAX_ATTEMPTS = 2


class RunStopped(Exception):
    """The run was cancelled or failed while this call waited."""


class Outcome(enum.Enum):
    """What became of one claimed call."""

    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"  # the run stopped first: the claim goes back
    WAITING = "waiting"  # a transient error: still claimed, sent again after its backoff (`Retries`)
    LOST = "lost"  # someone else finished it (its claim was taken over)


class RunWatch:
    """Whether a run is still running, asked of the database at most twice a second per worker process
    (not per lane), and its heartbeat recorded every few seconds while any lane of it works here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checked: dict[int, tuple[float, bool]] = {}  # run id -> (when, running)
        self._beats: dict[int, float] = {}

    def running(self, run_id: int, *, since: float) -> bool:
        """The run's status, read no earlier than `since` (a lane's start) and at most
        STATUS_CHECK_SECONDS ago."""
        now = time.monotonic()
        with self._lock:
            checked_at, running = self._checked.get(run_id, (-1.0, True))
            if checked_at >= since and now - checked_at <= STATUS_CHECK_SECONDS:
                return running
            if running and checked_at >= 0:
                self._checked[run_id] = (now, True)  # the others keep working while this lane asks
            beat = now - self._beats.get(run_id, -1e9) > min(5.0, settings.JUDGE_STALE_SECONDS / 3)
            if beat:
                self._beats[run_id] = now
        if beat:
            JudgeRun.objects.filter(pk=run_id).update(heartbeat=timezone.now())
        status = JudgeRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
        running = status == JudgeRun.Status.RUNNING
        with self._lock:
            self._checked[run_id] = (time.monotonic(), running)
        return running

    def stopped(self, run_id: int) -> None:
        with self._lock:
            self._checked[run_id] = (time.monotonic(), False)

    def read_running(self, run_id: int, *, at: float) -> None:
        """A lane read the run as running at `at` (its start): the lanes here need not ask again for
        STATUS_CHECK_SECONDS, unless someone saw it stop after that."""
        with self._lock:
            if self._checked.get(run_id, (-1.0, True))[0] < at:
                self._checked[run_id] = (at, True)


_watch = RunWatch()


@dataclass
class LaneContext:
    """What every call of a run needs, loaded once per lane."""

    run_id: int
    evaluation_id: int
    rater_id: int
    version: RubricVersion
    params: RunParameters
    limiter: RateLimiter
    project_id: int
    credential: Credential
    adaptations: dict[str, Any] = field(default_factory=dict)  # `Accepts` changes the run adapted to
    # The run's first and last call ids (`claims.ClaimAhead` claims fewer at a time near the end).
    call_ids: tuple[int, int] = (0, 0)
    queued_at: datetime | None = None  # when the run was queued for this work (`JudgeRun.queue_stamp`)
    finishes: list[Future[bool]] = field(default_factory=list)
    _started_at: float = field(default_factory=time.monotonic)
    _stopped: bool = False

    @classmethod
    def load(cls, run: JudgeRun, *, read_at: float | None = None) -> LaneContext:
        """The lane's context for `run`, read from the database as running at `read_at` (a lane's start),
        if given: its first look at the run's status is then that read, not one more query."""
        fixed = RunFixed.of(run)
        params = run.frozen_parameters
        limiter = RateLimiter(
            judge_id=run.judge_id,
            requests_per_minute=params.requests_per_minute,
            tokens_per_minute=params.tokens_per_minute,
        )
        ctx = cls(
            run_id=run.pk,
            evaluation_id=run.evaluation_id,
            rater_id=run.rater_id,
            version=fixed.version,
            params=params,
            limiter=limiter,
            project_id=fixed.project_id,
            credential=credential_for(
                judge_id=run.judge_id, source=params.credential, base_url=params.base_url
            ),
            adaptations=adapting.merged(run.adaptations),
            call_ids=fixed.call_ids,
            queued_at=run.queued_at,
        )
        if read_at is not None:
            ctx._started_at = read_at
            _watch.read_running(run.pk, at=read_at)
        return ctx

    @property
    def queue_stamp(self) -> str:
        return JudgeRun.stamp_of(self.queued_at)

    @property
    def kind(self) -> str:
        return self.version.rubric.kind

    @property
    def calls_per_item(self) -> int:
        swap = self.kind == "pairwise" and self.params.position_swap
        return self.params.samples * (2 if swap else 1)

    @property
    def lease_seconds(self) -> float:
        """How long a claim lasts: all of a call's attempts, each perhaps sent only once the lane's
        request for another call is through (`Retries`), and their waits."""
        attempts = settings.LLM_MAX_ATTEMPTS
        waits = (attempts - 1) * RETRY_AFTER_CAP_SECONDS * 1.2
        return 2 * self.params.request_timeout * attempts + waits + 120

    def wait_for_finishes(self) -> int:
        """Block until this lane's background finishes are stored; returns how many lost their claim."""
        if self.finishes:
            store_gathered_now()
        lost = sum(1 for future in self.finishes if not future.result())
        self.finishes.clear()
        return lost

    def mark_stopped(self) -> None:
        self._stopped = True
        _watch.stopped(self.run_id)

    @property
    def azure(self) -> bool:
        return family_of(self.params).azure

    def build(self, prompt: str, sample: int) -> dict[str, Any]:
        return build_request(
            params=self.params,
            version=self.version,
            prompt=prompt,
            sample=sample,
            adaptations=self.adaptations,
        )

    def adapt(self, error: client.PermanentError) -> bool:
        """Adapt the run to a refused parameter (recorded once for all lanes); False: nothing to adapt."""
        parameter = adapting.refused_parameter(error)
        if parameter is None:
            return False
        if parameter in adapting.SCORING_PARAMETERS:
            error.message = adapting.scoring_refused_message(parameter)
            return False
        changes = adapting.record(run_id=self.run_id, parameter=parameter, error=error)
        if changes is None:
            return False
        self.adaptations = changes
        return True

    def stopped(self) -> bool:
        """Whether the run is no longer running (RunWatch: a starting worker takes over runs whose
        heartbeat went stale)."""
        if not self._stopped and not _watch.running(self.run_id, since=self._started_at):
            self._stopped = True
        return self._stopped


@dataclass(frozen=True)
class RunFixed:
    """What no lane changes while a run's calls are queued: its rubric version, its project and the ids of
    its first and last call. Read by the first of its lanes to start in a process and shared by the others
    (at a run's start, when every lane loads at once, this was half of each lane's CPU before its first
    request); read again when the run is queued again (resumed or recovered: `queued_at`)."""

    version: RubricVersion
    project_id: int
    call_ids: tuple[int, int]

    @classmethod
    def of(cls, run: JudgeRun) -> RunFixed:
        return _run_fixed(run.pk, run.created, run.queued_at, run.rubric_version_id, run.evaluation_id)


@functools.lru_cache(maxsize=32)
def _run_fixed(
    run_id: int, created: datetime, queued_at: datetime | None, version_id: int, evaluation_id: int
) -> RunFixed:
    """`RunFixed` for a run, as it was queued at `queued_at` (`created` too: a test database may give a
    new run an old one's id)."""
    ids = JudgeCall.objects.filter(run_id=run_id).aggregate(first=Min("id"), last=Max("id"))
    return RunFixed(
        version=RubricVersion.objects.select_related("rubric").get(pk=version_id),
        project_id=Evaluation.objects.values_list("project_id", flat=True).get(pk=evaluation_id),
        call_ids=(ids["first"] or 0, ids["last"] or 0),
    )


def cache_key(*, project_id: int, credential: str, base_url: str, request: dict[str, Any]) -> str:
    """Identical prompt, model, parameters and sample index (the seed) give the same key, within one
    project and one credential (its identity, never the secret): a judge of another project, or one
    without the key, never gets replies someone else paid for."""
    document = json.dumps([project_id, credential, base_url, request], sort_keys=True)
    return hashlib.sha256(document.encode()).hexdigest()


def keyed(request: dict[str, Any], sample: int) -> dict[str, Any]:
    """The request as the cache sees it: families that send no seed still keep their samples apart."""
    return request if "seed" in request else {**request, "seed": sample}


def estimated_tokens(request: dict[str, Any]) -> int:
    limit = request.get("max_tokens") or request.get("max_completion_tokens") or 0
    return len(request["messages"][0]["content"]) // 4 + min(limit, 200)


# -- asking -------------------------------------------------------------------------------------
def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """Retry-After when the endpoint sent one (at most RETRY_AFTER_CAP_SECONDS), else exponential backoff;
    both with jitter."""
    if retry_after is not None:
        return min(retry_after, RETRY_AFTER_CAP_SECONDS) * random.uniform(1.0, 1.2)
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def ask(
    ctx: LaneContext, claim: Claim, build: Callable[[], dict[str, Any]]
) -> tuple[client.Reply, dict[str, Any]]:
    """(reply, the request that got it), each request counted in `claim.attempts`. A refused parameter
    adapts the run and the request is built and sent again at once; a transient error is raised for
    `process_call` to retry later, without holding the lane."""
    request = build()
    health = health_of(ctx.run_id)
    while True:
        if ctx.stopped():
            raise RunStopped()
        ctx.limiter.acquire(tokens=estimated_tokens(request), should_stop=ctx.stopped)
        claim.attempts += 1
        try:
            if not health.wait_for_room(ctx.stopped):
                raise RunStopped()
            with health.sending():
                reply = client.chat(
                    base_url=ctx.params.base_url,
                    api_key=ctx.credential.api_key,
                    timeout=ctx.params.request_timeout,
                    request=request,
                    azure=ctx.azure,
                )
            health.answer(request_shape(request))
            return reply, request
        except client.PermanentError as error:
            health.answer()
            if claim.attempts < MAX_ADAPTATIONS_PER_CALL and ctx.adapt(error):
                request = build()
                continue
            raise
        except client.TransientError as error:
            raise judged(ctx, health, error) from None


def judged(ctx: LaneContext, health: RunHealth, error: client.TransientError) -> Exception:
    """What a transient error means for the run: a run whose first requests all fail to connect stops
    (PermanentError); an overloaded endpoint gets fewer requests at once here."""
    if error.status is None:
        if error.message == client.COULD_NOT_CONNECT and health.connect_failed():
            parts = urlsplit(ctx.params.base_url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            return client.PermanentError(
                f"could not connect to {parts.hostname}:{port}: none of the run's first requests reached the "
                "endpoint; check that it is running and the judge's base URL, then resume the run"
            )
        return error
    health.answer()
    if error.overloaded:
        retries = _retries.get(ctx.run_id)
        cap = health.overloaded(retries.lanes if retries is not None else 1)
        if cap is not None:
            adapting.note_overload(run_id=ctx.run_id, cap=cap, seconds=OVERLOAD_SECONDS, error=error)
        return error
    return error


class Retries:
    """A run's claimed calls waiting to be sent again after a transient error (Retry-After or backoff),
    shared by the run's lanes in this process (`run_retries`).

    They keep their claim (same token, so no lane of another process takes them) but not one of the
    judge's `concurrency` slots, which count requests in flight: the lanes send other calls meanwhile,
    and each waiting one goes again, from whichever lane is free first, once its time comes (near a run's
    end, a retry does not wait for its own lane's next request while the other lanes have nothing to
    send). At most MAX_WAITING_CALLS per lane wait; with that many the lanes wait as well, so an endpoint
    that turns every request away is not sent ever more calls."""

    def __init__(self) -> None:
        self.waiting: list[Claim] = []
        self.lanes = 0  # lanes of this process working the run
        self.lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.waiting)

    @property
    def full(self) -> bool:
        return len(self.waiting) >= MAX_WAITING_CALLS * max(1, self.lanes)

    def add(self, claim: Claim) -> None:
        with self.lock:
            self.waiting.append(claim)

    def due(self) -> Claim | None:
        """The waiting call whose time came first, if any has come (it leaves the list)."""
        with self.lock:
            first = min(self.waiting, key=lambda claim: claim.not_before, default=None)
            if first is None or first.not_before > time.monotonic():
                return None
            self.waiting.remove(first)
            return first

    def sleep(self, ctx: LaneContext) -> None:
        """Sleep until the first waiting call is due, looking at the run's status meanwhile: a cancelled
        run's lane ends without waiting out a long Retry-After."""
        with self.lock:
            wake = min((claim.not_before for claim in self.waiting), default=0.0)
        while not ctx.stopped() and (left := wake - time.monotonic()) > 0:
            time.sleep(min(left, STATUS_CHECK_SECONDS))

    def release(self) -> None:
        """Give the waiting calls back (the run stopped): pending again, for a resumed run."""
        with self.lock:
            waiting, self.waiting = self.waiting, []
        for claim in waiting:
            claim.release()


_retries: dict[int, Retries] = {}
_retries_lock = threading.Lock()


@contextmanager
def run_retries(run_id: int) -> Iterator[Retries]:
    """The run's `Retries` in this process, for one lane while it works; the last lane to leave gives
    back what still waits (nothing, unless the run stopped)."""
    with _retries_lock:
        retries = _retries.setdefault(run_id, Retries())
        retries.lanes += 1
    try:
        yield retries
    finally:
        with _retries_lock:
            retries.lanes -= 1
            last = retries.lanes == 0
            if last:
                del _retries[run_id]
                forget_health(run_id)
        if last:
            retries.release()


def cached_reply(key: str) -> client.Reply | None:
    row = CachedReply.objects.filter(key=key).first()
    if row is None:
        return None
    return client.Reply(
        content=row.content,
        refusal=row.refusal,
        finish_reason=row.finish_reason,
        logprobs=row.logprobs,
        prompt_tokens=0,
        completion_tokens=0,
        latency_ms=0.0,
    )


def store_in_cache(key: str, model: str, reply: client.Reply) -> None:
    CachedReply.objects.bulk_create(
        [CachedReply(key=key, model=model, **reply.as_cache())], ignore_conflicts=True
    )


# -- reading the reply --------------------------------------------------------------------------
@dataclass(frozen=True)
class Reading:
    """What a reply says, in the call row's terms: value in canonical orientation, explanation, whether
    it could be read, and (logprob scoring) the score's details."""

    raw_output: str
    value: str
    explanation: str
    parse_failed: bool
    logprobs_missing: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def as_fields(self) -> dict[str, Any]:
        return {
            "raw_output": self.raw_output,
            "value": self.value,
            "explanation": self.explanation,
            "parse_failed": self.parse_failed,
            "logprobs_missing": self.logprobs_missing,
            "details": self.details,
        }


def read_reply(reply: client.Reply, *, version: RubricVersion, swapped: bool, want_logprobs: bool) -> Reading:
    """The reply as the call row stores it: value (canonical orientation), explanation, parse failure,
    logprob score."""
    kind = version.rubric.kind
    if reply.content is None and reply.refusal:
        parsed = Parsed(None, error=f"the model refused: {reply.refusal}")
    else:
        parsed = parse_reply(reply.content, kind=kind, scale_values=version.scale_values)
        if not parsed.ok and reply.finish_reason == "length":
            parsed = Parsed(None, error=f"{parsed.error} (the reply was cut off at max_tokens)")
    value = parsed.value or ""
    if kind == "pairwise" and swapped and value:
        value = FLIP[value]
    reading = Reading(
        raw_output=reply.content if reply.content is not None else reply.refusal,
        value=value,
        explanation=parsed.explanation,
        parse_failed=not parsed.ok,
        details={} if parsed.ok else {"parse_error": parsed.error},
    )
    if want_logprobs and kind == "likert":
        return _with_logprob_score(reading, reply, version.scale_values)
    return reading


def _with_logprob_score(reading: Reading, reply: client.Reply, values: list[str]) -> Reading:
    """G-Eval: the score is the expectation at the reply's score position (`parsing.geval_score`), whatever
    the written value says; a score position without a scale value among its alternatives is a parse
    failure, never a score read from a later token."""
    if not reply.logprobs:
        details = {**reading.details, "logprobs": "the endpoint returned no logprobs"}
        return replace(reading, logprobs_missing=True, details=details)
    scored = geval_score(reply.content or "", reply.logprobs, values)
    if scored.score is None:
        details = {**reading.details, "parse_error": scored.error}
        return replace(reading, value="", parse_failed=True, details=details)
    details = {**reading.details, "score": scored.score, "argmax": scored.argmax, "position": scored.position}
    return replace(reading, value=format_score(scored.score), parse_failed=False, details=details)


def process_call(ctx: LaneContext, claim: Claim) -> Outcome:
    """Do one claimed call: render, ask (cache or endpoint), read, store. A transient error before its
    last attempt sets `claim.not_before` (Retry-After or backoff) and the call is WAITING: its lane
    sends it again then, through here."""
    params, call, token = ctx.params, claim.call, claim.token
    try:
        prompt = render_prompt(ctx.version, call.item, swapped=call.swapped)
    except RenderError as error:
        message = f"item {call.item.external_id}: the prompt could not be rendered: {error}"
        finish_call(ctx, call, token, {"status": JudgeCall.Status.FAILED, "error": message})
        return Outcome.FAILED

    def build() -> dict[str, Any]:
        return ctx.build(prompt, call.sample)

    def key_of(request: dict[str, Any]) -> str:
        return cache_key(
            project_id=ctx.project_id,
            credential=ctx.credential.identity,
            base_url=params.base_url,
            request=keyed(request, call.sample),
        )

    # A missing key fails the run at its first call, even where the cache could answer.
    use_cache = params.cache_enabled and not ctx.credential.problem
    reply = cached_reply(key_of(build())) if use_cache else None
    cached = reply is not None
    if reply is None:
        try:
            if ctx.credential.problem:
                raise client.PermanentError(f"no API key: {ctx.credential.problem}")
            reply, request = ask(ctx, claim, build)
            check_usable(reply, request=request, want_logprobs=version_wants_logprobs(ctx))
        except RunStopped:
            return Outcome.STOPPED
        except client.PromptTooLong as error:
            # This prompt alone does not fit: its call fails, the run goes on with the others.
            failed = {"status": JudgeCall.Status.FAILED, "error": too_long_message(call, error)}
            details = {"too_long": {"prompt_tokens": error.prompt_tokens, "context": error.context}}
            finish_call(
                ctx, call, token, {**failed, "details": details, "attempts": call.attempts + claim.attempts}
            )
            return Outcome.FAILED
        except client.PermanentError as error:
            failed = {"status": JudgeCall.Status.FAILED, "error": error.message}
            finish_call(ctx, call, token, {**failed, "attempts": call.attempts + claim.attempts})
            stop_run(run_id=ctx.run_id, error=error.message)
            ctx.mark_stopped()
            return Outcome.FAILED
        except client.TransientError as error:
            if repeating(claim, error):
                return give_up_repeated(ctx, claim, build(), error)
            if error.overloaded and error.status != 429 and claim.overloads < MAX_FREE_OVERLOADS:
                # fewer requests at once get it through: not an attempt used up (a 429 still is: it may
                # be a quota that no waiting restores)
                claim.overloads += 1
            limit = PROXY_MAX_ATTEMPTS if error.proxy_retried else settings.LLM_MAX_ATTEMPTS
            if claim.attempts - claim.overloads < limit:
                claim.not_before = time.monotonic() + backoff_seconds(claim.attempts, error.retry_after)
                return Outcome.WAITING
            message = f"gave up after {claim.attempts} attempts: {error.message}"
            failed = {"status": JudgeCall.Status.FAILED, "error": message}
            finish_call(ctx, call, token, {**failed, "attempts": call.attempts + claim.attempts})
            return Outcome.FAILED
        if use_cache:
            store_in_cache(key_of(request), params.model, reply)
    else:
        request = build()
    fields = done_fields(
        ctx, call, reply, want_logprobs="logprobs" in request, cached=cached, attempts=claim.attempts
    )
    return finish_soon(ctx, call, token, fields)


def repeating(claim: Claim, error: client.TransientError) -> bool:
    """Whether this call's last SAME_SERVER_ERRORS_TO_STOP attempts got the same server error (an overload
    aside): sending it again cannot help."""
    if error.status is None or error.status < 500 or error.overloaded:
        claim.last_error, claim.same_errors = "", 0
        return False
    claim.same_errors = claim.same_errors + 1 if error.message == claim.last_error else 1
    claim.last_error = error.message
    return claim.same_errors >= SAME_SERVER_ERRORS_TO_STOP


def give_up_repeated(
    ctx: LaneContext, claim: Claim, request: dict[str, Any], error: client.TransientError
) -> Outcome:
    """Fail a call whose request got the same server error each time; the second call in a row of the same
    kind of request to end so stops the run (every call of that kind would)."""
    message = (
        f"the endpoint gave the same answer {claim.same_errors} times in a row to this request, so sending "
        f"it again cannot help: {error.message}"
    )
    attempts = claim.call.attempts + claim.attempts
    finish_call(
        ctx,
        claim.call,
        claim.token,
        {"status": JudgeCall.Status.FAILED, "error": message, "attempts": attempts},
    )
    if health_of(ctx.run_id).repeated(request_shape(request), error.message) >= SAME_ERROR_CALLS_TO_STOP:
        stop_run(run_id=ctx.run_id, error=message)
        ctx.mark_stopped()
    return Outcome.FAILED


def too_long_message(call: JudgeCall, error: client.PromptTooLong) -> str:
    tokens = f"{error.prompt_tokens} prompt tokens" if error.prompt_tokens else "its prompt"
    context = f"the server's context of {error.context} tokens" if error.context else "the server's context"
    return (
        f"item {call.item.external_id}: the prompt is too long for the endpoint ({tokens} do not fit "
        f"{context}); the run's other calls go on ({error.message})"
    )


def done_fields(
    ctx: LaneContext,
    call: JudgeCall,
    reply: client.Reply,
    *,
    want_logprobs: bool,
    cached: bool,
    attempts: int,
) -> dict[str, Any]:
    """The call row of an answered call (live or from a batch's output file)."""
    reading = read_reply(reply, version=ctx.version, swapped=call.swapped, want_logprobs=want_logprobs)
    fields = reading.as_fields()
    if reply.reasoning_tokens:
        fields["details"] = {**reading.details, "reasoning_tokens": reply.reasoning_tokens}
    fields.update(
        status=JudgeCall.Status.DONE,
        cached=cached,
        attempts=call.attempts + attempts,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        latency_ms=round(reply.latency_ms, 1),
        error="",
    )
    return fields


def version_wants_logprobs(ctx: LaneContext) -> bool:
    return ctx.params.logprobs and ctx.kind == "likert"


def check_usable(reply: client.Reply, *, request: dict[str, Any], want_logprobs: bool) -> None:
    """Replies that every further call would repeat stop the run with a plain reason: a reasoning model
    that spent its whole token limit thinking, and logprob scoring on an endpoint that sends none."""
    if not reply.content and not reply.refusal and reply.finish_reason == "length":
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        spent = f" ({reply.reasoning_tokens} of them on reasoning)" if reply.reasoning_tokens else ""
        raise client.PermanentError(
            f"the model used its whole limit of {limit} output tokens{spent} and wrote no answer: the token "
            "limit is too small for a reasoning model; raise the judge's max tokens (e.g. to 2000) and "
            "launch a new run"
        )
    if want_logprobs and reply.logprobs is None and reply.content:
        raise client.PermanentError(
            "the endpoint sent no logprobs, which this run's logprob scoring needs: turn logprob scoring "
            "off on the judge (its score becomes the model's written answer) and launch a new run"
        )


def finish_soon(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict[str, Any]) -> Outcome:
    """Store a done call on the worker's finisher threads, so the lane's next request goes out at once
    instead of after the database round trips; inside a transaction (whose rows other connections
    cannot see) it is stored right here. The lane waits for its finishes before it ends."""
    if not db.helper_threads_see_our_writes():
        return Outcome.DONE if finish_call(ctx, call, token, fields) else Outcome.LOST
    ctx.finishes.append(finish_later(ctx, call, token, fields))
    return Outcome.DONE


def stop_run(*, run_id: int, error: str) -> None:
    JudgeRun.objects.filter(pk=run_id, status=JudgeRun.Status.RUNNING).update(
        status=JudgeRun.Status.FAILED, error=error, finished=timezone.now()
    )
