"""The annotator's pages through HTTP: home, next item, the rating form, submit, skip, history, revisions."""

import re
import time
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from evaluations.models import Rating, RatingRevision
from rating import services
from rating.models import Assignment
from tests.rating.conftest import add_annotators

pytestmark = pytest.mark.django_db


def url(name, evaluation, *args):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk, *args])


def reserve(client, evaluation):
    response = client.get(url("rate_next", evaluation))
    assert response.status_code == 302
    return Assignment.objects.get(evaluation=evaluation, status="reserved", user__username="anna")


def answers(likert, pairwise, *, value="4", choice="A", explanation="A is kinder."):
    return {
        f"rubric-{likert.pk}": value,
        f"rubric-{pairwise.pk}": choice,
        f"explanation-{pairwise.pk}": explanation,
        "shown_at": f"{time.time() - 12:.1f}",
    }


def test_home_shows_each_evaluation_with_progress(annotator_client, evaluation):
    response = annotator_client.get(reverse("annotator_home"))
    assert response.status_code == 200
    page = response.content.decode()
    assert evaluation.name in page
    assert "0 rated · your share 4 · 4 items in all" in page
    assert "Start rating" in page
    assert url("rate_next", evaluation) in page


def test_next_item_asks_for_the_comparison_first_then_the_other_rubrics(
    annotator_client, evaluation, likert, pairwise
):
    assignment = reserve(annotator_client, evaluation)
    response = annotator_client.get(url("rate_item", evaluation, assignment.item_id))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Hello number 0, how are you?" in page
    assert 'class="turn bot target"' not in page and 'data-card="A"' in page and 'data-card="B"' in page
    assert "<kbd>a</kbd>" in page and "<kbd>s</kbd>" in page
    assert page.count('type="radio"') == 3 and 'name="stage" value="compare"' in page
    assert "(required; A and B as you see them)" in page  # the pairwise explanation
    rest = annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id),
        {f"rubric-{pairwise.pk}": "B", f"explanation-{pairwise.pk}": "B asks back.", "stage": "compare"},
    )
    page = rest.content.decode()
    assert rest.status_code == 200 and not Rating.objects.exists()
    assert 'class="turn bot target"' in page and 'data-card="A"' not in page
    for option in likert.scale:
        assert option["label"] in page and option["description"] in page
    assert "<kbd>1</kbd>" in page and page.count('type="radio"') == 5
    assert f'type="hidden" name="rubric-{pairwise.pk}" value="B"' in page and "B asks back." in page


def test_submit_saves_every_rubric_then_moves_on(annotator_client, evaluation, likert, pairwise, annotator):
    assignment = reserve(annotator_client, evaluation)
    response = annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise)
    )
    assert response.status_code == 302 and response.url == url("rate_next", evaluation)
    ratings = {r.rubric_version_id: r for r in Rating.objects.filter(rater__user=annotator)}
    assert ratings[likert.pk].value == "4" and ratings[likert.pk].side_shown == ""
    seconds_spent = ratings[likert.pk].seconds_spent
    assert seconds_spent is not None and 11 <= seconds_spent <= 30
    assert ratings[pairwise.pk].side_shown == assignment.left_side
    assert ratings[pairwise.pk].value == (
        "A" if assignment.left_side == "baseline" else "B"
    )  # picked A (left)
    assignment.refresh_from_db()
    assert assignment.status == "done" and assignment.finished is not None


def test_htmx_submit_returns_the_next_item_in_place(annotator_client, evaluation, likert, pairwise):
    assignment = reserve(annotator_client, evaluation)
    response = annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id),
        answers(likert, pairwise),
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "<html" not in page and 'id="rating-panel"' in page
    assert "Hello number 1" in page and "Saved item 1." in page
    assert not re.search(r"\bd-\d\b", page)  # raters never see an item's external id
    following = Assignment.objects.get(evaluation=evaluation, status="reserved")
    assert response["HX-Push-Url"] == url("rate_item", evaluation, following.item_id)


@pytest.mark.parametrize("left_side", ["baseline", "response"])
def test_pairwise_choice_is_stored_canonically_whatever_side_was_shown(
    annotator_client, evaluation, likert, pairwise, annotator, left_side
):
    assignment = reserve(annotator_client, evaluation)
    Assignment.objects.filter(pk=assignment.pk).update(left_side=left_side)
    page = annotator_client.get(url("rate_item", evaluation, assignment.item_id)).content.decode()
    # The radio under the left card sends "A" whichever response is there: the page does not tell.
    assert 'value="A" data-key="a"' in page and 'value="B" data-key="b"' in page
    item = assignment.item
    left, right = (
        (item.baseline, item.response) if left_side == "baseline" else (item.response, item.baseline)
    )
    assert page.index(left["text"]) < page.index(right["text"])
    assert "baseline" not in page.lower() and 'data-role="response"' not in page
    annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise, choice="A")
    )
    rating = Rating.objects.get(rater__user=annotator, rubric_version=pairwise)
    assert (rating.value, rating.side_shown) == ("A" if left_side == "baseline" else "B", left_side)


