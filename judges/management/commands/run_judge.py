"""`manage.py run_judge --evaluation NAME --rubric NAME[@VERSION] [--rubric ...] --judge NAME [--project SLUG]
[--batch] [--wait]`: one run per --rubric, all launched or none."""

import sys
from time import sleep
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluations.management.lookup import find_evaluation
from evaluations.models import Evaluation
from judges import services
from judges.models import Judge, JudgeRun
from rubrics.models import RubricVersion


class Command(BaseCommand):
    help = "Launch a judge run on an evaluation (prints calls, tokens and cost first); --wait follows it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--evaluation", required=True, help="Evaluation name.")
        parser.add_argument(
            "--rubric",
            required=True,
            action="append",
            help="Rubric name, optionally NAME@VERSION; repeat for several runs (one per version).",
        )
        parser.add_argument("--judge", required=True, help="Judge name (in the evaluation's project).")
        parser.add_argument("--project", help="Project slug, when the evaluation name is not unique.")
        parser.add_argument(
            "--batch",
            action="store_true",
            help="Send the calls through the endpoint's Batch API: half the price, results within 24 h.",
        )
        parser.add_argument("--wait", action="store_true", help="Print progress; exit 1 if any run fails.")
        parser.add_argument("--interval", type=float, default=2.0, help="Seconds between progress lines.")

    def handle(self, *args: Any, **options: Any) -> None:
        evaluation = find_evaluation(options["evaluation"], options["project"])
        versions = []
        for spec in options["rubric"]:
            version = self._version(evaluation, spec)
            if version not in versions:
                versions.append(version)
        judge = Judge.objects.filter(project=evaluation.project, name=options["judge"]).first()
        if judge is None:
            names = ", ".join(Judge.objects.filter(project=evaluation.project).values_list("name", flat=True))
            raise CommandError(
                f"No judge named {options['judge']!r} in project {evaluation.project.slug} "
                f"(judges: {names or 'none'})."
            )
        try:
            batch = options["batch"]
            estimates = services.estimate_runs(
                judge=judge, evaluation=evaluation, rubric_versions=versions, batch=batch
            )
            runs = services.launch_runs(
                judge=judge, evaluation=evaluation, rubric_versions=versions, batch=batch
            )
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        simulated = " (simulated model)" if judge.is_simulated else ""
        for run, (version, estimate) in zip(runs, estimates, strict=True):
            self.stdout.write(
                f"Run {run.pk}: {judge.name}{simulated} on {evaluation.name} / {version}: "
                f"{estimate.calls} calls, about {estimate.tokens} tokens, estimated cost {estimate.cost_text}"
                + (" (batch price: half the judge's prices; results within 24 h)" if estimate.batch else "")
            )
        if len(runs) > 1:
            total = services.total_estimate([estimate for _, estimate in estimates])
            self.stdout.write(
                f"Total: {len(runs)} runs, {total.calls} calls, about {total.tokens} tokens, "
                f"estimated cost {total.cost_text}"
            )
        if services.queue_refused(runs):
            raise CommandError(services.QUEUE_REFUSED)
        if options["wait"]:
            self._follow(runs, options["interval"])

    def _version(self, evaluation: Evaluation, spec: str) -> RubricVersion:
        name, _, number = spec.partition("@")
        versions = evaluation.rubric_versions.select_related("rubric").filter(rubric__name=name)
        if number:
            if not number.isdigit():
                raise CommandError(f"--rubric {spec!r}: the version after @ must be a number.")
            # NAME@V may also name a judge-only version (examples from disagreements).
            versions = evaluation.judge_versions().filter(rubric__name=name, number=int(number))
        version = versions.order_by("-number").first()
        if version is None:
            available = ", ".join(str(v) for v in evaluation.rubric_versions.select_related("rubric"))
            raise CommandError(f"Evaluation {evaluation.name} has no rubric {spec!r} (it has: {available}).")
        return version

    def _follow(self, runs: list[JudgeRun], interval: float) -> None:
        """Print each run's progress until none is active; exit 1 if any did not finish done."""
        several = len(runs) > 1
        while True:
            for run in runs:
                run.refresh_from_db()
                progress = services.run_progress(run)
                prefix = f"Run {run.pk} " if several else ""
                self.stdout.write(
                    f"{prefix}{run.status}: {progress.done}/{progress.total} done, {progress.failed} failed, "
                    f"{progress.cached} cached, {progress.parse_failures} parse failures, "
                    f"{progress.prompt_tokens + progress.completion_tokens} tokens, "
                    f"cost {progress.cost_text}, "
                    f"{progress.calls_per_minute} calls/min"
                )
            if not any(run.is_active for run in runs):
                break
            sleep(interval)
        failed = [run for run in runs if run.status != JudgeRun.Status.DONE]
        for run in failed:
            self.stderr.write(f"Run {run.pk} {run.status}: {run.error}")
        if failed:
            sys.exit(1)
