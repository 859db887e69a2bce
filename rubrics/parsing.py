"""Read a rubric from a seed-style prompt text or from a JSON spec, refusing what cannot be used.

Seed-style text (the four files in rubrics/seeds are the reference):

- criterion: the first line of an "Evaluation Criteria:" section, ``Name (1-5) - description``,
  ``Name (yes/no): description`` or ``Name (1-5):`` followed by description lines (scale lines
  excluded); or "You will be assessing Name, which ..." in a "## Metric Definition" section.
- instructions: the text before the first heading (or a "# Instruction" section).
- steps: the "Evaluation Steps" section; numbered lines (``1.``, ``STEP 1:``) start a step and
  indented lines below belong to it; without numbers every line is a step.
- scale: lines of one of the shapes ``Rating 1 (Label): description``, ``- 1 (Label): description``,
  ``1 point: description`` / ``2 points: description``, or ``"LABEL": description``; the shape
  with the most lines wins and needs at least two. Quoted labels A / SAME / B make a pairwise
  rubric, other quoted labels a categorical one, numbers a likert one (in numeric order).
- the whole text is the prompt template.

A JSON spec is one object: name, kind, scale [{value, label, description}], prompt_template, and
optionally criterion, description, instructions, steps, target, output_format,
explanation_required, variables (extra placeholder names, e.g. metadata keys not uploaded yet).
Keys it does not know are refused rather than ignored.

What "looks like a placeholder" (rubrics.rendering.PLACEHOLDER_RE): ``{{name}}`` or ``{name}``
where name is an identifier (letters, digits, underscores, not starting with a digit), optionally
``metadata.key``. JSON in a prompt (``{"score": 4}``), empty braces or braces around anything else
are literal text. A placeholder is known when it is a rendering variable, a ``metadata.`` name, a
name listed in the spec's ``variables``, or (checked by the caller) a metadata key of an item in
the project; any other is refused with the line it is on, so ``{{Dialgo}}`` cannot slip through.

Mojibake (UTF-8 read as Windows-1252, e.g. ``canâ€™t``) is found with ftfy, one report per line;
it is repaired only when asked, and each repair is reported.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import ftfy
from ftfy import TextFixerConfig

from datasets import safe_json

from .rendering import BUILTIN_VARIABLES, METADATA_PREFIX, placeholders

KINDS = ("likert", "categorical", "pairwise")
TARGETS = ("last_turn", "pairwise", "sentence")
OUTPUT_FORMATS = ("score", "json", "pairwise_json")
PAIRWISE_VALUES = ("A", "SAME", "B")
MAX_VALUE_CHARS = 64  # evaluations.Rating.value
MAX_CRITERION_CHARS = 300  # rubrics.RubricVersion.criterion
MAX_NAME_CHARS = 200  # rubrics.Rubric.name
SPEC_KEYS = {
    "name",
    "kind",
    "scale",
    "prompt_template",
    "criterion",
    "description",
    "instructions",
    "steps",
    "target",
    "output_format",
    "explanation_required",
    "variables",
}

# Only mojibake repair: no quote uncurling, width or ligature changes, no normalisation.
MOJIBAKE_ONLY = TextFixerConfig(
    unescape_html=False,
    remove_terminal_escapes=False,
    fix_latin_ligatures=False,
    fix_character_width=False,
    uncurl_quotes=False,
    fix_line_breaks=False,
    remove_control_chars=False,
    normalization=None,
    explain=False,
)

SCALE_SHAPES: list[tuple[str, re.Pattern]] = [
    (
        "rating",
        re.compile(r"^\s*(?:[-*•]\s*)?Rating\s+(?P<value>\d+)\s*\((?P<label>[^)]+)\)\s*:\s*(?P<desc>.*)$"),
    ),
    ("numbered", re.compile(r"^\s*(?:[-*•]\s*)?(?P<value>\d+)\s*\((?P<label>[^)]+)\)\s*:\s*(?P<desc>.*)$")),
    ("points", re.compile(r"^\s*(?:[-*•]\s*)?(?P<label>(?P<value>\d+)\s+points?)\s*:\s*(?P<desc>.*)$")),
    ("quoted", re.compile(r'^\s*(?:[-*•]\s*)?"(?P<value>[^"]{1,64})"\s*:\s*(?P<desc>.*)$')),
]
# The patterns below are written so that no line makes them try every split of a long run of spaces (a
# 120 KB upload of such lines once held a web worker for 30 s): a group ends on a non-space, not lazily.
HEADING_RE = re.compile(r"^\s*(?:#+\s*(?P<md>.*\S)|(?P<plain>[A-Z][A-Za-z0-9 ]{0,40}):)\s*$")
# "Name (1-5) - description", "Name (yes/no): description", "Name (1-5):", "Name - description".
CRITERION_RE = re.compile(r"^(?P<name>.*?\S)(?:\s*\([^()]*\))?(?:\s*:\s*|\s+[-–]\s+)(?P<desc>.*)$")
TRAILING_PARENS_RE = re.compile(r"\([^()]*\)\s*:?$")  # on a stripped line; strip what it leaves
ASSESSING_RE = re.compile(r"You will be assessing (?P<name>[^,.]{1,200}?)(?:,|\.| which)")
STEP_START_RE = re.compile(r"^(?:\d+[.)]|STEP\s+\d+\s*:)\s*", re.IGNORECASE)


class RubricParseError(ValueError):
    """The text or spec cannot become a rubric; `problems` says everything that is missing or wrong."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass
