"""The four built-in rubrics, loaded from the seed files shipped in rubrics/seeds.

The seed files are byte-for-byte copies of the product's first rubrics. Each is parsed with the
same parser as an imported text, so people and judges read the same scale definitions. Seed 003
contains mojibake ("canâ€™t"): the file stays as shipped, the built-in copy is repaired on load,
and the version's notes say so (the rubric page shows them).

Loading is idempotent: a built-in already present (same seed file) is left alone, so running
it again after a data migration, a test-database flush or a manual import changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .parsing import ParsedRubric, parse_prompt_text

SEEDS_DIR = Path(__file__).resolve().parent / "seeds"


@dataclass(frozen=True)
class Builtin:
    seed: str
    name: str
    kind: str
    target: str
    repair_text: bool = False

    @property
    def path(self) -> Path:
        return SEEDS_DIR / self.seed

    def read(self) -> str:
        # newline="" keeps the text exactly as in the file.
        with self.path.open(encoding="utf-8", newline="") as handle:
            return handle.read()

    def parse(self) -> ParsedRubric:
        parsed = parse_prompt_text(self.read(), name=self.name, repair_text=self.repair_text)
        if (parsed.kind, parsed.target) != (self.kind, self.target):
            raise ValueError(
                f"seed {self.seed} parsed as {parsed.kind}/{parsed.target}, "
                f"expected {self.kind}/{self.target}"
            )
        if parsed.repaired:
            parsed.notes.insert(
                0, f"Built-in copy of seed {self.seed}; the shipped seed file keeps the original."
            )
        return parsed


BUILTINS = [
    Builtin("000_92fb41b17348cc69.txt", "Repetitiveness", "likert", "last_turn"),
    Builtin("001_cb6913e604c61025.txt", "Empathetical understanding", "likert", "last_turn"),
    Builtin("002_dc84c7214cd8bb97.txt", "Multi-turn chat quality", "pairwise", "pairwise"),
    Builtin(
        "003_08a06ab90f2e0997.txt",
        "Context fit and emotion attention",
        "likert",
        "sentence",
        repair_text=True,
    ),
]


def ensure_builtin_rubrics(rubric_model: Any = None, version_model: Any = None) -> list:
    """Create the built-in rubrics that are missing; returns the versions it created.

    Data migrations pass their historical models; everyone else uses the defaults.
    """
    if rubric_model is None or version_model is None:
        from .models import Rubric, RubricVersion

        rubric_model, version_model = Rubric, RubricVersion
    created = []
    for builtin in BUILTINS:
        if rubric_model.objects.filter(project__isnull=True, builtin_key=builtin.seed).exists():
            continue
        if rubric_model.objects.filter(project__isnull=True, name=builtin.name).exists():
            continue  # someone imported a shared rubric under this name; never overwrite it
        parsed = builtin.parse()
        rubric = rubric_model.objects.create(
            project=None, name=builtin.name, kind=parsed.kind, builtin_key=builtin.seed
        )
        created.append(version_model.objects.create(rubric=rubric, number=1, **parsed.version_fields()))
    return created
