"""Judge runs: estimate, launch, work, cancel, resume, progress; and the judge's connection test.

A run is worked by lanes: Celery tasks that each claim and do one call after another until none is
left. The first lane works alone until its first call is through (so a wrong key or model stops the
run after one call, not after a burst), then starts the others; the number of lanes is the judge's
concurrency, across all workers together. A lane has one request in flight at a time: a call waiting
for its retry after a transient error is set aside (`calls.Retries`) while the lane sends others, so the
concurrency is the number of requests in flight at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, IntegerField, Q, QuerySet, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from datasets.models import Item
from evaluations.models import Evaluation, Rater, Rating
from projects import leases
from projects.names import fit, max_length
from rubrics.models import RubricVersion
from rubrics.rendering import RenderError, render_prompt

from . import batch as batches
from . import client, credentials
from .calls import LaneContext, Outcome, Retries, process_call, run_retries
from .claims import CALL_LEASE, ClaimAhead
from .endpoints import build_request, sent_parameters
from .models import Judge, JudgeCall, JudgeRun
from .parameters import RunParameters

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

ESTIMATE_SAMPLE_ITEMS = 50
EXPECTED_SCORE_TOKENS = 5
EXPECTED_JSON_TOKENS = 120
# Columns of a new call that `insert_calls` fills itself; every other one gets its field's default.
FILLED_CALL_COLUMNS = {"id", "run_id", "item_id", "sample", "swapped"}
# Any lane of a running run beats `heartbeat`; before the first beat the run dates from its queueing.
RUN_LEASE = leases.Lease(
    renewed="heartbeat", held=Q(status=JudgeRun.Status.RUNNING), dated_by=("queued_at", "created")
)


def orders_for(params: RunParameters, version: RubricVersion) -> list[bool]:
    """[False] or, for pairwise with position swap, [False, True] (True: the response is shown as A)."""
    if version.rubric.kind == "pairwise" and params.position_swap:
        return [False, True]
    return [False]


CURRENCY = "USD"
ASSUMED_LATENCY_MS = 2000
# Typical reasoning tokens per judge call by reasoning_effort ("" = the model's default, medium).
EXPECTED_REASONING_TOKENS = {"minimal": 0, "low": 150, "": 500, "medium": 500, "high": 1500}


PRICES_NOT_SET = "prices not set"


def cost_text(cost: Decimal | None, currency: str = CURRENCY) -> str:
    """ "0.1234 USD", or "prices not set" for a judge without prices (never a 0 that looks like a price)."""
    return PRICES_NOT_SET if cost is None else f"{cost} {currency}"


@dataclass(frozen=True)
class Estimate:
    items: int
    calls: int
    prompt_tokens: int
    completion_tokens: int  # includes reasoning tokens, billed as output
    cost: Decimal | None  # None: the judge has no prices (shown as tokens and "prices not set")
    api_key_present: bool
    reasoning_tokens: int = 0
    duration_seconds: float = 0.0
    latency_measured: bool = False
    parameters: tuple[str, ...] = ()
    currency: str = CURRENCY
    batch: bool = False  # through the Batch API: half the price, results within 24 h
    # The server's context as the connection test learnt it (llama.cpp /props), and how many of the sampled
    # items' prompts (about 4 characters a token) do not fit it: their calls would fail.
    context_tokens: int | None = None
    too_long_sampled: int = 0
    sampled: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_text(self) -> str:
        return cost_text(self.cost, self.currency)

    @property
    def duration(self) -> str:
        if self.batch:
            return "within 24 h"
        minutes = self.duration_seconds / 60
        if minutes < 1:
            return f"{max(1, round(self.duration_seconds))} s"
        return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def expected_duration(
    params: RunParameters, *, calls: int, tokens_per_call: float, latency_ms: float
) -> float:
    """Seconds for `calls` at the judge's concurrency, bounded by its request and token rate limits."""
    per_minute = params.concurrency * 60_000 / max(latency_ms, 1.0)
    if params.requests_per_minute:
        per_minute = min(per_minute, params.requests_per_minute)
    if params.tokens_per_minute and tokens_per_call:
        per_minute = min(per_minute, params.tokens_per_minute / tokens_per_call)
    return 60 * calls / per_minute if per_minute else 0.0


