"""A cache of computed agreement reports, keyed by the report's parameters and the ratings' fingerprint."""

from django.db import models


class ReportCache(models.Model):
    """One computed report of an evaluation for one set of parameters (filter, resamples).

    `fingerprint` summarises the evaluation's current ratings (count, last change, highest id);
    when the ratings change it no longer matches and the report is computed again.

    A large report is computed by a Celery task. The row is created before the first report exists
    (payload null) and `computing` is the claim: the fingerprint the task is computing for, so a
    second request while it runs enqueues nothing. `failed` remembers the fingerprint whose
    computation raised, so the page shows `error` instead of enqueueing the same failure again.
    """

    evaluation = models.ForeignKey("evaluations.Evaluation", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64, help_text="Hash of the report's parameters.")
    parameters = models.JSONField(default=dict)
    fingerprint = models.CharField(
        max_length=200, blank=True, help_text="Of the ratings `payload` was computed from."
    )
    payload = models.JSONField(null=True, blank=True, help_text="Null until the first report is computed.")
    seconds = models.FloatField(null=True, blank=True, help_text="How long the computation took.")
    computing = models.CharField(
        max_length=200,
        blank=True,
        help_text="Fingerprint a background task is computing for; empty when idle.",
    )
    computing_since = models.DateTimeField(null=True, blank=True)
    failed = models.CharField(max_length=200, blank=True, help_text="Fingerprint whose computation failed.")
    error = models.TextField(blank=True)
    computed = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "key"], name="one_cached_report_per_parameters"),
        ]

    def __str__(self) -> str:
        return f"agreement report of evaluation {self.evaluation_id} ({self.key[:8]})"
