"""The annotator's flow through HTTP: landing, blind comparison, refusals, undo, reopening, true counts."""

import csv
import io
import re
import time

import pytest
from django.urls import reverse

from evaluations.models import Rating
from rating import revisit, services
from rating.models import Assignment
from tests import factories
from tests.rating.test_rate_pages import answers, reserve, url

pytestmark = pytest.mark.django_db


def test_an_annotator_lands_on_the_rating_queue_and_a_researcher_on_projects(
    client, annotator, researcher, evaluation
):
    client.force_login(annotator)
    landing = client.get(reverse("project_list"))
    assert landing.status_code == 302 and landing.url == reverse("annotator_home")
    home = client.get(reverse("annotator_home")).content.decode()
    assert home.count("Start rating") == 1 and "New project" not in home
    assert f'href="{reverse("project_detail", args=[evaluation.project.slug])}"' not in home
    client.force_login(researcher)
    assert client.get(reverse("project_list")).status_code == 200


def test_the_comparison_page_never_says_which_card_is_the_response(annotator_client, evaluation, annotator):
    assignment = reserve(annotator_client, evaluation)
    item = assignment.item
    pages = {}
    for side in ["baseline", "response"]:
        Assignment.objects.filter(pk=assignment.pk).update(left_side=side)
        page = annotator_client.get(url("rate_item", evaluation, item.pk)).content.decode()
        panel = page[page.index('id="rating-panel"') :]
        # The response appears once, as a card; the dialog stops at the prompt.
        assert panel.count(item.response["text"]) == 1 and panel.count(item.baseline["text"]) == 1
        assert "turn bot target" not in panel and 'data-role="response"' not in panel
        assert "baseline" not in panel.lower()
        pages[side] = panel
    # Swapping the two texts turns one person's page into the other's: nothing else differs.
    swapped = (
        pages["baseline"]
        .replace(item.response["text"], "\0")
        .replace(item.baseline["text"], item.response["text"])
        .replace("\0", item.baseline["text"])
    )

    def strip(text):  # the form's time stamp and masked CSRF token differ from request to request
        return re.sub(r'name="(shown_at|csrfmiddlewaretoken)" value="[^"]*"', "", text)

    assert strip(swapped) == strip(pages["response"])


def test_an_htmx_refusal_returns_only_the_forms_retargeted_with_what_was_typed(
    annotator_client, evaluation, likert, pairwise
):
    assignment = reserve(annotator_client, evaluation)
    data = {f"explanation-{pairwise.pk}": "half a thought", "stage": "compare"}
    response = annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id), data, headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert response["HX-Retarget"] == "#rating-forms" and response["HX-Reswap"] == "outerHTML"
    assert page.lstrip().startswith('<div class="forms-column" id="rating-forms">')
    assert 'id="rating-panel"' not in page and "<html" not in page and "Dialog" not in page
    assert "Pick a value for “Which is better”." in page and "half a thought" in page
    assert 'class="rubric-form has-error"' in page
    assert not Rating.objects.exists()


def test_a_wrong_likert_value_comes_back_in_the_second_stage_with_the_comparison_kept(
    annotator_client, evaluation, likert, pairwise
):
    assignment = reserve(annotator_client, evaluation)
    data = answers(likert, pairwise, value="", choice="B") | {"stage": "rest"}
    response = annotator_client.post(url("rate_submit", evaluation, assignment.item_id), data)
    page = response.content.decode()
    assert response.status_code == 400 and "Pick a value for “Repetition”." in page
    assert (
        f'type="hidden" name="rubric-{pairwise.pk}" value="B"' in page and 'name="stage" value="rest"' in page
    )


def test_the_rating_page_shows_n_of_your_share_and_the_keys(annotator_client, evaluation, likert, pairwise):
    assignment = reserve(annotator_client, evaluation)
    annotator_client.post(url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise))
    following = reserve(annotator_client, evaluation)
    page = annotator_client.get(url("rate_item", evaluation, following.item_id)).content.decode()
    assert "1 of your share of 4" in page and 'role="progressbar"' in page and 'style="width: 25%"' in page
    assert "<kbd>k</kbd> skip" in page and "<kbd>u</kbd> undo" in page


