from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import models


class Project(models.Model):
    """The permission boundary: datasets, rubrics, judges and evaluations belong to a project."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def role_of(self, user: User | AnonymousUser) -> str | None:
        if not user.is_authenticated:
            return None
        membership = self.memberships.filter(user=user.pk).only("role").first()
        return membership.role if membership else None


class Membership(models.Model):
    class Role(models.TextChoices):
        RESEARCHER = "researcher", "Researcher"
        ANNOTATOR = "annotator", "Annotator"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    created = models.DateTimeField(auto_now_add=True)
    # When this person's judge connection test in this project started: one at a time per person, in any
    # project (judges.probing).
    connection_test_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user_and_project"),
            models.CheckConstraint(
                condition=models.Q(role__in=["researcher", "annotator"]), name="membership_role_is_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"
