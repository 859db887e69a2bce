"""manage.py export_ratings --evaluation NAME --layout long|wide|jsonl|xlsx [--item-text] [--excel] -o FILE"""

import shutil
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluations import workbook
from evaluations.exports import LAYOUTS, stream
from evaluations.management.lookup import find_evaluation


class Command(BaseCommand):
    help = (
        "Export an evaluation's ratings: long CSV (one row per rating), wide CSV (one row per item), JSONL, "
        "or an Excel workbook with a sheet per layout (xlsx)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--evaluation", required=True, help="Evaluation name.")
        parser.add_argument(
            "--project", help="Project slug, when several projects use the evaluation's name."
        )
        parser.add_argument("--layout", choices=[*LAYOUTS, workbook.LAYOUT], default="long")
        parser.add_argument(
            "--item-text",
            action="store_true",
            help="Wide layout (and the workbook's wide sheet): add the item texts.",
        )
        parser.add_argument(
            "--excel", action="store_true", help="CSV: start with a UTF-8 byte order mark, for Excel."
        )
        parser.add_argument(
            "-o", "--output", default="-", help="File to write; - (default) for standard output."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        evaluation = find_evaluation(options["evaluation"], options["project"])
        if options["layout"] == workbook.LAYOUT:
            self._workbook(evaluation, options)
            return
        chunks = stream(
            evaluation, options["layout"], item_texts=options["item_text"], excel=options["excel"]
        )
        written = 0
        if options["output"] == "-":
            for chunk in chunks:
                sys.stdout.buffer.write(chunk)
                written += len(chunk)
            sys.stdout.buffer.flush()
            return
        with open(options["output"], "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                written += len(chunk)
        self.stderr.write(f"Wrote {written:,} bytes ({options['layout']}) to {options['output']}.")

    def _workbook(self, evaluation: Any, options: dict[str, Any]) -> None:
        try:
            source = workbook.open_workbook(evaluation, item_texts=options["item_text"])
        except workbook.WorkbookTooWide as error:
            raise CommandError(f"No workbook: {error}.") from None
        with source:
            if options["output"] == "-":
                shutil.copyfileobj(source, sys.stdout.buffer)
                sys.stdout.buffer.flush()
                return
            with open(options["output"], "wb") as handle:
                shutil.copyfileobj(source, handle)
                written = handle.tell()
        self.stderr.write(f"Wrote {written:,} bytes (xlsx) to {options['output']}.")