def test_undo_takes_back_the_last_submit_and_returns_the_answers_as_shown(
    annotator_client, evaluation, likert, pairwise, annotator
):
    first = reserve(annotator_client, evaluation)
    Assignment.objects.filter(pk=first.pk).update(left_side="response")
    annotator_client.post(
        url("rate_submit", evaluation, first.item_id), answers(likert, pairwise, value="2", choice="A")
    )
    assert Rating.objects.get(rubric_version=pairwise).value == "B"  # A on screen was the response
    second = reserve(annotator_client, evaluation)
    page = annotator_client.get(url("rate_item", evaluation, second.item_id)).content.decode()
    assert url("rate_undo", evaluation, first.item_id) in page and "Undo last submit" in page
    assert "d-0" not in page  # raters never see the item's external id
    response = annotator_client.post(url("rate_undo", evaluation, first.item_id), {"stage": "rest"})
    page = response.content.decode()
    assert response.status_code == 200 and "Undone: your answers to item 1 are back in the form" in page
    assert 'value="A" data-key="a" checked' in page and "A is kinder." in page
    assert not Rating.objects.exists()
    statuses = dict(Assignment.objects.filter(user=annotator).values_list("item_id", "status"))
    assert statuses == {first.item_id: "reserved"}  # the item handed next went back to the queue
    annotator_client.post(url("rate_submit", evaluation, first.item_id), answers(likert, pairwise, value="5"))
    assert Rating.objects.get(rubric_version=likert).value == "5"
    assert reserve(annotator_client, evaluation).item_id == second.item_id


def test_only_the_last_submit_can_be_undone(annotator_client, evaluation, likert, pairwise, annotator):
    first = reserve(annotator_client, evaluation)
    annotator_client.post(url("rate_submit", evaluation, first.item_id), answers(likert, pairwise))
    second = reserve(annotator_client, evaluation)
    annotator_client.post(url("rate_submit", evaluation, second.item_id), answers(likert, pairwise))
    with pytest.raises(services.RatingRefused, match="Only your last submit"):
        revisit.undo_submit(evaluation=evaluation, item_id=first.item_id, user=annotator)
    response = annotator_client.post(url("rate_undo", evaluation, first.item_id))
    assert response.status_code == 302 and response.url == url("rate_history", evaluation)
    assert Rating.objects.filter(item_id=first.item_id).count() == 2


def test_a_skipped_item_is_reopened_from_history_and_the_counts_stay_true(
    annotator_client, evaluation, likert, pairwise, annotator
):
    evaluation.overlap = 1
    evaluation.save()
    items = []
    for n in range(4):
        assignment = reserve(annotator_client, evaluation)
        items.append(assignment.item_id)
        if n == 1:
            annotator_client.post(
                url("rate_set_aside", evaluation, assignment.item_id), {"action": "skip", "reason": "unsure"}
            )
        else:
            annotator_client.post(
                url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise)
            )
    done = annotator_client.get(url("rate_next", evaluation), follow=True).content.decode()
    assert "you rated 3 and set aside 1 (reopen them from History)" in done
    assert "3 rated · 1 skipped or flagged · your share 4" in done
    assert "Nothing left to rate here now" in done and "Continue rating" not in done
    history = annotator_client.get(url("rate_history", evaluation)).content.decode()
    reopen = url("rate_item", evaluation, items[1])
    assert f'class="reopen" href="{reopen}"' in history
    page = annotator_client.get(reopen).content.decode()
    assert "You skipped this item earlier (“unsure”)" in page and "Rate it now to take it back." in page
    annotator_client.post(url("rate_submit", evaluation, items[1]), answers(likert, pairwise))
    assert Assignment.objects.get(user=annotator, item_id=items[1]).status == "done"
    home = annotator_client.get(reverse("annotator_home")).content.decode()
    assert "4 rated · your share 4" in home


