import re

from django.conf import settings
from django.db import models
from django.utils import timezone


class Dataset(models.Model):
    """What a researcher uploaded, as a set of items."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    source_filename = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    item_count = models.PositiveIntegerField(
        default=0, help_text="Items imported so far; kept by the importer so pages need no COUNT(*)."
    )

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="dataset_name_unique_in_project"),
        ]

    def __str__(self) -> str:
        return self.name


class Item(models.Model):
    """The unit that gets rated: a context of turns, the response judged, and an optional baseline."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="items")
    external_id = models.CharField(max_length=200)
    position = models.PositiveIntegerField(help_text="Order of the item in the upload.")
    context = models.JSONField(default=list, help_text='[{"speaker": "USER", "text": "..."}, ...]')
    response = models.JSONField(help_text='{"speaker": "BOT", "text": "..."}')
    baseline = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    search_text = models.TextField(
        blank=True,
        default="",
        help_text="Lower-cased id and turn texts, trigram-indexed on PostgreSQL for the item browser.",
    )

    class Meta:
        ordering = ["dataset", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "external_id"], name="item_external_id_unique_in_dataset"
            ),
            models.UniqueConstraint(fields=["dataset", "position"], name="item_position_unique_in_dataset"),
        ]

    def __str__(self) -> str:
        return self.external_id

    @property
    def has_baseline(self) -> bool:
        return self.baseline is not None


_PROBLEM_VALUES = re.compile(r"'[^']*'|\"[^\"]*\"|“[^”]*”|\d+")


class UploadJob(models.Model):
    """One browser upload: the stored file, its options, and how its validation and import went.

    Small files are imported in the request; large ones by a Celery task that updates `done_bytes`
    so the page can show a progress bar. The file is deleted once the job has finished. A running job
    beats `heartbeat` every few seconds; one silent for UPLOAD_STALE_SECONDS lost its worker, and a
    redelivered message takes it over and imports it again from the start (nothing partial was
    committed: the import is one transaction).
    """

    class Status(models.TextChoices):
        MAPPING = "mapping", "Waiting for the column mapping"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Validating and importing"
        DONE = "done", "Imported"
        FAILED = "failed", "Refused"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="upload_jobs")
    dataset = models.ForeignKey(Dataset, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=200, help_text="Name of the dataset to create or append to.")
    filename = models.CharField(max_length=300)
    path = models.CharField(max_length=500, help_text="Where the uploaded file waits on disk.")
    size_bytes = models.PositiveBigIntegerField(default=0)
    format = models.CharField(max_length=20, default="auto")
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    done_bytes = models.PositiveBigIntegerField(default=0)
    items_imported = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True, help_text="Errors, repairs and warnings (capped).")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)
    heartbeat = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the worker importing the job."
    )

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.filename} -> {self.name} ({self.status})"

    @property
    def stalled_minutes(self) -> int:
        """Whole minutes without progress of a queued or running job silent for longer than
        UPLOAD_STALE_SECONDS (at least 1); 0 while it is moving or once it is finished."""
        if self.status not in {self.Status.QUEUED, self.Status.RUNNING}:
            return 0
        silent = (timezone.now() - (self.heartbeat or self.created)).total_seconds()
        if silent <= settings.UPLOAD_STALE_SECONDS:
            return 0
        return max(1, int(silent // 60))

    @property
    def is_finished(self) -> bool:
        return self.status in {self.Status.DONE, self.Status.FAILED}

    @property
    def same_problem(self) -> str:
        """One line for a refusal whose listed problems are all one problem (the same field and message,
        quoted values and numbers aside): a format mismatch, not 120 different mistakes."""
        errors = (self.report or {}).get("errors") or []
        if len(errors) < 3:
            return ""
        kinds = {(e.get("field") or "", _PROBLEM_VALUES.sub("…", e.get("message", ""))) for e in errors}
        if len(kinds) != 1:
            return ""
        first = errors[0]
        where = f"{first['field']}: " if first.get("field") else ""
        lines = [e["line"] for e in errors if e.get("line")]
        span = f" (lines {lines[0]} to {lines[-1]})" if len(lines) > 1 else ""
        problem = f"{where}{first['message'].rstrip('.')}"
        if self.error_count > len(errors):
            return (
                f"The first {len(errors)} of the {self.error_count:,} problems are the same{span}: {problem}."
            )
        return (
            f"All {self.error_count:,} problems are the same{span}: {problem}. One problem on every line "
            "usually means the file's format differs from the fields Concord reads."
        )

    @property
    def percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        if not self.size_bytes:
            return 0
        return min(99, int(100 * self.done_bytes / self.size_bytes))
