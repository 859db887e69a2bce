"""G-Eval scoring reads the score's own position: the expectation over the scale values among the top
logprobs of the reply's first token that is not formatting (after one leading label such as "Score:"), or
of the token that starts a JSON reply's score value; never a later token because it happens to be a digit.

Each reply is a chat.completion as a server sends it (read by `client.reply_from`), and each expected
score is computed by hand from the logprobs written in the test."""

import math

import pytest

from judges import client
from judges.calls import read_reply
from tests import factories

pytestmark = pytest.mark.django_db


def completion(tokens: list[tuple[str, list[tuple[str, float]]]]) -> client.Reply:
    """The reply whose content is the tokens' text, each with its top logprobs (the sampled token's own
    logprob is its entry among them, or -1.0)."""
    content = [
        {
            "token": token,
            "logprob": dict(top).get(token, -1.0),
            "bytes": list(token.encode()),
            "top_logprobs": [{"token": alt, "logprob": logprob} for alt, logprob in top],
        }
        for token, top in tokens
    ]
    body = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "".join(token for token, _ in tokens)},
                "finish_reason": "stop",
                "logprobs": {"content": content},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": len(tokens)},
    }
    return client.reply_from(body, api_key="")


def expectation(mass: dict[int, float]) -> float:
    """Σ v·e^lp / Σ e^lp over the scale values found."""
    weights = {value: math.exp(logprob) for value, logprob in mass.items()}
    return sum(value * weight for value, weight in weights.items()) / sum(weights.values())


def read(reply: client.Reply, version=None):
    version = version or factories.make_rubric()
    return read_reply(reply, version=version, swapped=False, want_logprobs=True)


def test_a_reply_whose_first_token_is_not_a_score_is_scored_at_that_first_token_not_at_a_later_digit():
    """The run of the issue: `B~}5`, its first position holding the score distribution; the old reading
    took the 4th token (a sampled 5 whose only scale alternative was 3) and stored 3."""
    first = [("B", -1.05), ("3", -1.31), ("4", -1.31), ("2", -1.88), ("5", -2.00), ("1", -2.63)]
    reading = read(
        completion([("B", first), ("~", [("~", -0.1)]), ("}", [("}", -0.2)]), ("5", [("3", -2.5)])])
    )
    # (3e^-1.31 + 4e^-1.31 + 2e^-1.88 + 5e^-2.00 + 1e^-2.63) / (2e^-1.31 + e^-1.88 + e^-2.00 + e^-2.63)
    #   = (0.8095 + 1.0793 + 0.3052 + 0.6767 + 0.0721) / 0.8997 = 3.2709
    assert reading.details["score"] == pytest.approx(3.2709, abs=1e-4)
    assert reading.details["score"] == pytest.approx(
        expectation({3: -1.31, 4: -1.31, 2: -1.88, 5: -2.00, 1: -2.63})
    )
    assert (reading.value, reading.parse_failed, reading.details["position"]) == ("3.2709", False, 0)
    assert reading.details["argmax"] in ("3", "4")


def test_a_rating_label_with_the_scale_in_brackets_is_scored_at_the_value_after_it_never_at_the_1_of_1_5():
    tokens = [
        ("Rating", [("Rating", -0.01)]),
        (" (", [(" (", -0.1)]),
        ("1", [("1", -0.01), ("0", -5.0)]),
        ("-", [("-", -0.01)]),
        ("5", [("5", -0.01), ("10", -4.7)]),
        ("):", [("):", -0.01)]),
        (" ", [(" ", -0.01)]),
        ("4", [("4", -0.2), ("3", -1.9), ("5", -3.0), ("\n", -4.0)]),
    ]
    reading = read(completion(tokens))
    assert reading.details["score"] == pytest.approx(expectation({4: -0.2, 3: -1.9, 5: -3.0}))
    # (4e^-0.2 + 3e^-1.9 + 5e^-3.0) / (e^-0.2 + e^-1.9 + e^-3.0) = (3.2749 + 0.4487 + 0.2489) / 1.0180
    assert reading.details["score"] == pytest.approx(3.9020, abs=1e-4)
    assert (reading.parse_failed, reading.details["position"]) == (False, 7)


def test_leading_whitespace_and_markdown_are_skipped_to_the_score_token():
    spaced = read(completion([(" 4", [(" 4", -0.1), (" 3", -2.4), (" 5", -3.5), ("\n", -4.0)])]))
    assert spaced.details["score"] == pytest.approx(expectation({4: -0.1, 3: -2.4, 5: -3.5}))
    bold = read(
        completion([("**", [("**", -0.3)]), ("4", [("4", -0.5), ("5", -1.0)]), ("**", [("**", -0.1)])])
    )
    assert bold.details["score"] == pytest.approx(expectation({4: -0.5, 5: -1.0}))
    assert bold.details["position"] == 1


