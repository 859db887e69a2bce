"""One judge call from claim to rating: render, ask (cache or endpoint, with retries), parse, store.

Retries live here and only here (the openai client's are off). Requests are built by the run's endpoint
family (`judges.endpoints`), calls are claimed in `judges.claims` and an item's calls become one rating in
`judges.aggregate`. A call is finished with a conditional UPDATE that checks the claim token, so a
redelivered task or a second lane never stores a call twice; the item's rating is written under a lock
on the item's calls once all of them are done, and the rating's unique constraint backs that up.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from evaluations.models import Evaluation, Rating
from rubrics.models import RubricVersion
from rubrics.rendering import RenderError, render_prompt

from . import adapting, client, db
from .aggregate import aggregate_calls
from .credentials import Credential, credential_for, source_of
from .endpoints import FAMILIES, OPENAI_COMPATIBLE, build_request
from .models import CachedReply, JudgeCall, JudgeRun
from .parsing import Parsed, format_score, logprob_score, parse_reply
from .ratelimit import RateLimiter

BACKOFF_BASE_SECONDS = 0.25
BACKOFF_CAP_SECONDS = 20.0
STATUS_CHECK_SECONDS = 0.5
FLIP = {"A": "B", "B": "A", "SAME": "SAME"}
MAX_ADAPTATIONS_PER_CALL = 4
# Each thread holds its own database connection: keep this pool small (connections per worker
# process = its pool threads + these + the claimers).
FINISHER_THREADS = 4

_finisher = ThreadPoolExecutor(max_workers=FINISHER_THREADS, thread_name_prefix="judge-finish")


class RunStopped(Exception):
    """The run was cancelled or failed while this call waited."""


@dataclass
class LaneContext:
    """What every call of a run needs, loaded once per lane."""

    run_id: int
    evaluation_id: int
    rater_id: int
    version: RubricVersion
    params: dict
    limiter: RateLimiter
    project_id: int
    credential: Credential
    finishes: list[Future] = field(default_factory=list)
    _checked_at: float = 0.0
    _beat_at: float = 0.0
    _stopped: bool = False

    @classmethod
    def load(cls, run: JudgeRun) -> LaneContext:
        version = RubricVersion.objects.select_related("rubric").get(pk=run.rubric_version_id)
        params = {**run.parameters, "adaptations": adapting.merged(run.adaptations)}
        limiter = RateLimiter(
            judge_id=run.judge_id,
            requests_per_minute=params["requests_per_minute"],
            tokens_per_minute=params["tokens_per_minute"],
        )
        return cls(
            run_id=run.pk,
            evaluation_id=run.evaluation_id,
            rater_id=run.rater_id,
            version=version,
            params=params,
            limiter=limiter,
            project_id=Evaluation.objects.values_list("project_id", flat=True).get(pk=run.evaluation_id),
            credential=credential_for(judge_id=run.judge_id, source=source_of(params)),
        )

    @property
    def kind(self) -> str:
        return self.version.rubric.kind

    @property
    def calls_per_item(self) -> int:
        swap = self.kind == "pairwise" and self.params["position_swap"]
        return self.params["samples"] * (2 if swap else 1)

    @property
    def lease_seconds(self) -> float:
        return self.params["request_timeout"] * settings.LLM_MAX_ATTEMPTS + 120

    def wait_for_finishes(self) -> int:
        """Block until this lane's background finishes are stored; returns how many lost their claim."""
        lost = sum(1 for future in self.finishes if not future.result())
        self.finishes.clear()
        return lost

    def mark_stopped(self) -> None:
        self._stopped = True

    @property
    def azure(self) -> bool:
        return FAMILIES.get(self.params.get("endpoint", ""), OPENAI_COMPATIBLE).azure

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
        self.params = {**self.params, "adaptations": changes}
        return True

    def stopped(self) -> bool:
        """Whether the run is no longer running; asks the database at most twice a second, and now and
        then records the run's heartbeat (a starting worker takes over runs whose heartbeat went stale)."""
        now = time.monotonic()
        if not self._stopped and now - self._checked_at > STATUS_CHECK_SECONDS:
            self._checked_at = now
            if now - self._beat_at > min(5.0, settings.JUDGE_STALE_SECONDS / 3):
                self._beat_at = now
                JudgeRun.objects.filter(pk=self.run_id).update(heartbeat=timezone.now())
            status = JudgeRun.objects.filter(pk=self.run_id).values_list("status", flat=True).first()
            self._stopped = status != JudgeRun.Status.RUNNING
        return self._stopped


