"""The alt-test paper's public data sets in ../shared/data/alttest, as Concord items and a ratings CSV.

Source (SOURCE.md there): github.com/nitaytech/AltTest, `human_annotations.json` ({person: {instance:
label}}) and `llm_annotations.json` ({llm: {instance: label}}). The files hold labels only, no texts,
so each instance becomes an item with a placeholder dialog that names it. MT-Bench labels
model_a / model_b / tie become Concord's pairwise A / B / SAME (A = baseline = model_a); SummEval
and CEBaB stars are likert 1-5 and their integers are written as text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.shared_data import SHARED_DATA, write_ratings_csv

# ../shared/data next to the repository; CONCORD_SHARED_DATA points elsewhere (e.g. from a git worktree).
ALTTEST_DIR = Path(os.environ.get("CONCORD_SHARED_DATA") or SHARED_DATA) / "alttest"
SETS = ("mtbench", "summeval", "cebab_stars")
_PAIRWISE = {"model_a": "A", "model_b": "B", "tie": "SAME"}


def _load(name: str, kind: str) -> dict:
    with (ALTTEST_DIR / name / f"{kind}_annotations.json").open(encoding="utf-8") as handle:
        return json.load(handle)


def published_figures() -> dict:
    with (ALTTEST_DIR / "published_figures.json").open(encoding="utf-8") as handle:
        return json.load(handle)


def kind_of(name: str) -> str:
    return "pairwise" if name == "mtbench" else "likert"


def label(name: str, raw) -> str:
    return _PAIRWISE[raw] if name == "mtbench" else str(int(raw))


def rubric_spec(name: str) -> dict:
    kind = kind_of(name)
    if kind == "pairwise":
        scale = [{"value": v, "label": v, "description": f"{v}."} for v in ("A", "SAME", "B")]
        template = (
            "[Question]\n{prompt}\n\n[A]\n{baseline_model_response}\n\n[B]\n{response}\n\nWhich is better?"
        )
    else:
        scale = [{"value": str(n), "label": str(n), "description": f"Score {n}."} for n in range(1, 6)]
        template = "Rate the response from 1 to 5.\n\n{{Dialog}}\n\nScore:"
    return {
        "name": name,
        "kind": kind,
        "criterion": name,
        "description": f"The alt-test paper's {name} labels.",
        "instructions": "Labels imported from the paper's public data.",
        "scale": scale,
        "prompt_template": template,
        "target": "pairwise" if kind == "pairwise" else "last_turn",
        "output_format": "pairwise_json" if kind == "pairwise" else "score",
    }


def items(name: str) -> list[dict]:
    humans, models = _load(name, "human"), _load(name, "llm")
    instances = sorted({i for labels in [*humans.values(), *models.values()] for i in labels})
    return [
        {
            "id": instance,
            "turns": [{"speaker": "USER", "text": f"Instance {instance} of {name} (texts not in the data)."}],
            "response": {"speaker": "BOT", "text": "(response B)"},
            "baseline": {"speaker": "BOT", "text": "(response A)"},
            "metadata": {"source": f"alttest/{name}"},
        }
        for instance in instances
    ]


def ratings(name: str) -> list[dict]:
    rows = []
    for rater_kind, table in (("human", _load(name, "human")), ("model", _load(name, "llm"))):
        for rater, labels in table.items():
            for instance, raw in labels.items():
                rows.append(
                    {
                        "item_id": instance,
                        "rubric": name,
                        "rater": rater,
                        "rater_kind": rater_kind,
                        "value": label(name, raw),
                        "explanation": "",
                        "parse_failed": "",
                    }
                )
    return rows


def write_ratings(directory: Path, name: str) -> Path:
    return write_ratings_csv(directory / f"{name}-ratings.csv", ratings(name))
