"""Import a rubric from a seed-style prompt text or a JSON spec."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.text_files import FileRefused, decode_text
from projects.models import Project
from rubrics.parsing import RubricParseError
from rubrics.services import import_rubric


class Command(BaseCommand):
    help = (
        "Import a rubric from a prompt text (criterion, steps and scale parsed, placeholders checked) or a "
        "JSON spec (name, kind, scale, prompt_template, ...). Importing a name again makes a new version."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A .txt prompt or a .json spec.")
        parser.add_argument("--project", help="Slug of the owning project (default: shared by all projects).")
        parser.add_argument("--name", help="Rubric name (default: the spec's name or the parsed criterion).")
        parser.add_argument(
            "--repair-text",
            action="store_true",
            help="Repair mojibake found by ftfy (each change is reported).",
        )

    def handle(
        self,
        *args: Any,
        path: str,
        project: str | None,
        name: str | None,
        repair_text: bool,
        **options: Any,
    ) -> None:
        owner = None
        if project:
            owner = Project.objects.filter(slug=project).first()
            if owner is None:
                raise CommandError(f"--project: no project with slug {project!r}")
        try:
            text = decode_text(Path(path).read_bytes())
        except (OSError, FileRefused) as error:
            raise CommandError(f"{path}: cannot read the file: {error}") from None
        try:
            result = import_rubric(
                text=text, project=owner, name=name, filename=path, repair_text=repair_text
            )
        except RubricParseError as error:
            raise CommandError(f"{path}: refused:\n  - " + "\n  - ".join(error.problems)) from None
        for repair in result.parsed.mojibake:
            verb = "repaired" if result.parsed.repaired else "looks like mojibake (use --repair-text)"
            self.stderr.write(f"{path}: {repair.where}: {repair.before!r} {verb} -> {repair.after!r}")
        version = result.version
        if not result.created_version:
            self.stdout.write(f"{version}: unchanged (the latest version already has this text)")
            return
        scale = ", ".join(f"{option['value']} {option['label']}".strip() for option in version.scale)
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {version} ({result.rubric.kind}, target {version.target}); scale: {scale}"
            )
        )
