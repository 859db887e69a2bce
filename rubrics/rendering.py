"""Turn a rubric version and an item into the exact prompt text an LLM judge receives.

Placeholders
    Two syntaxes: ``{{Name}}`` (spaces inside the double braces allowed: ``{{ Name }}``) and
    ``{name}``. A name is a letter or underscore followed by letters, digits or underscores,
    optionally prefixed with ``metadata.`` (``{metadata.topic}`` always means the metadata key).
    Names match case-insensitively. Only *known* names are substituted; every other brace (JSON
    examples such as ``{"pairwise_choice": "A"}``, ``{}``, an unknown ``{foo}``) stays literal
    text, and substituted values are never scanned again.

Variables (`item_variables`)
    ``dialog``     the context turns and then the response, one line per turn.
    ``context``    the context turns, one line per turn.
    ``history``    the context without its last turn (the prompt), one line per turn.
    ``prompt``     the text of the context's last turn: the user turn the response answers.
    ``response``   the text of the rated response.
    ``baseline_model_response`` / ``baseline``   the text of the baseline (pairwise items only).
    ``sentence``   the rated response as one turn line.
    any metadata key (``topic``, ...), values as text: strings as they are, other JSON values
    as compact JSON. Built-in names win over a metadata key with the same name; ``metadata.<key>``
    always reaches the metadata.

    A turn line is ``SPEAKER: text``: the speaker exactly as stored, a colon and one space, then
    the text exactly as stored (a text with line breaks keeps them). Turn lines are joined with a
    single ``\\n`` and nothing is appended after the last one. A list of no turns is ``""``.

Rubric variables
    ``criterion``, ``description``, ``instructions``, ``steps`` and ``scale`` are the version's own
    fields (the texts of the human form), so a prompt can be rendered from what people read
    (rubrics.source). They win over metadata keys of the same name.

Templates without a placeholder (rubric variables aside)
    Seed 003 has none: its text ends with "Your Turn:" after two worked examples. Such a template
    gets the item appended in the format of those examples (see `append_item`)::

        <template>\\nDialogue in [<topic>]:\\n<context lines>\\n\\nEvaluation sentence:\\n<sentence>
        \\n\\nOutput Evaluation Form (score ONLY):\\n

    The examples' "Analysis:" block is left out so the judge answers with the score at once (the
    format says "score ONLY"). Without a ``topic`` in the metadata the header is "Dialogue:".
    A placeholder-free template whose target is not a sentence gets ``\\n\\nDialog:\\n\\n<dialog>\\n``
    (pairwise: both responses under "Response A" / "Response B" headings).

Pairwise orientation
    A is the baseline and B the response. ``swapped=True`` exchanges the response and the
    baseline turns before anything is derived, so every variable follows (position-swap runs).
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

IDENT = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?"
PLACEHOLDER_RE = re.compile(r"\{\{\s*(?P<double>" + IDENT + r")\s*\}\}|\{(?P<single>" + IDENT + r")\}")

BUILTIN_VARIABLES: dict[str, str] = {
    "dialog": "the context and the response, one SPEAKER: text line per turn",
    "context": "the context turns, one SPEAKER: text line per turn",
    "history": "the context without its last turn",
    "prompt": "the text of the context's last turn (the user prompt)",
    "response": "the text of the rated response",
    "baseline_model_response": "the text of the baseline response",
    "baseline": "the text of the baseline response (alias)",
    "sentence": "the rated response as one SPEAKER: text line",
}
# The rubric's own fields, so a prompt can be rendered from the same texts people see (rubrics.source).
RUBRIC_VARIABLES: dict[str, str] = {
    "criterion": "the rubric's criterion",
    "description": "the rubric's description of the criterion",
    "instructions": "the rubric's instructions",
    "steps": "the evaluation steps, one numbered line each",
    "scale": "the scale, one line per option: value (label): description",
}
BUILTIN_VARIABLES.update(RUBRIC_VARIABLES)
BASELINE_VARIABLES = {"baseline", "baseline_model_response"}
METADATA_PREFIX = "metadata."

SENTENCE_BLOCK_HEADER = "Dialogue in [{topic}]:"
SENTENCE_BLOCK_FORM = "Output Evaluation Form (score ONLY):"


class RenderError(ValueError):
    """The item lacks something the template needs (e.g. a baseline for a pairwise prompt)."""


class ItemLike(Protocol):
    external_id: str
    context: list[dict[str, str]]
    response: dict[str, str]
    baseline: dict[str, str] | None
    metadata: dict[str, Any]


class VersionLike(Protocol):
    prompt_template: str
    target: str


def scale_lines(scale: list[dict[str, Any]]) -> str:
    lines = []
    for option in scale:
        value, label = str(option.get("value", "")), str(option.get("label", "") or "")
        head = value if label in ("", value) else f"{value} ({label})"
        description = str(option.get("description", "") or "")
        lines.append(f"{head}: {description}" if description else head)
    return "\n".join(lines)


def rubric_variables(fields: Any) -> dict[str, str]:
    """The rubric variables from a version or a mapping of its fields (missing fields are empty)."""

    def get(name: str, default: Any) -> Any:
        value = fields.get(name, default) if isinstance(fields, dict) else getattr(fields, name, default)
        return default if value is None else value

    steps = [str(step) for step in get("steps", [])]
    return {
        "criterion": str(get("criterion", "")),
        "description": str(get("description", "")),
        "instructions": str(get("instructions", "")),
        "steps": "\n".join(f"{n}. {step}" for n, step in enumerate(steps, start=1)),
        "scale": scale_lines(list(get("scale", []))),
    }


def turn_line(turn: dict[str, Any]) -> str:
    """``SPEAKER: text`` for one turn, both exactly as stored."""
    return f"{turn.get('speaker', '')}: {turn.get('text', '')}"


def turn_lines(turns: list[dict[str, Any]]) -> str:
    return "\n".join(turn_line(turn) for turn in turns)


def metadata_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _oriented(item: ItemLike, swapped: bool) -> tuple[dict, dict | None]:
    response, baseline = item.response, item.baseline
    if not swapped:
        return response, baseline
    if not baseline:
        raise RenderError(f"item {item.external_id} has no baseline, so its responses cannot be swapped")
    return baseline, response


def item_variables(item: ItemLike, *, swapped: bool = False) -> dict[str, str]:
    """Every variable the item provides, keyed by lower-case name (see the module docstring)."""
    response, baseline = _oriented(item, swapped)
    context = list(item.context or [])
    variables: dict[str, str] = {}
    for key, value in (item.metadata or {}).items():
        variables.setdefault(str(key).lower(), metadata_text(value))
        variables[METADATA_PREFIX + str(key).lower()] = metadata_text(value)
    variables.update(
        dialog=turn_lines([*context, response]),
        context=turn_lines(context),
        history=turn_lines(context[:-1]),
        prompt=str(context[-1].get("text", "")) if context else "",
        response=str(response.get("text", "")),
        sentence=turn_line(response),
    )
    for name in BASELINE_VARIABLES:
        variables.pop(name, None)
    if baseline:
        variables["baseline"] = variables["baseline_model_response"] = str(baseline.get("text", ""))
    return variables


def placeholders(template: str) -> list[tuple[str, int, str]]:
    """(name, 1-based line, the placeholder as written) of every brace group that looks like one."""
    found = []
    for match in PLACEHOLDER_RE.finditer(template):
        name = match.group("double") or match.group("single")
        found.append((name, template.count("\n", 0, match.start()) + 1, match.group(0)))
    return found


def substitute(template: str, variables: dict[str, str]) -> str:
    """Replace known placeholders (case-insensitive); leave every other brace as it is."""

    def replace(match: re.Match) -> str:
        name = (match.group("double") or match.group("single")).lower()
        return variables.get(name, match.group(0))

    return PLACEHOLDER_RE.sub(replace, template)


def append_item(template: str, variables: dict[str, str], *, target: str) -> str:
    """The template with the item appended, for templates that have no placeholder."""
    if target == "sentence":
        topic = variables.get(METADATA_PREFIX + "topic")
        header = SENTENCE_BLOCK_HEADER.format(topic=topic) if topic else "Dialogue:"
        return (
            f"{template}\n{header}\n{variables['context']}\n\n"
            f"Evaluation sentence:\n{variables['sentence']}\n\n{SENTENCE_BLOCK_FORM}\n"
        )
    if target == "pairwise" and "baseline" in variables:
        return (
            f"{template}\n\nDialog:\n\n{variables['context']}\n\n"
            f"Response A:\n{variables['baseline']}\n\nResponse B:\n{variables['response']}\n"
        )
    return f"{template}\n\nDialog:\n\n{variables['dialog']}\n"


def _check_baseline(template: str, item: ItemLike, variables: dict[str, str]) -> None:
    if "baseline" in variables:
        return
    used = [written for name, _, written in placeholders(template) if name.lower() in BASELINE_VARIABLES]
    if used:
        raise RenderError(f"item {item.external_id} has no baseline, which the prompt uses as {used[0]}")


def render_prompt(version: VersionLike, item: ItemLike, *, swapped: bool = False) -> str:
    """The exact prompt for `item` under `version` (a RubricVersion or anything with its fields)."""
    template = version.prompt_template
    variables = item_variables(item, swapped=swapped)
    variables.update(rubric_variables(version))  # the rubric's own texts win over a metadata key
    if not any(name.lower() not in RUBRIC_VARIABLES for name, _, _ in placeholders(template)):
        if version.target == "pairwise" and "baseline" not in variables:
            raise RenderError(f"item {item.external_id} has no baseline to compare the response with")
        return append_item(substitute(template, variables), variables, target=version.target)
    _check_baseline(template, item, variables)
    return substitute(template, variables)
