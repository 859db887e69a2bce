import pytest
from django.core.management import CommandError, call_command

from datasets.models import Dataset, Item

from .helpers import database_state, dialog, write_jsonl


def test_import_dataset_command_prints_counts(project, tmp_path, capsys):
    path = write_jsonl(tmp_path / "d.jsonl", [dialog(n) for n in range(3)])
    call_command("import_dataset", str(path), "--project", project.slug, "--name", "CLI")
    out = capsys.readouterr().out
    assert "Imported 3 items into dataset 'CLI'" in out and "jsonl, UTF-8" in out
    assert Dataset.objects.get(name="CLI").item_count == 3


def test_import_dataset_command_refuses_with_errors_and_nonzero_exit(project, tmp_path, capsys):
    path = write_jsonl(tmp_path / "d.jsonl", [dialog(0), dialog(0), {"id": "x"}])
    before = database_state()
    with pytest.raises(CommandError, match="refused: 2 problem"):
        call_command("import_dataset", str(path), "--project", project.slug, "--name", "CLI")
    err = capsys.readouterr().err
    assert "line 2, field id: duplicate id 'd-0'" in err and "line 3, field turns" in err
    assert database_state() == before


def test_import_dataset_command_options(project, tmp_path, capsys):
    moji = dialog(0, response={"speaker": "BOT", "text": "naÃ¯ve"})
    path = tmp_path / "m.jsonl"
    path.write_bytes(write_jsonl(tmp_path / "tmp.jsonl", [moji]).read_text().encode("utf-16"))
    call_command(
        "import_dataset",
        str(path),
        "--project",
        project.slug,
        "--name",
        "M",
        "--repair-text",
        "--convert-encoding",
    )
    assert "repaired line 1, field response.text" in capsys.readouterr().out
    assert Item.objects.get().response["text"] == "naïve"
    wide = tmp_path / "w.csv"
    wide.write_text("key,said\nk1,Hello\n")
    call_command(
        "import_dataset",
        str(wide),
        "--project",
        project.slug,
        "--name",
        "M",
        "--append",
        "--column",
        "id=key",
        "--column",
        "response=said",
        "--response-speaker",
        "AGENT",
    )
    assert Item.objects.get(external_id="k1").response == {"speaker": "AGENT", "text": "Hello"}


def test_import_dataset_command_unknown_project_or_file(project, tmp_path):
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        call_command("import_dataset", "x.jsonl", "--project", "nope", "--name", "X")
    with pytest.raises(CommandError, match="no such file"):
        call_command(
            "import_dataset", str(tmp_path / "missing.jsonl"), "--project", project.slug, "--name", "X"
        )
