"""One dialog item as a plain record, and the parser that turns a JSON object into it.

This module is the contract other apps code against: `ItemRecord` has the same attribute names as
`datasets.models.Item` (external_id, context, response, baseline, metadata), so prompt rendering
and checks work on either. `parse_item_object` accepts the shapes of DESIGN.md:

- ``{"id", "turns": [{"speaker", "text"}, ...], "response"?, "baseline"?, "metadata"?}``;
  without ``response`` the last turn is the rated response and the rest is the context;
- OpenAI chat ``{"id", "messages": [{"role", "content"}, ...], ...}``; roles become speakers
  (user -> USER, assistant -> BOT, system -> SYSTEM, any other role upper-cased);
- speakers are kept exactly as given in the ``{speaker, text}`` shape.

Top-level keys it does not know are kept as metadata rather than dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

MAX_ID_CHARS = 200  # datasets.models.Item.external_id
MAX_SPEAKER_CHARS = 100
MAX_TEXT_CHARS = 100_000
MAX_TURNS = 1_000
MAX_METADATA_BYTES = 100_000  # of JSON: about as much as a turn's text
MAX_METADATA_KEY_CHARS = 200

ROLE_SPEAKERS = {"user": "USER", "assistant": "BOT", "system": "SYSTEM"}
UNKNOWN_SHAPE = "unknown turn shape: expected {speaker, text} or {role, content}"
KNOWN_KEYS = {"id", "turns", "messages", "response", "baseline", "metadata"}


class RecordError(ValueError):
    """One problem in an uploaded record, located by 1-based line (when known) and field."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None):
        self.message = message
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.field:
            where.append(f"field {self.field}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass(slots=True)
class ItemRecord:
    """An item before it is stored: what `datasets.models.Item` holds, minus the dataset."""

    external_id: str
    context: list[dict[str, str]]
    response: dict[str, str]
    baseline: dict[str, str] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    line: int | None = None

    @property
    def has_baseline(self) -> bool:
        # An empty baseline text is an answer too (MT-Bench has empty answers): only a missing one lacks.
        return self.baseline is not None

    def empty_texts(self) -> int:
        """How many of the item's turns (context, response, baseline) have an empty or blank text."""
        turns = [*self.context, self.response, *([self.baseline] if self.baseline is not None else [])]
        return sum(1 for turn in turns if not str(turn.get("text", "")).strip())


class _Collector:
    """Gathers every problem of one object, so a file's report is complete, not first-error-only."""

    def __init__(self, line: int | None):
        self.line = line
        self.errors: list[RecordError] = []

    def add(self, field_name: str | None, message: str) -> None:
        self.errors.append(RecordError(message, line=self.line, field=field_name))


def check_item_object(obj: Any, *, line: int | None = None) -> tuple[ItemRecord | None, list[RecordError]]:
    """Parse `obj` and return (record, []) or (None, every problem found)."""
    plain = _plain_record(obj, line)
    if plain is not None:
        return plain, []
    problems = _Collector(line)
    if isinstance(obj, list):
        problems.add(None, "this line is a JSON list; each line must be one JSON object (an item)")
        return None, problems.errors
    if not isinstance(obj, dict):
        problems.add(None, f"expected a JSON object (an item), found {_json_type(obj)}")
        return None, problems.errors
    external_id = _parse_id(obj, problems)
    turns = _parse_turn_list(obj, problems)
    response = _parse_single_turn(obj, "response", problems)
    baseline = _parse_single_turn(obj, "baseline", problems)
    metadata = _parse_metadata(obj, problems)
    if turns is not None and response is None and "response" not in obj:
        if not turns:
            key = "messages" if "messages" in obj else "turns"
            problems.add(key, "empty turns: there is no turn to rate (give turns or a response)")
        else:
            response, turns = turns[-1], turns[:-1]
    if problems.errors or external_id is None or response is None:
        return None, problems.errors
    record = ItemRecord(
        external_id=external_id,
        context=turns or [],
        response=response,
        baseline=baseline,
        metadata=metadata,
        line=line,
    )
    return record, []


PLAIN_KEYS = {"id", "turns", "metadata"}
TURN_KEYS = {"speaker", "text"}


def _plain_record(obj: Any, line: int | None) -> ItemRecord | None:
    """The record of an item already in the stored shape with nothing to report (a string id, turns of
    {speaker, text}, a metadata object), taken as it is; None sends it through the full check. The
    common case of a large upload, without building a new dict for every turn."""
    if type(obj) is not dict or not obj.keys() <= PLAIN_KEYS:
        return None
    external_id, turns, metadata = obj.get("id"), obj.get("turns"), obj.get("metadata")
    if type(external_id) is not str or len(external_id) > MAX_ID_CHARS or not external_id.strip():
        return None
    if type(turns) is not list or not 0 < len(turns) <= MAX_TURNS or not all(map(_plain_turn, turns)):
        return None
    if metadata is None:
        metadata = {}
    elif type(metadata) is not dict or (metadata and metadata_problem(metadata)):
        return None
    return ItemRecord(external_id, turns[:-1], turns[-1], None, metadata, line)


def _plain_turn(turn: Any) -> bool:
    if type(turn) is not dict or turn.keys() != TURN_KEYS:
        return False
    speaker, text = turn["speaker"], turn["text"]
    return (
        type(speaker) is str
        and type(text) is str
        and 0 < len(speaker) <= MAX_SPEAKER_CHARS
        and not speaker.isspace()
        and "\x00" not in speaker
        and len(text) <= MAX_TEXT_CHARS
        and "\x00" not in text
    )


def parse_item_object(obj: Any, *, line: int | None = None) -> ItemRecord:
    """The `ItemRecord` for one JSON object; raises `RecordError` (the first problem) when it is invalid."""
    record, errors = check_item_object(obj, line=line)
    if errors:
        raise errors[0]
    assert record is not None
    return record


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _parse_id(obj: dict, problems: _Collector) -> str | None:
    if "id" not in obj or obj["id"] is None:
        problems.add("id", "missing id: every item needs an id (a string or number)")
        return None
    raw = obj["id"]
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        problems.add("id", f"id must be a string or a whole number, found {_json_type(raw)}")
        return None
    value = str(raw)
    if not value.strip():
        problems.add("id", "id is empty")
        return None
    if len(value) > MAX_ID_CHARS:
        problems.add("id", f"id is {len(value)} characters long; at most {MAX_ID_CHARS} are allowed")
        return None
    return value


def _parse_turn_list(obj: dict, problems: _Collector) -> list[dict[str, str]] | None:
    if "turns" in obj and "messages" in obj:
        problems.add("turns", "give either turns or messages, not both")
        return None
    key = "messages" if "messages" in obj else "turns"
    if key not in obj:
        if "response" in obj:
            return []
        names = sorted(map(str, obj))
        found = ", ".join(names[:8]) + (" …" if len(names) > 8 else "") if names else "none"
        wanted = "give turns (or OpenAI chat messages) and/or a response"
        problems.add("turns", f"missing turns: {wanted} (this item's keys: {found})")
        return None
    raw = obj[key]
    if not isinstance(raw, list):
        problems.add(key, f"{key} must be a list of turns, found {_json_type(raw)}")
        return None
    if len(raw) > MAX_TURNS:
        problems.add(key, f"{len(raw)} turns; at most {MAX_TURNS} are allowed")
        return None
    turns = []
    for index, raw_turn in enumerate(raw):
        turn = _parse_turn(raw_turn, f"{key}[{index}]", problems)
        if turn is not None:
            turns.append(turn)
    return turns if len(turns) == len(raw) else None


def _parse_single_turn(obj: dict, key: str, problems: _Collector) -> dict[str, str] | None:
    if key not in obj or obj[key] is None:
        return None
    raw = obj[key]
    if isinstance(raw, str):
        # A bare string is the bot's text: the common shape of pairwise data sets.
        raw = {"speaker": "BOT", "text": raw}
    return _parse_turn(raw, key, problems)


def _parse_turn(raw: Any, where: str, problems: _Collector) -> dict[str, str] | None:
    if not isinstance(raw, dict):
        problems.add(where, f"{UNKNOWN_SHAPE}, found {_json_type(raw)}")
        return None
    if "speaker" in raw or "text" in raw:
        speaker_key, text_key, speaker = "speaker", "text", raw.get("speaker")
    elif "role" in raw or "content" in raw:
        speaker_key, text_key = "role", "content"
        role = raw.get("role")
        speaker = ROLE_SPEAKERS.get(role, role.upper()) if isinstance(role, str) else role
    else:
        keys = ", ".join(sorted(map(str, raw))) or "none"
        problems.add(where, f"{UNKNOWN_SHAPE}, found keys {keys}")
        return None
    ok = True
    if not isinstance(speaker, str) or not speaker.strip():
        problems.add(f"{where}.{speaker_key}", f"missing {speaker_key}")
        ok = False
    elif len(speaker) > MAX_SPEAKER_CHARS:
        problems.add(f"{where}.{speaker_key}", f"{speaker_key} longer than {MAX_SPEAKER_CHARS} characters")
        ok = False
    elif "\x00" in speaker:
        problems.add(f"{where}.{speaker_key}", f"{speaker_key} contains a NUL character")
        ok = False
    text = _turn_text(raw.get(text_key), f"{where}.{text_key}", problems)
    if text is None or not ok or not isinstance(speaker, str):
        return None
    return {"speaker": speaker, "text": text}


def _turn_text(raw: Any, where: str, problems: _Collector) -> str | None:
    if isinstance(raw, list):
        # OpenAI content parts: keep the text parts, refuse anything else rather than drop it.
        parts = []
        for index, part in enumerate(raw):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                problems.add(f"{where}[{index}]", "only text content parts are supported")
                return None
        raw = "\n".join(parts)
    if raw is None:
        # Only a missing text is an error; an empty string is an empty answer and imports as one.
        problems.add(where, "missing text")
        return None
    if not isinstance(raw, str):
        problems.add(where, f"text must be a string, found {_json_type(raw)}")
        return None
    if len(raw) > MAX_TEXT_CHARS:
        problems.add(where, f"text is {len(raw):,} characters long; at most {MAX_TEXT_CHARS:,} are allowed")
        return None
    if "\x00" in raw:
        problems.add(where, "text contains a NUL character")
        return None
    return raw


def metadata_problem(metadata: dict) -> str:
    """Why an item's metadata cannot be stored as it is ("" when it can): a key too long or holding a NUL
    character, or more than MAX_METADATA_BYTES of JSON in all (a page shows it whole)."""
    for key in metadata:
        if len(key) > MAX_METADATA_KEY_CHARS:
            limit = MAX_METADATA_KEY_CHARS
            return f"a metadata key is {len(key):,} characters long; at most {limit} are allowed"
        if "\x00" in key:
            return f"the metadata key {key[:40]!r} contains a NUL character"
    try:
        text = orjson.dumps(metadata)
    except TypeError:  # an integer past 64 bits, which json keeps
        text = json.dumps(metadata).encode()
    if len(text) > MAX_METADATA_BYTES:
        return f"the metadata is {len(text):,} bytes of JSON; at most {MAX_METADATA_BYTES:,} are allowed"
    if b"\\u0000" in text:
        return "a metadata value contains a NUL character"
    return ""


def _parse_metadata(obj: dict, problems: _Collector) -> dict[str, Any]:
    raw = obj.get("metadata")
    if raw is None:
        metadata: dict[str, Any] = {}
    elif isinstance(raw, dict):
        metadata = dict(raw)
    else:
        problems.add("metadata", f"metadata must be a JSON object, found {_json_type(raw)}")
        metadata = {}
    for key, value in obj.items():
        if key in KNOWN_KEYS:
            continue
        if key in metadata:
            problems.add(key, f"{key!r} is both a top-level key and a metadata key")
            continue
        metadata[key] = value
    if problem := metadata_problem(metadata):
        problems.add("metadata", problem)
    return metadata
