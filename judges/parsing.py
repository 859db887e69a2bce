"""Read a judge's reply as a value on the rubric's scale, or say precisely why it cannot be read.

Accepted: score-only replies ("4", "Score: 4", "**4**", "4/5", "4 - because ..."), JSON objects (also
inside ``` fences) with a score, label or pairwise_choice and an explanation, a leading label for
categorical rubrics and a leading or labelled A / SAME / B (also MT-Bench's "[[A]]") for pairwise.
A reply that fits none of these is a parse failure: the caller stores the raw text, never a score.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

VALUE_KEYS = (
    "score",
    "rating",
    "value",
    "label",
    "answer",
    "result",
    "pairwise_choice",
    "choice",
    "verdict",
    "winner",
)
EXPLANATION_KEYS = ("explanation", "reason", "reasoning", "rationale", "justification", "analysis")
PAIRWISE_ALIASES = {"A": "A", "B": "B", "SAME": "SAME", "TIE": "SAME", "C": "SAME", "EQUAL": "SAME"}
FENCE_RE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.S)
# A leading label before a score: "Score:", "**Rating (1-5):**", "Final score =", "Evaluation Form -".
LABEL = r"(?:final\s+)?(?:score|rating|answer|evaluation(?:\s+form)?)\s*(?:\([^)]*\))?\s*[:=\-]?\s*"
NUMBER_RE = re.compile(
    rf"^[\s*#>\"'`_]*(?:{LABEL})?"
    r"[*\s\"'`_]*(?P<value>\d+(?:\.\d+)?)(?![\d.]\d)(?P<rest>.*)$",
    re.I | re.S,
)
LABELLED_NUMBER_RE = re.compile(r"\b(?:score|rating)\s*[:=]\s*\**\s*(?P<value>\d+(?:\.\d+)?)", re.I)
PAIRWISE_RE = re.compile(
    r"(?:\[\[\s*(?P<bracket>A|B|C|SAME|TIE)\s*\]\]"
    r"|\b(?:pairwise_choice|choice|verdict|winner|answer)\W{0,4}(?P<labelled>A|B|SAME|TIE)\b)",
    re.I,
)
LEADING_PAIRWISE_RE = re.compile(
    r"^[\s*#>\"'`_]*(?:response\s+)?(?P<value>A|B|SAME|TIE)\b(?P<rest>.*)$", re.S | re.I
)
SEPARATOR_RE = re.compile(r"^[\s*`\"'_]*(?:/\s*\d+)?[\s*`\"'_]*(?:[-:.,;)\]–—]+\s*)?(?:because\s+)?", re.I)


@dataclass(frozen=True)
class Parsed:
    value: str | None
    explanation: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.value is not None


def parse_reply(text: str | None, *, kind: str, scale_values: list[str]) -> Parsed:
    """The value `text` gives on a scale of `kind` ("likert", "categorical", "pairwise")."""
    if text is None or not text.strip():
        return Parsed(None, error="empty reply")
    stripped = text.strip()
    structured = _parse_json(stripped)
    if isinstance(structured, Parsed):
        return structured
    if structured is not None:
        return _from_object(structured, kind=kind, scale_values=scale_values)
    if kind == "pairwise":
        return _parse_pairwise_text(stripped)
    if kind == "categorical":
        return _parse_label_text(stripped, scale_values)
    return _parse_score_text(stripped, scale_values)


def _parse_json(text: str) -> dict | Parsed | None:
    """The JSON object in `text`, a Parsed failure for broken JSON, or None when it is not JSON at all."""
    fenced = FENCE_RE.search(text)
    candidate = fenced.group(1).strip() if fenced else text
    start = candidate.find("{")
    if start == -1 or (not fenced and start > 0 and not candidate.lstrip().startswith("{")):
        return None
    end = candidate.rfind("}")
    if end < start:
        return Parsed(None, error="truncated JSON: the object is never closed")
    try:
        data = json.loads(candidate[start : end + 1])
    except ValueError as error:
        return Parsed(None, error=f"malformed JSON: {error}")
    if not isinstance(data, dict):
        return Parsed(None, error="JSON reply is not an object")
    return {str(key).lower(): value for key, value in data.items()}


def _from_object(data: dict, *, kind: str, scale_values: list[str]) -> Parsed:
    explanation = next((str(data[key]) for key in EXPLANATION_KEYS if data.get(key) not in (None, "")), "")
    raw = next((data[key] for key in VALUE_KEYS if key in data and data[key] not in (None, "")), None)
    if raw is None:
        return Parsed(None, error=f"JSON has none of the keys {', '.join(VALUE_KEYS[:3])} or pairwise_choice")
    if kind == "pairwise":
        value = PAIRWISE_ALIASES.get(str(raw).strip().strip("[]").upper())
        if value is None:
            return Parsed(None, error=f"pairwise choice {raw!r} is not A, SAME or B")
        return Parsed(value, explanation)
    if kind == "categorical":
        return _match_label(str(raw), scale_values, explanation)
    return _on_scale(str(raw).strip(), scale_values, explanation)


def _parse_score_text(text: str, scale_values: list[str]) -> Parsed:
    match = NUMBER_RE.match(text)
    if match is None:
        labelled = list(LABELLED_NUMBER_RE.finditer(text))
        if not labelled:
            return Parsed(None, error="no score found in the reply")
        return _on_scale(labelled[-1].group("value"), scale_values, text)
    rest = SEPARATOR_RE.sub("", match.group("rest"), count=1).strip()
    return _on_scale(match.group("value"), scale_values, rest)


def _on_scale(raw: str, scale_values: list[str], explanation: str) -> Parsed:
    if raw in scale_values:
        return Parsed(raw, explanation)
    try:
        number = float(raw)
    except ValueError:
        return Parsed(None, error=f"{raw!r} is not a number on the scale {', '.join(scale_values)}")
    for value in scale_values:
        try:
            if math.isclose(float(value), number):
                return Parsed(value, explanation)
        except ValueError:
            continue
    return Parsed(None, error=f"{raw} is not on the scale {', '.join(scale_values)}")


def _parse_label_text(text: str, scale_values: list[str]) -> Parsed:
    first_line = text.splitlines()[0].strip(" *#\"'`.:")
    for value in sorted(scale_values, key=len, reverse=True):
        if re.match(re.escape(value) + r"(?!\w)", first_line, re.I):
            rest = SEPARATOR_RE.sub("", text.strip(" *#\"'`")[len(value) :], count=1).strip()
            return Parsed(value, rest)
    labelled = re.search(r"\b(?:label|answer)\s*[:=]\s*\**\s*([\w -]+)", text, re.I)
    if labelled:
        return _match_label(labelled.group(1).strip(), scale_values, text)
    return Parsed(None, error=f"reply does not start with one of {', '.join(scale_values)}")


def _match_label(raw: str, scale_values: list[str], explanation: str) -> Parsed:
    for value in scale_values:
        if raw.strip().lower() == value.lower():
            return Parsed(value, explanation)
    return Parsed(None, error=f"{raw!r} is not one of {', '.join(scale_values)}")


def _parse_pairwise_text(text: str) -> Parsed:
    match = PAIRWISE_RE.search(text)
    if match:
        token = (match.group("bracket") or match.group("labelled")).upper()
        return Parsed(PAIRWISE_ALIASES[token], text)
    leading = LEADING_PAIRWISE_RE.match(text)
    if leading:
        rest = SEPARATOR_RE.sub("", leading.group("rest"), count=1).strip()
        return Parsed(PAIRWISE_ALIASES[leading.group("value").upper()], rest)
    return Parsed(None, error="no pairwise choice (A, SAME or B) found in the reply")


def logprob_score(
    top_logprobs: list[tuple[str, float]], scale_values: list[str], *, lead: str = ""
) -> tuple[float, str] | None:
    """G-Eval: the probability-weighted mean over the scale's values among one token's top_logprobs.

    An alternative counts as the scale value it spells (`token_value`, after `lead`, the part of the
    position's token before the score, and any formatting); the others are ignored and the rest
    renormalised. Returns (score, argmax value), or None when no alternative is a scale value.
    """
    mass: dict[str, float] = {}
    for token, logprob in top_logprobs:
        value = token_value(token, scale_values, lead=lead)
        if value is not None:
            mass[value] = mass.get(value, 0.0) + math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    score = sum(float(value) * p for value, p in mass.items()) / total
    argmax = max(mass, key=lambda v: mass[v])
    return score, argmax


def format_score(score: float) -> str:
    """Canonical text of a mean score: "4" when whole, else up to four decimals ("3.7215")."""
    rounded = round(score, 4)
    if rounded == int(rounded):
        return str(int(rounded))
    return f"{rounded:.4f}".rstrip("0").rstrip(".")


# -- where a G-Eval score is read -----------------------------------------------------------------
# Characters that only format a reply: whitespace, markdown emphasis and headings, quotes, a quote marker.
FORMATTING = " \t\r\n*#_`\"'>"
LEADING_LABEL_RE = re.compile(rf"[{re.escape(FORMATTING)}]*{LABEL}", re.I)
JSON_START_RE = re.compile(r"\s*(?:```(?:json|JSON)?\s*)?\{")


@dataclass(frozen=True)
class GEval:
    """A G-Eval score read from a reply's logprobs, or why none can be (`error`)."""

    score: float | None = None
    argmax: str = ""
    position: int = -1  # the index of the score's token among the reply's tokens
    error: str = ""


def token_value(token: str, scale_values: list[str], *, lead: str = "") -> str | None:
    """The scale value a token spells: "4", " 4", "**4", '"4', "4." and "4," are 4; "45", "4.5" and "4th"
    are not. `lead` (what the sampled token held before the score, e.g. ' "') is taken off first."""
    if lead and token.startswith(lead):
        token = token[len(lead) :]
    text = token.lstrip(FORMATTING)
    for value in sorted(scale_values, key=len, reverse=True):
        if not text.startswith(value):
            continue
        after = text[len(value) : len(value) + 2]
        if not after or not (after[0].isalnum() or (after[0] in ".," and after[1:].isdigit())):
            return value
    return None


def score_offset(content: str) -> int | str:
    """Where a reply's score starts (a character offset), or why it has no place for one.

    Plain text: the first character that is not formatting (`FORMATTING`), after one leading label
    ("Score:", "Rating (1-5):"; the only prefix allowed, so "(1-5)" is never read as the score). A JSON
    reply (also in a ``` fence): the first character of the score key's value, inside its quotes."""
    if JSON_START_RE.match(content):
        for key in VALUE_KEYS:
            match = re.search(rf'"{key}"\s*:\s*"?', content, re.I)
            if match:
                return match.end()
        return f"the JSON reply has none of the keys {', '.join(VALUE_KEYS[:3])}"
    label = LEADING_LABEL_RE.match(content)
    start = label.end() if label else 0
    offset = len(content) - len(content[start:].lstrip(FORMATTING))
    if offset >= len(content):
        return "the reply holds no score"
    return offset


def geval_score(content: str, logprobs: list, scale_values: list[str]) -> GEval:
    """The expectation over the scale values among the top logprobs of the token where the reply's score
    stands (`score_offset`), renormalised over those values; whatever token was sampled there. Never a
    later token for being a digit: a score position whose alternatives hold no scale value gives no score."""
    offset = score_offset(content)
    if isinstance(offset, str):
        return GEval(error=f"G-Eval: {offset}")
    start = 0
    for index, (token, alternatives) in enumerate(logprobs):
        end = start + len(token)
        if content[start:end] != token:
            return GEval(error="G-Eval: the logprobs' tokens do not spell the reply (score token unknown)")
        if end > offset:
            lead, rest = content[start:offset], content[offset:]
            return _scored_at(index, token, lead, rest, alternatives, scale_values)
        start = end
    return GEval(
        error=f"G-Eval: the score (character {offset + 1}) lies past the {len(logprobs)} tokens whose "
        "logprobs were kept"
    )


def _scored_at(
    index: int, token: str, lead: str, rest: str, alternatives: list, scale_values: list[str]
) -> GEval:
    """The score at token `index` (`token`, of which `lead` comes before the score and `rest` is the reply
    from the score on)."""
    where = f"token {index + 1} ({token!r})"
    if any(math.isnan(logprob) or logprob > 1e-6 for _, logprob in alternatives):
        return GEval(error=f"G-Eval: the endpoint's top logprobs at {where} are not log probabilities")
    written, spelled = token_value(rest, scale_values), token_value(token, scale_values, lead=lead)
    if spelled is not None and written != spelled:
        # e.g. "10" written as "1" then "0": an alternative "1" may be the start of 10 as well as 1; or
        # "4.5" on a 1-5 scale, whose first token is no answer of its own
        what = f"the scale value {written}" if written else f"the written score {rest.split()[0]!r}"
        return GEval(error=f"G-Eval: {what} continues past the score's {where}")
    result = logprob_score([(alt, logprob) for alt, logprob in alternatives], scale_values, lead=lead)
    if result is None:
        return GEval(
            error=f"G-Eval: no scale value ({', '.join(scale_values)}) among the top logprobs at the "
            f"score's {where}",
            position=index,
        )
    return GEval(score=result[0], argmax=result[1], position=index)
