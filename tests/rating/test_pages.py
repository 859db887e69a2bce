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
    assert keys == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "", ""]


def test_pairwise_left_button_stores_whichever_response_is_on_the_left():
    scale = [{"value": v, "label": v, "description": f"{v} wins"} for v in ("A", "SAME", "B")]
    baseline_left = pairwise_options(version_with(scale), "baseline")
    response_left = pairwise_options(version_with(scale), "response")
    assert [(o.key, o.value, o.description) for o in baseline_left] == [
        ("a", "A", "A wins"),
        ("s", "SAME", "SAME wins"),
        ("b", "B", "B wins"),
    ]
    assert [(o.key, o.value, o.description) for o in response_left] == [
        ("a", "B", "A wins"),
        ("s", "SAME", "SAME wins"),
        ("b", "A", "B wins"),
    ]


def test_time_spent_is_kept_only_when_plausible():
    from datetime import UTC, datetime

    from rating.services import seconds_since

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert seconds_since(str(now.timestamp() - 42.25), now=now) == 42.2
    assert seconds_since(str(now.timestamp() + 5), now=now) is None  # from the future
    assert seconds_since(str(now.timestamp() - 3 * 86400), now=now) is None  # days ago: a stale tab
    assert seconds_since("nan", now=now) is None and seconds_since("", now=now) is None


def test_share_splits_the_ratings_needed_evenly_and_never_exceeds_the_items():
    from rating.services import share_of

    assert share_of(total=100, overlap=3, annotators=7) == 43
    assert share_of(total=100, overlap=3, annotators=2) == 100
    assert share_of(total=100, overlap=3, annotators=0) == 0
