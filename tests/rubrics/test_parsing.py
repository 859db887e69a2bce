"""Parsing seed-style texts and JSON specs, and refusing what cannot become a rubric."""

import json

import pytest

from rubrics.builtins import BUILTINS
from rubrics.parsing import (
    RubricParseError,
    find_mojibake,
    parse_json_spec,
    parse_prompt_text,
    parse_rubric_source,
)
from tests.rubrics.conftest import seed_text

SEEDS = {builtin.name: builtin for builtin in BUILTINS}


def parsed_seed(name: str, **options):
    return parse_prompt_text(seed_text(SEEDS[name].seed), **options)


def test_seed_000_scale_is_very_repetitive_to_not_repetitive_with_descriptions():
    parsed = parsed_seed("Repetitiveness")
    assert [(o["value"], o["label"]) for o in parsed.scale] == [
        ("1", "Very Repetitive"), ("2", "Repetitive"), ("3", "Moderately Repetitive"),
        ("4", "Slightly Repetitive"), ("5", "Not Repetitive"),
    ]  # fmt: skip
    assert parsed.scale[0]["description"].startswith("The response is highly repetitive, reiterating")
    assert (parsed.kind, parsed.target, parsed.output_format) == ("likert", "last_turn", "score")
    assert parsed.criterion == "Repetitiveness"
    assert parsed.description == "the degree to which the chatbot was repetitive."
    assert len(parsed.steps) == 5 and parsed.steps[0].startswith("Read the Entire Dialogue:")
    assert parsed.placeholders == ["Dialog"]


def test_seed_001_scale_is_poor_to_excellent():
    parsed = parsed_seed("Empathetical understanding")
    assert [o["label"] for o in parsed.scale] == ["Poor", "Fair", "Good", "Very Good", "Excellent"]
    assert [o["value"] for o in parsed.scale] == ["1", "2", "3", "4", "5"]
    assert parsed.scale[4]["description"].startswith("The chatbot’s response demonstrates deep empathetical")
    assert parsed.criterion == "Empathetical understanding"
    assert len(parsed.steps) == 4


def test_seed_002_is_pairwise_a_same_b_with_explanation():
    parsed = parsed_seed("Multi-turn chat quality")
    assert [o["value"] for o in parsed.scale] == ["A", "SAME", "B"]
    assert parsed.scale[1]["description"].startswith("Response A and Response B demonstrate comparable")
    assert (parsed.kind, parsed.target, parsed.output_format) == ("pairwise", "pairwise", "pairwise_json")
    assert parsed.explanation_required
    assert parsed.criterion == "Multi-turn Chat Quality"
    assert len(parsed.steps) == 6
    assert parsed.placeholders == ["history", "prompt", "baseline_model_response", "response"]


def test_seed_003_is_one_to_five_points_on_a_sentence_without_placeholders():
    parsed = parsed_seed("Context fit and emotion attention")
    assert [(o["value"], o["label"]) for o in parsed.scale] == [
        ("1", "1 point"), ("2", "2 points"), ("3", "3 points"), ("4", "4 points"), ("5", "5 points"),
    ]  # fmt: skip
    assert parsed.scale[4]["description"].startswith("The current sentence perfectly fits")
    assert (parsed.kind, parsed.target) == ("likert", "sentence")
    assert parsed.placeholders == []
    assert parsed.criterion == "Context Fit and Emotion Attention"
    assert len(parsed.steps) == 3


def test_seed_003_mojibake_is_reported_and_repaired_only_when_asked():
    text = seed_text(SEEDS["Context fit and emotion attention"].seed)
    found = find_mojibake(text)
    assert [(r.before, r.after) for r in found] == [("canâ€™t", "can’t")]
    assert parse_prompt_text(text).prompt_template == text
    repaired = parse_prompt_text(text, repair_text=True)
    assert repaired.prompt_template == text.replace("canâ€™t", "can’t")
    assert "Repaired mojibake" in repaired.version_fields()["notes"]
    assert "'canâ€™t' -> 'can’t'" in repaired.version_fields()["notes"]


def test_seed_001_curly_quotes_are_not_mojibake():
    assert find_mojibake(seed_text(SEEDS["Empathetical understanding"].seed)) == []


def test_empty_text_is_refused():
    with pytest.raises(RubricParseError, match="empty"):
        parse_prompt_text("  \n ")


def test_text_without_scale_is_refused_saying_so():
    text = "Evaluation Criteria:\nClarity (1-5) - how clear it is.\n\nDialog:\n{{Dialog}}\n"
    with pytest.raises(RubricParseError) as refused:
        parse_prompt_text(text)
    assert refused.value.problems == [
        "no scale: expected at least two lines like 'Rating 1 (Label): ...', '- 1 (Label): ...', "
        "'1 point: ...' or '\"A\": ...'"
    ]


def test_unknown_placeholder_is_refused_with_its_line_and_a_suggestion():
    text = "Evaluation Criteria:\nClarity (1-5) - how clear.\n- 1 (Bad): bad\n- 2 (Good): good\n{{Dialgo}}\n"
    with pytest.raises(RubricParseError) as refused:
        parse_prompt_text(text)
    [problem] = refused.value.problems
    assert problem.startswith("line 5: unknown placeholder {{Dialgo}}")
    assert "Did you mean {dialog}?" in problem


