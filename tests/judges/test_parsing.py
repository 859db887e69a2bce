import math

import pytest

from judges.parsing import format_score, logprob_score, parse_reply

LIKERT = ["1", "2", "3", "4", "5"]
PAIRWISE = ["A", "SAME", "B"]


@pytest.mark.parametrize(
    ("text", "value", "explanation"),
    [
        ("4", "4", ""),
        ("Score: 4", "4", ""),
        ("**4**", "4", ""),
        ("4/5", "4", ""),
        ("4 - because it stays on topic", "4", "it stays on topic"),
        ("Rating: 3\nThe bot repeats itself.", "3", "The bot repeats itself."),
        ('{"score": 2, "explanation": "vague"}', "2", "vague"),
        ('```json\n{"score": "5", "explanation": "kind"}\n```', "5", "kind"),
        ("4.0", "4", ""),
        ("Evaluation Form (return score ONLY): 1", "1", ""),
    ],
)
def test_likert_replies_in_the_usual_formats_parse_to_a_scale_value(text, value, explanation):
    parsed = parse_reply(text, kind="likert", scale_values=LIKERT)
    assert (parsed.value, parsed.explanation) == (value, explanation)


@pytest.mark.parametrize(
    ("text", "error_part"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ('{"score": 7}', "not on the scale"),
        ("3.5", "not on the scale"),
        ("I think it is fine", "no score"),
        ('{"pairwise_choice": "A", "explanation": "Response A is more spec', "truncated JSON"),
        ('{"score": 4,, }', "malformed JSON"),
        ('{"verdict_text": "good"}', "none of the keys"),
    ],
)
def test_unreadable_likert_replies_are_failures_with_a_reason_never_a_score(text, error_part):
    parsed = parse_reply(text, kind="likert", scale_values=LIKERT)
    assert parsed.value is None
    assert error_part in parsed.error


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"pairwise_choice": "B", "explanation": "more specific"}', "B"),
        ('```json\n{\n "pairwise_choice": "SAME",\n "explanation": "x"\n}\n```', "SAME"),
        ("[[A]]", "A"),
        ("B - it answers the question", "B"),
        ("Verdict: tie", "SAME"),
    ],
)
def test_pairwise_choices_parse_from_json_and_text(text, value):
    assert parse_reply(text, kind="pairwise", scale_values=PAIRWISE).value == value


def test_pairwise_explanation_comes_from_the_json():
    parsed = parse_reply(
        '{"pairwise_choice": "A", "explanation": "A is kinder"}', kind="pairwise", scale_values=PAIRWISE
    )
    assert parsed.explanation == "A is kinder"


def test_a_refusal_is_not_a_pairwise_choice():
    parsed = parse_reply("I'm sorry, but I can't help with that.", kind="pairwise", scale_values=PAIRWISE)
    assert parsed.value is None


def test_categorical_label_leads_the_reply_case_insensitively():
    parsed = parse_reply("Yes, because it repeats", kind="categorical", scale_values=["yes", "no"])
    assert (parsed.value, parsed.explanation) == ("yes", "it repeats")
    assert parse_reply("maybe", kind="categorical", scale_values=["yes", "no"]).value is None


def test_logprob_score_is_weighted_mean_over_scale_tokens_only_renormalised():
    alternatives = [
        ("4", math.log(0.5)),
        ("5", math.log(0.25)),
        (" the", math.log(0.2)),
        ("3", math.log(0.05)),
    ]
    scored = logprob_score(alternatives, LIKERT)
    assert scored is not None
    score, argmax = scored
    assert score == pytest.approx((4 * 0.5 + 5 * 0.25 + 3 * 0.05) / 0.8)
    assert argmax == "4"


def test_logprob_score_is_none_without_any_scale_token():
    assert logprob_score([("The", -0.1), ("I", -2.0)], LIKERT) is None


def test_scores_are_written_canonically():
    assert [format_score(4.0), format_score(3.72154), format_score(2.5)] == ["4", "3.7215", "2.5"]
