"""The judge's connection test: a few small requests that find what its endpoint and model accept (the
output-token parameter, temperature, logprobs, JSON schema output, n), stored on the judge for its runs.

Each probe sends the judge's own model one short question. A 400 naming a refused parameter changes the
probe's request (as a run would adapt); a probe the endpoint accepts but ignores (logprobs that never
come back, a schema the reply does not follow, one choice for n=2) counts as not supported. Nothing is
stored unless the model answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from projects import leases
from projects.models import Membership, Project

from . import adapting, client, credentials
from .batch import has_batch_api
from .endpoint_safety import UnsafeEndpoint, check_base_url
from .endpoints import Accepts, Family, family_for
from .fake_llm import OWNED_BY
from .models import Judge

PROBE_QUESTION = "Reply with the single word: ready"
PROBE_MAX_TOKENS = 1024
PROBE_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["ready"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
MAX_BASE_ATTEMPTS = 4


@dataclass(frozen=True)
class ConnectionResult:
    ok: bool
    message: str
    reply: str = ""
    simulated: bool = False
    capabilities: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    still_running: bool = False  # not tested: this person's last test is still running


@dataclass
class Probe:
    judge: Judge
    family: Family
    accepts: Accepts
    api_key: str
    notes: list[str] = field(default_factory=list)
    results: dict[str, dict[str, str]] = field(default_factory=dict)  # optional feature -> probe result

    def base_request(self, **extra: Any) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.judge.model,
            self.accepts.token_limit: min(self.judge.max_tokens, PROBE_MAX_TOKENS),
            "messages": [{"role": "user", "content": PROBE_QUESTION}],
        }
        temperature = self.judge.temperature
        if temperature is not None and self.accepts.temperature:
            request["temperature"] = min(float(temperature), self.accepts.temperature_max)
        return {**request, **extra}

    def send(self, request: dict) -> client.Reply:
        return client.chat(
            base_url=self.judge.base_url,
            api_key=self.api_key,
            timeout=min(self.judge.request_timeout, 30),
            request=request,
            azure=self.family.azure,
        )

    def base(self) -> client.Reply:
        """The plain question, adapting to refused parameters; raises the error it cannot adapt to."""
        for _ in range(MAX_BASE_ATTEMPTS):
            try:
                return self.send(self.base_request())
            except client.PermanentError as error:
                parameter = adapting.refused_parameter(error)
                change = adapting.CHANGES.get(parameter or "")
                if change is None or all(getattr(self.accepts, k) == v for k, v in change.items()):
                    raise
                self.accepts = self.accepts.updated(change)
                self.notes.append(f"{parameter} refused ({error.message}): {adapting.describe(change)}")
        raise client.PermanentError("the endpoint kept refusing the probe's parameters")

    def supports(
        self, name: str, extra: dict[str, Any], check: Callable[[client.Reply], object]
    ) -> bool | None:
        """Whether the endpoint does what `extra` asks: True, False (refused, or accepted but ignored) or
        None (not known: any other error). Each probe's result is kept in `results`; none stops the test."""
        try:
            reply = self.send(self.base_request(**extra))
        except client.EndpointError as error:
            refused = isinstance(error, client.PermanentError) and (
                error.status in (400, 422) or adapting.refused_parameter(error) is not None
            )
            result = "refused" if refused else "not known"
            self.results[name] = {"result": result, "message": error.message[:300]}
            self.notes.append(f"{name}: {result} ({error.message})")
            return False if refused else None
        ok = bool(check(reply))
        self.results[name] = {"result": "supported" if ok else "ignored"}
        if not ok:
            self.notes.append(f"{name}: accepted but ignored")
        return ok


def _server_limits(judge: Judge, api_key: str) -> dict[str, int]:
    """What llama.cpp's /props says of the server: its slots (requests served at once) and each slot's
    context in tokens; {} from other servers."""
    props = client.server_props(
        base_url=judge.base_url, api_key=api_key, timeout=min(judge.request_timeout, 15)
    )
    limits = {}
    slots = props.get("total_slots")
    generation = props.get("default_generation_settings")
    context = generation.get("n_ctx") if isinstance(generation, dict) else None
    if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0:
        limits["slots"] = slots
    if isinstance(context, int) and not isinstance(context, bool) and context > 0:
        limits["context_tokens"] = context
    return limits


def _json_answer(reply: client.Reply) -> bool:
    try:
        return json.loads(reply.content or "").get("answer") == "ready"
    except (ValueError, AttributeError):
        return False


def _listed_models(judge: Judge, family: Family, api_key: str) -> tuple[list[dict], str]:
    """The endpoint's models ([] when it lists none) and the owner of the judge's model."""
    try:
        models = client.list_models(
            base_url=judge.base_url,
            api_key=api_key,
            timeout=min(judge.request_timeout, 15),
            azure=family.azure,
        )
    except client.EndpointError:
        return [], ""  # not every compatible server lists models; the chat call is the real test
    owner = next((m["owned_by"] for m in models if m["id"] == judge.model), "")
    return models, owner or ""


def _failure(
    judge: Judge, error: client.EndpointError, models: list[dict[str, str]], simulated: bool
) -> ConnectionResult:
    # A failure to connect says only that (never the network's error text: no port scanner).
    message = error.message if error.status is not None or isinstance(error, client.PermanentError) else ""
    message = message or f"{client.COULD_NOT_CONNECT}."
    ids = [m["id"] for m in models]
    if error.status == 404 and ids and judge.model not in ids:
        shown = ", ".join(ids[:8]) + (" …" if len(ids) > 8 else "")
        message = f"the endpoint has no model {judge.model!r} (it lists: {shown})"
    elif error.status == 404:
        message = f"{message} (is {judge.base_url} the API's base URL, usually ending in /v1?)"
    return ConnectionResult(False, message, simulated=simulated)


