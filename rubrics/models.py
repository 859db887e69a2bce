from django.db import models


class Rubric(models.Model):
    """One criterion. Its text lives in versions; ratings point at the exact version they used."""

    class Kind(models.TextChoices):
        LIKERT = "likert", "Likert (ordered scale)"
        CATEGORICAL = "categorical", "Categorical (unordered labels)"
        PAIRWISE = "pairwise", "Pairwise (A / SAME / B)"

    # Null project: a built-in rubric, shared by every project.
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="rubrics"
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    builtin_key = models.CharField(
        max_length=100, blank=True, help_text="Seed file a built-in rubric was loaded from."
    )
    # A project's own copy of a built-in rubric, made when the project edits the built-in.
    copied_from = models.ForeignKey(
        "RubricVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="copies",
        help_text="The built-in version this project copy started from.",
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="rubric_name_unique_in_project"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(project__isnull=True), name="builtin_rubric_name_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=["likert", "categorical", "pairwise"]),
                name="rubric_kind_is_known",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_builtin(self) -> bool:
        return self.project_id is None

    def latest_version(self) -> "RubricVersion | None":
        return self.versions.order_by("-number").first()


class RubricVersion(models.Model):
    """The frozen text of a rubric. Once a rating points at a version, the database refuses edits."""

    class Target(models.TextChoices):
        LAST_TURN = "last_turn", "Last bot turn of a dialog"
        PAIRWISE = "pairwise", "Two candidate responses to the last user prompt"
        SENTENCE = "sentence", "One sentence in dialog context"

    class OutputFormat(models.TextChoices):
        SCORE = "score", "A score only"
        JSON = "json", "JSON object"
        PAIRWISE_JSON = "pairwise_json", "JSON with pairwise_choice and explanation"

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    criterion = models.CharField(max_length=300, help_text="Short name of what is measured.")
    description = models.TextField(blank=True, help_text="What the criterion means.")
    instructions = models.TextField(blank=True)
    steps = models.JSONField(default=list, blank=True, help_text="Evaluation steps, one string each.")
    # [{"value": "1", "label": "Very Repetitive", "description": "..."}] in scale order.
    scale = models.JSONField(default=list)
    prompt_template = models.TextField()
    target = models.CharField(max_length=20, choices=Target.choices, default=Target.LAST_TURN)
    output_format = models.CharField(max_length=20, choices=OutputFormat.choices, default=OutputFormat.SCORE)
    explanation_required = models.BooleanField(default=False)
    example_count = models.PositiveIntegerField(
        default=0, help_text="Items from disagreements its prompt shows as examples (agreement.examples)."
    )
    notes = models.TextField(blank=True, help_text="What import changed, e.g. repaired mojibake.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rubric__name", "number"]
        constraints = [
            models.UniqueConstraint(fields=["rubric", "number"], name="rubric_version_number_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="rubric_version_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.rubric.name}@{self.number}"

    @property
    def label(self) -> str:
        """The name pages, run names and exports show: NAME vN, and which prompt carries examples (a
        project's copy of a built-in is named apart from it, "NAME (copy)" or "NAME (examples)")."""
        label = f"{self.rubric.name} v{self.number}"
        if self.example_count:
            return f"{label} + {self.example_count} example{'' if self.example_count == 1 else 's'}"
        return label

    @property
    def kind(self) -> str:
        return self.rubric.kind

    @property
    def scale_values(self) -> list[str]:
        return [str(option["value"]) for option in self.scale]

    @property
    def requires_baseline(self) -> bool:
        return self.rubric.kind == Rubric.Kind.PAIRWISE
