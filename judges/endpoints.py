"""Endpoint families and their request builders: what each kind of OpenAI-compatible endpoint accepts and
the chat completion request Concord sends it.

A judge's family comes from its choice on the judge form or, on "automatic", from its base URL and model
(`family_for`). What a family is documented to accept (`Accepts`) is a starting point: the judge's
connection test stores what its endpoint really accepted (`Judge.capabilities`), and a run that meets a
400 "unsupported parameter" adapts once (`JudgeRun.adaptations`); the builder reads all three, in that
order, so the call path never asks which provider it talks to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rubrics.models import RubricVersion

from .client import TOP_LOGPROBS
from .parameters import RunParameters

AZURE_DEFAULT_API_VERSION = "2024-10-21"
REASONING_EFFORTS = ("minimal", "low", "medium", "high")
# OpenAI's reasoning models: the o-series and gpt-5 and later (gpt-5-chat-latest aside, a chat model).
OPENAI_REASONING_MODEL_RE = re.compile(r"^(?:o\d|gpt-(?:[5-9]|\d{2,})(?!-chat))", re.I)


@dataclass(frozen=True)
class Accepts:
    """Which request parameters an endpoint takes. `token_limit` names its output-token parameter."""

    token_limit: str = "max_tokens"
    temperature: bool = True
    temperature_max: float = 2.0
    logprobs: bool = True
    json_schema: bool = True
    # Structured output as {"type": "json_object", "schema": ...} (llama-cpp-python), where json_schema is not
    json_object_schema: bool = False
    seed: bool = True
    n: bool = True
    reasoning: bool = False

    def updated(self, changes: dict[str, Any] | None) -> Accepts:
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in (changes or {}).items() if k in known})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Family:
    """One endpoint family: how to recognise it, what it accepts, and how to build its requests."""

    key: str
    label: str
    doc_url: str
    accepts: Accepts = Accepts()
    hosts: tuple[str, ...] = ()
    owned_by: tuple[str, ...] = ()
    azure: bool = False
    note: str = ""

    def accepts_for(self, params: RunParameters, adaptations: dict[str, Any] | None = None) -> Accepts:
        """Documented behaviour, then what the connection test found, then what this run adapted to."""
        return self.accepts.updated(params.capabilities).updated(adaptations)

    def build(
        self,
        *,
        params: RunParameters,
        version: RubricVersion,
        prompt: str,
        sample: int,
        adaptations: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The chat completion request for one call: the exact prompt, plus structured output or (when the
        endpoint has none) an appended format instruction for JSON rubrics. Logprobs are asked for whenever
        the run asked for logprob scoring: an endpoint without them refuses the run, never a quiet switch."""
        accepts = self.accepts_for(params, adaptations)
        request: dict[str, Any] = {"model": params.model, accepts.token_limit: params.max_tokens}
        request.update(self.sampling(params, accepts))
        if accepts.seed:
            request["seed"] = sample
        content = prompt
        if wants_json(version):
            if params.structured_output and accepts.json_schema:
                request["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "judgement", "strict": True, "schema": response_schema(version)},
                }
            else:
                content = f"{prompt}\n\n{format_instruction(version)}"
                if params.structured_output and accepts.json_object_schema:
                    # the schema constrains the reply; the instruction tells the model what it is for
                    request["response_format"] = {"type": "json_object", "schema": response_schema(version)}
        if params.logprobs and version.rubric.kind == "likert":
            request["logprobs"] = True
            request["top_logprobs"] = TOP_LOGPROBS
        request["messages"] = [{"role": "user", "content": content}]
        return request

    def sampling(self, params: RunParameters, accepts: Accepts) -> dict[str, Any]:
        """Temperature when the judge set one (None: the endpoint's default) and the endpoint takes it."""
        if params.temperature is None or not accepts.temperature:
            return {}
        return {"temperature": min(float(params.temperature), accepts.temperature_max)}


