"""Blind, informed raters: a neutral place instead of the item's id, the guidelines and chosen metadata, an
explanation asked for only where the researcher wants one, step 1 kept across a reload, undo after a skip."""

import time

import pytest
from django.urls import reverse

from evaluations.models import Rating
from rating.models import Assignment, RaterView, Slot
from rubrics.builtins import ensure_builtin_rubrics
from rubrics.models import RubricVersion
from tests import factories

pytestmark = pytest.mark.django_db


def url(name, evaluation, *args):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk, *args])


def reserve(client, evaluation) -> Assignment:
    assert client.get(url("rate_next", evaluation)).status_code == 302
    return Assignment.objects.get(evaluation=evaluation, status="reserved")


def page_of(client, evaluation, item_id: int) -> str:
    return client.get(url("rate_item", evaluation, item_id)).content.decode()


@pytest.fixture
def builtin_evaluation(project, annotator):
    ensure_builtin_rubrics()
    versions = list(RubricVersion.objects.filter(rubric__project__isnull=True).select_related("rubric"))
    dataset = factories.make_dataset(project, items=3)
    return factories.make_evaluation(project, dataset, versions, overlap=1, annotators=[annotator])


def builtin_answers(evaluation, *, explanation: str = "") -> dict[str, str]:
    data = {"shown_at": f"{time.time() - 5:.1f}"}
    for version in evaluation.ordered_versions():
        data[f"rubric-{version.pk}"] = "A" if version.kind == "pairwise" else "3"
        data[f"explanation-{version.pk}"] = explanation
    return data


def test_raters_see_their_place_in_the_queue_never_the_items_id(annotator_client, evaluation):
    assignment = reserve(annotator_client, evaluation)
    page = page_of(annotator_client, evaluation, assignment.item_id)
    title = page[page.index("<title>") : page.index("</title>")]
    assert "item 1" in title and assignment.item.external_id not in title
    assert "item 1 of your 4" in page
    assert assignment.item.external_id not in page


def test_the_built_in_pairwise_rubric_needs_no_explanation_from_people_by_default(
    annotator_client, builtin_evaluation
):
    assignment = reserve(annotator_client, builtin_evaluation)
    page = page_of(annotator_client, builtin_evaluation, assignment.item_id)
    assert (
        "(optional; A and B as you see them)" in page and "required" not in page.split("Explanation")[1][:40]
    )
    response = annotator_client.post(
        url("rate_submit", builtin_evaluation, assignment.item_id), builtin_answers(builtin_evaluation)
    )
    assert response.status_code == 302
    assert Rating.objects.filter(item_id=assignment.item_id).count() == 4


def test_a_researcher_asks_people_to_explain_one_rubric_and_then_it_is_required(
    researcher_client, annotator_client, builtin_evaluation, annotator, researcher
):
    pairwise = next(v for v in builtin_evaluation.ordered_versions() if v.kind == "pairwise")
    settings_url = url("rater_view_settings", builtin_evaluation)
    researcher_client.force_login(researcher)
    response = researcher_client.post(
        settings_url, {"guidelines": "", "metadata_keys": "", "explain": [pairwise.pk]}
    )
    assert response.status_code == 302
    assert RaterView.objects.get(evaluation=builtin_evaluation).explain_versions == [pairwise.pk]
    annotator_client.force_login(annotator)
    assignment = reserve(annotator_client, builtin_evaluation)
    response = annotator_client.post(
        url("rate_submit", builtin_evaluation, assignment.item_id), builtin_answers(builtin_evaluation)
    )
    assert response.status_code == 400
    assert "“Multi-turn Chat Quality” asks for an explanation." in response.content.decode()
    assert not Rating.objects.exists()


def test_guidelines_are_markdown_with_nothing_that_runs_and_each_rubrics_text(
    researcher_client, evaluation, annotator, likert
):
    hostile = (
        "# Read first\n\nPrefer **specific** replies. [help](javascript:alert(1))\n\n"
        '<script>alert(1)</script><img src=x onerror="alert(2)">'
    )
    response = researcher_client.post(
        url("rater_view_settings", evaluation), {"guidelines": hostile, "metadata_keys": "topic"}
    )
    assert response.status_code == 302
    researcher_client.force_login(annotator)
    assignment = reserve(researcher_client, evaluation)
    page = page_of(researcher_client, evaluation, assignment.item_id)
    panel = page[page.index('id="guidelines"') : page.index("</details>", page.index('id="guidelines"'))]
    assert "<h1>Read first</h1>" in panel and "<strong>specific</strong>" in panel
    assert "<script" not in panel and "onerror" not in panel and "javascript:" not in panel
    assert likert.criterion in panel


