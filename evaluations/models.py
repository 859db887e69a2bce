from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import User
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Count, Exists, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from datasets.models import Item
    from projects.models import Project
    from rubrics.models import RubricVersion


MAX_OVERLAP = 1000  # human ratings an item may need: the evaluation form and the settings both hold to it
# A reservation lasts at most a week: longer, an item an annotator left is lost to the others, and a
# timedelta of more minutes than that overflows long before the database's integers do.
MAX_RESERVATION_MINUTES = 7 * 24 * 60


class Evaluation(models.Model):
    """A dataset x one or more rubric versions, with annotators, overlap N and judge runs."""

    class Order(models.TextChoices):
        DATASET = "dataset", "Dataset order"
        SHUFFLED = "shuffled", "Shuffled (fixed per evaluation)"
        JUDGE_UNSURE = "judge_unsure", "Judge least sure first (from the judge ratings when rating starts)"
        LEAST_RATED = "least_rated", "Least rated first (fewest ratings and reservations; ties shuffled)"

    class Expertise(models.TextChoices):
        EXPERTS = "experts", "Experts (epsilon 0.2)"
        SKILLED = "skilled", "Skilled annotators (epsilon 0.15)"
        CROWD = "crowd", "Crowd workers (epsilon 0.1)"
        CUSTOM = "custom", "Custom epsilon"

    class AltTestMetric(models.TextChoices):
        BY_KIND = "", "By rubric kind"
        ACCURACY = "accuracy", "Accuracy"
        NEG_RMSE = "neg_rmse", "Negative RMSE (likert only)"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="evaluations")
    dataset = models.ForeignKey("datasets.Dataset", on_delete=models.PROTECT, related_name="evaluations")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    rubric_versions = models.ManyToManyField("rubrics.RubricVersion", related_name="evaluations")
    annotators = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="evaluations")
    overlap = models.PositiveIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_OVERLAP)],
        help_text="Human ratings each item needs (N).",
    )
    reservation_minutes = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(MAX_RESERVATION_MINUTES)]
    )
    order = models.CharField(max_length=20, choices=Order.choices, default=Order.DATASET)
    # The alternative annotator test (agreement.alt_test): epsilon, the benefit granted to a model
    # for being cheaper than people, by the paper's rule of thumb for who the people are.
    annotator_expertise = models.CharField(
        max_length=10, choices=Expertise.choices, default=Expertise.SKILLED
    )
    alt_test_epsilon = models.FloatField(
        default=0.15, help_text="Alt-test epsilon: experts 0.2, skilled 0.15, crowd 0.1, or custom."
    )
    alt_test_metric = models.CharField(
        max_length=10,
        choices=AltTestMetric.choices,
        blank=True,
        help_text="Empty: accuracy for categorical and pairwise rubrics, negative RMSE for likert.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="evaluation_name_unique_in_project"),
            models.CheckConstraint(
                condition=models.Q(overlap__gte=1), name="evaluation_overlap_at_least_one"
            ),
            models.CheckConstraint(
                condition=models.Q(reservation_minutes__gte=1), name="evaluation_reservation_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(alt_test_epsilon__gte=0, alt_test_epsilon__lt=1),
                name="evaluation_alt_test_epsilon_in_0_1",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def items(self) -> QuerySet[Item]:
        """The dataset's items this evaluation rates: all of them but those excluded when it was created."""
        from datasets.models import Item

        return Item.objects.filter(dataset_id=self.dataset_id).exclude(
            Exists(ExcludedItem.objects.filter(evaluation_id=self.pk, item_id=OuterRef("pk")))
        )

    def item_count(self) -> int:
        """How many items `items()` holds: the dataset's items less this evaluation's exclusions among them
        (each item excluded once at most: a unique constraint). Counting both is cheaper than counting
        the anti-join (100k items: ~30-50 ms instead of ~70-95 ms on PostgreSQL)."""
        from datasets.models import Item

        excluded = ExcludedItem.objects.filter(evaluation_id=self.pk, item__dataset_id=self.dataset_id)
        excluded_count = excluded.order_by().values("evaluation_id").annotate(n=Count("pk")).values("n")[:1]
        total = Item.objects.filter(dataset_id=self.dataset_id).aggregate(
            n=Count("pk") - Coalesce(Subquery(excluded_count), 0)
        )["n"]
        return int(total or 0)

    def ordered_versions(self, rubric: str | None = None) -> list[RubricVersion]:
        """The evaluation's rubric versions by rubric name and number; with `rubric` (a name, or NAME@N)
        only those it names, and a ValueError listing the evaluation's versions when none is."""
        versions = list(self.rubric_versions.select_related("rubric").order_by("rubric__name", "number"))
        if rubric is None:
            return versions
        chosen = [v for v in versions if v.rubric.name == rubric or str(v) == rubric]
        if not chosen:
            names = ", ".join(str(v) for v in versions) or "none"
            raise ValueError(f"evaluation {self.name!r} has no rubric {rubric!r} (it has: {names})")
        return chosen

    def judge_versions(self) -> QuerySet[RubricVersion]:
        """Rubric versions judges may run here: the evaluation's own and its judge-only versions."""
        from rubrics.models import RubricVersion

        own = models.Q(evaluations=self) | models.Q(pk__in=self.judge_only_versions.values("rubric_version"))
        return RubricVersion.objects.filter(own).distinct()


class ExcludedItem(models.Model):
    """An item of the dataset that an evaluation leaves out because it lacks what a rubric needs.

    Chosen when the evaluation is created ("exclude items that lack ..."); excluded items are not
    queued for people, not sent to judges and not counted in reports.
    """

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="exclusions")
    item = models.ForeignKey("datasets.Item", on_delete=models.CASCADE, related_name="exclusions")
    reason = models.CharField(max_length=300)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "item"], name="item_excluded_once_per_evaluation")
        ]

    def __str__(self) -> str:
        return f"{self.item_id} excluded from {self.evaluation_id}: {self.reason}"


