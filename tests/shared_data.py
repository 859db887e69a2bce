"""Turn the public datasets in ../shared/data into Concord's own input formats.

Two rated datasets that nobody on the team wrote (see each folder's SOURCE.md):

- PandaLM test set: 999 instruction prompts, each with two responses, preference labels from
  three annotators and verdicts from two judges (GPT-3.5, PandaLM-7B).
- USR PersonaChat: 60 contexts x 5 candidate responses, six criteria on small Likert scales,
  rated by 3 of 4 named annotators.

Everything here is a pure function of the source files: the `*_items` / `*_ratings` functions
return plain dicts, the `write_*` functions put them in a directory as

- a dataset in JSONL (DESIGN.md's item format: id, turns, response, baseline, metadata),
- a ratings CSV with the columns of Concord's ratings import
  (item_id, rubric, rater, rater_kind, value, explanation, parse_failed),
- one JSON rubric spec per criterion (name, kind, criterion, description, instructions, scale,
  prompt_template, target, output_format), the JSON format of `import_rubric`.

Decisions, so that what tests compute can be traced back to the source:

- PandaLM: one user turn `instruction + "\\n" + input` (just the instruction when input is
  empty, just the input when the instruction is blank). Concord's pairwise orientation is
  A = baseline, B = response, and PandaLM's is A = response1, B = response2, so
  baseline = response1 and response = response2. Labels 1 -> "A", 2 -> "B", 0 / "Tie" -> "SAME".
- PandaLM's GPT-3.5 verdict "garbage" (25 items: the judge's reply could not be parsed) is kept
  as a parse-failure row: empty value, parse_failed "true". It is a real outcome of that judge
  and Concord's Rating model stores exactly that (`parse_failed`, no value), so agreement code
  can choose to count it as wrong or to skip it.
- PandaLM has six responses stored as JSON `true` (a lossy upstream conversion of "True"); they
  become the text "True". 54 responses are empty strings; Concord refuses empty turns, so they
  become the text EMPTY_RESPONSE and the item's metadata lists which side was empty
  (`empty_responses: ["baseline"]`), so nothing is lost silently.
- USR: the context is split on "\\n" (its trailing newline dropped); speakers alternate and the
  last context line is the partner's turn that the response answers, so context speakers are
  assigned backwards from the end: the partner is "USER", the responding side is "BOT". Item ids
  are `usr-<context>-<response>` (both 0-based, context zero-padded to two digits). The response's
  trailing newline is dropped. Metadata: model (the system label), fact (the persona lines).
- USR values are the integers of the source written as text ("0", "3").
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# ../shared/data beside the checkout; CONCORD_SHARED_DATA points elsewhere (e.g. from a git worktree).
SHARED_DATA = Path(
    os.environ.get("CONCORD_SHARED_DATA") or Path(__file__).resolve().parent.parent.parent / "shared" / "data"
)
PANDALM_DIR = SHARED_DATA / "pandalm-testset"
USR_DIR = SHARED_DATA / "usr-personachat"

RATING_COLUMNS = ["item_id", "rubric", "rater", "rater_kind", "value", "explanation", "parse_failed"]
EMPTY_RESPONSE = "(empty response)"

PANDALM_RUBRIC = "PandaLM preference"
PANDALM_ANNOTATORS = ["annotator1", "annotator2", "annotator3"]
PANDALM_JUDGES = ["gpt-3.5-turbo", "pandalm-7b"]
_PANDALM_LABELS = {"1": "A", "2": "B", "0": "SAME", "tie": "SAME"}

USR_CRITERIA = ["Understandable", "Natural", "Maintains Context", "Engaging", "Uses Knowledge", "Overall"]
USR_ANNOTATORS = ["shikib", "maxine", "mckenna", "yulan"]


@dataclass
class SharedDataset:
    """Where `write_pandalm` / `write_usr` put their files, with what they hold."""

    items_path: Path
    ratings_path: Path
    rubric_paths: dict[str, Path]
    item_count: int
    rating_count: int
    raters: dict[str, str] = field(default_factory=dict)  # name -> "human" | "model"


# --- PandaLM ---------------------------------------------------------------------------------


def _load_json(path: Path):
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def _text(value) -> str:
    """Source text as a string: JSON booleans become "True"/"False", None becomes ""."""
    if value is None:
        return ""
    return str(value)


def _pandalm_prompt(instruction: str, given_input: str) -> str:
    instruction, given_input = instruction.strip(), given_input.strip()
    if instruction and given_input:
        return f"{instruction}\n{given_input}"
    return instruction or given_input


def pandalm_label(raw) -> str | None:
    """PandaLM's label (1, 2, 0, "1", "2", "Tie", "garbage") as A / B / SAME; None for garbage."""
    key = str(raw).strip().lower()
    if key == "garbage":
        return None
    if key not in _PANDALM_LABELS:
        raise ValueError(f"unknown PandaLM label {raw!r}")
    return _PANDALM_LABELS[key]


