"""The Done-when datasets of issue 3: both public datasets import through the CLI."""

from pathlib import Path

import pytest
from django.core.management import call_command

from datasets.models import Dataset
from tests.shared_data import write_pandalm, write_usr

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
DEMO = Path(__file__).resolve().parents[2] / "projects" / "demo" / "dataset.jsonl"


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data is not present")
def test_pandalm_and_usr_import_through_the_cli(project, tmp_path, capsys):
    pandalm, usr = write_pandalm(tmp_path), write_usr(tmp_path)
    call_command("import_dataset", str(pandalm.items_path), "--project", project.slug, "--name", "PandaLM")
    call_command("import_dataset", str(usr.items_path), "--project", project.slug, "--name", "USR")
    pandalm_set, usr_set = Dataset.objects.get(name="PandaLM"), Dataset.objects.get(name="USR")
    assert pandalm_set.item_count == 999
    assert all(item.has_baseline for item in pandalm_set.items.all()[:50])
    assert usr_set.item_count == usr_set.items.count() > 0
    assert "Imported 999 items" in capsys.readouterr().out


@pytest.mark.skipif(not DEMO.exists(), reason="no demo dataset")
def test_the_demo_dataset_imports(project):
    call_command("import_dataset", str(DEMO), "--project", project.slug, "--name", "Demo")
    assert Dataset.objects.get(name="Demo").item_count > 0


def test_the_raw_pandalm_file_is_refused_naming_the_keys_it_has(project, tmp_path):
    """Seen in a browser review: 1,998 problems ('missing id', 'missing turns') and no word of what the file
    holds instead; the raw file is a JSON array of PandaLM's own records."""
    import json

    from datasets.services import import_dataset
    from tests.shared_data import SHARED_DATA

    raw = SHARED_DATA / "pandalm-testset" / "testset-v1.json"
    records = json.loads(raw.read_text())[:3]
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(records))
    result = import_dataset(project=project, name="Raw PandaLM", path=path)
    assert not result.ok
    turns = [error.message for error in result.errors if error.field == "turns"]
    keys = ", ".join(sorted(records[0])[:8])
    assert turns and all(f"(this item's keys: {keys}" in message for message in turns)