def cost_of(
    params: RunParameters, *, prompt_tokens: int, completion_tokens: int, batch: bool = False
) -> Decimal | None:
    """At the judge's prices per million tokens; through the Batch API at half of them. None when the
    judge has no prices: unknown, never 0."""
    price_in, price_out = params.price_input_per_million, params.price_output_per_million
    if price_in is None or price_out is None:
        return None
    total = (price_in * prompt_tokens + price_out * completion_tokens) / Decimal(1_000_000)
    return batches.batch_cost(total) if batch else total.quantize(Decimal("0.0001"))


def estimate_run(
    *, judge: Judge, evaluation: Evaluation, rubric_version: RubricVersion, batch: bool = False
) -> Estimate:
    """Calls, tokens and cost of a run before launch (prompt length from up to 50 rendered items)."""
    params = judge.parameters()
    items = evaluation.items()
    count = items.count()
    orders = orders_for(params, rubric_version)
    calls = count * params.samples * len(orders)
    sample = list(items.order_by("position")[:ESTIMATE_SAMPLE_ITEMS])
    chars = too_long = 0
    context = (judge.capabilities or {}).get("context_tokens")
    context = context if isinstance(context, int) and context > 0 else None
    request: dict[str, Any] = {}
    for item in sample:
        try:
            prompt = render_prompt(rubric_version, item)
        except RenderError as error:
            raise ValidationError(f"Item {item.external_id}: {error}") from None
        request = build_request(params=params, version=rubric_version, prompt=prompt, sample=0)
        chars += len(request["messages"][0]["content"])
        too_long += context is not None and len(request["messages"][0]["content"]) / 4 > context
    per_call_prompt = (chars / len(sample) / 4) if sample else 0
    answer = EXPECTED_JSON_TOKENS if rubric_version.output_format != "score" else EXPECTED_SCORE_TOKENS
    reasoning = (
        EXPECTED_REASONING_TOKENS.get(params.reasoning_effort, 500) if judge.accepts().reasoning else 0
    )
    per_call_completion = min(params.max_tokens, answer + reasoning)
    per_call_reasoning = max(0, per_call_completion - answer) if reasoning else 0
    prompt_tokens = round(per_call_prompt * calls)
    completion_tokens = per_call_completion * calls
    latency = (judge.capabilities or {}).get("latency_ms")
    return Estimate(
        items=count,
        calls=calls,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost=cost_of(params, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, batch=batch),
        api_key_present=not credentials.credential_for(
            judge_id=judge.pk, source=judge.credential_source, base_url=judge.base_url
        ).problem,
        reasoning_tokens=per_call_reasoning * calls,
        duration_seconds=expected_duration(
            params,
            calls=calls,
            tokens_per_call=per_call_prompt + per_call_completion,
            latency_ms=latency or ASSUMED_LATENCY_MS,
        ),
        latency_measured=bool(latency),
        parameters=tuple(sent_parameters(request)),
        batch=batch,
        context_tokens=context,
        too_long_sampled=too_long,
        sampled=len(sample),
    )