def test_chosen_metadata_is_shown_escaped_and_an_unknown_key_is_refused(
    researcher_client, project, annotator, likert
):
    dataset = factories.make_dataset(project, items=1)
    dataset.items.update(metadata={"persona": "<b>I love cats</b>", "system": "KV-MemNN", "turns": [1, 2]})
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=1, annotators=[annotator])
    response = researcher_client.post(
        url("rater_view_settings", evaluation), {"metadata_keys": "persona, Topic"}
    )
    assert response.status_code == 400
    assert "no item of the dataset has the key “Topic” (keys are case-sensitive)" in response.content.decode()
    assert not RaterView.objects.exists()
    researcher_client.post(url("rater_view_settings", evaluation), {"metadata_keys": "persona, turns"})
    researcher_client.force_login(annotator)
    assignment = reserve(researcher_client, evaluation)
    page = page_of(researcher_client, evaluation, assignment.item_id)
    assert "&lt;b&gt;I love cats&lt;/b&gt;" in page and "<b>I love cats" not in page
    assert "<dd>[1, 2]</dd>" in page and "KV-MemNN" not in page


def test_only_researchers_change_what_raters_see(annotator_client, evaluation):
    assert annotator_client.get(url("rater_view_settings", evaluation)).status_code in {403, 404}
    assert annotator_client.post(url("rater_view_settings", evaluation), {"guidelines": "x"}).status_code in {
        403,
        404,
    }
    assert not RaterView.objects.exists()


def test_step_one_is_kept_across_a_reload(annotator_client, evaluation, likert, pairwise):
    assignment = reserve(annotator_client, evaluation)
    step_one = {
        "stage": "compare",
        f"rubric-{pairwise.pk}": "B",
        f"explanation-{pairwise.pk}": "B asks back.",
        "shown_at": f"{time.time() - 5:.1f}",
    }
    response = annotator_client.post(url("rate_submit", evaluation, assignment.item_id), step_one)
    assert 'data-stage="rest"' in response.content.decode()
    reloaded = page_of(annotator_client, evaluation, assignment.item_id)
    assert 'data-stage="rest"' in reloaded
    assert f'name="rubric-{pairwise.pk}" value="B"' in reloaded and "B asks back." in reloaded


def test_a_skip_can_be_undone_and_the_item_handed_next_goes_back(annotator_client, evaluation):
    skipped = reserve(annotator_client, evaluation)
    response = annotator_client.post(
        url("rate_set_aside", evaluation, skipped.item_id), {"reason": "cut off", "action": "skip"}
    )
    assert response.status_code == 302
    following = reserve(annotator_client, evaluation)
    page = page_of(annotator_client, evaluation, following.item_id)
    assert "Undo last skip" in page and url("rate_undo", evaluation, skipped.item_id) in page
    response = annotator_client.post(url("rate_undo", evaluation, skipped.item_id))
    assert response.status_code == 200
    assert "Undone: item 1 is yours to rate again" in response.content.decode()
    assert 'value="cut off"' in response.content.decode()  # the reason is back in its box
    skipped.refresh_from_db()
    assert skipped.status == "reserved" and skipped.reason == "" and skipped.finished is None
    assert not Assignment.objects.filter(pk=following.pk).exists()
    claims = dict(Slot.objects.filter(evaluation=evaluation).values_list("item_id", "claims"))
    assert claims[skipped.item_id] == 1 and claims[following.item_id] == 0


def test_a_skip_is_not_undone_once_others_filled_the_item(annotator_client, evaluation):
    skipped = reserve(annotator_client, evaluation)
    annotator_client.post(
        url("rate_set_aside", evaluation, skipped.item_id), {"reason": "cut off", "action": "skip"}
    )
    reserve(annotator_client, evaluation)
    Slot.objects.filter(evaluation=evaluation, item_id=skipped.item_id).update(claims=2, is_open=False)
    response = annotator_client.post(url("rate_undo", evaluation, skipped.item_id))
    assert response.status_code == 302
    skipped.refresh_from_db()
    assert skipped.status == "skipped"
    assert Assignment.objects.filter(evaluation=evaluation, status="reserved").count() == 1
