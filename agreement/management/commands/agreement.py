"""manage.py agreement --evaluation NAME [--project SLUG] [--rubric NAME] [--where k=v] [--by key] --json"""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agreement.alt_test import METRICS
from agreement.report import DEFAULT_RESAMPLES, DEFAULT_SEED, build_report, build_reports_by
from agreement.stand_in import AltTestSettings
from evaluations.models import Evaluation


def parse_where(pairs: list[str]) -> dict[str, str]:
    where = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--where {pair!r}: write it as key=value, e.g. --where topic=Concert")
        where[key.strip()] = value
    return where


class Command(BaseCommand):
    help = "Print the agreement report of an evaluation (human-human and model-vs-people, with CIs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--evaluation", required=True, help="Evaluation name.")
        parser.add_argument("--project", help="Project slug (needed when two projects have the name).")
        parser.add_argument("--rubric", help="Only this rubric (name, or name@version).")
        parser.add_argument(
            "--where", action="append", default=[], help="Metadata filter key=value (repeatable)."
        )
        parser.add_argument("--by", help="One report per value of this metadata key.")
        parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="Bootstrap resamples.")
        parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="Bootstrap seed.")
        parser.add_argument(
            "--epsilon",
            type=float,
            help="Alt-test epsilon, 0 to 1, of the evaluation's (experts 0.2, skilled 0.15, crowd 0.1).",
        )
        parser.add_argument(
            "--alt-test-metric",
            choices=METRICS,
            help="Alt-test alignment score for likert rubrics (default: the evaluation's, else neg_rmse).",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print JSON (documented in docs/agreement.md)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        evaluation = self.find_evaluation(options["evaluation"], options["project"])
        where = parse_where(options["where"])
        if options["resamples"] < 0:
            raise CommandError("--resamples must be 0 or more")
        epsilon = options["epsilon"]
        if epsilon is not None and not 0 <= epsilon < 1:
            raise CommandError(f"--epsilon {epsilon:g}: give a value from 0 up to (not including) 1")
        common = {
            "evaluation": evaluation,
            "rubric": options["rubric"],
            "where": where,
            "resamples": options["resamples"],
            "seed": options["seed"],
            "alt_test": AltTestSettings.of(evaluation, epsilon=epsilon, metric=options["alt_test_metric"]),
        }
        try:
            by = options["by"]
            report = (build_reports_by(by=by, **common) if by else build_report(**common)).as_json()
        except ValueError as error:
            raise CommandError(str(error)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, ensure_ascii=False))
            return
        if options["by"]:
            for part in report["slices"]:
                self.stdout.write(f"== {options['by']} = {part['value']}")
                self.write_text(part["rubrics"])
        else:
            self.write_text(report["rubrics"])

    def find_evaluation(self, name: str, slug: str | None) -> Evaluation:
        matches = Evaluation.objects.filter(name=name).select_related("project", "dataset")
        if slug:
            matches = matches.filter(project__slug=slug)
        found = list(matches[:2])
        if not found:
            where = f" in project {slug!r}" if slug else ""
            raise CommandError(f"no evaluation named {name!r}{where}")
        if len(found) > 1:
            raise CommandError(f"two projects have an evaluation named {name!r}: add --project SLUG")
        return found[0]

    def write_text(self, rubrics: list[dict]) -> None:
        for block in rubrics:
            hh = block["human_human"]
            self.stdout.write(
                f"{block['rubric']} v{block['version']} ({block['kind']}), {block['items']} items"
            )
            self.stdout.write(
                f"  people: alpha {fmt(hh.get('krippendorff_alpha'))}, "
                f"agreement {fmt(hh.get('percent_agreement'))}, "
                f"kappa {fmt(hh.get('cohen_kappa'))} on {hh['items']} items"
            )
            for rater in block["raters"]:
                major = rater["vs_majority"]
                self.stdout.write(
                    f"  {rater['rater']}: vs majority agreement {fmt(major.get('percent_agreement'))}, "
                    f"kappa {fmt(major.get('cohen_kappa'))}; parse failures {rater['parse_failures']}"
                )
                self.stdout.write(f"    {rater['verdict']['text']}")
                self.stdout.write(f"    {rater['alt_test']['text']}")


def fmt(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"
