"""python manage.py import_ratings PATH --evaluation NAME [--project SLUG]"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluations.management.lookup import find_evaluation
from evaluations.ratings_import import RatingsImportError, import_ratings


class Command(BaseCommand):
    help = (
        "Import ratings (CSV or JSONL: item_id, rubric, rater, rater_kind, value[, explanation]) into an "
        "evaluation. Every problem is reported with its line, and then nothing is imported."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="CSV, TSV or JSONL file.")
        parser.add_argument("--evaluation", required=True, help="Evaluation name.")
        parser.add_argument(
            "--project", help="Project slug, when several projects use the evaluation's name."
        )
        parser.add_argument(
            "--format", choices=["csv", "tsv", "jsonl"], help="Default: from the file's suffix."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        evaluation = find_evaluation(options["evaluation"], options["project"])
        try:
            result = import_ratings(
                evaluation=evaluation, path=options["path"], file_format=options["format"]
            )
        except FileNotFoundError:
            raise CommandError(f"No file at {options['path']}.") from None
        except RatingsImportError as error:
            raise CommandError(f"{options['path']}: {error.summary()}") from None
        self.stdout.write(f"{evaluation.name}: {result.summary()}")