class TextRepair:
    """One line whose mojibake ftfy found (and, when asked, repaired)."""

    where: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.where}: {self.before!r} -> {self.after!r}"


@dataclass
class ParsedRubric:
    name: str
    kind: str
    criterion: str
    prompt_template: str
    scale: list[dict[str, str]]
    target: str
    output_format: str
    description: str = ""
    instructions: str = ""
    steps: list[str] = field(default_factory=list)
    explanation_required: bool = False
    placeholders: list[str] = field(default_factory=list)
    mojibake: list[TextRepair] = field(default_factory=list)
    repaired: bool = False
    notes: list[str] = field(default_factory=list)

    def version_fields(self) -> dict[str, Any]:
        """The RubricVersion fields this parse fills."""
        return {
            "criterion": self.criterion,
            "description": self.description,
            "instructions": self.instructions,
            "steps": self.steps,
            "scale": self.scale,
            "prompt_template": self.prompt_template,
            "target": self.target,
            "output_format": self.output_format,
            "explanation_required": self.explanation_required,
            "notes": "\n".join(self.notes),
        }


# --- mojibake ----------------------------------------------------------------------------------


def _changed_span(before: str, after: str) -> tuple[str, str]:
    """The smallest differing stretch of two lines, widened to whole words for a readable report."""
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end_b, end_a = len(before), len(after)
    while end_b > start and end_a > start and before[end_b - 1] == after[end_a - 1]:
        end_b, end_a = end_b - 1, end_a - 1
    while start > 0 and not before[start - 1].isspace():
        start -= 1
    while end_b < len(before) and not before[end_b].isspace():
        end_b, end_a = end_b + 1, end_a + 1
    return before[start:end_b], after[start:end_a]