@dataclass(frozen=True)
class ReasoningFamily(Family):
    """OpenAI's reasoning models: max_completion_tokens, reasoning_effort, the default temperature only."""

    def sampling(self, params: RunParameters, accepts: Accepts) -> dict[str, Any]:
        effort = params.reasoning_effort
        sent = super().sampling(params, accepts)
        return {**sent, "reasoning_effort": effort} if effort and accepts.reasoning else sent


OPENAI_CHAT = Family(
    "openai-chat",
    "OpenAI chat model",
    "https://platform.openai.com/docs/api-reference/chat/create",
    hosts=("api.openai.com",),
)
OPENAI_REASONING = ReasoningFamily(
    "openai-reasoning",
    "OpenAI reasoning model (o-series, gpt-5)",
    "https://platform.openai.com/docs/guides/reasoning",
    Accepts(token_limit="max_completion_tokens", temperature=False, logprobs=False, reasoning=True),
    note="reasoning tokens count against max_completion_tokens and are billed as output",
)
AZURE = Family(
    "azure",
    "Azure OpenAI",
    "https://learn.microsoft.com/en-us/azure/ai-services/openai/reference",
    hosts=(".openai.azure.com", ".cognitiveservices.azure.com"),
    azure=True,
    note="model = deployment name; api-version from the base URL's query (default "
    f"{AZURE_DEFAULT_API_VERSION}); key in the api-key header",
)
AZURE_REASONING = ReasoningFamily(
    "azure-reasoning",
    "Azure OpenAI reasoning deployment",
    "https://learn.microsoft.com/en-us/azure/ai-services/openai/how-to/reasoning",
    OPENAI_REASONING.accepts,
    azure=True,
)
VLLM = Family(
    "vllm",
    "vLLM",
    "https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html",
    owned_by=("vllm",),
)
OLLAMA = Family(
    "ollama",
    "Ollama",
    "https://docs.ollama.com/api/openai-compatibility",
    Accepts(n=False),
    owned_by=("library", "ollama"),
    note="n is not among the supported fields: one reply per request",
)
LLAMA_CPP = Family(
    "llama-cpp",
    "llama.cpp server",
    "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md",
    owned_by=("llamacpp",),
)
LLAMA_CPP_PYTHON = Family(
    "llama-cpp-python",
    "llama-cpp-python server",
    "https://llama-cpp-python.readthedocs.io/en/latest/server/",
    Accepts(json_schema=False, json_object_schema=True),
    owned_by=("me",),
    note='response_format "json_schema" fails with HTTP 500 (a validation error): structured output is sent '
    'as "json_object" with a "schema"; errors outside its handler come as FastAPI {"detail": ...} bodies',
)
GEMINI = Family(
    "gemini",
    "Gemini (OpenAI compatibility)",
    "https://ai.google.dev/gemini-api/docs/openai",
    Accepts(logprobs=False),
    hosts=("generativelanguage.googleapis.com",),
)
ANTHROPIC = Family(
    "anthropic",
    "Anthropic (OpenAI SDK compatibility)",
    "https://docs.claude.com/en/api/openai-sdk",
    Accepts(temperature_max=1.0, logprobs=False, json_schema=False, seed=False, n=False),
    hosts=("api.anthropic.com",),
    note="logprobs, response_format and seed are ignored; temperature above 1 is capped; n must be 1",
)
OPENROUTER = Family(
    "openrouter",
    "OpenRouter",
    "https://openrouter.ai/docs/api-reference/parameters",
    hosts=("openrouter.ai",),
    note="parameters a routed provider does not support are dropped by OpenRouter",
)
TOGETHER = Family(
    "together",
    "Together AI",
    "https://docs.together.ai/docs/inference/openai-compatibility",
    hosts=("api.together.xyz", "api.together.ai"),
)
GROQ = Family(
    "groq",
    "Groq",
    "https://console.groq.com/docs/openai",
    Accepts(logprobs=False, n=False),
    hosts=("api.groq.com",),
    note="logprobs, top_logprobs and n > 1 are refused with 400",
)
OPENAI_COMPATIBLE = Family(
    "openai-compatible",
    "Other OpenAI-compatible endpoint",
    "https://platform.openai.com/docs/api-reference/chat",
)