# A connection test runs in the web request, its probes each bounded (the chat ones by at most 30 s, the
# model list and the Batch API by 15 s): one at a time per person (in any of their projects), so that no one
# ties up the web server's threads with tests of slow endpoints. A test that outlives this lease no longer
# holds it.
CONNECTION_TEST_LEASE = leases.Lease(
    renewed="connection_test_since", held=Q(connection_test_since__isnull=False)
)
CONNECTION_TEST_SECONDS = 180
STILL_TESTING = ConnectionResult(
    False,
    "Your last connection test, in this project or another, is still running (one at a time): wait for its "
    "result.",
    still_running=True,
)


@contextmanager
def one_test_at_a_time(user: Any, project: Project) -> Iterator[bool]:
    """Whether `user` may test a connection in `project` now (True: the test is theirs until the block
    ends): one at a time per person, whichever of their projects it runs in, or a member of several
    projects could hold as many web server threads. A superuser who is not a member is not limited."""
    theirs = Membership.objects.filter(user=user)
    mine = theirs.filter(project=project)
    with transaction.atomic():
        # Their memberships locked while we look: two tests started at once in two projects are one too many.
        list(theirs.select_for_update().values_list("pk", flat=True))
        running = CONNECTION_TEST_LEASE.held & ~CONNECTION_TEST_LEASE.expired(CONNECTION_TEST_SECONDS)
        taken = not theirs.exclude(project=project).filter(running).exists() and leases.take(
            mine,
            lease=CONNECTION_TEST_LEASE,
            seconds=CONNECTION_TEST_SECONDS,
            free=Q(connection_test_since__isnull=True),
        )
    if not taken and mine.exists():
        yield False
        return
    try:
        yield True
    finally:
        leases.release(mine, lease=CONNECTION_TEST_LEASE, connection_test_since=None)


def test_connection(*, judge: Judge) -> ConnectionResult:
    """Ask the model once, then probe what it accepts; store the result on the judge when it answered. The
    web server thread it ran in keeps no connection to the endpoint afterwards."""
    try:
        return _test_connection(judge)
    finally:
        client.close_thread_connections()


def _test_connection(judge: Judge) -> ConnectionResult:
    try:
        check_base_url(judge.base_url, resolve_now=False)
    except UnsafeEndpoint as error:
        return ConnectionResult(False, f"Refused: {error}.")
    credential = credentials.credential_for(
        judge_id=judge.pk, source=judge.credential_source, base_url=judge.base_url
    )
    if credential.problem:
        return ConnectionResult(False, f"No API key: {credential.problem}.")
    family = judge.family
    models, owner = _listed_models(judge, family, credential.api_key)
    simulated = any(m["owned_by"] == OWNED_BY for m in models) or judge.is_simulated
    family = family_for(endpoint=judge.endpoint, base_url=judge.base_url, model=judge.model, owned_by=owner)
    probe = Probe(judge=judge, family=family, accepts=family.accepts, api_key=credential.api_key)
    try:
        reply = probe.base()
        if not reply.content and reply.finish_reason == "length":
            raise client.PermanentError(
                f"the model used its whole limit of {judge.max_tokens} output tokens"
                + (f" ({reply.reasoning_tokens} on reasoning)" if reply.reasoning_tokens else "")
                + " and wrote no answer: the token limit is too small for a reasoning model; raise max tokens"
            )
        logprobs = probe.supports("logprobs", {"logprobs": True, "top_logprobs": 5}, lambda r: r.logprobs)
        schema = {
            "type": "json_schema",
            "json_schema": {"name": "probe", "strict": True, "schema": PROBE_SCHEMA},
        }
        json_schema = probe.supports("JSON schema output", {"response_format": schema}, _json_answer)
        n = probe.supports("n=2", {"n": 2}, lambda r: r.choices == 2)
    except client.EndpointError as error:
        return _failure(judge, error, models, simulated)
    batch = not family.azure and has_batch_api(
        base_url=judge.base_url, api_key=credential.api_key, timeout=min(judge.request_timeout, 15)
    )
    if not batch:
        probe.notes.append("Batch API: not found (GET /batches did not answer)")
    found = {"logprobs": logprobs, "json_schema": json_schema, "n": n}
    server = {} if family.azure else _server_limits(judge, credential.api_key)
    concurrency = judge.concurrency
    if server.get("slots") and concurrency > server["slots"]:
        # more requests at once than slots queue at the server or (a shared KV cache) fail with a 500
        concurrency = server["slots"]
        probe.notes.append(
            f"concurrency lowered from {judge.concurrency} to {concurrency}: the server has {concurrency} "
            "slot(s) (llama.cpp /props total_slots)"
        )
    capabilities = {
        **server,
        **probe.accepts.as_dict(),
        # a feature whose probe met another error is not known: the family's documented default stays
        **{name: value for name, value in found.items() if value is not None},
        "probes": probe.results,
        "owned_by": owner,
        "latency_ms": round(reply.latency_ms),
        "family": family.key,
        "batch": batch,
    }
    if judge.pk is not None:  # else the new-judge form's test before saving: nothing to store yet
        Judge.objects.filter(pk=judge.pk).update(
            capabilities=capabilities,
            probed_at=timezone.now(),
            simulated=judge.simulated or simulated,
            concurrency=concurrency,
        )
        judge.refresh_from_db()
    else:
        judge.concurrency = concurrency
    text = reply.content if reply.content is not None else reply.refusal
    return ConnectionResult(
        True,
        f"{judge.model} answered in {reply.latency_ms:.0f} ms ({family.label})",
        reply=text or "(empty)",
        simulated=simulated,
        capabilities=capabilities,
        notes=probe.notes,
    )
