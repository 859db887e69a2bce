"""python manage.py import_dataset PATH --project SLUG --name NAME [options]"""

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from datasets.readers import FORMATS
from datasets.services import import_dataset
from projects.models import Project

SHOWN = 50


class Command(BaseCommand):
    help = "Validate a JSONL / JSON / CSV file of dialogs and import it as a dataset, all or nothing."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--name", required=True, help="dataset name")
        parser.add_argument("--format", default="auto", choices=sorted(FORMATS))
        parser.add_argument("--repair-text", action="store_true", help="repair mojibake with ftfy (listed)")
        parser.add_argument("--keep-mojibake", action="store_true", help="import mojibake unchanged")
        parser.add_argument("--convert-encoding", action="store_true", help="convert non-UTF-8 text")
        parser.add_argument("--append", action="store_true", help="add the items to an existing dataset")
        parser.add_argument(
            "--column",
            action="append",
            default=[],
            metavar="ROLE=COLUMN",
            help="CSV wide: which column holds id, dialog, response or baseline (repeatable)",
        )
        parser.add_argument("--response-speaker", default="", help="CSV wide: speaker of response/baseline")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"there is no project with slug {options['project']!r}")
        mapping = self.mapping(options["column"])
        if options["response_speaker"]:
            mapping["response_speaker"] = options["response_speaker"]
        try:
            result = import_dataset(
                project=project,
                name=options["name"],
                path=options["path"],
                format=options["format"],
                repair_text=options["repair_text"],
                keep_mojibake=options["keep_mojibake"],
                convert_encoding=options["convert_encoding"],
                append=options["append"],
                mapping=mapping,
            )
        except FileNotFoundError:
            raise CommandError(f"no such file: {options['path']}") from None
        for repair in result.repairs[:SHOWN]:
            self.stdout.write(f"repaired {repair}")
        if result.repair_count > SHOWN:
            self.stdout.write(f"... and {result.repair_count - SHOWN} more repairs")
        for warning in result.warnings:
            self.stdout.write(self.style.WARNING(warning))
        if not result.ok:
            for error in result.errors[:SHOWN]:
                self.stderr.write(f"{options['path']}: {error}")
            if result.error_count > SHOWN:
                self.stderr.write(f"... and {result.error_count - SHOWN} more problems")
            raise CommandError(f"refused: {result.error_count} problem(s) found; nothing was imported")
        assert result.dataset is not None
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {result.created} items into dataset {result.dataset.name!r} "
                f"of project {project.slug} "
                f"({result.format}, {result.encoding}; {result.repair_count} repairs; "
                f"{result.empty_text_count} empty texts imported as empty turns; "
                f"the dataset now has {result.dataset.item_count} items)."
            )
        )

    def mapping(self, pairs: list[str]) -> dict[str, str]:
        mapping = {}
        for pair in pairs:
            role, sep, column = pair.partition("=")
            if not sep or role not in {"id", "dialog", "response", "baseline"}:
                raise CommandError(
                    f"--column {pair!r}: expected ROLE=COLUMN with ROLE id, dialog, response or baseline"
                )
            mapping[role] = column
        return mapping