def cache_key(*, project_id: int, credential: str, base_url: str, request: dict) -> str:
    """Identical prompt, model, parameters and sample index (the seed) give the same key, within one
    project and one credential (its identity, never the secret): a judge of another project, or one
    without the key, never gets replies someone else paid for."""
    document = json.dumps([project_id, credential, base_url, request], sort_keys=True)
    return hashlib.sha256(document.encode()).hexdigest()


def keyed(request: dict, sample: int) -> dict:
    """The request as the cache sees it: families that send no seed still keep their samples apart."""
    return request if "seed" in request else {**request, "seed": sample}


def estimated_tokens(request: dict) -> int:
    limit = request.get("max_tokens") or request.get("max_completion_tokens") or 0
    return len(request["messages"][0]["content"]) // 4 + min(limit, 200)


# -- asking -------------------------------------------------------------------------------------
def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """Retry-After when the endpoint sent one, else exponential backoff; both with jitter."""
    if retry_after is not None:
        return retry_after * random.uniform(1.0, 1.2)
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def ask_with_retries(ctx: LaneContext, build: Callable[[], dict]) -> tuple[client.Reply, int, dict]:
    """(reply, attempts, the request that got it). Transient errors are retried up to LLM_MAX_ATTEMPTS
    and the last one is raised; a refused parameter adapts the run and the request is built again."""
    attempts = 0
    request = build()
    while True:
        if ctx.stopped():
            raise RunStopped()
        ctx.limiter.acquire(tokens=estimated_tokens(request), should_stop=ctx.stopped)
        attempts += 1
        try:
            reply = client.chat(
                base_url=ctx.params["base_url"],
                api_key=ctx.credential.api_key,
                timeout=ctx.params["request_timeout"],
                request=request,
                azure=ctx.azure,
            )
            return reply, attempts, request
        except client.TransientError as error:
            error.attempts = attempts
            if attempts >= settings.LLM_MAX_ATTEMPTS:
                raise
            time.sleep(backoff_seconds(attempts, error.retry_after))
        except client.PermanentError as error:
            error.attempts = attempts
            if attempts < MAX_ADAPTATIONS_PER_CALL and ctx.adapt(error):
                request = build()
                continue
            raise


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
def read_reply(reply: client.Reply, *, version: RubricVersion, swapped: bool, want_logprobs: bool) -> dict:
    """Fields for the call row: value (canonical orientation), explanation, parse failure, logprob score."""
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
    fields: dict = {
        "raw_output": reply.content if reply.content is not None else reply.refusal,
        "value": value,
        "explanation": parsed.explanation,
        "parse_failed": not parsed.ok,
        "logprobs_missing": False,
        "details": {},
    }
    if not parsed.ok:
        fields["details"]["parse_error"] = parsed.error
    if want_logprobs and kind == "likert":
        fields.update(_logprob_fields(reply, version, parsed))
    return fields


def _logprob_fields(reply: client.Reply, version: RubricVersion, parsed: Parsed) -> dict:
    details: dict = {} if parsed.ok else {"parse_error": parsed.error}
    if not reply.logprobs:
        details["logprobs"] = "the endpoint returned no logprobs"
        return {"logprobs_missing": True, "details": details}
    values = version.scale_values
    for token, alternatives in reply.logprobs:
        if token.strip() in values:
            result = logprob_score([(alt, logprob) for alt, logprob in alternatives], values)
            if result is not None:
                score, argmax = result
                details.update(score=score, argmax=argmax)
                return {
                    "logprobs_missing": False,
                    "details": details,
                    "value": format_score(score),
                    "parse_failed": False,
                }
    details["logprobs"] = "no scale value among the reply's top logprobs"
    return {"logprobs_missing": True, "details": details}


