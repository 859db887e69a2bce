"""python manage.py create_evaluation --project SLUG --dataset NAME --rubric NAME[@VERSION] ... --name NAME"""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.models import Dataset
from evaluations.models import Evaluation
from evaluations.services import create_evaluation, resolve_rubric_version
from projects.models import Project


class Command(BaseCommand):
    help = (
        "Create an evaluation of a dataset under one or more rubric versions, after checking the items fit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="Project slug.")
        parser.add_argument("--dataset", required=True, help="Dataset name in the project.")
        parser.add_argument(
            "--rubric",
            action="append",
            required=True,
            dest="rubrics",
            help="NAME or NAME@VERSION (latest version without @); repeat for several rubrics.",
        )
        parser.add_argument("--name", required=True, help="Name of the new evaluation.")
        parser.add_argument(
            "--overlap", type=int, default=3, help="Human ratings each item needs (default 3)."
        )
        parser.add_argument("--order", choices=Evaluation.Order.values, default=Evaluation.Order.DATASET)
        parser.add_argument(
            "--exclude-lacking",
            action="store_true",
            help="Leave out items that lack what a rubric needs (e.g. a baseline) instead of refusing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"No project with slug '{options['project']}'.")
        dataset = Dataset.objects.filter(project=project, name=options["dataset"]).first()
        if dataset is None:
            raise CommandError(f"Project '{project.slug}' has no dataset named '{options['dataset']}'.")
        try:
            versions = [resolve_rubric_version(project, spec) for spec in options["rubrics"]]
            evaluation = create_evaluation(
                project=project,
                dataset=dataset,
                rubric_versions=versions,
                name=options["name"],
                overlap=options["overlap"],
                order=options["order"],
                exclude_lacking=options["exclude_lacking"],
            )
        except ValidationError as error:
            raise CommandError("Evaluation not created:\n  " + "\n  ".join(error.messages)) from None
        self.stdout.write(
            f"Created evaluation '{evaluation.name}' (id {evaluation.pk}) of '{dataset.name}' under "
            f"{', '.join(str(v) for v in versions)}, overlap {evaluation.overlap}."
        )
        excluded = evaluation.exclusions.count()
        if excluded:
            self.stdout.write(f"Excluded {excluded} items that lack what a rubric needs.")
