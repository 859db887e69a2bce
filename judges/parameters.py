"""The judge's settings a run freezes at launch, typed; JSON only in `JudgeRun.parameters`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from . import credentials


@dataclass(frozen=True)
class RunParameters:
    """What a run sends and how it runs, so editing the judge never changes a running run."""

    base_url: str
    model: str
    credential: str  # "none", "pasted" or "env:NAME" (judges.credentials), never the key
    max_tokens: int
    samples: int = 1
    temperature: float | None = None  # None: none is sent, the endpoint's own default
    logprobs: bool = False
    position_swap: bool = True
    structured_output: bool = True
    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    concurrency: int = 1
    # None: the judge had no prices (its cost is unknown, never 0)
    price_input_per_million: Decimal | None = Decimal(0)
    price_output_per_million: Decimal | None = Decimal(0)
    cache_enabled: bool = True
    request_timeout: float = 60.0
    simulated: bool = False
    endpoint: str = ""  # the family key; runs launched before families existed: "" (OpenAI-compatible)
    reasoning_effort: str = ""
    # What the judge's connection test found the endpoint accepts (`Accepts` fields).
    capabilities: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunParameters:
        """From a run's stored JSON, including runs stored before some settings existed."""
        known = {name for name in cls.__dataclass_fields__}
        values = {key: value for key, value in data.items() if key in known}
        if "credential" not in values:  # runs launched before pasted keys froze only `api_key_env`
            name = data.get("api_key_env") or ""
            values["credential"] = credentials.ENV_PREFIX + name if name else credentials.NO_KEY
        for price in ("price_input_per_million", "price_output_per_million"):
            stored = values.get(price, 0)
            values[price] = None if stored is None else Decimal(str(stored))
        values["capabilities"] = dict(values.get("capabilities") or {})
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for price in ("price_input_per_million", "price_output_per_million"):
            value = getattr(self, price)
            data[price] = None if value is None else str(value)
        return data