def test_literal_json_braces_in_a_prompt_are_fine():
    text = (
        "Evaluation Criteria:\nClarity (1-5) - how clear.\n- 1 (Bad): bad\n- 2 (Good): good\n"
        'Dialog: {dialog}\nAnswer as {"score": 2, "why": "..."} or {}.\n'
    )
    assert parse_prompt_text(text).placeholders == ["dialog"]


def test_a_project_metadata_key_counts_as_known():
    text = "Evaluation Criteria:\nFit (1-5) - fit.\n- 1 (Bad): bad\n- 2 (Good): good\n{dialog} in {topic}\n"
    parsed = parse_prompt_text(text, is_metadata_key=lambda name: name == "topic")
    assert parsed.placeholders == ["dialog", "topic"]


def test_repeated_scale_value_is_refused():
    text = "Evaluation Criteria:\nFit (1-5) - fit.\n- 1 (Bad): bad\n- 1 (Good): good\n- 2 (Ok): ok\n{dialog}"
    with pytest.raises(RubricParseError, match="line 4: scale value 1 appears twice"):
        parse_prompt_text(text)


def spec(**changes):
    base = {
        "name": "Redundant", "kind": "categorical",
        "scale": [{"value": "yes", "label": "Yes"}, {"value": "no", "label": "No", "description": "Fine."}],
        "prompt_template": "Is the last response redundant?\n{dialog}\nAnswer yes or no.",
    }  # fmt: skip
    base.update(changes)
    return json.dumps(base)


def test_json_spec_gives_a_categorical_rubric_with_defaults():
    parsed = parse_json_spec(spec(steps=["Read.", "Decide."]))
    assert (parsed.name, parsed.kind, parsed.criterion, parsed.target) == (
        "Redundant", "categorical", "Redundant", "last_turn",
    )  # fmt: skip
    assert parsed.scale == [
        {"value": "yes", "label": "Yes", "description": ""},
        {"value": "no", "label": "No", "description": "Fine."},
    ]
    assert parsed.steps == ["Read.", "Decide."]


def test_malformed_json_is_refused_with_line_and_column():
    with pytest.raises(RubricParseError, match=r"malformed JSON at line 2, column 1"):
        parse_json_spec('{"name": "x",\n}')


def test_json_spec_missing_fields_are_each_named():
    with pytest.raises(RubricParseError) as refused:
        parse_json_spec(json.dumps({"kind": "likert", "extra": 1}))
    problems = " | ".join(refused.value.problems)
    assert "unknown fields extra" in problems
    assert "field name: missing" in problems
    assert "field prompt_template: missing" in problems
    assert "field scale: no scale" in problems


def test_json_pairwise_spec_needs_exactly_a_same_b():
    scale = [{"value": "B"}, {"value": "A"}]
    with pytest.raises(RubricParseError, match='exactly "A", "SAME", "B"'):
        parse_json_spec(spec(kind="pairwise", scale=scale, prompt_template="{response} vs {baseline}"))


def test_json_likert_spec_needs_numeric_values():
    with pytest.raises(RubricParseError, match="a likert scale needs numbers, found 'yes'"):
        parse_json_spec(spec(kind="likert"))


def test_json_spec_unknown_placeholder_is_refused_unless_declared():
    with pytest.raises(
        RubricParseError, match=r"field prompt_template, line 1: unknown placeholder \{fact\}"
    ):
        parse_json_spec(spec(prompt_template="{fact}\n{dialog}"))
    assert parse_json_spec(spec(prompt_template="{fact}\n{dialog}", variables=["fact"])).placeholders == [
        "fact", "dialog",
    ]  # fmt: skip


def test_quoted_labels_other_than_a_same_b_make_a_categorical_rubric():
    text = (
        "Evaluation Criteria:\nRedundancy (yes/no) - does the response repeat itself?\n\n"
        '"yes": The response repeats earlier content.\n"no": It does not.\n\nDialog:\n{{Dialog}}\n'
    )
    parsed = parse_prompt_text(text, name="Redundant")
    assert (parsed.kind, parsed.name, parsed.criterion) == ("categorical", "Redundant", "Redundancy")
    assert parsed.description == "does the response repeat itself?"
    assert parsed.scale == [
        {"value": "yes", "label": "yes", "description": "The response repeats earlier content."},
        {"value": "no", "label": "no", "description": "It does not."},
    ]


def test_an_overlong_name_is_refused_rather_than_cut():
    with pytest.raises(RubricParseError, match="name: 201 characters long; at most 200"):
        parse_json_spec(spec(name="x" * 201))


@pytest.mark.parametrize(
    "hostile",
    [
        "Evaluation Criteria:\na" + " " * 60_000 + "b\n#a" + " " * 60_000 + "b\n1 (Bad): x\n2 (Good): y\n",
        "Evaluation Criteria:\nX (" + " " * 60_000 + "b\n1" + " " * 60_000 + "(x\n",
        "Metric Definition:\n" + "You will be assessing x " * 5_000 + "\n",
    ],
)
def test_lines_built_to_make_the_patterns_backtrack_are_parsed_at_once(hostile):
    """Lines with long runs of spaces made the heading and criterion patterns try every split of the run:
    a 120 KB upload held a web worker for 30 s."""
    import time
    from contextlib import suppress

    started = time.monotonic()
    with suppress(RubricParseError):  # refused or not, what matters here is that it took no time
        parse_rubric_source(hostile)
    assert time.monotonic() - started < 2
