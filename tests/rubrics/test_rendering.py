"""Rendering: the built-ins reproduce their seed files with the item substituted, character for character."""

import pytest

from datasets.records import ItemRecord
from rubrics.builtins import BUILTINS
from rubrics.rendering import RenderError, item_variables, render_prompt
from tests import factories
from tests.rubrics.conftest import SHARED_SEEDS, SHIPPED_SEEDS, seed_text

SEEDS = {builtin.name: builtin.seed for builtin in BUILTINS}
DIALOG = (
    "USER: My cat died last week.\n"
    "BOT: I'm so sorry. How are you holding up?\n"
    "USER: Not great. The house feels empty.\n"
    "BOT: That emptiness is hard. Do you want to tell me about her?"
)


class Template:
    def __init__(self, text: str, target: str = "last_turn"):
        self.prompt_template, self.target = text, target


def test_repetitiveness_renders_seed_000_with_the_dialog(builtins, sample_item):
    expected = seed_text(SEEDS["Repetitiveness"]).replace("{{Dialog}}", DIALOG)
    assert render_prompt(builtins["Repetitiveness"], sample_item) == expected


def test_empathetical_understanding_renders_seed_001_with_the_dialog(builtins, sample_item):
    expected = seed_text(SEEDS["Empathetical understanding"]).replace("{{Dialog}}", DIALOG)
    assert render_prompt(builtins["Empathetical understanding"], sample_item) == expected


def test_multi_turn_chat_quality_renders_seed_002_with_history_prompt_and_both_responses(
    builtins, sample_item
):
    expected = (
        seed_text(SEEDS["Multi-turn chat quality"])
        .replace("{history}", "USER: My cat died last week.\nBOT: I'm so sorry. How are you holding up?")
        .replace("{prompt}", "Not great. The house feels empty.")
        .replace("{baseline_model_response}", "Cats live about fifteen years.")
        .replace("{response}", "That emptiness is hard. Do you want to tell me about her?")
    )
    rendered = render_prompt(builtins["Multi-turn chat quality"], sample_item)
    assert rendered == expected
    assert rendered.endswith("her?  // candidate_model_response\n")


def test_context_fit_appends_the_item_in_the_format_of_seed_003_examples(builtins, sample_item):
    seed = seed_text(SEEDS["Context fit and emotion attention"])
    assert seed.count("canâ€™t") == 1
    expected = seed.replace("canâ€™t", "can’t") + (
        "\nDialogue in [Pet_Loss]:\n"
        "USER: My cat died last week.\n"
        "BOT: I'm so sorry. How are you holding up?\n"
        "USER: Not great. The house feels empty.\n"
        "\n"
        "Evaluation sentence:\n"
        "BOT: That emptiness is hard. Do you want to tell me about her?\n"
        "\n"
        "Output Evaluation Form (score ONLY):\n"
    )
    assert render_prompt(builtins["Context fit and emotion attention"], sample_item) == expected


def test_seed_003_without_topic_uses_a_plain_dialogue_header(builtins, sample_item):
    sample_item.metadata = {}
    rendered = render_prompt(builtins["Context fit and emotion attention"], sample_item)
    assert "Your Turn:\nDialogue:\nUSER: My cat died" in rendered


def test_shipped_seed_copies_are_byte_identical_to_the_shared_seeds():
    if not SHARED_SEEDS.exists():
        pytest.skip("../shared/seeds is not next to this checkout")
    for seed in SEEDS.values():
        assert (SHIPPED_SEEDS / seed).read_bytes() == (SHARED_SEEDS / seed).read_bytes()


def test_item_model_and_item_record_render_the_same(builtins, sample_item, researcher):
    project = factories.make_project(researchers=[researcher])
    dataset = factories.make_dataset(project, items=1)
    item = dataset.items.get()
    record = ItemRecord(item.external_id, item.context, item.response, item.baseline, item.metadata)
    for version in builtins.values():
        assert render_prompt(version, item) == render_prompt(version, record)


def test_both_syntaxes_match_names_case_insensitively(sample_item):
    template = Template("{{Dialog}}|{{ dialog }}|{DIALOG}|{Response}|{{Sentence}}")
    rendered = render_prompt(template, sample_item)
    parts = rendered.split("|")
    assert parts[:3] == [DIALOG, DIALOG, DIALOG]
    assert parts[3] == "That emptiness is hard. Do you want to tell me about her?"
    assert parts[4] == "BOT: That emptiness is hard. Do you want to tell me about her?"


def test_unknown_names_and_json_braces_stay_literal(sample_item):
    template = Template('Answer {"score": 4} or {} or {{unknown}} or {nope} {0} then {prompt}')
    assert render_prompt(template, sample_item) == (
        'Answer {"score": 4} or {} or {{unknown}} or {nope} {0} then Not great. The house feels empty.'
    )


def test_substituted_text_is_never_scanned_again(sample_item):
    sample_item.response = {"speaker": "BOT", "text": "I said {prompt} and {{Dialog}}"}
    assert render_prompt(Template("[{response}]"), sample_item) == "[I said {prompt} and {{Dialog}}]"


def test_metadata_keys_are_variables_and_builtin_names_win(sample_item):
    sample_item.metadata = {"Topic": "Grief", "prompt": "shadowed", "turn_count": 4, "tags": ["a", "b"]}
    template = Template("{topic}|{prompt}|{metadata.prompt}|{turn_count}|{tags}")
    assert render_prompt(template, sample_item) == (
        'Grief|Not great. The house feels empty.|shadowed|4|["a", "b"]'
    )


def test_multi_line_turn_text_is_kept_on_its_speaker_line():
    item = ItemRecord("m", [{"speaker": "A", "text": "one\ntwo"}], {"speaker": "B", "text": "three"})
    assert item_variables(item)["dialog"] == "A: one\ntwo\nB: three"
    assert item_variables(item)["history"] == ""


def test_swapped_exchanges_response_and_baseline(builtins, sample_item):
    rendered = render_prompt(builtins["Multi-turn chat quality"], sample_item, swapped=True)
    assert "### Response A\nThat emptiness is hard." in rendered
    assert "### Response B\nCats live about fifteen years.  // candidate_model_response" in rendered


def test_pairwise_prompt_for_an_item_without_baseline_is_refused(builtins, sample_item):
    sample_item.baseline = None
    with pytest.raises(RenderError, match="s-1 has no baseline"):
        render_prompt(builtins["Multi-turn chat quality"], sample_item)
    with pytest.raises(RenderError, match="cannot be swapped"):
        render_prompt(builtins["Repetitiveness"], sample_item, swapped=True)


def test_template_without_placeholder_and_no_sentence_target_gets_the_dialog_appended(sample_item):
    assert render_prompt(Template("Rate it."), sample_item) == f"Rate it.\n\nDialog:\n\n{DIALOG}\n"
