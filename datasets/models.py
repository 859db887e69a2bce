from django.conf import settings
from django.db import models


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

    class Meta:
        ordering = ["dataset", "position"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "external_id"], name="item_external_id_unique_in_dataset"),
            models.UniqueConstraint(fields=["dataset", "position"], name="item_position_unique_in_dataset"),
        ]

    def __str__(self) -> str:
        return self.external_id

    @property
    def has_baseline(self) -> bool:
        return bool(self.baseline and str(self.baseline.get("text", "")).strip())
