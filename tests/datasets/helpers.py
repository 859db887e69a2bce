"""Small builders for dataset files used by the dataset tests."""

import json
from pathlib import Path

from datasets.models import Dataset, Item, UploadJob


def dialog(n: int, **extra) -> dict:
    item = {
        "id": f"d-{n}",
        "turns": [
            {"speaker": "USER", "text": f"Hello, I want to talk about topic {n}."},
            {"speaker": "BOT", "text": f"Sure, topic {n} is a fine thing to talk about."},
        ],
        "metadata": {"topic": "music" if n % 2 else "sports"},
    }
    item.update(extra)
    return item


def write_jsonl(path: Path, objects, *, newline: str = "\n") -> Path:
    path.write_text("".join(json.dumps(obj) + newline for obj in objects), encoding="utf-8", newline="")
    return path


def database_state() -> tuple[int, int, list[str]]:
    """What an all-or-nothing import must leave untouched when it refuses."""
    return (
        Dataset.objects.count(),
        Item.objects.count(),
        sorted(Dataset.objects.values_list("name", flat=True)),
    )


def job_count() -> int:
    return UploadJob.objects.count()