def test_double_submit_and_replay_never_duplicate(annotator_client, evaluation, likert, pairwise, annotator):
    assignment = reserve(annotator_client, evaluation)
    data = answers(likert, pairwise)
    for _ in range(3):
        annotator_client.post(url("rate_submit", evaluation, assignment.item_id), data)
    assert Rating.objects.filter(rater__user=annotator).count() == 2
    assert RatingRevision.objects.count() == 0


def test_two_tabs_submitting_different_answers_keep_one_rating_and_a_revision(
    evaluation, likert, pairwise, annotator
):
    first_tab, second_tab = Client(), Client()
    first_tab.force_login(annotator)
    second_tab.force_login(annotator)
    assignment = reserve(first_tab, evaluation)
    first_tab.post(url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise, value="2"))
    second_tab.post(url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise, value="5"))
    rating = Rating.objects.get(rater__user=annotator, rubric_version=likert)
    assert rating.value == "5"
    assert list(rating.revisions.values_list("value", flat=True)) == ["2"]


def test_revising_from_history_keeps_every_earlier_value(
    annotator_client, evaluation, likert, pairwise, annotator
):
    assignment = reserve(annotator_client, evaluation)
    annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise, value="2")
    )
    history = annotator_client.get(url("rate_history", evaluation)).content.decode()
    assert (
        "item 1" in history
        and "d-0" not in history
        and url("rate_item", evaluation, assignment.item_id) in history
    )
    form = annotator_client.get(
        url(
            "rate_item",
            evaluation,
            assignment.item_id,
        )
        + "?stage=rest"
    ).content.decode()
    assert 'value="2" data-key="2" checked' in form and "Save revision" in form
    comparison = annotator_client.get(url("rate_item", evaluation, assignment.item_id)).content.decode()
    assert 'value="A" data-key="a" checked' in comparison
    for value in ("3", "5"):
        response = annotator_client.post(
            url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise, value=value)
        )
        assert response.status_code == 302 and response.url == url("rate_history", evaluation)
    rating = Rating.objects.get(rater__user=annotator, rubric_version=likert)
    assert rating.value == "5"
    assert list(rating.revisions.values_list("value", flat=True)) == ["2", "3"]


def test_skip_needs_a_reason_and_flag_records_it(annotator_client, evaluation):
    assignment = reserve(annotator_client, evaluation)
    refused = annotator_client.post(url("rate_set_aside", evaluation, assignment.item_id), {"action": "skip"})
    assert refused.status_code == 400 and "Say why you are skipping" in refused.content.decode()
    response = annotator_client.post(
        url("rate_set_aside", evaluation, assignment.item_id),
        {"action": "flag", "reason": "dialog is cut off"},
    )
    assert response.status_code == 302
    assignment.refresh_from_db()
    assert (assignment.status, assignment.reason) == ("flagged", "dialog is cut off")


def test_forged_value_is_refused_nothing_stored_and_typed_text_kept(
    annotator_client, evaluation, likert, pairwise
):
    assignment = reserve(annotator_client, evaluation)
    data = answers(likert, pairwise, value="9", explanation="my careful reasoning")
    response = annotator_client.post(url("rate_submit", evaluation, assignment.item_id), data)
    page = response.content.decode()
    assert response.status_code == 400
    assert "“9” is not on the scale of “Repetition” (allowed: 1, 2, 3, 4, 5)." in page
    assert "my careful reasoning" in page and f'value="{data[f"rubric-{pairwise.pk}"]}"' in page
    assert not Rating.objects.exists()


def test_rubric_not_in_the_evaluation_is_refused(annotator_client, evaluation, likert, pairwise, project):
    from tests import factories

    stranger = factories.make_rubric(project=project, name="Not in this evaluation")
    assignment = reserve(annotator_client, evaluation)
    data = answers(likert, pairwise) | {f"rubric-{stranger.pk}": "3"}
    response = annotator_client.post(url("rate_submit", evaluation, assignment.item_id), data)
    assert response.status_code == 400
    assert f"names rubric version &#x27;{stranger.pk}&#x27;, which is not part of this evaluation" in (
        response.content.decode()
    )
    assert not Rating.objects.exists()


def test_rating_an_item_not_reserved_for_you_is_refused(
    annotator_client, evaluation, likert, pairwise, dataset
):
    reserve(annotator_client, evaluation)
    other_item = dataset.items.get(position=3)
    response = annotator_client.post(url("rate_submit", evaluation, other_item.pk), answers(likert, pairwise))
    page = response.content.decode()
    assert response.status_code == 403
    assert "This item is not reserved for you or assigned to you, so nothing was saved." in page
    assert "A is kinder." in page and 'value="4" data-key="4" checked' in page  # the other rubrics' stage
    assert not Rating.objects.exists() and not Assignment.objects.filter(item=other_item).exists()


