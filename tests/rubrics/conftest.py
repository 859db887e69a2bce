"""Fixtures for the rubric tests: the built-in rubrics, whatever earlier tests did to the database."""

from pathlib import Path

import pytest
from django.conf import settings

from datasets.records import ItemRecord
from rubrics.builtins import BUILTINS, ensure_builtin_rubrics
from rubrics.models import Rubric

SHARED_SEEDS = Path(settings.BASE_DIR).parent / "shared" / "seeds"
SHIPPED_SEEDS = Path(settings.BASE_DIR) / "rubrics" / "seeds"


def seed_text(filename: str) -> str:
    """The seed as given to the project (../shared/seeds), or the shipped copy in a fresh clone."""
    folder = SHARED_SEEDS if (SHARED_SEEDS / filename).exists() else SHIPPED_SEEDS
    with (folder / filename).open(encoding="utf-8", newline="") as handle:
        return handle.read()


@pytest.fixture
def builtins(db):
    """{name: latest version} of the four built-ins (a transactional test elsewhere may have flushed them)."""
    ensure_builtin_rubrics()
    rubrics = Rubric.objects.filter(project__isnull=True, builtin_key__in=[b.seed for b in BUILTINS])
    return {rubric.name: rubric.latest_version() for rubric in rubrics}


@pytest.fixture
def sample_item():
    return ItemRecord(
        external_id="s-1",
        context=[
            {"speaker": "USER", "text": "My cat died last week."},
            {"speaker": "BOT", "text": "I'm so sorry. How are you holding up?"},
            {"speaker": "USER", "text": "Not great. The house feels empty."},
        ],
        response={"speaker": "BOT", "text": "That emptiness is hard. Do you want to tell me about her?"},
        baseline={"speaker": "BOT", "text": "Cats live about fifteen years."},
        metadata={"topic": "Pet_Loss"},
    )