def pandalm_item_id(idx: int) -> str:
    return f"pandalm-{idx}"


def pandalm_items(*, limit: int | None = None) -> list[dict]:
    """PandaLM's pairs as Concord items: one user turn, baseline = response1, response = response2."""
    rows = _load_json(PANDALM_DIR / "testset-v1.json")[:limit]
    items = []
    for row in rows:
        empty = []
        sides = {}
        for side, key in (("baseline", "response1"), ("response", "response2")):
            text = _text(row[key]).strip()
            if not text:
                empty.append(side)
                text = EMPTY_RESPONSE
            sides[side] = {"speaker": "BOT", "text": text}
        metadata = {"cmp_key": row["cmp_key"], "motivation_app": row["motivation_app"]}
        if empty:
            metadata["empty_responses"] = empty
        items.append(
            {
                "id": pandalm_item_id(row["idx"]),
                "turns": [{"speaker": "USER", "text": _pandalm_prompt(row["instruction"], row["input"])}],
                "response": sides["response"],
                "baseline": sides["baseline"],
                "metadata": metadata,
            }
        )
    return items


def pandalm_ratings(*, limit: int | None = None) -> list[dict]:
    """Ratings of the three annotators (human) and the two judges (model), one dict per rating."""
    tests = _load_json(PANDALM_DIR / "testset-v1.json")[:limit]
    gpt = {row["idx"]: row for row in _load_json(PANDALM_DIR / "gpt-3.5-turbo-testset-v1.json")}
    panda = {row["idx"]: row for row in _load_json(PANDALM_DIR / "pandalm-7b-testset-v1.json")}
    ratings = []
    for row in tests:
        item_id = pandalm_item_id(row["idx"])
        for annotator in PANDALM_ANNOTATORS:
            ratings.append(
                _rating(item_id, PANDALM_RUBRIC, annotator, "human", pandalm_label(row[annotator]))
            )
        judged = [
            ("gpt-3.5-turbo", gpt[row["idx"]]["gpt_result"], gpt[row["idx"]]["gpt_reason"]),
            ("pandalm-7b", panda[row["idx"]]["pandalm_result"], panda[row["idx"]]["pandalm_reason"]),
        ]
        for judge, raw, reason in judged:
            ratings.append(
                _rating(item_id, PANDALM_RUBRIC, judge, "model", pandalm_label(raw), _text(reason))
            )
    return ratings


def pandalm_rubric_spec() -> dict:
    """A pairwise rubric in import_rubric's JSON format, for PandaLM's overall preference."""
    return {
        "name": PANDALM_RUBRIC,
        "kind": "pairwise",
        "criterion": "Overall preference",
        "description": "Which response follows the instruction better: correct, concise, on task.",
        "instructions": (
            "Read the instruction and both responses. Choose the better response, "
            "or SAME if they are equally good or equally bad."
        ),
        "scale": [
            {"value": "A", "label": "A", "description": "Response A is better."},
            {"value": "SAME", "label": "SAME", "description": "Both responses are equally good or bad."},
            {"value": "B", "label": "B", "description": "Response B is better."},
        ],
        # The rubric placeholders render the fields above, so people and the judge read the same words.
        "prompt_template": (
            "{criterion}: {description}\n{instructions}\n\n"
            "Compare two responses to the instruction below for correctness, conciseness and how well they "
            "follow the instruction.\n\n[Instruction]\n{prompt}\n\n"
            "[Response A]\n{baseline_model_response}\n\n"
            "[Response B]\n{response}\n\n{scale}\n\n"
            "Answer with pairwise_choice (A, SAME or B) and an explanation."
        ),
        "target": "pairwise",
        "output_format": "pairwise_json",
    }


