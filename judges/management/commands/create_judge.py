"""`manage.py create_judge --project SLUG --name NAME --base-url URL --model MODEL [--endpoint KIND]
[--key-env NAME] [--temperature T] [--reasoning-effort E] [--max-output-tokens N] [--samples N]
[--logprobs] [--position-swap] [--concurrency N] [--rpm N] [--tpm N] [--price-in X] [--price-out Y]`:
a judge for scripts, checked by the same form as the judge page (declared server credentials only, safe
endpoints, no negative prices)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from judges import credentials
from judges.endpoints import AUTOMATIC, FAMILY_CHOICES, REASONING_EFFORTS
from judges.forms import JudgeForm
from judges.models import default_request_timeout
from projects.models import Project

# Command-line option -> judge form field, so an error names the option the user typed.
OPTIONS = {
    "name": "--name",
    "base_url": "--base-url",
    "model": "--model",
    "endpoint": "--endpoint",
    "reasoning_effort": "--reasoning-effort",
    "credential": "--key-env",
    "temperature": "--temperature",
    "max_tokens": "--max-output-tokens",
    "samples": "--samples",
    "concurrency": "--concurrency",
    "requests_per_minute": "--rpm",
    "tokens_per_minute": "--tpm",
    "price_input_per_million": "--price-in",
    "price_output_per_million": "--price-out",
}


class Command(BaseCommand):
    help = "Create a judge in a project. Without --key-env it sends no key; without --temperature none."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="Project slug.")
        parser.add_argument("--name", required=True)
        parser.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. .../v1")
        parser.add_argument("--model", required=True)
        parser.add_argument(
            "--endpoint",
            default=AUTOMATIC,
            choices=[key for key, _ in FAMILY_CHOICES],
            help="The endpoint kind, which decides the parameters sent; auto: from the base URL and model.",
        )
        parser.add_argument(
            "--key-env", default="", help=f"A server credential declared in {credentials.SETTING}."
        )
        parser.add_argument("--temperature", default="", help="0-2; unset: the endpoint's own default.")
        parser.add_argument("--max-output-tokens", default="256")
        parser.add_argument(
            "--reasoning-effort",
            default="",
            choices=["", *REASONING_EFFORTS],
            help="Reasoning models only; unset: the endpoint's default.",
        )
        parser.add_argument("--samples", default="1")
        parser.add_argument("--logprobs", action="store_true", help="Logprob scoring (likert rubrics).")
        parser.add_argument("--position-swap", action="store_true", help="Pairwise: judge both orders.")
        parser.add_argument(
            "--no-structured-output",
            action="store_true",
            help="Ask for JSON by an instruction in the prompt, never response_format (for a server that "
            "refuses or mishandles it).",
        )
        parser.add_argument("--concurrency", default="8")
        parser.add_argument("--rpm", default="0", help="Requests per minute, 0 = no limit.")
        parser.add_argument("--tpm", default="0", help="Tokens per minute, 0 = no limit.")
        parser.add_argument("--price-in", default="0", help="Price per million input tokens (USD).")
        parser.add_argument("--price-out", default="0", help="Price per million output tokens (USD).")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"No project with slug '{options['project']}'.")
        key_env = options["key_env"].strip()
        data = {
            "name": options["name"],
            "base_url": options["base_url"],
            "model": options["model"],
            "endpoint": options["endpoint"],
            "reasoning_effort": options["reasoning_effort"],
            "credential": credentials.ENV_PREFIX + key_env if key_env else credentials.NO_KEY,
            "temperature": options["temperature"],
            "max_tokens": options["max_output_tokens"],
            "samples": options["samples"],
            "logprobs": options["logprobs"],
            "position_swap": options["position_swap"],
            "structured_output": not options["no_structured_output"],
            "concurrency": options["concurrency"],
            "requests_per_minute": options["rpm"],
            "tokens_per_minute": options["tpm"],
            "price_input_per_million": options["price_in"],
            "price_output_per_million": options["price_out"],
            "cache_enabled": True,
            "request_timeout": default_request_timeout(),
        }
        form = JudgeForm(data, project=project)
        if not form.is_valid():
            raise CommandError(" ".join(_errors(form)))
        judge = form.save(commit=False)
        judge.project = project
        judge.save()
        self.stdout.write(
            f"Judge {judge.name} (id {judge.pk}) created in project {project.slug}: {judge.model} at "
            f"{judge.base_url}, API key: {judge.credential_label}."
        )


def _errors(form: JudgeForm) -> list[str]:
    """Each form error as "--option: message" (the credential's message already names the setting)."""
    lines = []
    for field, messages in form.errors.items():
        for message in map(str, messages):
            if field == "credential":
                message = f"{form.data['credential'].removeprefix(credentials.ENV_PREFIX)}: {message}"
            option = OPTIONS.get(field)
            lines.append(f"{option}: {message}" if option else message)
    return lines
