"""One judge call from claim to rating: render, ask (cache or endpoint, with retries), parse, store.

Retries live here and only here (the openai client's are off). A call is claimed with a conditional
UPDATE and finished with another that checks the claim token, so a redelivered task or a second lane
never stores a call twice; the item's rating is written under a lock on the item's calls once all of
them are done, and the rating's unique constraint backs that up.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from datasets.models import Item
from evaluations.models import Rating
from rubrics.models import RubricVersion
from rubrics.rendering import RenderError, render_prompt

from . import client, db
from .models import CachedReply, JudgeCall, JudgeRun
from .parsing import Parsed, format_score, logprob_score, parse_reply
from .ratelimit import RateLimiter

BACKOFF_BASE_SECONDS = 0.25
BACKOFF_CAP_SECONDS = 20.0
STATUS_CHECK_SECONDS = 0.5
FLIP = {"A": "B", "B": "A", "SAME": "SAME"}
# Each thread holds its own database connection: keep these pools small (connections per worker
# process = its pool threads + these).
FINISHER_THREADS = 4

CLAIMER_THREADS = 4

_finisher = ThreadPoolExecutor(max_workers=FINISHER_THREADS, thread_name_prefix="judge-finish")
_claimer = ThreadPoolExecutor(max_workers=CLAIMER_THREADS, thread_name_prefix="judge-claim")


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
    finishes: list[Future] = field(default_factory=list)
    _checked_at: float = 0.0
    _beat_at: float = 0.0
    _stopped: bool = False

    @classmethod
    def load(cls, run: JudgeRun) -> LaneContext:
        version = RubricVersion.objects.select_related("rubric").get(pk=run.rubric_version_id)
        params = run.parameters
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


# -- requests -----------------------------------------------------------------------------------
def response_schema(version: RubricVersion) -> dict:
    key = "pairwise_choice" if version.rubric.kind == "pairwise" else "score"
    return {
        "type": "object",
        "properties": {
            key: {"type": "string", "enum": version.scale_values},
            "explanation": {"type": "string"},
        },
        "required": [key, "explanation"],
        "additionalProperties": False,
    }


def format_instruction(version: RubricVersion) -> str:
    key = "pairwise_choice" if version.rubric.kind == "pairwise" else "score"
    choices = ", ".join(f'"{value}"' for value in version.scale_values)
    return (
        f'Reply with one JSON object and nothing else: {{"{key}": one of {choices}, '
        f'"explanation": "a short justification"}}.'
    )


def wants_json(version: RubricVersion) -> bool:
    return version.output_format in (
        RubricVersion.OutputFormat.JSON,
        RubricVersion.OutputFormat.PAIRWISE_JSON,
    )


def build_request(*, params: dict, version: RubricVersion, prompt: str, sample: int) -> dict:
    """The chat completion request for one call: the exact prompt, plus structured output or (when the
    judge's endpoint has none) an appended format instruction for JSON rubrics."""
    content = prompt
    request: dict = {
        "model": params["model"],
        "temperature": params["temperature"],
        "max_tokens": params["max_tokens"],
        "seed": sample,
    }
    if wants_json(version):
        if params["structured_output"]:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "judgement", "strict": True, "schema": response_schema(version)},
            }
        else:
            content = f"{prompt}\n\n{format_instruction(version)}"
    if params["logprobs"] and version.rubric.kind == "likert":
        request["logprobs"] = True
        request["top_logprobs"] = client.TOP_LOGPROBS
    request["messages"] = [{"role": "user", "content": content}]
    return request


def cache_key(*, base_url: str, request: dict) -> str:
    """Identical prompt, model, parameters and sample index (the seed) give the same key."""
    return hashlib.sha256(json.dumps([base_url, request], sort_keys=True).encode()).hexdigest()


def estimated_tokens(request: dict) -> int:
    return len(request["messages"][0]["content"]) // 4 + min(request["max_tokens"], 200)


# -- asking -------------------------------------------------------------------------------------
def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """Retry-After when the endpoint sent one, else exponential backoff; both with jitter."""
    if retry_after is not None:
        return retry_after * random.uniform(1.0, 1.2)
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def ask_with_retries(ctx: LaneContext, request: dict) -> tuple[client.Reply, int]:
    """(reply, attempts). Transient errors are retried up to LLM_MAX_ATTEMPTS; the last one is raised."""
    attempts = 0
    while True:
        if ctx.stopped():
            raise RunStopped()
        ctx.limiter.acquire(tokens=estimated_tokens(request), should_stop=ctx.stopped)
        attempts += 1
        try:
            reply = client.chat(
                base_url=ctx.params["base_url"],
                api_key_env=ctx.params["api_key_env"],
                timeout=ctx.params["request_timeout"],
                request=request,
            )
            return reply, attempts
        except client.TransientError as error:
            error.attempts = attempts
            if attempts >= settings.LLM_MAX_ATTEMPTS:
                raise
            time.sleep(backoff_seconds(attempts, error.retry_after))
        except client.PermanentError as error:
            error.attempts = attempts
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


