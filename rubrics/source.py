"""One rubric text: what people read on the rating form and what the judge reads come from one source.

A version's prompt template is that source. The texts of the human form (criterion, description,
instructions, evaluation steps, scale labels and descriptions) reach the judge in one of two ways:

- written in the text (the built-in seeds, a pasted prompt): the form's fields are *read from the
  text* whenever a version is saved (`one_source`), so they cannot be edited apart from it;
- through rubric placeholders ``{criterion}``, ``{description}``, ``{instructions}``, ``{steps}``
  and ``{scale}`` (a JSON spec's fields): the prompt is rendered from the same fields people see.

A version whose human-form text reaches the judge in neither way is refused (`unread_texts`), so an
edit can never make people and the judge read different words.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .parsing import RubricParseError, parse_prompt_text
from .rendering import RUBRIC_VARIABLES, placeholders, rubric_variables, substitute

if TYPE_CHECKING:
    from .models import RubricVersion

DERIVED_FIELDS = ("criterion", "description", "instructions", "steps", "scale")
SETTINGS = (("target", "target"), ("output_format", "output format"), ("explanation_required", "explanation"))
EXCERPT_CHARS = 60


def uses_rubric_variables(template: str) -> bool:
    return any(name.lower() in RUBRIC_VARIABLES for name, _, _ in placeholders(template))


def read_from_text(*, kind: str, template: str, name: str = "") -> dict[str, Any] | None:
    """The human-form fields a seed-style text carries, or None when it carries no scale of `kind`."""
    if uses_rubric_variables(template):
        return None
    try:
        parsed = parse_prompt_text(template, name=name or None)
    except RubricParseError:
        return None
    if parsed.kind != kind:
        return None
    fields = parsed.version_fields()
    return {key: fields[key] for key in DERIVED_FIELDS}


def is_read_from_text(version: RubricVersion) -> bool:
    """Whether `version`'s form fields are read from its text (the edit form then offers only the text)."""
    derived = read_from_text(
        kind=version.rubric.kind, template=version.prompt_template, name=version.rubric.name
    )
    return derived is not None


def one_source(*, kind: str, fields: dict[str, Any], name: str = "") -> dict[str, Any]:
    """`fields` with the human-form fields read from the text when the text carries them."""
    derived = read_from_text(kind=kind, template=fields.get("prompt_template", ""), name=name)
    return {**fields, **derived} if derived else fields


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _human_texts(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, text) of every text the human form shows."""
    texts = [
        ("criterion", str(fields.get("criterion", ""))),
        ("description", str(fields.get("description", ""))),
    ]
    texts.append(("instructions", str(fields.get("instructions", ""))))
    texts += [(f"step {n}", str(step)) for n, step in enumerate(fields.get("steps") or [], start=1)]
    for option in fields.get("scale") or []:
        value = str(option.get("value", ""))
        if str(option.get("label", "")) not in ("", value):
            texts.append((f"scale {value} label", str(option["label"])))
        texts.append((f"scale {value} description", str(option.get("description", ""))))
    return [(where, text) for where, text in texts if text.strip()]


def unread_texts(fields: Mapping[str, Any]) -> list[str]:
    """One problem per human-form text the judge's prompt does not contain (whitespace aside)."""
    prompt = _squash(substitute(str(fields.get("prompt_template", "")), rubric_variables(fields))).casefold()
    problems = []
    for where, text in _human_texts(fields):
        missing = [line for line in map(_squash, text.split("\n")) if line and line.casefold() not in prompt]
        if missing:
            excerpt = missing[0] if len(missing[0]) <= EXCERPT_CHARS else missing[0][:EXCERPT_CHARS] + "…"
            field_name = where.split()[0]
            problems.append(
                f"{where}: “{excerpt}” is not in the prompt the judge reads. Write it in the prompt text, "
                f"or put {{{field_name}}} in the prompt template: people and the judge read the same words."
            )
    return problems


@dataclass(frozen=True)
class DiffLine:
    sign: str  # "+", "-", " " or "@" (a hunk header)
    text: str


def _comparable(version: RubricVersion) -> list[str]:
    """A version as lines: its prompt with rubric placeholders filled, then its settings."""
    fields = {key: getattr(version, key) for key in (*DERIVED_FIELDS, "prompt_template")}
    text = substitute(version.prompt_template, rubric_variables(fields))
    settings = [f"[{label}: {getattr(version, key)}]" for key, label in SETTINGS]
    return [*text.split("\n"), "", *settings]


def version_diff(previous: RubricVersion, version: RubricVersion) -> list[DiffLine]:
    """What changed from `previous` to `version`, as unified-diff lines (empty when nothing did)."""
    lines = difflib.unified_diff(_comparable(previous), _comparable(version), lineterm="", n=2)
    diff = []
    for line in list(lines)[2:]:  # skip the ---/+++ file headers
        sign = "@" if line.startswith("@@") else line[:1]
        diff.append(DiffLine(sign=sign, text=line if sign == "@" else line[1:]))
    return diff
