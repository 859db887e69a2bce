"""The agreement report served from a cache that is recomputed when the evaluation's ratings change."""

from __future__ import annotations

import hashlib
import json
import time

from django.db import IntegrityError, transaction
from django.db.models import Count, Max

from agreement.models import ReportCache
from agreement.report import DEFAULT_RESAMPLES, DEFAULT_SEED, build_report
from evaluations.models import Evaluation, Rater, Rating


def ratings_fingerprint(evaluation: Evaluation) -> str:
    """Changes whenever a rating of the evaluation is added, revised or deleted, or a rater is renamed."""
    ratings = Rating.objects.filter(evaluation=evaluation).aggregate(
        count=Count("id"), updated=Max("updated"), top=Max("id")
    )
    raters = Rater.objects.filter(project_id=evaluation.project_id).aggregate(
        count=Count("id"), top=Max("id")
    )
    stamp = ratings["updated"].isoformat() if ratings["updated"] else "-"
    return f"{ratings['count']}:{ratings['top'] or 0}:{stamp}:{raters['count']}:{raters['top'] or 0}"


def parameters_key(parameters: dict) -> str:
    return hashlib.sha256(json.dumps(parameters, sort_keys=True).encode()).hexdigest()


# Bump when the report's JSON changes shape, so reports cached by older code are recomputed.
REPORT_FORMAT = 2


def report_parameters(*, where: dict[str, str] | None = None, resamples: int = DEFAULT_RESAMPLES) -> dict:
    return {
        "where": dict(sorted((where or {}).items())),
        "resamples": resamples,
        "seed": DEFAULT_SEED,
        "format": REPORT_FORMAT,
    }


def cached_report(
    *, evaluation: Evaluation, where: dict[str, str] | None = None, resamples: int = DEFAULT_RESAMPLES
) -> tuple[dict, ReportCache]:
    """The report for these parameters: from the cache if the ratings have not changed, else computed now."""
    parameters = report_parameters(where=where, resamples=resamples)
    key = parameters_key(parameters)
    fingerprint = ratings_fingerprint(evaluation)
    entry = ReportCache.objects.filter(evaluation=evaluation, key=key).first()
    if entry is not None and entry.fingerprint == fingerprint:
        return entry.payload, entry
    started = time.perf_counter()
    payload = build_report(evaluation=evaluation, where=where or None, resamples=resamples, seed=DEFAULT_SEED)
    seconds = time.perf_counter() - started
    values = {"parameters": parameters, "fingerprint": fingerprint, "payload": payload, "seconds": seconds}
    try:
        with transaction.atomic():
            entry, _ = ReportCache.objects.update_or_create(evaluation=evaluation, key=key, defaults=values)
    except IntegrityError:  # two requests computed it at once; either result is the same
        entry = ReportCache.objects.get(evaluation=evaluation, key=key)
    return payload, entry


def fresh_cached_report(evaluation: Evaluation) -> dict | None:
    """The unfiltered report if it is cached and still current; never computes (for the evaluation page)."""
    key = parameters_key(report_parameters())
    entry = ReportCache.objects.filter(evaluation=evaluation, key=key).only("fingerprint", "payload").first()
    if entry is None or entry.fingerprint != ratings_fingerprint(evaluation):
        return None
    return entry.payload