# -- claiming and finishing ---------------------------------------------------------------------
CLAIM_SQL = """
WITH claimed AS (
    UPDATE {calls} SET status = 'claimed', claim_token = %s, claimed_at = %s
    WHERE id = (
        SELECT id FROM {calls} WHERE run_id = %s AND status = %s {stale}
        ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
    ) RETURNING id, item_id, sample, swapped, attempts
)
SELECT claimed.id, claimed.sample, claimed.swapped, claimed.attempts, item.id, item.external_id,
       item.context::text, item.response::text, item.baseline::text, item.metadata::text
FROM claimed JOIN {items} item ON item.id = claimed.item_id
"""


def claim_next_call(ctx: LaneContext) -> tuple[JudgeCall, uuid.UUID] | None:
    """Take the next pending call (or one whose claim outlived its lease) for this lane.

    The claim is one conditional UPDATE: on PostgreSQL a single statement with SKIP LOCKED that also
    returns the item, so lanes never wait for each other; elsewhere a select then an update that checks
    the row count.
    """
    stale = timezone.now() - timedelta(seconds=ctx.lease_seconds)
    for status, stale_before in ((JudgeCall.Status.PENDING, None), (JudgeCall.Status.CLAIMED, stale)):
        if db.claims_in_one_statement():
            claimed = _claim_postgresql(ctx.run_id, status, stale_before)
        else:
            found = _claim_portable(ctx.run_id, status, stale_before)
            claimed = found and (JudgeCall.objects.select_related("item").get(pk=found[0]), found[1])
        if claimed:
            return claimed
    return None


class ClaimAhead:
    """Claims a lane's next call while its current request is in flight, so no lane waits for the
    database between two requests. Inside a transaction (tests) it claims inline instead, since rows
    made there are invisible to other connections."""

    def __init__(self, ctx: LaneContext):
        self.ctx = ctx
        self.future: Future | None = None

    def next(self) -> tuple[JudgeCall, uuid.UUID] | None:
        if self.future is None:
            return claim_next_call(self.ctx)
        future, self.future = self.future, None
        return future.result()

    def prefetch(self) -> None:
        if db.helper_threads_see_our_writes():
            self.future = _claimer.submit(_claim_in_thread, self.ctx)

    def release(self) -> None:
        """Give back a claim taken ahead that the lane will not use."""
        claimed = self.next() if self.future is not None else None
        if claimed is not None:
            release_claim(*claimed)


def _claim_in_thread(ctx: LaneContext) -> tuple[JudgeCall, uuid.UUID] | None:
    close_old_connections()
    return claim_next_call(ctx)


def release_claim(call: JudgeCall, token: uuid.UUID) -> None:
    JudgeCall.objects.filter(pk=call.pk, status=JudgeCall.Status.CLAIMED, claim_token=token).update(
        status=JudgeCall.Status.PENDING, claim_token=None
    )


def _claim_postgresql(run_id: int, status: str, stale_before) -> tuple[JudgeCall, uuid.UUID] | None:
    token = uuid.uuid4()
    sql = CLAIM_SQL.format(
        calls=JudgeCall._meta.db_table,
        items=Item._meta.db_table,
        stale="AND claimed_at < %s" if stale_before else "",
    )
    params: list[Any] = [token, timezone.now(), run_id, status] + ([stale_before] if stale_before else [])
    with connection.cursor() as cursor:  # one statement: atomic by itself
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    call_id, sample, swapped, attempts, item_id, external_id, *documents = row
    context, response, baseline, metadata = (json.loads(text) if text else None for text in documents)
    item = Item(
        id=item_id,
        external_id=external_id,
        context=context or [],
        response=response,
        baseline=baseline,
        metadata=metadata or {},
    )
    call = JudgeCall(
        id=call_id,
        run_id=run_id,
        item=item,
        sample=sample,
        swapped=swapped,
        attempts=attempts,
        status=JudgeCall.Status.CLAIMED,
        claim_token=token,
    )
    return call, token


def _claim_portable(run_id: int, status: str, stale_before) -> tuple[int, uuid.UUID] | None:
    extra = {"claimed_at__lt": stale_before} if stale_before else {}
    for _ in range(5):
        found = (
            JudgeCall.objects.filter(run_id=run_id, status=status, **extra)
            .order_by("id")
            .values_list("pk", "claim_token")
            .first()
        )
        if found is None:
            return None
        token = uuid.uuid4()
        claimed = JudgeCall.objects.filter(pk=found[0], status=status, claim_token=found[1]).update(
            status=JudgeCall.Status.CLAIMED, claim_token=token, claimed_at=timezone.now()
        )
        if claimed == 1:
            return found[0], token
    return None


