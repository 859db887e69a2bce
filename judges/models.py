"""LLM judges: a reusable model configuration (Judge), its application to one evaluation under one rubric
version (JudgeRun), one row per (item, sample, order) of work (JudgeCall), and a cache of replies."""

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.functional import cached_property

from . import credentials
from .endpoints import AUTOMATIC, FAMILY_CHOICES, REASONING_EFFORTS, Accepts, Family, family_for
from .parameters import RunParameters

SIMULATED_MODEL_PREFIX = "fake-"


def default_base_url() -> str:
    return settings.LLM_DEFAULT_BASE_URL


def default_request_timeout() -> float:
    return settings.LLM_REQUEST_TIMEOUT


def price_field(label: str) -> models.DecimalField:
    return models.DecimalField(
        label,
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        default=None,
        validators=[MinValueValidator(Decimal("0"))],
    )


class Judge(models.Model):
    """An OpenAI-compatible endpoint, model and parameters. Its API key is a server credential the operator
    declared (`api_key_env`, the variable's name), or a key a researcher pasted (stored encrypted, shown
    only as `api_key_hint`), or none (judges.credentials)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="judges")
    name = models.CharField(max_length=120)
    base_url = models.URLField(max_length=500, default=default_base_url)
    model = models.CharField(max_length=200)
    api_key_env = models.CharField(
        "server credential",
        max_length=100,
        blank=True,
        default="",
        help_text="An environment variable the operator declared in CONCORD_JUDGE_CREDENTIALS.",
    )
    api_key_encrypted = models.TextField(blank=True, default="", editable=False)
    api_key_hint = models.CharField(max_length=24, blank=True, default="", editable=False)
    api_key_version = models.PositiveIntegerField(
        default=0,
        editable=False,
        help_text="Counts pasted keys, so replies cached under an old key stay apart.",
    )
    temperature = models.FloatField(
        null=True, blank=True, default=None, help_text="Empty: none is sent, the endpoint's own default."
    )
    max_tokens = models.PositiveIntegerField(default=256)
    samples = models.PositiveIntegerField(default=1, help_text="Replies per item (n), each stored.")
    logprobs = models.BooleanField(
        "logprob scoring",
        default=False,
        help_text="G-Eval: score = probability-weighted mean over the scale from top_logprobs (likert).",
    )
    position_swap = models.BooleanField(default=True, help_text="Pairwise: judge each item in both orders.")
    structured_output = models.BooleanField(
        default=True,
        help_text="Ask for JSON with response_format; off: append a format instruction instead.",
    )
    requests_per_minute = models.PositiveIntegerField(default=0, help_text="0 = no limit.")
    tokens_per_minute = models.PositiveIntegerField(default=0, help_text="0 = no limit.")
    concurrency = models.PositiveIntegerField(
        default=8,
        help_text="Requests in flight at once, across workers; a call waiting to be retried takes no slot.",
    )
    # Unset (None) until someone gives them: an estimate then shows tokens and "prices not set", never 0 USD.
    price_input_per_million = price_field("price per million input tokens (USD)")
    price_output_per_million = price_field("price per million output tokens (USD)")
    cache_enabled = models.BooleanField(
        "cache", default=True, help_text="Answer identical calls from the cache."
    )
    request_timeout = models.FloatField(
        default=default_request_timeout, help_text="Seconds before a call counts as timed out."
    )
    simulated = models.BooleanField(
        default=False, help_text="The endpoint said it is Concord's simulated model."
    )
    endpoint = models.CharField(
        "endpoint kind",
        max_length=30,
        choices=FAMILY_CHOICES,
        default=AUTOMATIC,
        help_text="Decides which parameters Concord sends; automatic: from the base URL and model.",
    )
    reasoning_effort = models.CharField(
        max_length=10,
        blank=True,
        choices=[("", "the endpoint's default")] + [(e, e) for e in REASONING_EFFORTS],
        help_text="Reasoning models only (OpenAI o-series, gpt-5): how long the model thinks.",
    )
    capabilities = models.JSONField(
        default=dict, blank=True, help_text="What the endpoint accepted in the last connection test."
    )
    probed_at = models.DateTimeField(null=True, blank=True, help_text="When the connection test last ran.")
    tested_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last connection test from its page ended, passed or not."
    )
    test_error = models.TextField(blank=True, help_text="Why that test failed; empty when it passed.")
    edited_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When someone last changed its settings or key (a test older is stale).",
    )
    archived = models.BooleanField(
        default=False, help_text="Hidden from new runs; kept because runs used it (for their reports)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="judge_name_unique_in_project"),
            models.CheckConstraint(
                condition=models.Q(samples__gte=1, samples__lte=20), name="judge_samples_1_to_20"
            ),
            models.CheckConstraint(condition=models.Q(concurrency__gte=1), name="judge_concurrency_positive"),
            models.CheckConstraint(condition=models.Q(max_tokens__gte=1), name="judge_max_tokens_positive"),
            models.CheckConstraint(
                condition=models.Q(temperature__isnull=True)
                | models.Q(temperature__gte=0, temperature__lte=2),
                name="judge_temperature_0_to_2",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(price_input_per_million__isnull=True) | models.Q(price_input_per_million__gte=0)
                )
                & (
                    models.Q(price_output_per_million__isnull=True)
                    | models.Q(price_output_per_million__gte=0)
                ),
                name="judge_prices_unset_or_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(api_key_env="") | models.Q(api_key_encrypted=""),
                name="judge_one_key_source",
            ),
            models.CheckConstraint(
                condition=models.Q(api_key_encrypted="", api_key_hint="")
                | (~models.Q(api_key_encrypted="") & ~models.Q(api_key_hint="")),
                name="judge_pasted_key_has_hint",
            ),
            models.CheckConstraint(condition=models.Q(request_timeout__gt=0), name="judge_timeout_positive"),
            models.CheckConstraint(
                condition=models.Q(endpoint__in=[key for key, _ in FAMILY_CHOICES]),
                name="judge_endpoint_is_known",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_simulated(self) -> bool:
        """Concord's fake server only serves models named fake-*, so the name alone marks them."""
        return self.simulated or self.model.startswith(SIMULATED_MODEL_PREFIX)

    @property
    def prices_set(self) -> bool:
        return self.price_input_per_million is not None and self.price_output_per_million is not None

    @property
    def connection_warning(self) -> str:
        """A sentence for the launch form when the last connection test does not vouch for these settings."""
        if self.test_error and self.tested_at:
            return (
                f"The last connection test of judge {self.name} ({self.tested_at:%Y-%m-%d %H:%M} UTC) "
                f"failed: {self.test_error.rstrip('.')}. Its runs would likely fail too: test it again on "
                "the judge's page."
            )
        tested = max((t for t in (self.probed_at, self.tested_at) if t is not None), default=None)
        if tested is None:
            return f"Judge {self.name}'s connection has not been tested: test it on the judge's page first."
        if self.edited_at and self.edited_at > tested:
            return (
                f"Judge {self.name} was edited ({self.edited_at:%Y-%m-%d %H:%M} UTC) after its last "
                f"connection test ({tested:%Y-%m-%d %H:%M} UTC): test it again on the judge's page."
            )
        return ""

    @property
    def credential_source(self) -> str:
        """ "pasted", "env:NAME" or "none" (judges.credentials)."""
        if self.api_key_encrypted:
            return credentials.PASTED
        return credentials.ENV_PREFIX + self.api_key_env if self.api_key_env else credentials.NO_KEY

    @property
    def credential_label(self) -> str:
        if self.api_key_encrypted:
            return f"pasted key {self.api_key_hint}"
        return f"server credential {self.api_key_env}" if self.api_key_env else "no key"

    def set_pasted_key(self, api_key: str) -> None:
        """Encrypt and keep a pasted key (CredentialError when keys cannot be stored); not saved yet."""
        self.api_key_encrypted = credentials.encrypt_key(api_key)
        self.api_key_hint = credentials.key_hint(api_key)
        self.api_key_version += 1
        self.api_key_env = ""

    def clear_pasted_key(self) -> None:
        self.api_key_encrypted = ""
        self.api_key_hint = ""

    @property
    def family(self) -> Family:
        return family_for(
            endpoint=self.endpoint,
            base_url=self.base_url,
            model=self.model,
            owned_by=(self.capabilities or {}).get("owned_by", ""),
        )

    def accepts(self) -> Accepts:
        return self.family.accepts.updated(self.capabilities)

    def parameters(self) -> RunParameters:
        """The settings a run freezes at launch, so editing the judge never changes a running run."""
        return RunParameters(
            endpoint=self.family.key,
            capabilities={k: v for k, v in (self.capabilities or {}).items() if k in Accepts().as_dict()},
            reasoning_effort=self.reasoning_effort,
            base_url=self.base_url,
            model=self.model,
            credential=self.credential_source,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            samples=self.samples,
            logprobs=self.logprobs,
            position_swap=self.position_swap,
            structured_output=self.structured_output,
            requests_per_minute=self.requests_per_minute,
            tokens_per_minute=self.tokens_per_minute,
            concurrency=self.concurrency,
            price_input_per_million=self.price_input_per_million,
            price_output_per_million=self.price_output_per_million,
            cache_enabled=self.cache_enabled,
            request_timeout=self.request_timeout,
            simulated=self.is_simulated,
        )