FAMILIES: dict[str, Family] = {
    family.key: family
    for family in (
        OPENAI_CHAT,
        OPENAI_REASONING,
        AZURE,
        AZURE_REASONING,
        VLLM,
        OLLAMA,
        LLAMA_CPP,
        LLAMA_CPP_PYTHON,
        GEMINI,
        ANTHROPIC,
        OPENROUTER,
        TOGETHER,
        GROQ,
        OPENAI_COMPATIBLE,
    )
}
# A family recognised by host, whose reasoning models need the reasoning family's builder.
REASONING_VARIANT = {OPENAI_CHAT.key: OPENAI_REASONING, AZURE.key: AZURE_REASONING}
AUTOMATIC = "auto"
FAMILY_CHOICES = [(AUTOMATIC, "Automatic (from the base URL and model)")] + [
    (family.key, family.label) for family in FAMILIES.values()
]


def family_for(*, endpoint: str, base_url: str, model: str, owned_by: str = "") -> Family:
    """The judge's family: its explicit choice, else the one whose host (or /models owner) matches."""
    family = FAMILIES.get(endpoint) or _family_by_host(base_url) or _family_by_owner(owned_by)
    family = family or OPENAI_COMPATIBLE
    variant = REASONING_VARIANT.get(family.key)
    if variant is not None and OPENAI_REASONING_MODEL_RE.match(model):
        return variant
    return family


def _family_by_host(base_url: str) -> Family | None:
    host = (urlsplit(base_url).hostname or "").lower()
    for family in FAMILIES.values():
        if any(host == h or (h.startswith(".") and host.endswith(h)) for h in family.hosts):
            return family
    return None


def _family_by_owner(owned_by: str) -> Family | None:
    for family in FAMILIES.values():
        if owned_by and owned_by in family.owned_by:
            return family
    return None


def azure_endpoint(base_url: str) -> tuple[str, str]:
    """(resource endpoint, api-version) from an Azure base URL such as
    https://NAME.openai.azure.com/?api-version=2024-10-21 (a trailing /openai is allowed)."""
    parts = urlsplit(base_url)
    version = parse_qs(parts.query).get("api-version", [AZURE_DEFAULT_API_VERSION])[0]
    path = parts.path.rstrip("/").removesuffix("/openai")
    return f"{parts.scheme}://{parts.netloc}{path}", version


def sent_parameters(request: dict) -> list[str]:
    """The parameter names of a request, for the estimate ("which parameters will be sent")."""
    return [name for name in request if name not in ("model", "messages")]


# -- the JSON reply a rubric asks for ---------------------------------------------------------------
def response_schema(version: RubricVersion) -> dict:
    key = "pairwise_choice" if version.rubric.kind == "pairwise" else "score"
    return {
        "type": "object",
        "properties": {
            key: {"type": "string", "enum": version.scale_values},
            "explanation": {"type": "string"},
        },
        "required": [key, "explanation"],
        "additionalProperties": False,
    }


def format_instruction(version: RubricVersion) -> str:
    key = "pairwise_choice" if version.rubric.kind == "pairwise" else "score"
    choices = ", ".join(f'"{value}"' for value in version.scale_values)
    return (
        f'Reply with one JSON object and nothing else: {{"{key}": one of {choices}, '
        f'"explanation": "a short justification"}}.'
    )


def wants_json(version: RubricVersion) -> bool:
    return version.output_format in (
        RubricVersion.OutputFormat.JSON,
        RubricVersion.OutputFormat.PAIRWISE_JSON,
    )


def family_of(params: RunParameters) -> Family:
    """The family the run froze (older runs: OpenAI-compatible)."""
    return FAMILIES.get(params.endpoint, OPENAI_COMPATIBLE)


def build_request(
    *,
    params: RunParameters,
    version: RubricVersion,
    prompt: str,
    sample: int,
    adaptations: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The request for one call, built by the run's family with the changes the run adapted to."""
    return family_of(params).build(
        params=params, version=version, prompt=prompt, sample=sample, adaptations=adaptations
    )