def process_call(ctx: LaneContext, call: JudgeCall, token: uuid.UUID) -> str:
    """Do one claimed call; returns "done", "failed", "stopped" or "lost" (someone else finished it)."""
    params = ctx.params
    try:
        prompt = render_prompt(ctx.version, call.item, swapped=call.swapped)
    except RenderError as error:
        message = f"item {call.item.external_id}: the prompt could not be rendered: {error}"
        finish_call(ctx, call, token, {"status": JudgeCall.Status.FAILED, "error": message})
        return "failed"
    request = build_request(params=params, version=ctx.version, prompt=prompt, sample=call.sample)
    key = cache_key(base_url=params["base_url"], request=request)
    reply = cached_reply(key) if params["cache_enabled"] else None
    cached, attempts = reply is not None, 0
    if reply is None:
        try:
            reply, attempts = ask_with_retries(ctx, request)
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


def aggregate_calls(calls: list[JudgeCall], *, kind: str, scale_values: list[str]) -> dict:
    """One rating from an item's calls: mean (likert) or majority (categorical, pairwise) of the samples;
    for pairwise with swapped calls, each sample's two verdicts must agree or it counts as SAME."""
    samples = [_sample_detail(call) for call in calls]
    parsed = [call for call in calls if not call.parse_failed and call.value]
    details: dict = {
        "samples": samples,
        "prompt_tokens": sum(c.prompt_tokens for c in calls),
        "completion_tokens": sum(c.completion_tokens for c in calls),
        "latency_ms": round(sum(c.latency_ms or 0 for c in calls), 1),
        "attempts": sum(c.attempts for c in calls),
        "cached": sum(c.cached for c in calls),
    }
    raw = _raw_output(calls)
    if not parsed:
        errors = "; ".join(sorted({c.details.get("parse_error", "unparseable") for c in calls}))
        return {
            "value": "",
            "parse_failed": True,
            "explanation": "",
            "raw_output": raw,
            "details": {**details, "parse_error": errors},
        }
    if kind == "likert":
        scores = [float(c.value) for c in parsed]
        value = format_score(sum(scores) / len(scores))
        argmaxes = Counter(c.details.get("argmax") or c.value for c in parsed)
        details["argmax"] = _majority(argmaxes, scale_values)
    elif kind == "pairwise":
        verdicts, pairs, consistent = _pairwise_verdicts(parsed)
        value = _majority(Counter(verdicts), ["SAME", *scale_values])
        details.update(consistency_pairs=pairs, consistent_pairs=consistent)
    else:
        value = _majority(Counter(c.value for c in parsed), scale_values)
    return {
        "value": value,
        "parse_failed": False,
        "explanation": parsed[0].explanation,
        "raw_output": raw,
        "details": details,
    }


def _pairwise_verdicts(parsed: list[JudgeCall]) -> tuple[list[str], int, int]:
    by_sample: dict[int, dict[bool, str]] = {}
    for call in parsed:
        by_sample.setdefault(call.sample, {})[call.swapped] = call.value
    verdicts, pairs, consistent = [], 0, 0
    for orders in by_sample.values():
        if len(orders) == 2:
            pairs += 1
            if orders[False] == orders[True]:
                consistent += 1
                verdicts.append(orders[False])
            else:
                verdicts.append("SAME")
        else:
            verdicts.extend(orders.values())
    return verdicts, pairs, consistent


def _majority(counts: Counter, order: list[str]) -> str:
    """The most frequent value; a tie goes to the first of the tied values in `order` (SAME for pairwise)."""
    best = max(counts.values())
    tied = [value for value, count in counts.items() if count == best]
    return min(tied, key=lambda v: order.index(v) if v in order else len(order))


def _sample_detail(call: JudgeCall) -> dict:
    detail = {
        "sample": call.sample,
        "swapped": call.swapped,
        "value": call.value or None,
        "parse_failed": call.parse_failed,
        "tokens": call.prompt_tokens + call.completion_tokens,
        "latency_ms": call.latency_ms,
        "attempts": call.attempts,
        "cached": call.cached,
    }
    for key in ("score", "argmax", "parse_error", "logprobs"):
        if key in call.details:
            detail[key] = call.details[key]
    return detail


def _raw_output(calls: list[JudgeCall]) -> str:
    if len(calls) == 1:
        return calls[0].raw_output
    parts = []
    for call in calls:
        order = "swapped" if call.swapped else "original"
        parts.append(f"[sample {call.sample}, {order} order]\n{call.raw_output}")
    return "\n\n".join(parts)