class Rater(models.Model):
    """Who gave a rating: a user, a judge run, or a name imported with earlier ratings."""

    class Kind(models.TextChoices):
        HUMAN = "human", "Human"
        MODEL = "model", "Model"

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="raters")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="raters"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="rater_name_unique_in_project"),
            models.UniqueConstraint(
                fields=["project", "user"], condition=models.Q(user__isnull=False), name="one_rater_per_user"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=["human", "model"]), name="rater_kind_is_known"
            ),
            models.CheckConstraint(
                condition=models.Q(user__isnull=True) | models.Q(kind="human"), name="user_raters_are_human"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def for_user(cls, project: Project, user: User) -> Rater:
        """The human rater a user rates as in a project, made on first use.

        An imported rater may already hold the username (ratings from an earlier study); the
        user's own rater then gets a distinct name rather than taking over those ratings.
        """
        rater = cls.objects.filter(project=project, user=user).first()
        if rater:
            return rater
        name = user.get_username()
        if cls.objects.filter(project=project, name=name).exists():
            name = f"{name} (account {user.pk})"
        rater, _ = cls.objects.get_or_create(
            project=project, user=user, defaults={"name": name, "kind": cls.Kind.HUMAN}
        )
        return rater


class Rating(models.Model):
    """One rater's current answer for one item under one rubric version, in one evaluation.

    `value` is the canonical text of the answer: a scale value for likert ("4", or "3.72" for a
    probability-weighted judge score), a label for categorical, "A" / "SAME" / "B" for pairwise
    with A = baseline and B = response. A judge reply that could not be parsed is stored with
    `parse_failed` and an empty value, never as a score.
    """

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="ratings")
    item = models.ForeignKey("datasets.Item", on_delete=models.CASCADE, related_name="ratings")
    rubric_version = models.ForeignKey(
        "rubrics.RubricVersion", on_delete=models.PROTECT, related_name="ratings"
    )
    rater = models.ForeignKey(Rater, on_delete=models.CASCADE, related_name="ratings")
    value = models.CharField(max_length=64, blank=True)
    explanation = models.TextField(blank=True)
    parse_failed = models.BooleanField(default=False)
    raw_output = models.TextField(blank=True)
    # Pairwise only: which response the rater saw on the left ("baseline" or "response").
    side_shown = models.CharField(max_length=10, blank=True)
    seconds_spent = models.FloatField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True, help_text="Judge extras: argmax, samples, tokens.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "rater", "item", "rubric_version"],
                name="one_rating_per_rater_item_version",
            ),
            models.CheckConstraint(
                condition=models.Q(parse_failed=True) | ~models.Q(value=""), name="rating_has_value_or_failed"
            ),
            models.CheckConstraint(
                condition=models.Q(side_shown__in=["", "baseline", "response"]),
                name="rating_side_shown_is_known",
            ),
        ]
        indexes = [
            models.Index(fields=["evaluation", "rubric_version", "item"], name="rating_eval_version_item"),
        ]

    def __str__(self) -> str:
        return f"{self.rater} on {self.item_id}: {self.value or 'parse failure'}"

    @property
    def value_as_shown(self) -> str:
        """The value in the letters the rater saw (pairwise: A = their left card), as explanations use."""
        from .values import value_as_shown

        return value_as_shown(self.value, self.side_shown)


class RatingRevision(models.Model):
    """An earlier value of a rating, kept when a person revises it."""

    rating = models.ForeignKey(Rating, on_delete=models.CASCADE, related_name="revisions")
    value = models.CharField(max_length=64, blank=True)
    explanation = models.TextField(blank=True)
    side_shown = models.CharField(max_length=10, blank=True)
    seconds_spent = models.FloatField(null=True, blank=True)
    created = models.DateTimeField(help_text="When this earlier value was first saved.")
    replaced = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rating", "replaced"]

    def __str__(self) -> str:
        return f"revision of rating {self.rating_id}: {self.value}"


class JudgeOnlyVersion(models.Model):
    """A later version of one of an evaluation's rubrics that judges may run there but people never rate.

    Made by "examples from disagreements" (agreement.examples): its prompt carries tune-split items
    of this evaluation as examples; its runs are compared with the people's ratings of the
    evaluation's own version of the rubric, on the held-out items.
    """

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="judge_only_versions")
    rubric_version = models.ForeignKey("rubrics.RubricVersion", on_delete=models.PROTECT, related_name="+")
    example_items = models.JSONField(default=list, help_text="Ids of the items the prompt shows as examples.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "rubric_version"], name="one_judge_only_entry_per_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rubric_version} (judges only) in {self.evaluation}"
