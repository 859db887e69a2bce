"""The converters of ../shared/data keep what SOURCE.md says is in the files."""

from collections import Counter, defaultdict

from tests import shared_data


def test_pandalm_majority_labels_match_the_published_distribution():
    by_item = defaultdict(list)
    for rating in shared_data.pandalm_ratings():
        if rating["rater_kind"] == "human":
            by_item[rating["item_id"]].append(rating["value"])
    majorities = Counter(Counter(values).most_common(1)[0][0] for values in by_item.values())
    assert majorities == {"SAME": 105, "A": 422, "B": 472}


def test_pandalm_garbage_verdicts_become_parse_failures_without_value():
    failures = [r for r in shared_data.pandalm_ratings() if r["parse_failed"]]
    assert len(failures) == 25
    assert {(r["rater"], r["value"]) for r in failures} == {("gpt-3.5-turbo", "")}


def test_pandalm_items_put_response1_in_the_baseline_and_mark_empty_sides():
    items = {item["id"]: item for item in shared_data.pandalm_items()}
    assert len(items) == 999
    first = items["pandalm-0"]
    assert first["baseline"]["text"] == "If you have any questions about my rate, please let me know."
    assert first["response"]["text"] == "If you have any questions, please let me know."
    assert first["turns"][0]["text"].startswith("The sentence you are given might be too wordy")
    assert "\nIf you have any questions about my rate or if" in first["turns"][0]["text"]
    assert all(item["response"]["text"] and item["baseline"]["text"] for item in items.values())
    assert items["pandalm-18"]["metadata"]["empty_responses"] == ["baseline"]
    assert items["pandalm-157"]["baseline"]["text"] == "True"


def test_usr_items_alternate_speakers_ending_with_the_partner_turn():
    items = shared_data.usr_items()
    assert len(items) == 300
    turns = items[0]["turns"]
    assert len(turns) == 15
    assert turns[-1] == {"speaker": "USER", "text": "really would you share or are you shy"}
    assert [turn["speaker"] for turn in turns[-3:]] == ["USER", "BOT", "USER"]
    assert items[0]["metadata"]["model"] == "Original Ground Truth"
    assert items[0]["metadata"]["fact"].startswith("your persona: i also have a dog walking business.")


def test_usr_ratings_cover_six_criteria_with_named_raters_inside_each_scale():
    ratings = shared_data.usr_ratings()
    assert len(ratings) == 5400
    assert {r["rater"] for r in ratings} == set(shared_data.USR_ANNOTATORS)
    for criterion in shared_data.USR_CRITERIA:
        allowed = {option["value"] for option in shared_data.usr_scale(criterion)}
        assert {r["value"] for r in ratings if r["rubric"] == criterion} == allowed


def test_write_usr_puts_items_ratings_and_rubric_specs_in_the_directory(tmp_path):
    written = shared_data.write_usr(tmp_path, limit=2)
    assert written.item_count == 10
    assert written.rating_count == 10 * 6 * 3
    assert written.items_path.read_text().count("\n") == 10
    assert written.ratings_path.read_text().splitlines()[0] == ",".join(shared_data.RATING_COLUMNS)
    assert set(written.rubric_paths) == set(shared_data.USR_CRITERIA)
