"""`manage.py run_judge --evaluation NAME --rubric NAME[@VERSION] --judge NAME [--project SLUG] [--wait]`."""

import sys
import time

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evaluations.models import Evaluation
from judges import services
from judges.models import Judge, JudgeRun


class Command(BaseCommand):
    help = "Launch a judge run on an evaluation (prints calls, tokens and cost first); --wait follows it."

    def add_arguments(self, parser):
        parser.add_argument("--evaluation", required=True, help="Evaluation name.")
        parser.add_argument("--rubric", required=True, help="Rubric name, optionally NAME@VERSION.")
        parser.add_argument("--judge", required=True, help="Judge name (in the evaluation's project).")
        parser.add_argument("--project", help="Project slug, when the evaluation name is not unique.")
        parser.add_argument("--wait", action="store_true", help="Print progress; exit 1 if the run fails.")
        parser.add_argument("--interval", type=float, default=2.0, help="Seconds between progress lines.")

    def handle(self, *args, **options):
        evaluation = self._evaluation(options["evaluation"], options["project"])
        version = self._version(evaluation, options["rubric"])
        judge = Judge.objects.filter(project=evaluation.project, name=options["judge"]).first()
        if judge is None:
            names = ", ".join(Judge.objects.filter(project=evaluation.project).values_list("name", flat=True))
            raise CommandError(
                f"No judge named {options['judge']!r} in project {evaluation.project.slug} "
                f"(judges: {names or 'none'})."
            )
        try:
            estimate = services.estimate_run(judge=judge, evaluation=evaluation, rubric_version=version)
            run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        simulated = " (simulated model)" if judge.is_simulated else ""
        self.stdout.write(
            f"Run {run.pk}: {judge.name}{simulated} on {evaluation.name} / {version}: "
            f"{estimate.calls} calls, about {estimate.tokens} tokens, estimated cost {estimate.cost}"
        )
        if options["wait"]:
            self._follow(run, options["interval"])

    def _evaluation(self, name: str, slug: str | None) -> Evaluation:
        evaluations = Evaluation.objects.filter(name=name).select_related("project", "dataset")
        if slug:
            evaluations = evaluations.filter(project__slug=slug)
        found = list(evaluations[:2])
        if not found:
            raise CommandError(f"No evaluation named {name!r}" + (f" in project {slug}." if slug else "."))
        if len(found) > 1:
            raise CommandError(f"Several projects have an evaluation named {name!r}; add --project SLUG.")
        return found[0]

    def _version(self, evaluation: Evaluation, spec: str):
        name, _, number = spec.partition("@")
        versions = evaluation.rubric_versions.select_related("rubric").filter(rubric__name=name)
        if number:
            if not number.isdigit():
                raise CommandError(f"--rubric {spec!r}: the version after @ must be a number.")
            versions = versions.filter(number=int(number))
        version = versions.order_by("-number").first()
        if version is None:
            available = ", ".join(str(v) for v in evaluation.rubric_versions.select_related("rubric"))
            raise CommandError(f"Evaluation {evaluation.name} has no rubric {spec!r} (it has: {available}).")
        return version

    def _follow(self, run: JudgeRun, interval: float) -> None:
        while True:
            run.refresh_from_db()
            progress = services.run_progress(run)
            self.stdout.write(
                f"{run.status}: {progress.done}/{progress.total} done, {progress.failed} failed, "
                f"{progress.cached} cached, {progress.parse_failures} parse failures, "
                f"{progress.prompt_tokens + progress.completion_tokens} tokens, cost {progress.cost}, "
                f"{progress.calls_per_minute} calls/min"
            )
            if not run.is_active:
                break
            time.sleep(interval)
        if run.status != JudgeRun.Status.DONE:
            self.stderr.write(f"Run {run.pk} {run.status}: {run.error}")
            sys.exit(1)