class JudgeRun(models.Model):
    """One judge applied to one evaluation under one rubric version; its ratings are its rater's."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    judge = models.ForeignKey(Judge, on_delete=models.PROTECT, related_name="runs")
    evaluation = models.ForeignKey(
        "evaluations.Evaluation", on_delete=models.CASCADE, related_name="judge_runs"
    )
    rubric_version = models.ForeignKey(
        "rubrics.RubricVersion", on_delete=models.PROTECT, related_name="judge_runs"
    )
    rater = models.OneToOneField("evaluations.Rater", on_delete=models.PROTECT, related_name="judge_run")

    class Mode(models.TextChoices):
        LIVE = "live", "Live calls"
        BATCH = "batch", "Batch API"

    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RUNNING)
    mode = models.CharField(
        max_length=8,
        choices=Mode.choices,
        default=Mode.LIVE,
        help_text="Live calls through lanes, or batches through the endpoint's Batch API (judges.batch).",
    )
    batch_poller = models.UUIDField(
        null=True, blank=True, help_text="The one poll task chain that may advance this run's batches."
    )
    batch_polling_since = models.DateTimeField(
        null=True, blank=True, help_text="When the poll now at work on its batches began (one at a time)."
    )
    error = models.TextField(blank=True, help_text="Why the run stopped, for its page.")
    parameters = models.JSONField(default=dict, help_text="The judge's settings frozen at launch.")
    total_calls = models.PositiveIntegerField(default=0)
    lanes_started = models.BooleanField(
        default=False, help_text="The first call went alone; after it the other lanes were started."
    )
    heartbeat = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life from one of its lanes."
    )
    queued_at = models.DateTimeField(
        null=True, blank=True, help_text="When its first lane was last queued (launch, resume, recovery)."
    )
    adaptations = models.JSONField(
        default=list,
        blank=True,
        help_text="Parameters the endpoint refused and what the run sends instead, in order.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["running", "done", "failed", "cancelled"]),
                name="judge_run_status_is_known",
            ),
            models.CheckConstraint(
                condition=models.Q(mode__in=["live", "batch"]), name="judge_run_mode_is_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge} on {self.evaluation} ({self.rubric_version})"

    @property
    def frozen_parameters(self) -> RunParameters:
        return RunParameters.from_json(self.parameters)

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.RUNNING

    @property
    def queue_stamp(self) -> str:
        """When its lanes were last queued (`queued_at`), as each lane task carries it: a lane queued before
        the run was queued again (resumed, recovered) finds another stamp and does nothing."""
        return self.stamp_of(self.queued_at)

    @staticmethod
    def stamp_of(queued_at: datetime | None) -> str:
        return queued_at.isoformat() if queued_at else ""

    @cached_property
    def too_long_calls(self) -> list[dict[str, Any]]:
        """Its first calls that failed because their prompt did not fit the endpoint's context (at most 50):
        item, prompt tokens and context, for the run page."""
        calls = self.calls.filter(status=JudgeCall.Status.FAILED, details__has_key="too_long")
        rows = calls.order_by("id").values("item__external_id", "sample", "swapped", "details")[:50]
        return [dict(row) for row in rows]

    @property
    def can_resume(self) -> bool:
        """Resume means something only for a run that stopped before all its calls were done."""
        return self.status in (self.Status.FAILED, self.Status.CANCELLED)

    @property
    def worker_warning(self) -> str:
        """A sentence when queued work has waited for a worker longer than JUDGE_WORKER_WAIT_SECONDS."""
        if self.status != self.Status.RUNNING:
            return self._unpolled_batches_warning()
        queued = self.queued_at or self.created
        picked_up = self.heartbeat is not None and self.heartbeat >= queued
        since = self.heartbeat if picked_up and self.heartbeat else queued
        silent = (timezone.now() - since).total_seconds()
        if silent < settings.JUDGE_WORKER_WAIT_SECONDS:
            return ""
        minutes = max(1, round(silent / 60))
        if picked_up:
            return f"no worker has reported on this run for {minutes} min: is a Celery worker running?"
        return f"no worker has picked this up for {minutes} min: is a Celery worker running?"

    def _unpolled_batches_warning(self) -> str:
        """A stopped batch run whose batches are still open at the endpoint, with no poll for
        JUDGE_STALE_SECONDS: its poll chain was lost, and a worker's start-up recovery sends a new one."""
        if self.mode != self.Mode.BATCH or self.heartbeat is None:
            return ""
        silent = (timezone.now() - self.heartbeat).total_seconds()
        if silent < settings.JUDGE_STALE_SECONDS or not self.batches.filter(collected=False).exists():
            return ""
        minutes = max(1, round(silent / 60))
        return (
            f"no worker has polled this run's batches for {minutes} min, so nothing stops them at the "
            "endpoint: is a Celery worker running? One that starts polls them again."
        )


