"""render_prompt and import_rubric, run as a researcher would run them."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from rubrics.models import Rubric, RubricVersion
from rubrics.rendering import render_prompt
from tests import factories
from tests.rubrics.conftest import seed_text

ITEM = {
    "id": "d-17",
    "turns": [{"speaker": "USER", "text": "I got the job!"}, {"speaker": "BOT", "text": "Congratulations!"}],
    "response": {"speaker": "BOT", "text": "You must be thrilled."},
    "baseline": {"speaker": "BOT", "text": "Ok."},
    "metadata": {"topic": "Work"},
}


def run(command: str, *args, **options) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


@pytest.fixture
def item_file(tmp_path):
    path = tmp_path / "item.json"
    path.write_text(json.dumps(ITEM), encoding="utf-8")
    return path


def test_render_prompt_prints_exactly_the_rendered_prompt(builtins, item_file):
    from datasets.records import parse_item_object

    version = builtins["Repetitiveness"]
    output = run("render_prompt", rubric="repetitiveness", item_json=str(item_file))
    assert output == render_prompt(version, parse_item_object(ITEM))
    assert output.endswith(
        "USER: I got the job!\nBOT: Congratulations!\nBOT: You must be thrilled.\n\n\n"
        "Evaluation Form (return score ONLY):"
    )


def test_render_prompt_takes_a_version_and_swaps_on_request(builtins, item_file):
    output = run("render_prompt", rubric="Multi-turn chat quality@1", item_json=str(item_file), swapped=True)
    assert (
        "### Response A\nYou must be thrilled.\n\n### Response B\nOk.  // candidate_model_response\n"
        in output
    )


def test_render_prompt_uses_the_projects_own_rubric(item_file, researcher):
    project = factories.make_project(name="Jobs", researchers=[researcher])
    factories.make_rubric(project=project, name="Warmth", template="Warmth of: {response} ({topic})")
    output = run("render_prompt", rubric="Warmth", item_json=str(item_file), project="jobs")
    assert output == "Warmth of: You must be thrilled. (Work)"


@pytest.mark.parametrize(
    ("rubric", "message"),
    [
        ("Nope", "no rubric named 'Nope' in the built-in rubrics"),
        ("Repetitiveness@9", "Repetitiveness has no version 9 (versions: 1)"),
        ("Repetitiveness@x", "must be a number, not 'x'"),
    ],
)
def test_render_prompt_refuses_an_unknown_rubric_or_version(builtins, item_file, rubric, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run("render_prompt", rubric=rubric, item_json=str(item_file))


def test_render_prompt_names_the_problem_in_a_bad_item(builtins, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"id": "x", "turns": [}', encoding="utf-8")
    with pytest.raises(CommandError, match="line 1, column 23: malformed JSON"):
        run("render_prompt", rubric="Repetitiveness", item_json=str(broken))
    no_id = tmp_path / "no_id.json"
    no_id.write_text(json.dumps({"turns": ITEM["turns"]}), encoding="utf-8")
    with pytest.raises(CommandError, match="field id: missing id"):
        run("render_prompt", rubric="Repetitiveness", item_json=str(no_id))


def test_import_rubric_from_seed_text_into_a_project(project, tmp_path):
    path = tmp_path / "seed.txt"
    path.write_text(seed_text("001_cb6913e604c61025.txt"), encoding="utf-8")
    output = run("import_rubric", str(path), project=project.slug, name="Empathy")
    rubric = Rubric.objects.get(project=project, name="Empathy")
    version = rubric.versions.latest("number")
    assert "Imported Empathy@1 (likert, target last_turn)" in output
    assert [o["label"] for o in version.scale] == ["Poor", "Fair", "Good", "Very Good", "Excellent"]
    assert version.prompt_template == seed_text("001_cb6913e604c61025.txt")


def test_import_rubric_from_json_spec_and_again_makes_a_new_version(project, tmp_path):
    spec = {
        "name": "Redundant", "kind": "categorical", "scale": [{"value": "yes"}, {"value": "no"}],
        "prompt_template": "Redundant?\n{{Dialog}}", "output_format": "json",
    }  # fmt: skip
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    run("import_rubric", str(path), project=project.slug)
    assert "unchanged" in run("import_rubric", str(path), project=project.slug)
    path.write_text(json.dumps({**spec, "prompt_template": "Is it redundant?\n{{Dialog}}"}), encoding="utf-8")
    assert "Imported Redundant@2" in run("import_rubric", str(path), project=project.slug)
    versions = RubricVersion.objects.filter(rubric__project=project, rubric__name="Redundant")
    assert [v.number for v in versions] == [1, 2]
    assert versions[0].prompt_template == "Redundant?\n{{Dialog}}"


def test_import_rubric_accepts_a_metadata_key_of_the_projects_items(project, tmp_path):
    factories.make_dataset(project, items=2)  # items carry metadata "topic"
    path = tmp_path / "spec.json"
    spec = {
        "name": "T",
        "kind": "likert",
        "scale": [{"value": 1}, {"value": 2}],
        "prompt_template": "{topic}",
    }
    path.write_text(json.dumps(spec), encoding="utf-8")
    run("import_rubric", str(path), project=project.slug)
    with pytest.raises(CommandError, match=r"unknown placeholder \{topic\}"):
        run("import_rubric", str(path), name="Shared T")  # no project: no items to know topic from


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "the file is empty|the text is empty"),
        ("Evaluation Criteria:\nClarity (1-5) - clear.\n{{Dialog}}\n", "no scale"),
        (
            "Evaluation Criteria:\nC (1-2) - c.\n- 1 (No): n\n- 2 (Yes): y\n{{Dialgo}}\n",
            "unknown placeholder",
        ),
        ('{"name": "x", "kind": ', "malformed JSON at line 1, column 23"),
    ],
)
def test_import_rubric_refuses_bad_input_and_changes_nothing(project, tmp_path, content, message):
    path = tmp_path / "rubric.txt"
    path.write_text(content, encoding="utf-8")
    before = RubricVersion.objects.count()
    with pytest.raises(CommandError, match=message):
        run("import_rubric", str(path), project=project.slug, name="Bad")
    assert RubricVersion.objects.count() == before
    assert not Rubric.objects.filter(name="Bad").exists()


def test_import_rubric_refuses_an_unknown_project(db, tmp_path):
    with pytest.raises(CommandError, match="no project with slug 'ghost'"):
        run("import_rubric", str(tmp_path / "x.txt"), project="ghost")