def test_missing_csrf_token_is_refused_and_the_form_comes_back_with_a_fresh_token(
    evaluation, likert, pairwise, annotator
):
    client = Client(enforce_csrf_checks=True)
    client.force_login(annotator)
    assignment = reserve(client, evaluation)
    shown_at = f"{time.time() - 30:.1f}"  # the item came up half a minute ago
    data = answers(likert, pairwise, explanation="typed before the token expired") | {"shown_at": shown_at}
    ours = {"Sec-Fetch-Site": "same-origin"}  # what a browser says of a form posted from Concord's own page
    response = client.post(url("rate_submit", evaluation, assignment.item_id), data, headers=ours)
    page = response.content.decode()
    assert response.status_code == 403
    assert "security token was missing or out of date" in page
    assert "typed before the token expired" in page and 'value="4" data-key="4" checked' in page
    assert f'name="shown_at" value="{shown_at}"' in page  # the time spent before the refusal still counts
    assert not Rating.objects.exists()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found is not None
    token = found.group(1)
    retry = client.post(
        url("rate_submit", evaluation, assignment.item_id), data | {"csrfmiddlewaretoken": token}
    )
    assert retry.status_code == 302 and Rating.objects.count() == 2
    spent = Assignment.objects.get(pk=assignment.pk).seconds_spent
    assert spent is not None and spent >= 30


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site", "Origin": "https://attacker.test"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://attacker.test"},
        {},  # nothing says where it came from
    ],
)
def test_a_rating_posted_from_another_site_gets_no_form_back(
    evaluation, likert, pairwise, annotator, headers
):
    """Else that site could fill in an annotator's answers and leave them one Enter away from being saved."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(annotator)
    assignment = reserve(client, evaluation)
    data = answers(likert, pairwise, explanation="planted by another site")
    response = client.post(url("rate_submit", evaluation, assignment.item_id), data, headers=headers)
    page = response.content.decode()
    assert response.status_code == 403 and "CSRF verification failed" in page
    assert "planted by another site" not in page and "checked" not in page and not Rating.objects.exists()


def test_a_rating_posted_with_our_origin_and_no_fetch_metadata_gets_its_form_back(
    evaluation, likert, pairwise, annotator
):
    client = Client(enforce_csrf_checks=True)
    client.force_login(annotator)
    assignment = reserve(client, evaluation)
    data = answers(likert, pairwise, explanation="typed here")
    headers = {"Origin": "http://testserver"}
    response = client.post(url("rate_submit", evaluation, assignment.item_id), data, headers=headers)
    assert response.status_code == 403 and "typed here" in response.content.decode()


def test_missing_csrf_token_elsewhere_gets_djangos_refusal(researcher, evaluation):
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    response = client.post(url("annotators_add", evaluation), {"usernames": "anna"})
    assert response.status_code == 403 and "CSRF verification failed" in response.content.decode()


def test_late_submit_after_others_filled_the_item_says_so_and_keeps_answers(
    annotator_client, evaluation, likert, pairwise
):
    evaluation.overlap = 1
    evaluation.save()
    assignment = reserve(annotator_client, evaluation)
    (other,) = add_annotators(evaluation, 1)
    later = timezone.now() + timedelta(minutes=evaluation.reservation_minutes + 5)
    taken = services.next_assignment(evaluation=evaluation, user=other, now=later)
    assert taken is not None and taken.item_id == assignment.item_id
    response = annotator_client.post(
        url("rate_submit", evaluation, assignment.item_id),
        answers(likert, pairwise, explanation="kept words"),
    )
    page = response.content.decode()
    assert response.status_code == 409
    assert "rated by enough people" in page and "kept words" in page
    assert not Rating.objects.exists()


def test_a_user_outside_the_evaluation_gets_404(researcher_client, evaluation):
    assert researcher_client.get(url("rate_next", evaluation)).status_code == 404


def test_rating_page_query_count_is_constant(annotator_client, evaluation, django_assert_max_num_queries):
    assignment = reserve(annotator_client, evaluation)
    with django_assert_max_num_queries(14):
        annotator_client.get(url("rate_item", evaluation, assignment.item_id))


def test_rating_an_item_of_another_dataset_is_404(annotator_client, evaluation, likert, pairwise, project):
    from tests import factories

    elsewhere = factories.make_dataset(project, items=1).items.get()
    response = annotator_client.post(url("rate_submit", evaluation, elsewhere.pk), answers(likert, pairwise))
    assert response.status_code == 404
    assert not Rating.objects.exists()


def test_history_and_home_query_counts_do_not_grow_with_items_rated(
    annotator_client, evaluation, likert, pairwise, annotator
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for _ in range(3):
        assignment = reserve(annotator_client, evaluation)
        annotator_client.post(url("rate_submit", evaluation, assignment.item_id), answers(likert, pairwise))
        with CaptureQueriesContext(connection) as history:
            annotator_client.get(url("rate_history", evaluation))
        with CaptureQueriesContext(connection) as home:
            annotator_client.get(reverse("annotator_home"))
        counts.append((len(history), len(home)))
    assert counts[0] == counts[1] == counts[2]
