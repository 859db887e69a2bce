"""Real data has empty answers: an empty text imports as an empty turn and is counted; only a missing text
is an error. Read from ../shared/data in place (never copied)."""

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from datasets.models import Dataset, Item
from datasets.records import check_item_object
from datasets.services import import_dataset
from tests.shared_data import SHARED_DATA as SHARED

from .helpers import write_jsonl

MTBENCH = SHARED / "alttest" / "mtbench" / "human_annotations.json"
PANDALM = SHARED / "pandalm-testset" / "testset-v1.json"
EMPTY_ANSWER_MODEL = "llama-13b"


def mtbench_style_items() -> list[dict]:
    """One pairwise item per MT-Bench human judgment instance, ids as in the data
    (question__model_a__model_b__turn).

    The judgments carry no answer texts, so texts are written here; the answers of one model are
    empty strings, as some answers in MT-Bench's human judgments are. A = model_a = baseline,
    B = model_b = response.
    """
    with MTBENCH.open(encoding="utf-8") as handle:
        instances = sorted({key for labels in json.load(handle).values() for key in labels})
    items = []
    for key in instances:
        question, model_a, model_b, turn = key.split("__")

        def answer(model: str, number: str, question: str = question) -> dict:
            text = f"{model} answers question {question}, turn {number}."
            text = "" if model == EMPTY_ANSWER_MODEL else text
            return {"speaker": "BOT", "text": text}

        turns = [{"speaker": "USER", "text": f"MT-Bench question {question}, turn 1"}]
        if turn == "2":
            follow_up = {"speaker": "USER", "text": f"MT-Bench question {question}, turn 2"}
            turns += [answer(model_b, "1"), follow_up]
        items.append(
            {"id": key, "turns": turns, "response": answer(model_b, turn), "baseline": answer(model_a, turn)}
        )
    return items


def expected_empty_texts(items: list[dict]) -> int:
    turns = [turn for item in items for turn in [*item["turns"], item["response"], item["baseline"]]]
    return sum(1 for turn in turns if not turn["text"])


@pytest.mark.skipif(not MTBENCH.exists(), reason="../shared/data is not present")
def test_mtbench_style_pairwise_data_with_empty_answers_imports_whole(project, tmp_path, capsys):
    items = mtbench_style_items()
    path = write_jsonl(tmp_path / "mtbench.jsonl", items)
    call_command("import_dataset", str(path), "--project", project.slug, "--name", "MT-Bench")
    dataset = Dataset.objects.get(name="MT-Bench")
    empty = expected_empty_texts(items)
    assert dataset.item_count == len(items) == 120 and empty > 0
    assert f"{empty} empty texts imported as empty turns" in capsys.readouterr().out
    stored = Item.objects.get(dataset=dataset, external_id="82__gpt-3.5-turbo__llama-13b__1")
    assert stored.response == {"speaker": "BOT", "text": ""} and stored.has_baseline


@pytest.mark.skipif(not PANDALM.exists(), reason="../shared/data is not present")
def test_pandalm_empty_responses_import_as_they_are(project, tmp_path):
    with PANDALM.open(encoding="utf-8") as handle:
        rows = json.load(handle)
    items = [
        {
            "id": f"pandalm-{row['idx']}",
            "turns": [{"speaker": "USER", "text": f"{row['instruction']}\n{row['input']}".strip()}],
            "baseline": {"speaker": "BOT", "text": str(row["response1"])},
            "response": {"speaker": "BOT", "text": str(row["response2"])},
        }
        for row in rows
    ]
    blank = sum(1 for row in rows for key in ("response1", "response2") if not str(row[key]).strip())
    result = import_dataset(project=project, name="PandaLM", path=write_jsonl(tmp_path / "p.jsonl", items))
    assert result.ok and result.created == 999
    assert result.empty_text_count == blank == 54


def test_only_a_missing_text_is_an_error():
    record, errors = check_item_object(
        {"id": "x", "turns": [{"speaker": "USER", "text": ""}], "response": {"speaker": "BOT"}}
    )
    assert record is None
    assert [(e.field, e.message) for e in errors] == [("response.text", "missing text")]
    record, errors = check_item_object({"id": "x", "turns": [], "response": ""})
    assert errors == [] and record is not None
    assert record.response == {"speaker": "BOT", "text": ""} and record.empty_texts() == 1


def test_csv_long_empty_text_imports_as_an_empty_turn(project, tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("dialog_id,turn_index,speaker,text\nd1,0,USER,Hello\nd1,1,BOT,\n", encoding="utf-8")
    result = import_dataset(project=project, name="Long", path=path)
    assert result.ok and result.empty_text_count == 1
    assert Item.objects.get(external_id="d1").response == {"speaker": "BOT", "text": ""}


def test_item_browser_and_upload_page_show_empty_responses(researcher_client, project, tmp_path):
    items = [
        {
            "id": f"e-{n}",
            "turns": [{"speaker": "USER", "text": "Hi"}],
            "response": {"speaker": "BOT", "text": text},
        }
        for n, text in ((1, ""), (2, "Hey"))
    ]
    path = write_jsonl(tmp_path / "e.jsonl", items)
    with path.open("rb") as handle:
        response = researcher_client.post(
            reverse("dataset_upload", args=[project.slug]),
            {"name": "Empty", "file": handle, "format": "auto"},
            follow=True,
        )

    page = response.content.decode()
    assert "1 empty text (response, baseline or turn) imported as empty turn" in page
    dataset = Dataset.objects.get(name="Empty")
    listing = researcher_client.get(reverse("dataset_detail", args=[project.slug, dataset.pk]))
    assert listing.content.decode().count('data-role="empty-text">(empty response)') == 1
    item = Item.objects.get(external_id="e-1")
    detail = researcher_client.get(reverse("item_detail", args=[project.slug, dataset.pk, item.pk]))
    assert 'data-role="empty-text">(empty response)' in detail.content.decode()


def test_rating_page_shows_an_empty_answer_as_empty_response(annotator_client, project, annotator):
    from tests import factories

    dataset = factories.make_dataset(project, items=1)
    Item.objects.filter(dataset=dataset).update(
        response={"speaker": "BOT", "text": ""}, baseline={"speaker": "BOT", "text": " "}
    )
    likert = factories.make_rubric(project=project, name="Repetition")
    pairwise = factories.make_rubric(project=project, name="Which is better", kind="pairwise")
    evaluation = factories.make_evaluation(project, dataset, [likert, pairwise], annotators=[annotator])
    page = annotator_client.get(reverse("rate_next", args=[project.slug, evaluation.pk]), follow=True)
    assert page.content.decode().count('data-role="empty-text">(empty response)') >= 2
