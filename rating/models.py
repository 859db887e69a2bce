"""Human rating in the browser: who holds which item (Assignment) and how full each item is (Slot)."""

import hashlib

from django.conf import settings
from django.db import models


def pairwise_left_side(*, user_id: int, item_id: int) -> str:
    """Which response a person sees on the left for an item: fixed per (user, item), half of each.

    A hash rather than a random draw so the side is reproducible and needs no lookup to explain.
    """
    digest = hashlib.sha256(f"pairwise-side:{user_id}:{item_id}".encode()).digest()
    return "response" if digest[0] & 1 else "baseline"


def shuffled_rank(*, evaluation_id: int, item_id: int) -> int:
    """An item's place in an evaluation's fixed shuffled order: 60 bits of md5, as the SQL computes it."""
    return int(hashlib.md5(f"{evaluation_id}:{item_id}".encode()).hexdigest()[:15], 16)


class Slot(models.Model):
    """One item of an evaluation in the rating queue, with how many people hold or have rated it.

    `claims` counts live and not-yet-released reservations plus finished ratings; `is_open` is
    `claims < overlap`, kept in the row so "next item" reads a partial index in `rank` order
    instead of counting assignments over every item.
    """

    evaluation = models.ForeignKey("evaluations.Evaluation", on_delete=models.CASCADE, related_name="slots")
    item = models.ForeignKey("datasets.Item", on_delete=models.CASCADE, related_name="+")
    rank = models.BigIntegerField(
        help_text="Order in which items are handed out: dataset position or a hash."
    )
    claims = models.PositiveIntegerField(default=0)
    is_open = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "item"], name="one_slot_per_evaluation_item"),
        ]
        indexes = [
            models.Index(
                fields=["evaluation", "rank"], condition=models.Q(is_open=True), name="slot_open_by_rank"
            ),
            # "Least rated first": the open slot with the fewest claims, read from the index's first entry.
            models.Index(
                fields=["evaluation", "claims", "rank"],
                condition=models.Q(is_open=True),
                name="slot_open_by_claims",
            ),
        ]

    def __str__(self) -> str:
        return f"slot of item {self.item_id} in evaluation {self.evaluation_id}: {self.claims} claims"


class Assignment(models.Model):
    """An item handed to one annotator in one evaluation: reserved, then done, skipped or flagged.

    A reservation that ran out and was given back to the pool becomes `expired`; the person is
    not handed the item again, but a late submit still saves while the item has room.
    """

    class Status(models.TextChoices):
        RESERVED = "reserved", "Reserved"
        DONE = "done", "Done"
        SKIPPED = "skipped", "Skipped"
        FLAGGED = "flagged", "Flagged as a problem"
        EXPIRED = "expired", "Reservation expired"

    class Side(models.TextChoices):
        BASELINE = "baseline", "Baseline on the left"
        RESPONSE = "response", "Response on the left"

    evaluation = models.ForeignKey(
        "evaluations.Evaluation", on_delete=models.CASCADE, related_name="assignments"
    )
    item = models.ForeignKey("datasets.Item", on_delete=models.CASCADE, related_name="assignments")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RESERVED)
    rank = models.BigIntegerField(
        default=0, help_text="The item's place in the queue when it was handed out."
    )
    reserved_until = models.DateTimeField()
    # Pairwise rubrics: which response this person sees on the left for this item.
    left_side = models.CharField(max_length=10, choices=Side.choices)
    reason = models.TextField(blank=True, help_text="Why the item was skipped or flagged.")
    started = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)
    seconds_spent = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "item", "user"], name="one_assignment_per_user_item"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["reserved", "done", "skipped", "flagged", "expired"]),
                name="assignment_status_is_known",
            ),
            models.CheckConstraint(
                condition=models.Q(left_side__in=["baseline", "response"]),
                name="assignment_left_side_is_known",
            ),
            models.UniqueConstraint(
                fields=["evaluation", "user"],
                condition=models.Q(status="reserved"),
                name="one_reservation_per_user_evaluation",
            ),
        ]
        indexes = [
            models.Index(
                fields=["evaluation", "reserved_until"],
                condition=models.Q(status="reserved"),
                name="assignment_reserved_until",
            ),
            models.Index(fields=["user", "evaluation", "status"], name="assignment_user_status"),
            models.Index(fields=["evaluation", "user", "rank"], name="assignment_user_rank"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} on item {self.item_id}: {self.status}"

    @property
    def holds_claim(self) -> bool:
        """Whether this assignment is counted in its slot's claims."""
        return self.status in {self.Status.RESERVED, self.Status.DONE}


class KeyboardSettings(models.Model):
    """One person's single-key shortcuts on the rating page: on or off, and which key does what.

    WCAG 2.1.4 (character key shortcuts): a person must be able to turn them off or rebind them.
    `keys` holds only the actions rebound from `rating.shortcuts.DEFAULT_KEYS`.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="keyboard_settings"
    )
    shortcuts_on = models.BooleanField(default=True)
    keys = models.JSONField(default=dict, blank=True, help_text="Action -> single key, where rebound.")

    def __str__(self) -> str:
        return f"keyboard settings of user {self.user_id}"


class RaterView(models.Model):
    """What an evaluation shows its raters besides the item: guidelines, chosen metadata, and which
    rubrics ask people for an explanation. One row per evaluation, made when a researcher saves it."""

    evaluation = models.OneToOneField(
        "evaluations.Evaluation", on_delete=models.CASCADE, related_name="rater_view"
    )
    guidelines = models.TextField(blank=True, help_text="Instructions for raters, in Markdown.")
    metadata_keys = models.JSONField(
        default=list, blank=True, help_text="Item metadata keys shown to raters, read-only, in this order."
    )
    # Ids rather than a many-to-many table: read with the rest of the row on every submit, no extra query.
    explain_versions = models.JSONField(
        default=list,
        blank=True,
        help_text="Ids of the rubric versions whose rating needs an explanation from people.",
    )

    def __str__(self) -> str:
        return f"rater view of evaluation {self.evaluation_id}"
