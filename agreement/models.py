"""A cache of computed agreement reports, keyed by the report's parameters and the ratings' fingerprint."""

from django.db import models


class ReportCache(models.Model):
    """One computed report of an evaluation for one set of parameters (filter, resamples).

    `fingerprint` summarises the evaluation's current ratings (count, last change, highest id);
    when the ratings change it no longer matches and the report is computed again.
    """

    evaluation = models.ForeignKey("evaluations.Evaluation", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64, help_text="Hash of the report's parameters.")
    parameters = models.JSONField(default=dict)
    fingerprint = models.CharField(max_length=200)
    payload = models.JSONField()
    seconds = models.FloatField(help_text="How long the computation took.")
    computed = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "key"], name="one_cached_report_per_parameters"),
        ]

    def __str__(self) -> str:
        return f"agreement report of evaluation {self.evaluation_id} ({self.key[:8]})"
