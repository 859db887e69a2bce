"""Leases on claimed work: how every worker takes work, keeps it, and takes it over from a dead worker.

A row of work (a judge run, a judge call, an upload job, a report computation) is claimed with one
conditional UPDATE and the row count tells whether this worker won. While it works, the worker renews
the lease by writing the time into the lease's field (its heartbeat); a lease not renewed for its
length has expired: its worker died, and the next claim may take the row over. A redelivered message
or a second worker never takes work whose lease is alive.

Each model names its lease once (`Lease`); the functions below are the only ones that read or write
lease times, so judge lanes, upload jobs and report computations expire and are taken over alike.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, models
from django.db.models import Q
from django.utils import timezone

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """Where a model keeps its lease.

    `renewed`: the field the holder renews (its heartbeat). `dated_by`: fields that date a lease that
    was never renewed, tried in order (e.g. when the work was queued, when the row was created).
    `held`: the condition under which someone holds the lease at all (e.g. status running)."""

    renewed: str
    held: Q
    dated_by: tuple[str, ...] = ()

    def expired(self, seconds: float, *, now: datetime | None = None) -> Q:
        """Rows whose lease was last renewed (or, never renewed, dated) over `seconds` ago."""
        cutoff = expiry_cutoff(seconds, now=now)
        condition = Q(**{f"{self.renewed}__lt": cutoff})
        unset: dict[str, Any] = {}
        for earlier, field in zip((self.renewed, *self.dated_by), self.dated_by, strict=False):
            unset[f"{earlier}__isnull"] = True
            condition |= Q(**unset, **{f"{field}__lt": cutoff})
        return condition

    def last_sign(self, row: models.Model) -> datetime | None:
        """When the row's holder last showed life: its renewal, else the first of `dated_by` that is set."""
        for field in (self.renewed, *self.dated_by):
            value = getattr(row, field)
            if value is not None:
                return value
        return None


def expiry_cutoff(seconds: float, *, now: datetime | None = None) -> datetime:
    """A lease last renewed before this time has expired."""
    return (now or timezone.now()) - timedelta(seconds=seconds)


def take(
    rows: models.QuerySet[Any],
    *,
    lease: Lease,
    seconds: float,
    free: Q | None = None,
    **values: Any,
) -> int:
    """Claim the rows that are `free`, or held under a lease that expired `seconds` ago: one conditional
    UPDATE that renews the lease now and sets `values` (which may override the renewal). The number
    of rows taken; 0 when someone else holds them (or they are not there to take)."""
    now = timezone.now()
    claimable = lease.held & lease.expired(seconds, now=now)
    if free is not None:
        claimable |= free
    return rows.filter(claimable).update(**{lease.renewed: now, **values})


def renew(rows: models.QuerySet[Any], *, lease: Lease, **values: Any) -> int:
    """The holder's sign of life: the lease of the rows it holds runs again from now (and `values`,
    e.g. its progress, are stored with it)."""
    return rows.filter(lease.held).update(**{lease.renewed: timezone.now(), **values})


def release(rows: models.QuerySet[Any], *, lease: Lease, **values: Any) -> int:
    """Give the rows back: `values` say what a free row looks like (e.g. status queued, no holder)."""
    return rows.filter(lease.held).update(**values)


def seconds_left(row: models.Model, *, lease: Lease, seconds: float) -> float:
    """How long until the row's lease expires if its holder stops renewing it now (0: expired)."""
    last = lease.last_sign(row)
    if last is None:
        return 0.0
    return max(0.0, seconds - (timezone.now() - last).total_seconds())


@contextmanager
def renewing(rows: models.QuerySet[Any], *, lease: Lease, every: float, name: str) -> Iterator[None]:
    """Renew the lease from a thread while the body runs, so a long step without other signs of life
    (loading a spool in one COPY) does not make live work look dead."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(every):
                renew(rows, lease=lease)
        except Exception:
            logger.exception("renewing the lease of %s stopped", name)
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"{name}-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