# --- USR PersonaChat -------------------------------------------------------------------------

_USR_SCALES = {
    "Understandable": [
        ("0", "No", "The response cannot be understood."),
        ("1", "Yes", "The response is understandable."),
    ],
    "Natural": [
        ("1", "Unnatural", "No person would say this."),
        ("2", "Somewhat natural", "A person might say this, awkwardly."),
        ("3", "Natural", "A person would naturally say this."),
    ],
    "Maintains Context": [
        ("1", "No", "The response ignores or contradicts the context."),
        ("2", "Somewhat", "The response fits the context only in part."),
        ("3", "Yes", "The response is a valid continuation of the context."),
    ],
    "Engaging": [
        ("1", "Dull", "The response is generic or dull."),
        ("2", "Somewhat interesting", "The response is mildly interesting."),
        ("3", "Interesting", "The response is interesting and engaging."),
    ],
    "Uses Knowledge": [
        ("0", "No", "The response does not use the persona facts."),
        ("1", "Yes", "The response uses the persona facts."),
    ],
    "Overall": [
        ("1", "Very bad", "Very poor response."),
        ("2", "Bad", "Poor response."),
        ("3", "Neutral", "Acceptable response."),
        ("4", "Good", "Good response."),
        ("5", "Very good", "Excellent response."),
    ],
}

_USR_DESCRIPTIONS = {
    "Understandable": "Is the response understandable in the context of the history?",
    "Natural": "Is the response naturally written, as a person would say it?",
    "Maintains Context": "Does the response serve as a valid continuation of the conversation history?",
    "Engaging": "Is the response dull or interesting?",
    "Uses Knowledge": "Given the persona facts, does the response use them?",
    "Overall": "What is the overall impression of the response?",
}


def usr_scale(criterion: str) -> list[dict]:
    """The scale of one USR criterion as RubricVersion.scale ([{value, label, description}])."""
    return [{"value": v, "label": label, "description": text} for v, label, text in _USR_SCALES[criterion]]


def usr_rubric_specs() -> list[dict]:
    """Six likert rubrics in import_rubric's JSON format, each with its own USR scale."""
    specs = []
    for criterion in USR_CRITERIA:
        values = [option["value"] for option in usr_scale(criterion)]
        specs.append(
            {
                "name": criterion,
                "kind": "likert",
                "criterion": criterion,
                "description": _USR_DESCRIPTIONS[criterion],
                "instructions": f"Rate the last response on a scale from {values[0]} to {values[-1]}.",
                "scale": usr_scale(criterion),
                "prompt_template": (
                    "{criterion}: {description}\n{instructions}\n{scale}\n\n"
                    "Persona of the responder:\n{metadata.fact}\n\n"
                    "Dialog:\n{dialog}\n\n"
                    f"Rate the last response from {values[0]} to {values[-1]}. Score:"
                ),
                "target": "last_turn",
                "output_format": "score",
            }
        )
    return specs


def usr_item_id(context_index: int, response_index: int) -> str:
    return f"usr-{context_index:02d}-{response_index}"


def _usr_turns(context: str) -> list[dict]:
    lines = [line for line in context.rstrip("\n").split("\n")]
    # The last line is the partner's; speakers alternate, so assign them counting from the end.
    return [
        {"speaker": "USER" if (len(lines) - 1 - n) % 2 == 0 else "BOT", "text": line.strip()}
        for n, line in enumerate(lines)
    ]


def usr_items(*, limit: int | None = None) -> list[dict]:
    """USR's 300 candidate responses (5 per context) as Concord items; `limit` counts contexts."""
    items = []
    for c, row in enumerate(_load_json(USR_DIR / "pc_usr_data.json")[:limit]):
        turns = _usr_turns(row["context"])
        for r, candidate in enumerate(row["responses"]):
            items.append(
                {
                    "id": usr_item_id(c, r),
                    "turns": turns,
                    "response": {"speaker": "BOT", "text": candidate["response"].strip()},
                    "metadata": {"model": candidate["model"], "fact": row["fact"].strip()},
                }
            )
    return items