def check_launch(
    *, judge: Judge, evaluation: Evaluation, rubric_version: RubricVersion, batch: bool = False
) -> None:
    if judge.project_id != evaluation.project_id:
        raise ValidationError(
            f"Judge {judge.name} belongs to another project than evaluation {evaluation.name}."
        )
    if not evaluation.judge_versions().filter(pk=rubric_version.pk).exists():
        raise ValidationError(f"Rubric version {rubric_version} is not part of evaluation {evaluation.name}.")
    if judge.archived:
        raise ValidationError(f"Judge {judge.name} is archived; edit it to bring it back before a new run.")
    if judge.logprobs and rubric_version.rubric.kind == "likert" and not judge.accepts().logprobs:
        found = "its connection test found" if judge.probed_at else "its documentation says"
        raise ValidationError(
            f"Judge {judge.name}'s endpoint ({judge.family.label}) returns no logprobs ({found} so), so "
            f"logprob scoring cannot run on {rubric_version}: turn logprob scoring off on the judge."
        )
    if batch:
        batches.check_batch_launch(judge)
    items = evaluation.items()
    if not items.exists():
        raise ValidationError(f"Dataset {evaluation.dataset.name} has no items to judge.")
    if rubric_version.requires_baseline:
        lacking = [i.external_id for i in items if not i.has_baseline][:5]
        if lacking:
            raise ValidationError(
                f"Pairwise rubric {rubric_version} needs a baseline; items without one: {', '.join(lacking)}."
            )


def launch_run(
    *,
    judge: Judge,
    evaluation: Evaluation,
    rubric_version: RubricVersion,
    created_by: User | None = None,
    batch: bool = False,
) -> JudgeRun:
    """Create the run, its rater and one call per (item, sample, order); its work starts on commit (the
    first lane, or with `batch` the poll that sends its calls through the Batch API)."""
    check_launch(judge=judge, evaluation=evaluation, rubric_version=rubric_version, batch=batch)
    params = judge.parameters()
    orders = orders_for(params, rubric_version)
    with transaction.atomic():
        sequence = JudgeRun.objects.filter(judge=judge).count() + 1
        # Judge (120) and rubric (200) names could pass the rater's 200 characters: the rubric's name is cut;
        # the version's label and id (a judge-only version with examples is told apart from its source) kept.
        rubric_name = rubric_version.rubric.name
        name = fit(
            f"{judge.name} · {rubric_name}",
            f"{rubric_version.label[len(rubric_name) :]} (id {rubric_version.pk}) · run {sequence}",
            limit=max_length(Rater, "name"),
        )
        try:
            with transaction.atomic():
                rater = Rater.objects.create(project=evaluation.project, name=name, kind=Rater.Kind.MODEL)
        except IntegrityError:
            raise ValidationError(f"A rater named {name!r} already exists; try again.") from None
        run = JudgeRun.objects.create(
            judge=judge,
            evaluation=evaluation,
            rubric_version=rubric_version,
            rater=rater,
            parameters=params.to_json(),
            created_by=created_by,
            queued_at=timezone.now(),
            mode=JudgeRun.Mode.BATCH if batch else JudgeRun.Mode.LIVE,
        )
        items = evaluation.items()
        run.total_calls = insert_calls(run=run, items=items, samples=params.samples, orders=orders)
        run.save(update_fields=["total_calls"])
        start_work(run)
    return run


INSERT_CALLS_SQL = """
INSERT INTO {calls} (run_id, item_id, sample, swapped, {columns})
SELECT %s, item.pk, choice.sample, choice.swapped, {defaults}
FROM ({items}) item, ({choices}) choice
ORDER BY item.position, choice.sample, choice.swapped
"""