def test_a_json_reply_is_scored_at_the_token_that_starts_its_score_value_quoted_or_not():
    quoted = [
        ('{"', []),
        ("score", []),
        ('":', []),
        (' "', []),
        ("4", [("4", -0.3), ("5", -1.5), ("3", -2.2)]),
    ]
    reading = read(completion([(t, top or [(t, -0.01)]) for t, top in quoted] + [('"}', [('"}', -0.01)])]))
    assert reading.details["score"] == pytest.approx(expectation({4: -0.3, 5: -1.5, 3: -2.2}))
    bare = [('{"', []), ("score", []), ('":', []), (" 4", [(" 4", -0.7), (" 2", -0.9), (' "', -2.0)])]
    reading = read(completion([(t, top or [(t, -0.01)]) for t, top in bare] + [("}", [("}", -0.01)])]))
    assert reading.details["score"] == pytest.approx(expectation({4: -0.7, 2: -0.9}))
    assert reading.details["position"] == 3


def test_a_json_reply_is_never_scored_from_a_digit_in_an_explanation_written_before_the_score():
    tokens = [
        ('{"', []),
        ("explanation", []),
        ('":', []),
        (' "', []),
        ("2", [("2", -0.2), ("3", -1.0)]),  # "2 turns": not the score
        (" turns", []),
        (" repeat", []),
        ('",', []),
        (' "', []),
        ("score", []),
        ('":', []),
        (' "', []),
        ("4", [("4", -0.4), ("5", -1.4), ("3", -2.0)]),
        ('"}', []),
    ]
    reading = read(completion([(t, top or [(t, -0.01)]) for t, top in tokens]))
    assert reading.details["score"] == pytest.approx(expectation({4: -0.4, 5: -1.4, 3: -2.0}))
    assert reading.details["position"] == 12


def test_multi_character_tokens_count_as_the_scale_value_they_spell():
    """ "4." and "4" are both 4 (their mass adds up); '"3' is 3; "4.5" and "45" are no scale value."""
    dotted = [("4.", -0.4), ("3.", -1.3), ("4", -3.0), ("4.5", -2.0), ("45", -2.5), ("5", -2.9)]
    reading = read(completion([("4.", dotted), (" Clear", [(" Clear", -0.5)])]))
    weights = {4: math.exp(-0.4) + math.exp(-3.0), 3: math.exp(-1.3), 5: math.exp(-2.9)}
    assert reading.details["score"] == pytest.approx(
        sum(v * w for v, w in weights.items()) / sum(weights.values())
    )
    quoted = [('"4', -0.2), ('"3', -1.8), ('"', -3.0)]
    reading = read(completion([('"4', quoted), ('" - clear', [('" - clear', -0.1)])]))
    assert reading.details["score"] == pytest.approx(expectation({4: -0.2, 3: -1.8}))


def test_a_score_position_without_any_scale_value_is_a_parse_failure_not_a_later_written_score():
    tokens = [("The", [("The", -0.1), ("This", -2.0), ("I", -3.0)])]
    tokens += [(t, [(t, -0.05)]) for t in (" response", " is", " fine", ".", " Score", ":")]
    tokens += [(" 4", [(" 4", -0.1), (" 3", -2.0)])]
    reading = read(completion(tokens))
    assert (reading.value, reading.parse_failed) == ("", True)
    assert "no scale value" in reading.details["parse_error"] and "'The'" in reading.details["parse_error"]
    assert "score" not in reading.details


def test_a_scale_value_split_over_two_tokens_is_a_parse_failure():
    """On a 1-10 scale a tokenizer that spells 10 as "1" then "0" leaves the "1" alternative ambiguous."""
    scale = [{"value": str(n), "label": str(n), "description": f"{n}."} for n in range(1, 11)]
    version = factories.make_rubric(scale=scale)
    reading = read(completion([("1", [("1", -0.3), ("9", -1.0)]), ("0", [("0", -0.01)])]), version)
    assert reading.parse_failed and "the scale value 10 continues past" in reading.details["parse_error"]
    whole = read(completion([("10", [("10", -0.3), ("9", -1.0)])]), version)
    assert whole.details["score"] == pytest.approx(expectation({10: -0.3, 9: -1.0}))


def test_logprobs_that_are_no_log_probabilities_give_a_parse_failure_not_a_crash_or_a_score():
    reading = read(completion([("4", [("4", float("nan")), ("3", -1.0)])]))
    assert reading.parse_failed and "not log probabilities" in reading.details["parse_error"]
    reading = read(completion([("4", [("4", 2.0), ("3", -1.0)])]))
    assert reading.parse_failed and reading.value == ""


def test_a_score_past_the_kept_tokens_is_a_parse_failure_naming_it():
    words = [f" w{i}" for i in range(20)]
    tokens = ['{"', "explanation", '":', ' "', *words, '",', ' "', "score", '":', ' "', "4", '"}']
    reading = read(completion([(t, [(t, -0.01)]) for t in tokens]))
    assert (reading.value, reading.parse_failed) == ("", True)
    assert "past the 16 tokens" in reading.details["parse_error"]


def test_a_score_that_is_not_on_the_scale_past_its_first_token_is_a_parse_failure():
    """ "4.5" on a 1-5 scale: its first token "4" is not the answer, so its alternatives are no score."""
    reading = read(
        completion([("4", [("4", -0.2), ("5", -1.6)]), (".", [(".", -0.1)]), ("5", [("5", -0.1)])])
    )
    assert (reading.value, reading.parse_failed) == ("", True)
    assert "'4.5' continues past" in reading.details["parse_error"]
