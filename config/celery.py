"""The Celery app. Tasks live in each app's tasks.py and are found by autodiscovery."""

import os
import resource
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("concord")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def limit_memory(megabytes: int) -> None:
    """Cap this process's data and heap (RLIMIT_DATA: what malloc and NumPy's arrays take, not shared
    libraries) at `megabytes` (0: leave it): an allocation beyond it raises MemoryError in the task that
    asked, rather than the machine running out and the kernel killing some process, maybe another's."""
    if megabytes <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = megabytes * 1024 * 1024
    resource.setrlimit(
        resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
    )


@worker_init.connect
def limit_worker_memory(**_kwargs: object) -> None:
    """Before the pool starts, so every thread (and a prefork pool's children) is under the limit."""
    from django.conf import settings

    limit_memory(int(getattr(settings, "WORKER_MEMORY_LIMIT_MB", 0)))


class RecoverAfterReconnecting(bootsteps.StartStopStep):
    """A worker that lost its broker and connected again does what a starting worker does (worker_ready:
    judges.tasks, datasets.tasks): it takes over the judge runs and uploads gone silent, whose messages a
    broker restarted without its data may have lost. The consumer runs this step at each (re)connection."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.connections = 0

    def start(self, parent: Any) -> None:
        self.connections += 1
        if self.connections > 1:  # the first is the worker's start, which worker_ready already covers
            worker_ready.send(sender=parent)


app.steps["consumer"].add(RecoverAfterReconnecting)
