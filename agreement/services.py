"""The agreement report served from a cache that is recomputed when the evaluation's ratings change.

Downloads and the CLI compute a missing report in the request (`cached_report`). The page does not
wait for a large one (`report_for_page`): it asks a Celery task for it once and shows the previous
report, marked as updating, or a "computing" note until the task has stored the new one.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from functools import partial

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q, QuerySet
from kombu.exceptions import OperationalError as KombuOperationalError

from agreement import cost
from agreement.models import ReportCache
from agreement.report import DEFAULT_RESAMPLES, DEFAULT_SEED, build_report
from evaluations.models import Evaluation, Rater, Rating
from projects import leases

# A background claim older than this is taken as lost (worker gone, message dropped) and retried.
# Overridden by settings.AGREEMENT_CLAIM_SECONDS. Bench: 20 annotators x 100k items took 16.5 s.
CLAIM_SECONDS = 15 * 60
# The task renews nothing while it computes: its claim lasts CLAIM_SECONDS from `computing_since`.
REPORT_LEASE = leases.Lease(renewed="computing_since", held=~Q(computing=""))


def _ratings_state(evaluation: Evaluation) -> tuple[str, int]:
    """(fingerprint, number of ratings) of the evaluation, in two aggregate queries."""
    ratings = Rating.objects.filter(evaluation=evaluation).aggregate(
        count=Count("id"), updated=Max("updated"), top=Max("id")
    )
    raters = Rater.objects.filter(project_id=evaluation.project_id).aggregate(
        count=Count("id"), top=Max("id")
    )
    stamp = ratings["updated"].isoformat() if ratings["updated"] else "-"
    fingerprint = f"{ratings['count']}:{ratings['top'] or 0}:{stamp}:{raters['count']}:{raters['top'] or 0}"
    # The alt-test's settings live on the evaluation; changing them makes the cached report stale too.
    fingerprint += (
        f":{evaluation.alt_test_epsilon:g}:{evaluation.alt_test_metric}:{evaluation.annotator_expertise}"
    )
    return fingerprint, ratings["count"]


def ratings_fingerprint(evaluation: Evaluation) -> str:
    """Changes whenever a rating of the evaluation is added, revised or deleted, or a rater is renamed."""
    return _ratings_state(evaluation)[0]


def parameters_key(parameters: dict) -> str:
    return hashlib.sha256(json.dumps(parameters, sort_keys=True).encode()).hexdigest()


# Bump when the report's JSON changes shape, so reports cached by older code are recomputed.
REPORT_FORMAT = 3


def report_parameters(*, where: dict[str, str] | None = None, resamples: int = DEFAULT_RESAMPLES) -> dict:
    return {
        "where": dict(sorted((where or {}).items())),
        "resamples": resamples,
        "seed": DEFAULT_SEED,
        "format": REPORT_FORMAT,
    }


def _current(entry: ReportCache | None, fingerprint: str) -> bool:
    return entry is not None and entry.payload is not None and entry.fingerprint == fingerprint


def _compute_and_store(
    *, evaluation: Evaluation, where: dict[str, str] | None, resamples: int, fingerprint: str
) -> ReportCache:
    """Compute the report now and store it with the fingerprint read before reading the ratings."""
    parameters = report_parameters(where=where, resamples=resamples)
    key = parameters_key(parameters)
    started = time.perf_counter()
    # Only the JSON is kept: the report's own objects go as soon as it is made (0.75 KB a pair of people).
    payload = build_report(
        evaluation=evaluation, where=where or None, resamples=resamples, seed=DEFAULT_SEED
    ).as_json()
    values = {
        "parameters": parameters,
        "fingerprint": fingerprint,
        "payload": payload,
        "seconds": time.perf_counter() - started,
        "failed": "",
        "error": "",
    }
    try:
        with transaction.atomic():
            entry, _ = ReportCache.objects.update_or_create(evaluation=evaluation, key=key, defaults=values)
    except IntegrityError:  # two requests computed it at once; either result is the same
        entry = ReportCache.objects.get(evaluation=evaluation, key=key)
    _keep_the_latest(evaluation)
    return entry


KEPT_REPORTS = 50  # per evaluation: every filter a page is asked for (?key=&value=) makes one


def _keep_the_latest(evaluation: Evaluation) -> None:
    """Drop all but the evaluation's KEPT_REPORTS most recently computed reports (none that a task is
    computing), so that asking for ever new filters does not grow the cache without end."""
    idle = ReportCache.objects.filter(evaluation=evaluation, computing="")
    older = list(idle.order_by("-computed", "-pk").values_list("pk", flat=True)[KEPT_REPORTS:])
    if older:
        ReportCache.objects.filter(pk__in=older).delete()


def cached_report(
    *, evaluation: Evaluation, where: dict[str, str] | None = None, resamples: int = DEFAULT_RESAMPLES
) -> tuple[dict, ReportCache]:
    """The report for these parameters: from the cache if the ratings have not changed, else computed now
    (cost.ReportTooLarge, saying what to reduce, when it is above the server's budgets)."""
    key = parameters_key(report_parameters(where=where, resamples=resamples))
    fingerprint = ratings_fingerprint(evaluation)
    entry = ReportCache.objects.filter(evaluation=evaluation, key=key).first()
    if entry is None or not _current(entry, fingerprint):
        entry = _compute_and_store(
            evaluation=evaluation, where=where, resamples=resamples, fingerprint=fingerprint
        )
    assert entry.payload is not None
    return entry.payload, entry


@dataclass(frozen=True)
class PageReport:
    """What the report page shows: a report (current or stale) or none yet, and whether one is coming."""

    entry: ReportCache | None
    current: bool
    error: str = ""
    refused: str = ""  # too large to compute (cost.ReportCost.refused): what to reduce

    @property
    def payload(self) -> dict | None:
        return self.entry.payload if self.entry is not None else None

    @property
    def computing(self) -> bool:
        """A background computation for the current ratings is under way (the page polls)."""
        return not self.current and not self.error and not self.refused


QUEUE_REFUSED = (
    "this report is computed in the background and the task queue could not be reached (its broker is "
    "down); reload the page to try again"
)


def report_for_page(
    *, evaluation: Evaluation, where: dict[str, str] | None = None, resamples: int = DEFAULT_RESAMPLES
) -> PageReport:
    """The report for the page, never blocking on a large computation.

    A current cached report is returned as it is. A missing or stale one is computed now when its
    estimated cost (`cost.estimate_report`, of the whole evaluation whatever the filter) fits in a
    request; otherwise a background computation is requested and the stale report, if any, is returned;
    above the server's budgets, nothing is computed and the page says what to reduce.
    """
    key = parameters_key(report_parameters(where=where, resamples=resamples))
    fingerprint = ratings_fingerprint(evaluation)
    entry = ReportCache.objects.filter(evaluation=evaluation, key=key).first()
    if _current(entry, fingerprint):
        return PageReport(entry=entry, current=True)
    shown = entry if entry is not None and entry.payload is not None else None
    if entry is not None and entry.failed == fingerprint:
        return PageReport(entry=shown, current=False, error=entry.error or "the computation failed")
    if entry is None or entry.computing != fingerprint:  # else a task has it in hand: no estimate again
        estimate = cost.estimate_report(evaluation=evaluation, resamples=resamples)
        if estimate.refused:
            return PageReport(entry=shown, current=False, refused=estimate.refused)
        if estimate.inline:
            try:
                entry = _compute_and_store(
                    evaluation=evaluation, where=where, resamples=resamples, fingerprint=fingerprint
                )
            except cost.ReportTooLarge as refused:  # ratings added since the estimate above
                return PageReport(entry=shown, current=False, refused=str(refused))
            return PageReport(entry=entry, current=True)
    try:
        request_background_report(
            evaluation=evaluation, where=where, resamples=resamples, fingerprint=fingerprint
        )
    except KombuOperationalError:  # its claim is released: the next view tries again
        return PageReport(entry=shown, current=False, error=QUEUE_REFUSED)
    return PageReport(entry=shown, current=False)


def request_background_report(
    *, evaluation: Evaluation, where: dict[str, str] | None, resamples: int, fingerprint: str
) -> bool:
    """Claim the report's row and enqueue its task after commit; False (nothing enqueued) when a task
    already holds an unexpired claim."""
    parameters = report_parameters(where=where, resamples=resamples)
    key = parameters_key(parameters)
    ReportCache.objects.get_or_create(evaluation=evaluation, key=key, defaults={"parameters": parameters})
    claimed = leases.take(
        ReportCache.objects.filter(evaluation=evaluation, key=key),
        lease=REPORT_LEASE,
        seconds=int(getattr(settings, "AGREEMENT_CLAIM_SECONDS", CLAIM_SECONDS)),
        free=Q(computing=""),
        computing=fingerprint,
    )
    if claimed:
        transaction.on_commit(
            partial(_enqueue, evaluation_id=evaluation.pk, where=dict(where or {}), resamples=resamples)
        )
    return bool(claimed)


def _enqueue(*, evaluation_id: int, where: dict[str, str], resamples: int) -> None:
    """Send the task; if the broker refuses, release the claim so the next page view tries again."""
    from agreement.tasks import compute_agreement_report

    try:
        compute_agreement_report.delay(evaluation_id, where, resamples)
    except Exception:
        key = parameters_key(report_parameters(where=where, resamples=resamples))
        _release(ReportCache.objects.filter(evaluation_id=evaluation_id, key=key))
        raise


def compute_report_in_background(*, evaluation_id: int, where: dict[str, str], resamples: int) -> bool:
    """The task's work: compute and store the report, then release the claim. False when there was
    nothing to do (evaluation deleted, or the report is already current, e.g. a redelivered message)."""
    evaluation = Evaluation.objects.filter(pk=evaluation_id).first()
    if evaluation is None:
        return False
    key = parameters_key(report_parameters(where=where, resamples=resamples))
    claim = ReportCache.objects.filter(evaluation=evaluation, key=key)
    fingerprint = ratings_fingerprint(evaluation)
    if _current(claim.first(), fingerprint):
        _release(claim)
        return False
    try:
        _compute_and_store(evaluation=evaluation, where=where, resamples=resamples, fingerprint=fingerprint)
    except cost.ReportTooLarge as error:  # its message says what to reduce; nothing went wrong
        _release(claim, failed=fingerprint, error=str(error))
        return False
    except Exception as error:  # recorded so the page says why instead of enqueueing it again; re-raised
        message = f"{type(error).__name__}: {error}"
        _release(claim, failed=fingerprint, error=message)
        raise
    _release(claim)
    return True


def _release(claim: QuerySet[ReportCache], **values: str) -> None:
    leases.release(claim, lease=REPORT_LEASE, computing="", computing_since=None, **values)


def fresh_cached_report(evaluation: Evaluation) -> dict | None:
    """The unfiltered report if it is cached and still current; never computes (for the evaluation page)."""
    key = parameters_key(report_parameters())
    entry = ReportCache.objects.filter(evaluation=evaluation, key=key).only("fingerprint", "payload").first()
    if not _current(entry, ratings_fingerprint(evaluation)):
        return None
    assert entry is not None
    return entry.payload
