"""Version labels: every version a project can pick or see reads differently (RubricVersion.label)."""

from rubrics.services import edit_rubric


def test_a_project_copy_of_a_built_in_is_labelled_apart_from_the_built_in(builtins, project):
    builtin = builtins["Multi-turn chat quality"]
    copy = edit_rubric(
        rubric=builtin.rubric, project=project, changes={"prompt_template": builtin.prompt_template + " "}
    )
    assert builtin.label == "Multi-turn chat quality v1"
    assert copy.label == "Multi-turn chat quality (copy) v1"


def test_a_version_with_examples_says_how_many(builtins, project):
    builtin = builtins["Multi-turn chat quality"]
    copy = edit_rubric(
        rubric=builtin.rubric, project=project, changes={"prompt_template": builtin.prompt_template + " "}
    )
    copy.example_count = 6
    assert copy.label == "Multi-turn chat quality (copy) v1 + 6 examples"
    copy.example_count = 1
    assert copy.label == "Multi-turn chat quality (copy) v1 + 1 example"