def find_mojibake(text: str, *, where: str = "") -> list[TextRepair]:
    """Each line of `text` that ftfy would repair, with the word before and after."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        fixed = ftfy.fix_text(line, config=MOJIBAKE_ONLY)
        if fixed != line:
            before, after = _changed_span(line, fixed)
            location = f"{where} line {number}".strip()
            found.append(TextRepair(where=location, before=before, after=after))
    return found


def repair_mojibake(text: str) -> str:
    return "\n".join(ftfy.fix_text(line, config=MOJIBAKE_ONLY) for line in text.split("\n"))


def mojibake_note(repairs: list[TextRepair], *, repaired: bool) -> str:
    if not repairs:
        return ""
    listed = "; ".join(str(repair) for repair in repairs)
    if repaired:
        return f"Repaired mojibake (text decoded with the wrong encoding) with ftfy: {listed}."
    return f"Likely mojibake, not repaired (import again with repair to fix it): {listed}."


# --- placeholders ------------------------------------------------------------------------------


def placeholder_problems(
    template: str,
    *,
    declared: Collection[str] = frozenset(),
    is_metadata_key: Callable[[str], bool] | None = None,
) -> list[str]:
    """One message per unknown placeholder, naming its line and the closest known variable."""
    declared_lower = {name.lower() for name in declared}
    problems = []
    for name, line, written in placeholders(template):
        lowered = name.lower()
        if lowered in BUILTIN_VARIABLES or lowered.startswith(METADATA_PREFIX) or lowered in declared_lower:
            continue
        if is_metadata_key is not None and is_metadata_key(name):
            continue
        close = difflib.get_close_matches(lowered, list(BUILTIN_VARIABLES), n=1, cutoff=0.6)
        hint = f" Did you mean {{{close[0]}}}?" if close else ""
        problems.append(
            f"line {line}: unknown placeholder {written}: not a Concord variable "
            f"({', '.join(BUILTIN_VARIABLES)}) nor a metadata key of this project's items.{hint} "
            f"For a metadata key write {{metadata.{name}}} or list it in the spec's variables."
        )
    return problems


def unique_names(template: str) -> list[str]:
    seen: dict[str, str] = {}
    for name, _, _ in placeholders(template):
        seen.setdefault(name.lower(), name)
    return list(seen.values())


# --- seed-style text ---------------------------------------------------------------------------


def _sections(lines: list[str]) -> dict[str, list[tuple[int, str]]]:
    """Heading (lower case, first occurrence wins) -> its (line number, line) pairs."""
    sections: dict[str, list[tuple[int, str]]] = {"": []}
    current = ""
    for number, line in enumerate(lines, start=1):
        match = HEADING_RE.match(line)
        if match:
            current = (match.group("md") or match.group("plain")).strip().rstrip(":").lower()
            if current in sections:
                current = f"{current} #{number}"
            sections[current] = []
            continue
        sections[current].append((number, line))
    return sections


def _paragraph(lines: list[tuple[int, str]]) -> str:
    return "\n".join(line for _, line in lines).strip()


def parse_scale_lines(lines: list[str]) -> tuple[list[dict[str, str]], str, list[str]]:
    """(scale, shape, problems) from the scale lines of a text; shape is "" when there are none."""
    best: tuple[str, list[tuple[int, re.Match]]] = ("", [])
    for shape, pattern in SCALE_SHAPES:
        matches = [(n, m) for n, line in enumerate(lines, start=1) if (m := pattern.match(line))]
        if shape == "numbered":  # "Rating 1 (Label)" lines are the rating shape, not this one.
            matches = [(n, m) for n, m in matches if not SCALE_SHAPES[0][1].match(lines[n - 1])]
        if len(matches) > len(best[1]):
            best = (shape, matches)
    shape, matches = best
    if len(matches) < 2:
        return [], "", []
    scale: list[dict[str, str]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, match in matches:
        value = match.group("value").strip()
        label = (match.groupdict().get("label") or value).strip()
        if value in seen:
            problems.append(f"line {number}: scale value {value} appears twice (first on line {seen[value]})")
            continue
        seen[value] = number
        scale.append({"value": value, "label": label, "description": match.group("desc").strip()})
    if shape != "quoted":
        scale.sort(key=lambda option: int(option["value"]))
    elif {option["value"] for option in scale} == set(PAIRWISE_VALUES):
        scale.sort(key=lambda option: PAIRWISE_VALUES.index(option["value"]))
    return scale, shape, problems


def _criterion(sections: dict[str, list[tuple[int, str]]]) -> tuple[str, str]:
    """(criterion, description) from an Evaluation Criteria or Metric Definition section."""
    criteria = [(n, line) for n, line in sections.get("evaluation criteria", []) if line.strip()]
    if criteria:
        match = CRITERION_RE.match(criteria[0][1].strip())
        if match:
            rest = [line.strip() for _, line in criteria[1:] if not _is_scale_line(line)]
            description = "\n".join([match.group("desc") or "", *rest]).strip()
            return match.group("name").strip(), description
        name = TRAILING_PARENS_RE.sub("", criteria[0][1].strip()).rstrip().rstrip(":")
        return name, _paragraph(criteria[1:])
    definition = _paragraph(sections.get("metric definition", []))
    match = ASSESSING_RE.search(definition)
    if match:
        return match.group("name").strip(), definition
    return "", ""


def _is_scale_line(line: str) -> bool:
    return any(pattern.match(line) for _, pattern in SCALE_SHAPES)


def _steps(lines: list[tuple[int, str]]) -> list[str]:
    texts = [line for _, line in lines if line.strip()]
    if not any(STEP_START_RE.match(line) for line in texts):
        return [line.strip() for line in texts]
    steps: list[str] = []
    for line in texts:
        if STEP_START_RE.match(line):
            steps.append(STEP_START_RE.sub("", line.strip(), count=1))
        elif steps:
            steps[-1] += "\n" + line.rstrip()
    return steps


def _instructions(sections: dict[str, list[tuple[int, str]]]) -> str:
    return _paragraph(sections.get("", [])) or _paragraph(sections.get("instruction", []))


def _kind_of(shape: str, scale: list[dict[str, str]]) -> str:
    if shape != "quoted":
        return "likert"
    return "pairwise" if [o["value"] for o in scale] == list(PAIRWISE_VALUES) else "categorical"


def _target_of(kind: str, text: str, names: list[str]) -> str:
    if kind == "pairwise":
        return "pairwise"
    if "sentence" in {n.lower() for n in names} or re.search(r"Evaluation sentence:|given a sentence", text):
        return "sentence"
    return "last_turn"


def _output_format_of(kind: str, text: str) -> str:
    if kind == "pairwise":
        return "pairwise_json"
    return "json" if re.search(r"\bJSON\b", text) else "score"


def parse_prompt_text(
    text: str,
    *,
    name: str | None = None,
    repair_text: bool = False,
    is_metadata_key: Callable[[str], bool] | None = None,
) -> ParsedRubric:
    """A rubric from a seed-style prompt text; raises RubricParseError naming what is missing."""
    if not text.strip():
        raise RubricParseError(
            ["the text is empty: a rubric needs a prompt text with a criterion and a scale"]
        )
    mojibake = find_mojibake(text)
    if repair_text and mojibake:
        text = repair_mojibake(text)
    lines = text.split("\n")
    sections = _sections(lines)
    problems = []
    criterion, description = _criterion(sections)
    criterion = criterion or (name or "")
    if not criterion:
        problems.append(
            "no criterion: expected an 'Evaluation Criteria:' section starting 'Name (1-5) - description' "
            "or '## Metric Definition' with 'You will be assessing Name, ...' (or give a name)"
        )
    scale, shape, scale_problems = parse_scale_lines(lines)
    problems += scale_problems
    if not scale:
        problems.append(
            "no scale: expected at least two lines like 'Rating 1 (Label): ...', '- 1 (Label): ...', "
            "'1 point: ...' or '\"A\": ...'"
        )
    problems += placeholder_problems(text, is_metadata_key=is_metadata_key)
    problems += length_problems(name or criterion, criterion)
    if problems:
        raise RubricParseError(problems)
    kind = _kind_of(shape, scale)
    names = unique_names(text)
    parsed = ParsedRubric(
        name=(name or criterion).strip(),
        kind=kind,
        criterion=criterion,
        description=description,
        instructions=_instructions(sections),
        steps=_steps(sections.get("evaluation steps", [])),
        scale=scale,
        prompt_template=text,
        target=_target_of(kind, text, names),
        output_format=_output_format_of(kind, text),
        explanation_required=kind == "pairwise" and "explanation" in text.lower(),
        placeholders=names,
        mojibake=mojibake,
        repaired=repair_text and bool(mojibake),
    )
    _add_notes(parsed)
    return parsed


def length_problems(name: str, criterion: str) -> list[str]:
    problems = []
    if len(name.strip()) > MAX_NAME_CHARS:
        problems.append(f"name: {len(name.strip())} characters long; at most {MAX_NAME_CHARS} are allowed")
    if len(criterion) > MAX_CRITERION_CHARS:
        problems.append(
            f"criterion: {len(criterion)} characters long; at most {MAX_CRITERION_CHARS} are allowed"
        )
    return problems


def _add_notes(parsed: ParsedRubric) -> None:
    note = mojibake_note(parsed.mojibake, repaired=parsed.repaired)
    if note:
        parsed.notes.append(note)
    if not parsed.placeholders:
        parsed.notes.append("The prompt has no placeholder: the item is appended after the text.")


# --- JSON spec ---------------------------------------------------------------------------------


def load_json_spec(text: str) -> dict[str, Any]:
    try:
        spec = safe_json.loads(text)  # the depth and number limits of dataset and ratings files
    except json.JSONDecodeError as error:
        raise RubricParseError(
            [f"malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"]
        ) from None
    except safe_json.Unreadable as error:
        raise RubricParseError([str(error)]) from None
    if not isinstance(spec, dict):
        raise RubricParseError(
            ["a JSON rubric spec must be one object with name, kind, scale, prompt_template"]
        )
    return spec


def _text_field(spec: dict, key: str, problems: list[str], *, required: bool = False) -> str:
    value = spec.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        problems.append(f"field {key}: must be text")
        return ""
    if required and not value.strip():
        problems.append(f"field {key}: missing")
    return value


def _spec_scale(spec: dict, kind: str, problems: list[str]) -> list[dict[str, str]]:
    raw = spec.get("scale")
    if not isinstance(raw, list) or len(raw) < 2:
        problems.append(
            "field scale: no scale: give a list of at least two {value, label, description} objects"
        )
        return []
    scale: list[dict[str, str]] = []
    for index, option in enumerate(raw):
        where = f"field scale[{index}]"
        if not isinstance(option, dict) or option.get("value") in (None, ""):
            problems.append(f"{where}: needs a value")
            continue
        unknown = set(option) - {"value", "label", "description"}
        if unknown:
            problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        value = str(option["value"]).strip()
        if len(value) > MAX_VALUE_CHARS:
            problems.append(f"{where}.value: longer than {MAX_VALUE_CHARS} characters")
        if kind == "likert" and not re.fullmatch(r"-?\d+(\.\d+)?", value):
            problems.append(f"{where}.value: a likert scale needs numbers, found {value!r}")
        if any(value == existing["value"] for existing in scale):
            problems.append(f"{where}.value: {value!r} appears twice")
        scale.append(
            {
                "value": value,
                "label": str(option.get("label") or value),
                "description": str(option.get("description") or ""),
            }
        )
    if kind == "pairwise" and [o["value"] for o in scale] != list(PAIRWISE_VALUES):
        problems.append('field scale: a pairwise rubric\'s scale is exactly "A", "SAME", "B" in that order')
    return scale


def scale_problems(kind: str, scale: Any) -> list[str]:
    """What is wrong with a scale list for a rubric of `kind` (empty when nothing)."""
    problems: list[str] = []
    _spec_scale({"scale": scale}, kind, problems)
    return problems


def _spec_steps(spec: dict, problems: list[str]) -> list[str]:
    raw = spec.get("steps", [])
    if isinstance(raw, str):
        return [line.strip() for line in raw.split("\n") if line.strip()]
    if not isinstance(raw, list) or not all(isinstance(step, str) for step in raw):
        problems.append("field steps: must be a list of texts")
        return []
    return list(raw)


def _spec_choice(spec: dict, key: str, choices: tuple[str, ...], default: str, problems: list[str]) -> str:
    value = spec.get(key) or default
    if value not in choices:
        problems.append(f"field {key}: must be one of {', '.join(choices)}, not {value!r}")
    return value


def parse_json_spec(
    text: str,
    *,
    name: str | None = None,
    repair_text: bool = False,
    is_metadata_key: Callable[[str], bool] | None = None,
) -> ParsedRubric:
    """A rubric from a JSON spec; raises RubricParseError naming each missing or wrong field."""
    if not text.strip():
        raise RubricParseError(["the file is empty: expected a JSON rubric spec or a prompt text"])
    spec = load_json_spec(text)
    problems: list[str] = []
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        problems.append(
            f"unknown fields {', '.join(sorted(unknown))} (known: {', '.join(sorted(SPEC_KEYS))})"
        )
    spec_name = name or _text_field(spec, "name", problems, required=True)
    kind = _spec_choice(spec, "kind", KINDS, "", problems)
    template = _text_field(spec, "prompt_template", problems, required=True)
    scale = _spec_scale(spec, kind, problems)
    variables = spec.get("variables", [])
    if not isinstance(variables, list) or not all(isinstance(v, str) for v in variables):
        problems.append("field variables: must be a list of names")
        variables = []
    problems += [
        f"field prompt_template, {p}"
        for p in placeholder_problems(template, declared=set(variables), is_metadata_key=is_metadata_key)
    ]
    default_target = "pairwise" if kind == "pairwise" else "last_turn"
    default_format = "pairwise_json" if kind == "pairwise" else "score"
    parsed_fields: dict[str, Any] = {
        "criterion": _text_field(spec, "criterion", problems) or spec_name,
        "description": _text_field(spec, "description", problems),
        "instructions": _text_field(spec, "instructions", problems),
        "steps": _spec_steps(spec, problems),
        "target": _spec_choice(spec, "target", TARGETS, default_target, problems),
        "output_format": _spec_choice(spec, "output_format", OUTPUT_FORMATS, default_format, problems),
    }
    problems += length_problems(spec_name, parsed_fields["criterion"])
    explanation_required = spec.get("explanation_required", kind == "pairwise")
    if not isinstance(explanation_required, bool):
        problems.append("field explanation_required: must be true or false")
    if problems:
        raise RubricParseError(problems)
    parsed = ParsedRubric(
        name=spec_name.strip(),
        kind=kind,
        prompt_template=template,
        scale=scale,
        explanation_required=bool(explanation_required),
        placeholders=unique_names(template),
        **parsed_fields,
    )
    _repair_spec(parsed, repair_text)
    _add_notes(parsed)
    return parsed


def _repair_spec(parsed: ParsedRubric, repair_text: bool) -> None:
    """Find (and when asked, repair) mojibake in every text field of a parsed spec."""
    texts = {
        "prompt_template": parsed.prompt_template,
        "criterion": parsed.criterion,
        "description": parsed.description,
        "instructions": parsed.instructions,
    }
    for key, value in texts.items():
        found = find_mojibake(value, where=key)
        parsed.mojibake += found
        if found and repair_text:
            setattr(parsed, key, repair_mojibake(value))
    for index, option in enumerate(parsed.scale):
        for key in ("label", "description"):
            found = find_mojibake(option[key], where=f"scale[{index}].{key}")
            parsed.mojibake += found
            if found and repair_text:
                option[key] = repair_mojibake(option[key])
    parsed.repaired = repair_text and bool(parsed.mojibake)


def looks_like_json(text: str, filename: str | None = None) -> bool:
    if filename and filename.lower().endswith(".json"):
        return True
    return text.lstrip().startswith("{")


def parse_rubric_source(
    text: str,
    *,
    filename: str | None = None,
    name: str | None = None,
    repair_text: bool = False,
    is_metadata_key: Callable[[str], bool] | None = None,
) -> ParsedRubric:
    """A JSON spec (a .json file or text starting with "{") or else a seed-style prompt text."""
    parse = parse_json_spec if looks_like_json(text, filename) else parse_prompt_text
    return parse(text, name=name, repair_text=repair_text, is_metadata_key=is_metadata_key)
