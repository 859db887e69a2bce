"""Create the demo project: two demo users, the demo dataset and an evaluation on the built-in rubrics.

Idempotent: running it again changes nothing that is already there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from projects.models import Membership, Project

if TYPE_CHECKING:
    from datasets.models import Dataset
    from evaluations.models import Evaluation

DEMO_DATASET = Path(__file__).resolve().parents[2] / "demo" / "dataset.jsonl"
# Two example raters written for the demo, so its agreement report has people to compare with.
DEMO_RATINGS = Path(__file__).resolve().parents[2] / "demo" / "ratings.csv"
DEMO_PASSWORD = "concord-demo"
DEMO_DESCRIPTION = (
    "Twelve short dialogs written for Concord, with example ratings by two demo raters on the four built-in"
    " rubrics. Rate them yourself, or run the simulated judge and open the agreement report."
)
DEMO_USERS = {"researcher": Membership.Role.RESEARCHER, "annotator": Membership.Role.ANNOTATOR}


class Command(BaseCommand):
    help = "Create the demo project, users, dataset and evaluation (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--password", default=DEMO_PASSWORD, help="Password of the demo users.")

    def handle(self, *args: Any, password: str, **options: Any) -> None:
        with transaction.atomic():
            project, _ = Project.objects.get_or_create(
                slug="demo",
                defaults={
                    "name": "Demo study",
                    "description": DEMO_DESCRIPTION,
                },
            )
            users = {
                name: self.ensure_user(name, password, project, role) for name, role in DEMO_USERS.items()
            }
        dataset = self.ensure_dataset(project, users["researcher"])
        evaluation = self.ensure_evaluation(project, dataset, users)
        self.ensure_judge(project, evaluation)
        self.stdout.write(
            self.style.SUCCESS(f"Demo project ready: researcher / {password} and annotator / {password}")
        )

    def ensure_user(self, username: str, password: str, project: Project, role: str) -> User:
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        if role == Membership.Role.RESEARCHER and not user.is_staff:
            # Staff may create projects (CONCORD_PROJECT_CREATORS=staff): the demo researcher can try it.
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": role})
        return user

    def ensure_dataset(self, project: Project, user: User) -> Dataset:
        from datasets.models import Dataset
        from datasets.services import import_dataset

        existing = Dataset.objects.filter(project=project, name="Demo dialogs").first()
        if existing:
            return existing
        import_dataset(project=project, name="Demo dialogs", path=DEMO_DATASET, user=user)
        return Dataset.objects.get(project=project, name="Demo dialogs")

    def ensure_evaluation(self, project: Project, dataset: Dataset, users: dict[str, User]) -> Evaluation:
        from evaluations.models import Evaluation
        from evaluations.services import create_evaluation
        from rubrics.models import Rubric

        evaluation = Evaluation.objects.filter(project=project, name="Demo evaluation").first()
        if evaluation is None:
            versions = [
                rubric.latest_version()
                for rubric in Rubric.objects.filter(project__isnull=True).order_by("builtin_key")
            ]
            evaluation = create_evaluation(
                project=project,
                dataset=dataset,
                rubric_versions=[v for v in versions if v],
                name="Demo evaluation",
                overlap=2,
                created_by=users["researcher"],
            )
        evaluation.annotators.add(users["annotator"], users["researcher"])
        if not evaluation.ratings.filter(rater__name="demo-rater-1").exists():
            from evaluations.ratings_import import import_ratings

            import_ratings(evaluation=evaluation, path=DEMO_RATINGS)
        return evaluation

    def ensure_judge(self, project: Project, evaluation: Evaluation) -> None:
        """A simulated judge against the project's own test server, so judge runs work offline."""
        from judges.models import Judge

        judge, _ = Judge.objects.get_or_create(
            project=project,
            name="Simulated judge",
            defaults={
                "base_url": os.environ.get("CONCORD_FAKE_LLM_URL", "http://127.0.0.1:8765/v1"),
                "model": "fake-judge-1",
                "simulated": True,
                "concurrency": 16,
                # The simulated model is free: its price is known to be 0, not unset.
                "price_input_per_million": 0,
                "price_output_per_million": 0,
            },
        )
        # The simulated model needs no key; demos set up before server credentials named a variable.
        if judge.api_key_env == "CONCORD_FAKE_LLM_KEY":
            Judge.objects.filter(pk=judge.pk).update(api_key_env="")