class JudgeCall(models.Model):
    """One request of a run: an item, a sample index and an order (swapped = response shown as A)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        CLAIMED = "claimed", "Claimed"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    run = models.ForeignKey(JudgeRun, on_delete=models.CASCADE, related_name="calls")
    item = models.ForeignKey("datasets.Item", on_delete=models.CASCADE, related_name="+")
    sample = models.PositiveIntegerField(default=0)
    swapped = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    claim_token = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(null=True, blank=True)
    raw_output = models.TextField(blank=True)
    value = models.CharField(max_length=64, blank=True, help_text="Parsed value, canonical orientation.")
    explanation = models.TextField(blank=True)
    parse_failed = models.BooleanField(default=False)
    logprobs_missing = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    cached = models.BooleanField(default=False)
    details = models.JSONField(default=dict, blank=True, help_text="Logprob score, argmax, distribution.")
    finished_at = models.DateTimeField(null=True, blank=True)
    batch = models.ForeignKey(
        "JudgeBatch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="calls",
        help_text="The batch the call is in, or that answered it (at the batch price).",
    )

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "item", "sample", "swapped"], name="one_call_per_item_sample_order"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "claimed", "done", "failed"]),
                name="judge_call_status_is_known",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="claimed") | models.Q(claim_token__isnull=False),
                name="claimed_call_has_token",
            ),
        ]
        indexes = [
            models.Index(fields=["run", "status", "id"], name="judge_call_run_status"),
            models.Index(fields=["run", "item"], name="judge_call_run_item"),
        ]

    def __str__(self) -> str:
        order = "swapped" if self.swapped else "original"
        return f"call {self.pk}: item {self.item_id} sample {self.sample} {order} ({self.status})"


class CachedReply(models.Model):
    """A reply an endpoint gave to an exact request (prompt, model, parameters, sample index)."""

    key = models.CharField(max_length=64, unique=True, help_text="sha256 of the request.")
    model = models.CharField(max_length=200)
    content = models.TextField(blank=True)
    refusal = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=40, blank=True)
    logprobs = models.JSONField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"cached reply {self.key[:12]} from {self.model}"


class JudgeBatch(models.Model):
    """Calls of a run sent together through the endpoint's Batch API (judges.batch): one input file, one
    remote batch. Its calls are claimed with its token, so each result is stored once, by the claim."""

    class Status(models.TextChoices):
        PREPARING = "preparing", "Preparing"  # ours: calls claimed, not yet created at the endpoint
        VALIDATING = "validating", "Validating"
        FAILED = "failed", "Failed"
        IN_PROGRESS = "in_progress", "In progress"
        FINALIZING = "finalizing", "Finalizing"
        COMPLETED = "completed", "Completed"
        EXPIRED = "expired", "Expired"
        CANCELLING = "cancelling", "Cancelling"
        CANCELLED = "cancelled", "Cancelled"

    run = models.ForeignKey(JudgeRun, on_delete=models.CASCADE, related_name="batches")
    token = models.UUIDField(default=uuid.uuid4, unique=True, help_text="Claim token of its calls.")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PREPARING)
    remote_id = models.CharField(max_length=200, blank=True)
    input_file_id = models.CharField(max_length=200, blank=True)
    output_file_id = models.CharField(max_length=200, blank=True)
    error_file_id = models.CharField(max_length=200, blank=True)
    requests = models.PositiveIntegerField(default=0, help_text="Requests in its input file.")
    completed = models.PositiveIntegerField(default=0, help_text="request_counts.completed")
    failed = models.PositiveIntegerField(default=0, help_text="request_counts.failed")
    collected = models.BooleanField(
        default=False, help_text="Its results are stored and its unanswered calls are pending again."
    )
    error = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(
                    status__in=[
                        "preparing",
                        "validating",
                        "failed",
                        "in_progress",
                        "finalizing",
                        "completed",
                        "expired",
                        "cancelling",
                        "cancelled",
                    ]
                ),
                name="judge_batch_status_is_known",
            ),
            models.UniqueConstraint(
                fields=["remote_id"], condition=~models.Q(remote_id=""), name="judge_batch_remote_id_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.remote_id or self.pk} of run {self.run_id} ({self.status})"