def test_a_skipped_item_others_filled_meanwhile_cannot_be_reopened(
    annotator_client, evaluation, likert, pairwise, annotator
):
    from tests.rating.conftest import add_annotators

    evaluation.overlap = 1
    evaluation.save()
    assignment = reserve(annotator_client, evaluation)
    annotator_client.post(
        url("rate_set_aside", evaluation, assignment.item_id), {"action": "skip", "reason": "x"}
    )
    (other,) = add_annotators(evaluation, 1)
    taken = services.next_assignment(evaluation=evaluation, user=other)
    assert taken is not None and taken.item_id == assignment.item_id
    history = annotator_client.get(url("rate_history", evaluation)).content.decode()
    assert 'class="reopen"' not in history and "rated by enough people" in history
    page = annotator_client.get(url("rate_item", evaluation, assignment.item_id)).content.decode()
    assert (
        "It has since been rated by enough people" in page and 'type="submit"' not in page.split("</form>")[1]
    )


def test_demo_04_export_lets_a_reader_match_the_explanation_to_its_side(
    researcher_client, project, annotator
):
    """The issue's case: the annotator saw the response on the left and wrote about "A"."""
    from pathlib import Path

    from datasets.services import import_dataset
    from evaluations import exports

    result = import_dataset(project=project, path=Path("projects/demo/dataset.jsonl"), name="Demo")
    assert result.ok
    dataset = project.datasets.get(name="Demo")
    pairwise = factories.make_rubric(project=project, name="Chat quality", kind="pairwise")
    evaluation = factories.make_evaluation(project, dataset, [pairwise], overlap=1, annotators=[annotator])
    item = dataset.items.get(external_id="demo-04")
    Assignment.objects.create(
        evaluation=evaluation,
        item=item,
        user=annotator,
        reserved_until="2100-01-01T00:00Z",
        left_side="response",
    )
    explanation = "A acknowledges grief and invites the user to talk about the dog."
    answers_, errors = services.read_answers(
        versions=[pairwise],
        data={f"rubric-{pairwise.pk}": "A", f"explanation-{pairwise.pk}": explanation},
        left_side="response",
        explain={pairwise.pk},
    )
    assert not errors
    services.submit_ratings(evaluation=evaluation, item_id=item.pk, user=annotator, answers=answers_)
    rows = list(csv.DictReader(io.StringIO(b"".join(exports.stream(evaluation, "long")).decode())))
    (row,) = rows
    assert (row["value"], row["value_as_shown"], row["left_was"], row["explanation"]) == (
        "B",
        "A",
        "response",
        explanation,
    )
    page = researcher_client.get(
        reverse("agreement_item", args=[project.slug, evaluation.pk, item.pk])
    ).content.decode()
    assert "as shown: <strong>A</strong> · left was the response" in page and explanation in page


def test_the_comparison_step_carries_the_other_answers_and_the_clock(
    annotator_client, evaluation, likert, pairwise, annotator
):
    assignment = reserve(annotator_client, evaluation)
    annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise, value="2")
    )
    # Revising: step 1 shows the comparison with the other rubric's answer carried, unseen.
    page = annotator_client.get(url("rate_item", evaluation, assignment.item_id)).content.decode()
    assert f'type="hidden" name="rubric-{likert.pk}" value="2"' in page
    started = f"{time.time() - 40:.1f}"
    step = {
        f"rubric-{pairwise.pk}": "B",
        f"explanation-{pairwise.pk}": "B is kinder.",
        f"rubric-{likert.pk}": "2",
        "stage": "compare",
        "shown_at": started,
    }
    rest = annotator_client.post(url("rate_submit", evaluation, assignment.item_id), step).content.decode()
    assert 'value="2" data-key="2" checked' in rest and f'name="shown_at" value="{started}"' in rest
    final = step | {"stage": "rest", f"rubric-{likert.pk}": "3"}
    assert annotator_client.post(url("rate_submit", evaluation, assignment.item_id), final).status_code == 302
    rating = Rating.objects.get(rater__user=annotator, rubric_version=likert)
    assert rating.value == "3" and rating.seconds_spent is not None and rating.seconds_spent >= 40