def process_call(ctx: LaneContext, call: JudgeCall, token: uuid.UUID) -> str:
    """Do one claimed call; returns "done", "failed", "stopped" or "lost" (someone else finished it)."""
    params = ctx.params
    try:
        prompt = render_prompt(ctx.version, call.item, swapped=call.swapped)
    except RenderError as error:
        message = f"item {call.item.external_id}: the prompt could not be rendered: {error}"
        finish_call(ctx, call, token, {"status": JudgeCall.Status.FAILED, "error": message})
        return "failed"

    def build() -> dict:
        return build_request(params=ctx.params, version=ctx.version, prompt=prompt, sample=call.sample)

    def key_of(request: dict) -> str:
        return cache_key(
            project_id=ctx.project_id,
            credential=ctx.credential.identity,
            base_url=params["base_url"],
            request=keyed(request, call.sample),
        )

    request = build()
    key = key_of(request)
    # A missing key fails the run at its first call, even where the cache could answer.
    reply = cached_reply(key) if params["cache_enabled"] and not ctx.credential.problem else None
    cached, attempts = reply is not None, 0
    if reply is None:
        try:
            if ctx.credential.problem:
                missing = client.PermanentError(f"no API key: {ctx.credential.problem}")
                missing.attempts = 0  # nothing was sent
                raise missing
            reply, attempts, request = ask_with_retries(ctx, build)
            key = key_of(request)
            check_usable(reply, request=request, want_logprobs=version_wants_logprobs(ctx))
        except RunStopped:
            return "stopped"
        except client.PermanentError as error:
            finish_call(
                ctx,
                call,
                token,
                {
                    "status": JudgeCall.Status.FAILED,
                    "error": error.message,
                    "attempts": call.attempts + getattr(error, "attempts", 1),
                },
            )
            stop_run(run_id=ctx.run_id, error=error.message)
            ctx.mark_stopped()
            return "failed"
        except client.TransientError as error:
            message = f"gave up after {error.attempts} attempts: {error.message}"
            finish_call(
                ctx,
                call,
                token,
                {
                    "status": JudgeCall.Status.FAILED,
                    "error": message,
                    "attempts": call.attempts + error.attempts,
                },
            )
            return "failed"
        if params["cache_enabled"]:
            store_in_cache(key, params["model"], reply)
    fields = read_reply(reply, version=ctx.version, swapped=call.swapped, want_logprobs="logprobs" in request)
    if reply.reasoning_tokens:
        fields["details"]["reasoning_tokens"] = reply.reasoning_tokens
    fields.update(
        status=JudgeCall.Status.DONE,
        cached=cached,
        attempts=call.attempts + attempts,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        latency_ms=round(reply.latency_ms, 1),
        error="",
    )
    return finish_soon(ctx, call, token, fields)


def version_wants_logprobs(ctx: LaneContext) -> bool:
    return bool(ctx.params["logprobs"]) and ctx.kind == "likert"


def check_usable(reply: client.Reply, *, request: dict, want_logprobs: bool) -> None:
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


def finish_soon(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict) -> str:
    """Store a done call on the worker's finisher threads, so the lane's next request goes out at once
    instead of after the database round trips; inside a transaction (whose rows other connections
    cannot see) it is stored right here. The lane waits for its finishes before it ends."""
    if not db.helper_threads_see_our_writes():
        return "done" if finish_call(ctx, call, token, fields) else "lost"
    ctx.finishes.append(_finisher.submit(_finish_in_thread, ctx, call, token, fields))
    return "done"


def _finish_in_thread(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict) -> bool:
    close_old_connections()
    return finish_call(ctx, call, token, fields)


def finish_call(ctx: LaneContext, call: JudgeCall, token: uuid.UUID, fields: dict) -> bool:
    """Store a call's outcome if this lane still holds its claim; write the item's rating when complete.

    With several calls per item (samples, position swap) the item's calls are locked first, so the last
    of them to finish sees all the others done and writes the rating exactly once.
    """
    fields = {**fields, "finished_at": timezone.now(), "claim_token": None}
    mine = JudgeCall.objects.filter(pk=call.pk, status=JudgeCall.Status.CLAIMED, claim_token=token)
    with transaction.atomic():
        if ctx.calls_per_item == 1:
            siblings = [call]
        else:
            siblings = list(
                JudgeCall.objects.select_for_update()
                .filter(run_id=ctx.run_id, item_id=call.item_id)
                .order_by("id")
            )
        if mine.update(**fields) != 1:
            return False
        for sibling in siblings:
            if sibling.pk == call.pk:
                for name, value in fields.items():
                    setattr(sibling, name, value)
        if all(sibling.status == JudgeCall.Status.DONE for sibling in siblings):
            store_rating(ctx, call.item_id, siblings)
    return True


def stop_run(*, run_id: int, error: str) -> None:
    JudgeRun.objects.filter(pk=run_id, status=JudgeRun.Status.RUNNING).update(
        status=JudgeRun.Status.FAILED, error=error, finished=timezone.now()
    )


# -- the item's rating --------------------------------------------------------------------------
def store_rating(ctx: LaneContext, item_id: int, calls: list[JudgeCall]) -> Rating:
    fields = aggregate_calls(calls, kind=ctx.kind, scale_values=ctx.version.scale_values)
    rating = Rating(
        evaluation_id=ctx.evaluation_id,
        rater_id=ctx.rater_id,
        item_id=item_id,
        rubric_version_id=ctx.version.pk,
        **fields,
    )
    # One statement whether the rating is new or (after a resume) replaced; the unique constraint decides.
    Rating.objects.bulk_create(
        [rating],
        update_conflicts=True,
        unique_fields=["evaluation", "rater", "item", "rubric_version"],
        update_fields=[*fields, "updated"],
    )
    return rating
