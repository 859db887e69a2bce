"""The Celery app. Tasks live in each app's tasks.py and are found by autodiscovery."""

import os
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("concord")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