def insert_calls(*, run: JudgeRun, items: QuerySet[Item], samples: int, orders: list[bool]) -> int:
    """A pending call per item, sample and order, in item order (claims take the lowest id first), with one
    INSERT ... SELECT from the items: building and sending 2,000 call objects took ~0.2 s of a run's
    start. The other columns get their fields' defaults, prepared by the fields. Returns the count."""
    quote = connection.ops.quote_name
    fields = [f for f in JudgeCall._meta.concrete_fields if f.attname not in FILLED_CALL_COLUMNS]
    items_sql, items_params = items.order_by().values_list("pk", "position").query.sql_with_params()
    choices = [(sample, swapped) for sample in range(samples) for swapped in orders]
    sql = INSERT_CALLS_SQL.format(
        calls=quote(JudgeCall._meta.db_table),
        columns=", ".join(quote(str(field.column)) for field in fields),
        defaults=", ".join(["%s"] * len(fields)),
        items=items_sql,
        choices=" UNION ALL ".join(["SELECT %s AS sample, %s AS swapped"] * len(choices)),
    )
    params = [
        run.pk,
        *(field.get_db_prep_save(field.get_default(), connection) for field in fields),
        *items_params,
        *(value for choice in choices for value in choice),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def check_launches(
    *, judge: Judge, evaluation: Evaluation, rubric_versions: list[RubricVersion], batch: bool = False
) -> None:
    """Refuse a launch of several versions as a whole, naming every version that cannot be judged and why."""
    if not rubric_versions:
        raise ValidationError("Pick at least one rubric version.")
    problems: list[str] = []
    for version in rubric_versions:
        try:
            check_launch(judge=judge, evaluation=evaluation, rubric_version=version, batch=batch)
        except ValidationError as error:
            problems.extend(message for message in error.messages if message not in problems)
    if problems:
        raise ValidationError(problems)


def estimate_runs(
    *, judge: Judge, evaluation: Evaluation, rubric_versions: list[RubricVersion], batch: bool = False
) -> list[tuple[RubricVersion, Estimate]]:
    """The estimate of each version's run, after checking that every one of them can be launched."""
    check_launches(judge=judge, evaluation=evaluation, rubric_versions=rubric_versions, batch=batch)
    estimates: list[tuple[RubricVersion, Estimate]] = []
    problems: list[str] = []
    for version in rubric_versions:
        try:
            estimates.append(
                (
                    version,
                    estimate_run(judge=judge, evaluation=evaluation, rubric_version=version, batch=batch),
                )
            )
        except ValidationError as error:
            problems.extend(f"{version}: {message}" for message in error.messages)
    if problems:
        raise ValidationError(problems)
    return estimates


def sum_costs(costs: list[Decimal | None]) -> Decimal | None:
    """The sum, or None when any part is unknown (a total that left it out would look complete)."""
    return None if any(cost is None for cost in costs) else sum((c or Decimal(0) for c in costs), Decimal(0))


def total_estimate(estimates: list[Estimate]) -> Estimate:
    """The sum of several runs' estimates (items: the most any one run judges)."""
    return Estimate(
        items=max((e.items for e in estimates), default=0),
        calls=sum(e.calls for e in estimates),
        prompt_tokens=sum(e.prompt_tokens for e in estimates),
        completion_tokens=sum(e.completion_tokens for e in estimates),
        cost=sum_costs([e.cost for e in estimates]),
        api_key_present=all(e.api_key_present for e in estimates),
        reasoning_tokens=sum(e.reasoning_tokens for e in estimates),
        # Runs of one launch share the judge's concurrency and limits: they take about the sum.
        duration_seconds=sum(e.duration_seconds for e in estimates),
        latency_measured=all(e.latency_measured for e in estimates),
        parameters=tuple(dict.fromkeys(p for e in estimates for p in e.parameters)),
        batch=any(e.batch for e in estimates),
    )


def launch_runs(
    *,
    judge: Judge,
    evaluation: Evaluation,
    rubric_versions: list[RubricVersion],
    created_by: User | None = None,
    batch: bool = False,
) -> list[JudgeRun]:
    """One run (own rater, calls and lanes or batches) per version, all or none: a version that cannot be
    judged refuses the whole launch."""
    check_launches(judge=judge, evaluation=evaluation, rubric_versions=rubric_versions, batch=batch)
    with transaction.atomic():
        return [
            launch_run(
                judge=judge, evaluation=evaluation, rubric_version=version, created_by=created_by, batch=batch
            )
            for version in rubric_versions
        ]


QUEUE_REFUSED = (
    "The task queue did not take this run's work (its broker could not be reached), so nothing was sent. "
    "Resume the run once the queue is back."
)


def start_work(run: JudgeRun) -> None:
    """Queue a run's work for when the transaction commits: its first lane, or its batches' poll."""
    if run.mode == JudgeRun.Mode.BATCH:
        send = partial(batches.send_poll, run.pk, batches.new_poller(run.pk))
    else:
        send = partial(enqueue_lanes, run.pk, [0], run.queue_stamp)
    transaction.on_commit(partial(_send_first_task, run.pk, run.queued_at, send))


def queue_refused(runs: list[JudgeRun]) -> bool:
    """Whether the broker refused to start any of these runs just now (they failed saying so)."""
    return JudgeRun.objects.filter(pk__in=[run.pk for run in runs], error=QUEUE_REFUSED).exists()


def _published(run_id: int, what: str, send: Callable[[], None]) -> bool:
    """Send a run's task (`send`); False, logged, when the broker cannot be reached. The one place that
    catches the broker's refusal for the judges: each caller says what happens to the run then."""
    try:
        send()
    except KombuOperationalError as error:
        logger.warning("judge run %s: the broker refused %s (%s)", run_id, what, error)
        return False
    return True


def _send_first_task(run_id: int, queued_at: datetime | None, send: Callable[[], None]) -> None:
    """Send the task that starts a run. When the broker refuses it the run fails saying so, instead of
    saying running while nothing works on it (and the launch or resume that asked is not an error page)."""
    if not _published(run_id, "the task that starts it", send):
        JudgeRun.objects.filter(pk=run_id, queued_at=queued_at, status=JudgeRun.Status.RUNNING).update(
            status=JudgeRun.Status.FAILED, finished=timezone.now(), error=QUEUE_REFUSED
        )


def enqueue_lanes(run_id: int, lanes: list[int], queue_stamp: str) -> None:
    from .tasks import run_judge_lane

    for lane in lanes:
        run_judge_lane.delay(run_id, lane, queue_stamp)


def work_lane(*, run_id: int, lane: int, queue_stamp: str | None = None) -> int:
    """Claim and do calls until none is left or the run stops; returns how many this lane did. A lane
    queued before the run was queued again does nothing: a dead worker's lane tasks, delivered again once
    their visibility timeout passed, would otherwise join the lanes of the run it was recovered into and
    send more requests at once than the judge's concurrency."""
    read_at = time.monotonic()
    run = JudgeRun.objects.filter(pk=run_id, status=JudgeRun.Status.RUNNING).first()
    if run is None or queue_stamp not in (None, run.queue_stamp):
        return 0
    ctx = LaneContext.load(run, read_at=read_at)
    ahead = ClaimAhead(ctx)
    try:
        with run_retries(run_id) as retries:
            done = do_calls(ctx, ahead, retries, first_lane=lane == 0)
            if ctx.stopped():
                retries.release()
    finally:
        client.close_thread_connections()
    ahead.release()
    done -= ctx.wait_for_finishes()
    complete_run_if_finished(run_id=run_id)
    return done


def do_calls(ctx: LaneContext, ahead: ClaimAhead, retries: Retries, *, first_lane: bool) -> int:
    """One lane's loop; returns how many calls it did. The calls this lane claimed ahead go first (no
    other lane can send them), then a call whose retry is due (any lane's in this process), then a new
    one while few wait."""
    done = 0
    unsent: list[int] = []  # lanes the broker refused when this first lane started them: tried again
    try_again_at = 0.0
    while not ctx.stopped():
        claim = ahead.in_hand() or retries.due() or (None if retries.full else ahead.next())
        if claim is None:
            if not retries:
                break
            retries.sleep(ctx)
            continue
        ahead.prefetch(claim)
        outcome = process_call(ctx, claim)
        if outcome is Outcome.WAITING:
            retries.add(claim)
            continue
        if outcome is Outcome.STOPPED:
            claim.release()
            break
        done += 1
        if first_lane and done == 1:
            unsent, try_again_at = start_other_lanes(ctx), time.monotonic() + LANES_TRY_AGAIN_SECONDS
        elif unsent and time.monotonic() >= try_again_at:
            unsent, try_again_at = send_lanes(ctx, unsent), time.monotonic() + LANES_TRY_AGAIN_SECONDS
    return done


LANES_TRY_AGAIN_SECONDS = 10.0


def start_other_lanes(ctx: LaneContext) -> list[int]:
    """Queue the run's other lanes once (its first lane's first call done); returns those refused."""
    concurrency = ctx.params.concurrency
    if concurrency <= 1:
        return []
    started = JudgeRun.objects.filter(
        pk=ctx.run_id, queued_at=ctx.queued_at, lanes_started=False, status=JudgeRun.Status.RUNNING
    ).update(lanes_started=True)
    if not started:
        return []
    return send_lanes(ctx, list(range(1, concurrency)))


def send_lanes(ctx: LaneContext, lanes: list[int]) -> list[int]:
    """Queue these lanes in turn; returns those not sent because the broker went away. The first lane goes
    on meanwhile and sends them again a little later, so a broker back within the run brings it back to
    its full concurrency instead of finishing it one call at a time."""
    for index, lane in enumerate(lanes):
        if not _published(
            ctx.run_id, f"lane {lane}", partial(enqueue_lanes, ctx.run_id, [lane], ctx.queue_stamp)
        ):
            return lanes[index:]
    return []


def complete_run_if_finished(*, run_id: int) -> None:
    open_calls = JudgeCall.objects.filter(
        run_id=run_id, status__in=[JudgeCall.Status.PENDING, JudgeCall.Status.CLAIMED]
    )
    if open_calls.exists():
        return
    failed_calls = JudgeCall.objects.filter(run_id=run_id, status=JudgeCall.Status.FAILED)
    failed = failed_calls.count()
    running = JudgeRun.objects.filter(pk=run_id, status=JudgeRun.Status.RUNNING)
    if failed:
        too_long = failed_calls.filter(details__has_key="too_long").count()
        parts = []
        if failed > too_long:
            parts.append(
                f"{failed - too_long} call(s) failed after retries; resume the run to try them again."
            )
        if too_long:  # resuming sends the same prompt to the same context: say so rather than invite it
            parts.append(
                f"{too_long} call(s) have a prompt longer than the endpoint's context (listed below); "
                "resuming cannot help them."
            )
        running.update(status=JudgeRun.Status.FAILED, finished=timezone.now(), error=" ".join(parts))
    else:
        running.update(status=JudgeRun.Status.DONE, finished=timezone.now())


def recover_stalled_runs(*, stale_seconds: float) -> list[int]:
    """Take over running runs none of whose lanes reported for `stale_seconds` (their worker died):
    their claimed calls go back to pending and the first lane starts again. Returns the run ids."""
    stalled = JudgeRun.objects.filter(RUN_LEASE.held & RUN_LEASE.expired(stale_seconds))
    recovered = []
    for run in stalled.only("pk", "mode"):
        run_id = run.pk
        run.queued_at = timezone.now()
        with transaction.atomic():
            # Only one starting worker wins a run: the UPDATE checks again that its lease expired. It is
            # queued anew, not renewed: the lane that starts beats for it.
            taken = leases.take(
                JudgeRun.objects.filter(pk=run_id),
                lease=RUN_LEASE,
                seconds=stale_seconds,
                heartbeat=None,
                queued_at=run.queued_at,
                lanes_started=False,
            )
            if not taken:
                continue
            # Calls claimed by a batch stay its own: the endpoint may still answer them.
            leases.release(
                JudgeCall.objects.filter(run_id=run_id, batch__isnull=True),
                lease=CALL_LEASE,
                status=JudgeCall.Status.PENDING,
                claim_token=None,
            )
            start_work(run)
        recovered.append(run_id)
    return recovered + poll_orphaned_batches(JudgeRun.objects.all(), stale_seconds=stale_seconds)


def poll_orphaned_batches(runs: QuerySet[JudgeRun], *, stale_seconds: float) -> list[int]:
    """Give a new poll chain to each stopped run with batches still open at the endpoint whose chain has
    shown no life for `stale_seconds` (its messages lost with a broker's restart, or its cancelling poll
    refused while the broker was down): nothing else would cancel those batches, and resume waits for them.
    Returns the run ids."""
    expired = RUN_LEASE.expired(stale_seconds)  # every poll renews the run's heartbeat
    orphaned = runs.filter(expired, batches__collected=False).exclude(RUN_LEASE.held)
    polled = []
    for run_id in orphaned.values_list("pk", flat=True).distinct():
        poller = uuid.uuid4()
        with transaction.atomic():
            taken = JudgeRun.objects.filter(expired, pk=run_id).update(
                heartbeat=timezone.now(), batch_poller=poller
            )
            if not taken:  # another worker's recovery was first
                continue
            # Refused, it is tried again once this chain too looks dead.
            send = partial(batches.send_poll, run_id, str(poller))
            transaction.on_commit(partial(_published, run_id, "the poll for its open batches", send))
        polled.append(run_id)
    return polled


def delete_or_archive_judge(*, judge: Judge) -> bool:
    """Delete a judge no run used (True); archive one with runs, which keep it for their reports (False)."""
    with transaction.atomic():
        if not JudgeRun.objects.filter(judge=judge).exists():
            judge.delete()
            return True
        Judge.objects.filter(pk=judge.pk).update(archived=True)
        judge.archived = True
        return False


def cancel_run(*, run: JudgeRun) -> bool:
    """Stop a running run; a batch run's next poll (queued now) cancels its batches at the endpoint."""
    with transaction.atomic():
        cancelled = JudgeRun.objects.filter(pk=run.pk, status=JudgeRun.Status.RUNNING).update(
            status=JudgeRun.Status.CANCELLED, finished=timezone.now(), error=""
        )
        if cancelled and batches.open_batches(run):
            previous = JudgeRun.objects.filter(pk=run.pk).values_list("batch_poller", flat=True).get()
            poller = batches.new_poller(run.pk)
            transaction.on_commit(partial(_send_cancelling_poll, run.pk, poller, previous))
    return bool(cancelled)


def _send_cancelling_poll(run_id: int, poller: str, previous: uuid.UUID | None) -> None:
    """Send the poll that cancels a run's batches now. When the broker refuses it, the chain it replaced
    becomes the run's again, so that its next poll, already queued, cancels them instead of ending."""
    send = partial(batches.send_poll, run_id, poller)
    if not _published(run_id, "the poll that cancels its batches", send):
        JudgeRun.objects.filter(pk=run_id, batch_poller=poller).update(batch_poller=previous)


def resume_run(*, run: JudgeRun, mode: str | None = None) -> int:
    """Put failed and claimed calls back to pending and start the work again (as live calls or as a new
    batch: `mode`, else as before); returns calls reopened.

    A claim held by a worker that is in fact still alive is harmless: its finish no longer matches the
    claim token, so the call is stored once, by whoever claims it next. A batch still open at the
    endpoint (being cancelled) holds its calls: resume waits until it has ended (ValidationError).
    """
    if batches.open_batches(run):
        poll_orphaned_batches(JudgeRun.objects.filter(pk=run.pk), stale_seconds=settings.JUDGE_STALE_SECONDS)
        raise ValidationError(
            "A batch of this run is still being stopped at the endpoint: resume once it has."
        )
    if mode == JudgeRun.Mode.BATCH:
        batches.check_batch_launch(run.judge)
    with transaction.atomic():
        reopened = JudgeCall.objects.filter(
            run=run, status__in=[JudgeCall.Status.FAILED, JudgeCall.Status.CLAIMED]
        ).update(status=JudgeCall.Status.PENDING, claim_token=None, error="", batch=None)
        pending = JudgeCall.objects.filter(run=run, status=JudgeCall.Status.PENDING).exists()
        JudgeRun.objects.filter(pk=run.pk).update(
            status=JudgeRun.Status.RUNNING,
            error="",
            finished=None,
            lanes_started=False,
            queued_at=timezone.now(),
            mode=mode or run.mode,
        )
        run.refresh_from_db()
        run_id = run.pk
        if pending:
            start_work(run)
        else:
            transaction.on_commit(lambda: complete_run_if_finished(run_id=run_id))
    return reopened


@dataclass(frozen=True)
class RunProgress:
    """A judge run's calls, tokens and cost so far (the run page)."""

    total: int
    done: int
    failed: int
    pending: int
    claimed: int
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal | None  # None: the run's judge had no prices
    cached: int
    parse_failures: int
    logprobs_missing: int
    calls_per_minute: int
    consistency_pairs: int
    consistent_pairs: int
    reasoning_tokens: int = 0  # part of completion_tokens (billed as output)

    @property
    def cost_text(self) -> str:
        return cost_text(self.cost)

    @property
    def finished(self) -> int:
        return self.done + self.failed

    def percent(self, count: int) -> float:
        return round(100 * count / self.total, 1) if self.total else 0.0

    @property
    def done_percent(self) -> float:
        return self.percent(self.done)

    @property
    def failed_percent(self) -> float:
        return self.percent(self.failed)

    @property
    def parse_failure_rate(self) -> float | None:
        return round(100 * self.parse_failures / self.done, 1) if self.done else None

    @property
    def consistency_rate(self) -> float | None:
        return (
            round(100 * self.consistent_pairs / self.consistency_pairs, 1) if self.consistency_pairs else None
        )


def run_progress(run: JudgeRun) -> RunProgress:
    """Counts and sums for the run page, in two queries whatever the run's size."""
    minute_ago = timezone.now() - timedelta(minutes=1)
    done_q = Q(status=JudgeCall.Status.DONE)
    stats = run.calls.aggregate(
        # Before the aggregates named like the columns, which would shadow them.
        batch_prompt_tokens=Sum("prompt_tokens", filter=Q(batch__isnull=False)),
        batch_completion_tokens=Sum("completion_tokens", filter=Q(batch__isnull=False)),
        total=Count("id"),
        done=Count("id", filter=done_q),
        failed=Count("id", filter=Q(status=JudgeCall.Status.FAILED)),
        pending=Count("id", filter=Q(status=JudgeCall.Status.PENDING)),
        claimed=Count("id", filter=Q(status=JudgeCall.Status.CLAIMED)),
        prompt_tokens=Sum("prompt_tokens"),
        completion_tokens=Sum("completion_tokens"),
        cached=Count("id", filter=done_q & Q(cached=True)),
        parse_failures=Count("id", filter=done_q & Q(parse_failed=True)),
        logprobs_missing=Count("id", filter=done_q & Q(logprobs_missing=True)),
        recent=Count("id", filter=Q(finished_at__gte=minute_ago)),
        reasoning_tokens=Sum(Cast(KT("details__reasoning_tokens"), IntegerField())),
    )
    pairs = Rating.objects.filter(rater_id=run.rater_id).aggregate(
        pairs=Sum(Cast(KT("details__consistency_pairs"), IntegerField())),
        consistent=Sum(Cast(KT("details__consistent_pairs"), IntegerField())),
    )
    prompt_tokens, completion_tokens = stats["prompt_tokens"] or 0, stats["completion_tokens"] or 0
    batch_in, batch_out = stats["batch_prompt_tokens"] or 0, stats["batch_completion_tokens"] or 0
    params = run.frozen_parameters
    return RunProgress(
        total=stats["total"],
        done=stats["done"],
        failed=stats["failed"],
        pending=stats["pending"],
        claimed=stats["claimed"],
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost=sum_costs(
            [
                cost_of(
                    params,
                    prompt_tokens=prompt_tokens - batch_in,
                    completion_tokens=completion_tokens - batch_out,
                ),
                cost_of(params, prompt_tokens=batch_in, completion_tokens=batch_out, batch=True),
            ]
        ),
        cached=stats["cached"],
        parse_failures=stats["parse_failures"],
        logprobs_missing=stats["logprobs_missing"],
        calls_per_minute=stats["recent"],
        consistency_pairs=pairs["pairs"] or 0,
        consistent_pairs=pairs["consistent"] or 0,
        reasoning_tokens=stats["reasoning_tokens"] or 0,
    )