def usr_ratings(*, limit: int | None = None) -> list[dict]:
    """Every (response, criterion, annotator) rating of USR by its annotator; `limit` counts contexts."""
    ratings = []
    for c, row in enumerate(_load_json(USR_DIR / "pc_usr_data.json")[:limit]):
        for r, candidate in enumerate(row["responses"]):
            for criterion in USR_CRITERIA:
                for annotator, value in zip(row["annotators"], candidate[criterion], strict=True):
                    ratings.append(_rating(usr_item_id(c, r), criterion, annotator, "human", str(value)))
    return ratings


# --- Files -----------------------------------------------------------------------------------


def _rating(
    item_id: str, rubric: str, rater: str, kind: str, value: str | None, explanation: str = ""
) -> dict:
    return {
        "item_id": item_id,
        "rubric": rubric,
        "rater": rater,
        "rater_kind": kind,
        "value": value or "",
        "explanation": explanation,
        "parse_failed": "true" if value is None else "",
    }


def write_jsonl(path: Path, rows: Iterable[dict]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_ratings_csv(path: Path, ratings: Iterable[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RATING_COLUMNS)
        writer.writeheader()
        writer.writerows(ratings)
    return path


def _write(
    directory: Path, stem: str, items: list[dict], ratings: list[dict], specs: list[dict]
) -> SharedDataset:
    directory.mkdir(parents=True, exist_ok=True)
    rubric_paths = {}
    for spec in specs:
        path = directory / f"rubric-{spec['name'].lower().replace(' ', '-')}.json"
        path.write_text(json.dumps(spec, indent=2, ensure_ascii=False), encoding="utf-8")
        rubric_paths[spec["name"]] = path
    return SharedDataset(
        items_path=write_jsonl(directory / f"{stem}-items.jsonl", items),
        ratings_path=write_ratings_csv(directory / f"{stem}-ratings.csv", ratings),
        rubric_paths=rubric_paths,
        item_count=len(items),
        rating_count=len(ratings),
        raters={rating["rater"]: rating["rater_kind"] for rating in ratings},
    )


def write_pandalm(directory: Path, *, limit: int | None = None) -> SharedDataset:
    """PandaLM as pandalm-items.jsonl, pandalm-ratings.csv and one pairwise rubric spec in `directory`."""
    return _write(
        directory,
        "pandalm",
        pandalm_items(limit=limit),
        pandalm_ratings(limit=limit),
        [pandalm_rubric_spec()],
    )


def write_usr(directory: Path, *, limit: int | None = None) -> SharedDataset:
    """USR as usr-items.jsonl, usr-ratings.csv and six likert rubric specs; `limit` counts contexts."""
    return _write(directory, "usr", usr_items(limit=limit), usr_ratings(limit=limit), usr_rubric_specs())


# --- Database helpers for tests (until import_rubric and import_dataset land everywhere) ---


def make_rubric_versions(project, specs: list[dict]) -> dict:
    """Create a project-owned Rubric + RubricVersion 1 per spec through the ORM; {name: version}."""
    from rubrics.models import Rubric, RubricVersion

    versions = {}
    for spec in specs:
        rubric = Rubric.objects.create(project=project, name=spec["name"], kind=spec["kind"])
        versions[spec["name"]] = RubricVersion.objects.create(
            rubric=rubric,
            number=1,
            criterion=spec["criterion"],
            description=spec["description"],
            instructions=spec["instructions"],
            scale=spec["scale"],
            prompt_template=spec["prompt_template"],
            target=spec["target"],
            output_format=spec["output_format"],
        )
    return versions


def make_dataset_from_items(project, name: str, items: list[dict]):
    """Create a Dataset and its Items straight from item dicts in this module's format."""
    from datasets.models import Dataset, Item

    dataset = Dataset.objects.create(project=project, name=name)
    Item.objects.bulk_create(
        Item(
            dataset=dataset,
            external_id=item["id"],
            position=n,
            context=item["turns"],
            response=item["response"],
            baseline=item.get("baseline"),
            metadata=item.get("metadata", {}),
        )
        for n, item in enumerate(items)
    )
    return dataset
