"""How rubric scales become buttons: labels, descriptions and the keys that pick them."""

from rating.pages import pairwise_options, scale_options
from rubrics.models import RubricVersion


def version_with(scale) -> RubricVersion:
    return RubricVersion(criterion="c", scale=scale, prompt_template="")


def test_digit_values_are_their_own_keys():
    options = scale_options(version_with([{"value": str(n), "label": f"L{n}"} for n in range(1, 6)]))
    assert [(o.value, o.key, o.label) for o in options] == [(str(n), str(n), f"L{n}") for n in range(1, 6)]


def test_labels_get_their_position_as_key_up_to_nine():
    labels = [{"value": f"label-{n}", "label": f"Label {n}", "description": "d"} for n in range(11)]
    keys = [o.key for o in scale_options(version_with(labels))]
    assert keys == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", ""]


def test_ten_of_a_one_to_ten_scale_is_picked_with_zero_unless_zero_is_a_value():
    """Seen in a browser review: 10 had no key, so it could not be picked from the keyboard."""
    one_to_ten = [o.key for o in scale_options(version_with([{"value": str(n)} for n in range(1, 11)]))]
    assert one_to_ten == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0"]
    zero_to_ten = [o.key for o in scale_options(version_with([{"value": str(n)} for n in range(0, 11)]))]
    assert zero_to_ten == ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ""]


def test_pairwise_buttons_send_the_letters_shown_and_answers_store_them_canonically():
    scale = [{"value": v, "label": v, "description": f"{v} wins"} for v in ("A", "SAME", "B")]
    version = version_with(scale)
    assert [(o.key, o.value, o.label, o.description) for o in pairwise_options(version)] == [
        ("a", "A", "A (left)", "A wins"),
        ("s", "SAME", "SAME", "SAME wins"),
        ("b", "B", "B (right)", "B wins"),
    ]


def test_a_left_pick_is_the_baseline_or_the_response_depending_on_the_side_shown():
    from rating.services import read_answers
    from rubrics.models import Rubric

    version = version_with([{"value": v, "label": v} for v in ("A", "SAME", "B")])
    version.pk, version.rubric = 7, Rubric(name="Which is better", kind="pairwise")
    for shown, left_side, stored in [
        ("A", "baseline", "A"),
        ("A", "response", "B"),
        ("B", "response", "A"),
        ("SAME", "response", "SAME"),
    ]:
        answers, errors = read_answers(
            versions=[version], data={"rubric-7": shown}, left_side=left_side, explain=set()
        )
        assert not errors and answers[7].value == stored


def test_time_spent_is_kept_only_when_plausible():
    from datetime import UTC, datetime

    from rating.services import seconds_since

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert seconds_since(str(now.timestamp() - 42.25), now=now) == 42.2
    assert seconds_since(str(now.timestamp() + 5), now=now) is None  # from the future
    assert seconds_since(str(now.timestamp() - 3 * 86400), now=now) is None  # days ago: a stale tab
    assert seconds_since("nan", now=now) is None and seconds_since("", now=now) is None


def test_share_splits_the_ratings_needed_evenly_and_never_exceeds_the_items():
    from rating.progress import share_of

    assert share_of(total=100, overlap=3, annotators=7) == 43
    assert share_of(total=100, overlap=3, annotators=2) == 100
    assert share_of(total=100, overlap=3, annotators=0) == 0
