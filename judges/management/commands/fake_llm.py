"""`python manage.py fake_llm --port N`: serve Concord's simulated OpenAI-compatible model on 127.0.0.1."""

import contextlib
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from judges.fake_llm import FAULTS, FakeConfig, FakeLLM
from judges.fake_profiles import PROFILE_NAMES


class Command(BaseCommand):
    help = "Serve a simulated OpenAI-compatible model (models named fake-*) for tests, benchmarks and demos."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default 127.0.0.1).")
        parser.add_argument("--latency-ms", type=float, default=200.0)
        parser.add_argument(
            "--fail-rate",
            type=float,
            default=None,
            help="Share of requests that get a fault (default 0.1 when --fault is given).",
        )
        parser.add_argument(
            "--fault",
            action="append",
            default=[],
            choices=sorted(FAULTS),
            help="A fault to inject; repeat for several.",
        )
        parser.add_argument(
            "--fault-attempts",
            type=int,
            default=1,
            help="How many attempts of a faulted request fail (0 = all).",
        )
        parser.add_argument(
            "--retry-after", type=float, default=1.0, help="Retry-After seconds sent with 429."
        )
        parser.add_argument("--no-logprobs", action="store_true", help="Never return logprobs.")
        parser.add_argument("--api-key", default=None, help="Require this bearer key (401 otherwise).")
        parser.add_argument(
            "--profile",
            default="any",
            choices=PROFILE_NAMES,
            help="Behave as this provider does (refusals, error bodies, ignored parameters); "
            "default: accept everything.",
        )
        parser.add_argument("--stop-after", type=float, default=None, help="Stop by itself after N seconds.")

    def handle(self, *args: Any, **options: Any) -> None:
        fail_rate = options["fail_rate"]
        if fail_rate is None:
            fail_rate = 0.1 if options["fault"] else 0.0
        if not 0 <= fail_rate <= 1:
            raise CommandError(f"--fail-rate must be between 0 and 1, not {fail_rate}")
        config = FakeConfig(
            latency_ms=options["latency_ms"],
            fail_rate=fail_rate,
            faults=tuple(options["fault"]),
            fault_attempts=options["fault_attempts"],
            logprobs=not options["no_logprobs"],
            api_key=options["api_key"],
            retry_after=options["retry_after"],
            profile=options["profile"],
        )
        server = FakeLLM(config, host=options["host"], port=options["port"])
        self.stdout.write(
            f"Simulated model (fake-*, profile {config.profile}) at {server.base_url} "
            f"latency {config.latency_ms:g} ms, faults {list(config.faults) or 'none'} at rate {fail_rate:g}"
        )
        self.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            server.serve(stop_after=options["stop_after"])
