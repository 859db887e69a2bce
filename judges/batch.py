"""Judge runs through an endpoint's Batch API (OpenAI's files + batches: half the price, results within
24 h), with the same calls, request builder, parsing, ratings and progress page as live runs.

A batch run's pending calls are claimed into a `JudgeBatch` with the batch's token (a conditional UPDATE,
as lanes claim), written as JSONL lines {custom_id: the call's id, method, url, body: the request the
run's endpoint family builds}, uploaded (purpose "batch") and submitted (completion window 24h). One poll
task chain per run (`JudgeRun.batch_poller`: a redelivered or second poll finds its token replaced and
does nothing) looks at each open batch, cancels it at the endpoint once the run is cancelled, and when
the batch ends stores each result through `calls.finish_call` with the batch's token: a call is stored
once, whoever reads the file and however often. Requests the batch never ran (expired, cancelled) go
back to pending, so a resume finishes them as live calls or as a new batch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from projects import leases
from rubrics.rendering import RenderError, render_prompt

from . import adapting, client
from .calls import LaneContext, check_usable, done_fields, stop_run, version_wants_logprobs
from .endpoints import OPENAI_CHAT, OPENAI_REASONING
from .finishing import finish_call
from .models import Judge, JudgeBatch, JudgeCall, JudgeRun

ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
PRICE_FACTOR = Decimal("0.5")  # OpenAI: batch requests cost half the synchronous price
MAX_FILE_BYTES = 200 * 1024 * 1024
# Families documented to have the Batch API; any other endpoint needs its connection test to find it.
DOCUMENTED = {OPENAI_CHAT.key, OPENAI_REASONING.key}
ENDED = {
    JudgeBatch.Status.COMPLETED,
    JudgeBatch.Status.EXPIRED,
    JudgeBatch.Status.CANCELLED,
    JudgeBatch.Status.FAILED,
}
CANCELLABLE = {JudgeBatch.Status.VALIDATING, JudgeBatch.Status.IN_PROGRESS, JudgeBatch.Status.FINALIZING}
# Per-request errors that mean "never ran": the call goes back to pending, not failed.
NOT_RUN_CODES = {"batch_expired", "batch_cancelled"}
LIST_PAGE = 100
# A poll that has not finished in this long is presumed dead (its worker died) and the next one may work.
POLL_LEASE_SECONDS = 900
POLL_LEASE = leases.Lease(renewed="batch_polling_since", held=Q(batch_polling_since__isnull=False))
HEARTBEAT_EVERY_LINES = 500
FILE_TIMEOUT_SECONDS = 120.0
# One exchange with the Batch API (a file up or down) ends within this and reads at most this much: a
# result file holds short answers to at most MAX_FILE_BYTES of requests.
TRANSFER_SECONDS = 900.0
MAX_ANSWER_BYTES = 2 * MAX_FILE_BYTES


# -- launching ----------------------------------------------------------------------------------
def check_batch_launch(judge: Judge) -> None:
    """Refuse a batch run on an endpoint without the Batch API, saying how Concord knows."""
    if judge.family.azure:
        raise ValidationError(
            f"Judge {judge.name} is an Azure OpenAI deployment: Concord sends batches only to OpenAI's "
            "/v1/batches API; launch live calls instead."
        )
    found = (judge.capabilities or {}).get("batch")
    if found is True or (found is None and judge.family.key in DOCUMENTED):
        return
    if found is False:
        raise ValidationError(
            f"Judge {judge.name}'s endpoint has no Batch API (its connection test found no /batches): "
            "launch live calls instead."
        )
    raise ValidationError(
        f"Whether judge {judge.name}'s endpoint ({judge.family.label}) has the Batch API is not known: "
        "test its connection first."
    )


def has_batch_api(*, base_url: str, api_key: str, timeout: float) -> bool:
    """Whether the endpoint answers GET /batches (the connection test's probe; it starts nothing)."""
    try:
        with client.endpoint_errors(api_key, timeout):
            _client(base_url, api_key, timeout).batches.list(limit=1)
    except client.EndpointError:
        return False
    return True


def batch_cost(cost: Decimal) -> Decimal:
    return (cost * PRICE_FACTOR).quantize(Decimal("0.0001"))


# -- the poll task chain ------------------------------------------------------------------------
def new_poller(run_id: int) -> str:
    """A new poll chain, now the run's only one: an older chain (a dead worker's, or one waiting for its
    countdown) ends at its next poll, and one still at work finishes that poll first."""
    poller = uuid.uuid4()
    JudgeRun.objects.filter(pk=run_id).update(batch_poller=poller)
    return str(poller)


def send_poll(run_id: int, poller: str, countdown: float = 0) -> None:
    from .tasks import poll_judge_batches

    poll_judge_batches.apply_async((run_id, poller), countdown=countdown)


def advance(*, run_id: int, poller: str) -> str | None:
    """One poll of a batch run: submit its pending calls, look at each open batch, store what ended.

    Only a poll carrying the run's current token works, and only one at a time: the token moves on when
    the poll is through, so a redelivered message finds it gone, and a chain that took over (cancel,
    recovery) waits while an older poll is still at work. Returns the token of the next poll (the same
    one when it has to wait), or None when this chain ends."""
    started = timezone.now()
    mine = JudgeRun.objects.filter(pk=run_id, batch_poller=poller)
    taken = leases.take(
        mine,
        lease=POLL_LEASE,
        seconds=POLL_LEASE_SECONDS,
        free=Q(batch_polling_since__isnull=True),
        batch_polling_since=started,  # this poll's own mark, to find its row again when it is through
        heartbeat=started,
    )
    if not taken:
        return poller if mine.exists() else None
    this_poll = JudgeRun.objects.filter(pk=run_id, batch_polling_since=started)
    try:
        more = look(run_id)
    except BaseException:
        this_poll.update(batch_polling_since=None)  # a retry of this message carries the same token
        raise
    following = uuid.uuid4() if more else None
    moved = this_poll.filter(batch_poller=poller).update(batch_poller=following, batch_polling_since=None)
    this_poll.update(batch_polling_since=None)  # taken over meanwhile: the new chain's turn
    return str(following) if moved and following else None


def look(run_id: int) -> bool:
    """Advance the run's batches; True while any is open or calls are still to be sent."""
    run = JudgeRun.objects.get(pk=run_id)
    ctx = LaneContext.load(run)
    if run.status == JudgeRun.Status.RUNNING:
        claim_batches(run)
    for batch in run.batches.filter(collected=False).order_by("id"):
        step(ctx, run, batch)
    run.refresh_from_db(fields=["status"])
    if run.batches.filter(collected=False).exists():
        return True
    # With every batch collected a running run ends, unless calls are left over (the file size limit).
    return run.status == JudgeRun.Status.RUNNING and not finish(run)


def claim_batches(run: JudgeRun) -> list[JudgeBatch]:
    """Claim the run's pending calls into new batches of at most JUDGE_BATCH_MAX_REQUESTS, in id order."""
    made: list[JudgeBatch] = []
    size = settings.JUDGE_BATCH_MAX_REQUESTS
    while True:
        pending = JudgeCall.objects.filter(run=run, status=JudgeCall.Status.PENDING).order_by("id")
        nth = list(pending.values_list("id", flat=True)[size - 1 : size])
        last = nth[0] if nth else None
        with transaction.atomic():
            batch = JudgeBatch.objects.create(run=run)
            chunk = pending.filter(pk__lte=last) if last is not None else pending
            claimed = chunk.update(
                status=JudgeCall.Status.CLAIMED,
                claim_token=batch.token,
                claimed_at=timezone.now(),
                batch=batch,
            )
            if not claimed:
                transaction.set_rollback(True)
                return made
            JudgeBatch.objects.filter(pk=batch.pk).update(requests=claimed)
        made.append(batch)


def step(ctx: LaneContext, run: JudgeRun, batch: JudgeBatch) -> None:
    """Submit, look at, cancel or collect one batch; an endpoint error that will not pass ends it."""
    try:
        if batch.status != JudgeBatch.Status.PREPARING:
            remote = retrieve(ctx, batch.remote_id)
        elif run.status == JudgeRun.Status.RUNNING:
            return submit(ctx, batch)
        else:  # cancelled before it was sent, or while it was being created: find it to cancel it
            found = find_remote(ctx, batch) if batch.input_file_id else None
            if found is None:
                return close(batch, error="")
            remote = found
            batch.remote_id = remote["id"]
            JudgeBatch.objects.filter(pk=batch.pk).update(remote_id=batch.remote_id)
        record(batch, remote)
        if run.status != JudgeRun.Status.RUNNING and batch.status in CANCELLABLE:
            record(batch, cancel(ctx, batch.remote_id))
        if batch.status in ENDED:
            collect(ctx, batch)
    except client.TransientError as error:
        JudgeBatch.objects.filter(pk=batch.pk).update(error=f"will try again: {error.message}")
    except client.PermanentError as error:
        close(batch, error=error.message)
    return None


def close(batch: JudgeBatch, *, error: str) -> None:
    """End a batch without reading its results: its calls go back to pending."""
    release(batch)
    status = JudgeBatch.Status.FAILED if error else JudgeBatch.Status.CANCELLED
    JudgeBatch.objects.filter(pk=batch.pk).update(status=status, error=error, collected=True)


def record(batch: JudgeBatch, remote: dict) -> None:
    """Keep the remote batch's status, request counts and file ids on our row."""
    counts = remote.get("request_counts") or {}
    status = str(remote.get("status") or "").lower()
    if status not in JudgeBatch.Status.values:
        raise client.PermanentError(
            f"the endpoint reported batch status {status!r}, which the Batch API does not have"
        )
    batch.status = status
    batch.completed = int(counts.get("completed") or 0)
    batch.failed = int(counts.get("failed") or 0)
    batch.output_file_id = remote.get("output_file_id") or ""
    batch.error_file_id = remote.get("error_file_id") or ""
    batch.error = errors_text(remote)
    batch.save(update_fields=["status", "completed", "failed", "output_file_id", "error_file_id", "error"])


def errors_text(remote: dict) -> str:
    """A failed batch's validation errors, one sentence each with its line."""
    data = ((remote.get("errors") or {}).get("data")) or []
    parts = [
        (f"line {e['line']}: " if e.get("line") else "") + f"{e.get('message')} ({e.get('code')})"
        for e in data[:5]
    ]
    more = f"; and {len(data) - 5} more" if len(data) > 5 else ""
    return "; ".join(parts) + more


# -- submitting ---------------------------------------------------------------------------------
def submit(ctx: LaneContext, batch: JudgeBatch) -> None:
    """Upload the batch's input file and create the remote batch. After a crash between the two the
    remote batch is found again by its metadata (our token), never created twice."""
    if not batch.input_file_id:
        content = input_file(ctx, batch)
        if not content:
            JudgeBatch.objects.filter(pk=batch.pk).update(status=JudgeBatch.Status.COMPLETED, collected=True)
            return
        with _errors(ctx):
            uploaded = _openai(ctx).files.create(
                file=(f"concord-run-{ctx.run_id}-{batch.token}.jsonl", content, "application/jsonl"),
                purpose="batch",
            )
        batch.input_file_id = uploaded.id
        JudgeBatch.objects.filter(pk=batch.pk).update(input_file_id=uploaded.id)
        remote = None
    else:
        remote = find_remote(ctx, batch)
    if remote is None:
        with _errors(ctx):
            created = _openai(ctx).batches.create(
                input_file_id=batch.input_file_id,
                endpoint=ENDPOINT,
                completion_window=COMPLETION_WINDOW,
                metadata={"concord_batch": str(batch.token), "concord_run": str(ctx.run_id)},
            )
        remote = created.model_dump()
    batch.remote_id = remote["id"]
    JudgeBatch.objects.filter(pk=batch.pk).update(remote_id=batch.remote_id)
    record(batch, remote)


def input_file(ctx: LaneContext, batch: JudgeBatch) -> bytes:
    """The JSONL of the batch's calls, each request built as a live call's. A prompt that cannot be
    rendered fails its call here; calls past the file size limit go back to pending for the next batch."""
    lines: list[bytes] = []
    size = 0
    calls = JudgeCall.objects.filter(batch=batch, status=JudgeCall.Status.CLAIMED, claim_token=batch.token)
    for call in calls.select_related("item").order_by("id").iterator(chunk_size=2000):
        try:
            prompt = render_prompt(ctx.version, call.item, swapped=call.swapped)
        except RenderError as error:
            message = f"item {call.item.external_id}: the prompt could not be rendered: {error}"
            finish_call(ctx, call, batch.token, {"status": JudgeCall.Status.FAILED, "error": message})
            continue
        body = ctx.build(prompt, call.sample)  # with the run's adaptations, as a live call
        line = json.dumps(
            {"custom_id": str(call.pk), "method": "POST", "url": ENDPOINT, "body": body}
        ).encode()
        if size + len(line) + 1 > MAX_FILE_BYTES:
            release(batch, from_id=call.pk)
            break
        lines.append(line)
        size += len(line) + 1
    JudgeBatch.objects.filter(pk=batch.pk).update(requests=len(lines))
    return b"".join(line + b"\n" for line in lines)


def find_remote(ctx: LaneContext, batch: JudgeBatch) -> dict | None:
    """The remote batch this one created before a crash (metadata concord_batch = our token), if any."""
    with _errors(ctx):
        page = _openai(ctx).batches.list(limit=LIST_PAGE)
    for remote in page.data:
        if (remote.metadata or {}).get("concord_batch") == str(batch.token):
            return remote.model_dump()
    return None


def release(batch: JudgeBatch, *, from_id: int = 0) -> int:
    """Put the batch's calls that are still claimed (from `from_id` on) back to pending."""
    return JudgeCall.objects.filter(
        batch=batch, status=JudgeCall.Status.CLAIMED, claim_token=batch.token, pk__gte=from_id
    ).update(status=JudgeCall.Status.PENDING, claim_token=None, batch=None)


# -- looking and cancelling ---------------------------------------------------------------------
def retrieve(ctx: LaneContext, remote_id: str) -> dict:
    with _errors(ctx):
        return _openai(ctx).batches.retrieve(remote_id).model_dump()


def cancel(ctx: LaneContext, remote_id: str) -> dict:
    with _errors(ctx):
        return _openai(ctx).batches.cancel(remote_id).model_dump()


# -- collecting ---------------------------------------------------------------------------------
def collect(ctx: LaneContext, batch: JudgeBatch) -> None:
    """Store every result of an ended batch (each once: the claim token decides), then put the calls it
    never ran back to pending and mark it collected."""
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id:
            for number, line in enumerate(file_lines(ctx, file_id), start=1):
                store_line(ctx, batch, line)
                if number % HEARTBEAT_EVERY_LINES == 0:  # a long file is no dead worker
                    JudgeRun.objects.filter(pk=ctx.run_id).update(heartbeat=timezone.now())
    release(batch)
    JudgeBatch.objects.filter(pk=batch.pk).update(collected=True)


def file_lines(ctx: LaneContext, file_id: str) -> Iterator[dict]:
    with _errors(ctx):
        text = _openai(ctx).files.content(file_id).text
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            try:
                yield json.loads(raw)
            except ValueError:
                raise client.PermanentError(
                    f"line {number} of the batch's file {file_id} is not JSON"
                ) from None


def store_line(ctx: LaneContext, batch: JudgeBatch, line: dict) -> bool:
    """Store one output or error line on its call if the batch still holds the call's claim."""
    try:
        call = JudgeCall.objects.get(pk=int(line["custom_id"]), batch=batch, status=JudgeCall.Status.CLAIMED)
    except (JudgeCall.DoesNotExist, KeyError, TypeError, ValueError):
        return False  # stored already, or not one of ours
    fields = line_fields(ctx, call, line)
    if fields is None:
        return False  # never ran: released to pending with the batch's other unanswered calls
    return finish_call(ctx, call, batch.token, fields)


def line_fields(ctx: LaneContext, call: JudgeCall, line: dict) -> dict | None:
    """The call row for one line: parsed as a live reply, or failed with the endpoint's error."""
    response = line.get("response") or {}
    error = line.get("error") or {}
    if error.get("code") in NOT_RUN_CODES:
        return None
    failed = {"status": JudgeCall.Status.FAILED, "attempts": call.attempts + 1}
    if response.get("status_code") != 200:
        inner = client._error_body(response.get("body")) or error or {}
        message = client.redact(str(inner.get("message") or json.dumps(line)[:300]), ctx.credential.api_key)
        status = response.get("status_code")
        refused = refused_line(ctx, status, inner, message)
        if refused is None:
            return None  # adapted: sent again, with the change, in the run's next batch
        return {**failed, "error": f"the batch answered {status or 'an error'}: {refused}"}
    want_logprobs = version_wants_logprobs(ctx)
    try:
        reply = client.reply_from(response.get("body"), api_key=ctx.credential.api_key)
        check_usable(reply, request={"max_tokens": ctx.params.max_tokens}, want_logprobs=want_logprobs)
    except client.EndpointError as problem:
        return {**failed, "error": problem.message}
    return done_fields(ctx, call, reply, want_logprobs=want_logprobs, cached=False, attempts=1)


def refused_line(ctx: LaneContext, status: Any, inner: dict, message: str) -> str | None:
    """A line's 400 "unsupported parameter" adapts the run as a live call's does (once, for all its later
    calls; None: the call goes back to pending). A refused scoring parameter stops the run with that reason;
    any other error is the call's, returned as its message."""
    code, param = inner.get("code"), inner.get("param")
    error = client.PermanentError(
        message, status=status, code=str(code) if code else None, param=str(param) if param else None
    )
    if ctx.adapt(error) and adapting.refused_parameter(error) not in ctx.build("", 0):
        return None
    if adapting.refused_parameter(error) in adapting.SCORING_PARAMETERS:
        stop_run(run_id=ctx.run_id, error=error.message)
    return error.message


# -- the run's end ------------------------------------------------------------------------------
def finish(run: JudgeRun) -> bool:
    """With every batch collected: end a running run (done, or failed naming what is left); False when
    calls are still pending after a normal batch (more to send)."""
    from .services import complete_run_if_finished

    pending = JudgeCall.objects.filter(run=run, status=JudgeCall.Status.PENDING).count()
    last = run.batches.order_by("-id").first()
    if pending and last is not None and last.status != JudgeBatch.Status.COMPLETED:
        stop_run(run_id=run.pk, error=stopped_message(last, pending))
        return True
    if pending:
        return False
    complete_run_if_finished(run_id=run.pk)
    return True


def stopped_message(batch: JudgeBatch, pending: int) -> str:
    what = {
        JudgeBatch.Status.EXPIRED: "expired after its 24 h window",
        JudgeBatch.Status.CANCELLED: "was cancelled at the endpoint",
        JudgeBatch.Status.FAILED: f"failed: {batch.error}" if batch.error else "failed",
    }.get(JudgeBatch.Status(batch.status), f"ended {batch.status}")
    return (
        f"Batch {batch.remote_id or batch.pk} {what}; {pending} call(s) are pending: resume the run to "
        "finish them (as live calls or as a new batch)."
    )


def open_batches(run: JudgeRun) -> bool:
    return run.batches.filter(collected=False).exists()


# -- the endpoint -------------------------------------------------------------------------------
def _client(base_url: str, api_key: str, timeout: float) -> Any:
    return client.get_client(base_url=base_url, api_key=api_key, timeout=timeout)


def _openai(ctx: LaneContext) -> Any:
    if ctx.credential.problem:
        raise client.PermanentError(f"no API key: {ctx.credential.problem}")
    return _client(ctx.params.base_url, ctx.credential.api_key, _timeout(ctx))


def _errors(ctx: LaneContext) -> AbstractContextManager[None]:
    """One exchange with the Batch API: bounded in time and size, its errors as EndpointErrors."""
    return client.endpoint_errors(
        ctx.credential.api_key, _timeout(ctx), seconds=TRANSFER_SECONDS, max_bytes=MAX_ANSWER_BYTES
    )


def _timeout(ctx: LaneContext) -> float:
    """Files can be large: at least two minutes, whatever the judge's timeout for one call."""
    return max(float(ctx.params.request_timeout), FILE_TIMEOUT_SECONDS)
