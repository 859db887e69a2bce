"""Print the exact prompt a judge would receive for one item: for debugging prompts."""

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.records import ItemRecord, RecordError, parse_item_object
from projects.models import Project
from rubrics.models import RubricVersion
from rubrics.rendering import RenderError, render_prompt
from rubrics.services import find_rubric


class Command(BaseCommand):
    help = (
        "Print the exact prompt of a rubric version for an item given as one JSON object in the dataset "
        "format (written as is: no newline is added)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rubric", required=True, help="NAME or NAME@VERSION (default: the latest version)."
        )
        parser.add_argument(
            "--item-json", required=True, help="A file holding one JSON item, or - for stdin."
        )
        parser.add_argument("--project", help="Slug of the project whose rubric to use (else a built-in).")
        parser.add_argument("--swapped", action="store_true", help="Exchange response and baseline.")

    def handle(
        self, *args: Any, rubric: str, item_json: str, project: str | None, swapped: bool, **options: Any
    ) -> None:
        version = self.find_version(rubric, project)
        item = self.read_item(item_json)
        try:
            prompt = render_prompt(version, item, swapped=swapped)
        except RenderError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(prompt, ending="")

    def find_version(self, spec: str, slug: str | None) -> RubricVersion:
        name, _, number = spec.rpartition("@") if "@" in spec else (spec, "", "")
        project = None
        if slug:
            project = Project.objects.filter(slug=slug).first()
            if project is None:
                raise CommandError(f"--project: no project with slug {slug!r}")
        rubric = find_rubric(name=name.strip(), project=project)
        if rubric is None:
            where = f"project {slug} or the built-ins" if slug else "the built-in rubrics (use --project)"
            raise CommandError(f"--rubric: no rubric named {name!r} in {where}")
        if not number:
            version = rubric.latest_version()
        elif not number.isdigit():
            raise CommandError(f"--rubric: the version after @ must be a number, not {number!r}")
        else:
            version = rubric.versions.filter(number=int(number)).first()
        if version is None:
            numbers = ", ".join(str(n) for n in rubric.versions.values_list("number", flat=True)) or "none"
            raise CommandError(f"--rubric: {rubric.name} has no version {number} (versions: {numbers})")
        return version

    def read_item(self, path: str) -> ItemRecord:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"--item-json: cannot read {path}: {error}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as error:
            raise CommandError(
                f"--item-json: {path} line {error.lineno}, column {error.colno}: malformed JSON: {error.msg}"
            ) from None
        try:
            return parse_item_object(obj)
        except RecordError as error:
            raise CommandError(f"--item-json: {path}: {error}") from None
