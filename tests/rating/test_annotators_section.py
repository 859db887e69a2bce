"""Researchers manage an evaluation's annotators from the Annotators section of its page."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.template import Context, Template
from django.test import Client
from django.urls import reverse

from projects.models import Membership
from rating import services
from tests import factories

pytestmark = pytest.mark.django_db


def url(name, evaluation, *args):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk, *args])


def test_section_tag_lists_annotators_with_their_counts(evaluation, annotator, rf, researcher):
    services.next_assignment(evaluation=evaluation, user=annotator)
    request = rf.get("/")
    request.user = researcher
    html = Template("{% load rating_tags %}{% evaluation_annotators evaluation %}").render(
        Context({"evaluation": evaluation, "request": request})
    )
    assert 'id="evaluation_annotators"' in html
    assert re.search(r"anna</td>\s*<td class=\"num\">0</td><td class=\"num\">1</td>", html)
    assert url("annotators_add", evaluation) in html and url("assignment_settings", evaluation) in html


def test_researcher_adds_existing_accounts_who_become_project_annotators(
    researcher_client, researcher, evaluation
):
    newcomer = factories.make_user("ben", password=None)
    factories.make_project(name="Earlier study", researchers=[researcher], annotators=[newcomer])
    response = researcher_client.post(url("annotators_add", evaluation), {"usernames": "ben, anna"})
    assert response.status_code == 302
    assert set(evaluation.annotators.values_list("username", flat=True)) == {"anna", "ben"}
    assert Membership.objects.get(user=newcomer, project=evaluation.project).role == "annotator"


def test_adding_an_unknown_username_adds_nobody(researcher_client, researcher, evaluation):
    ben = factories.make_user("ben", password=None)
    factories.make_project(name="Earlier study", researchers=[researcher], annotators=[ben])
    response = researcher_client.post(
        url("annotators_add", evaluation), {"usernames": "ben nobody"}, headers={"HX-Request": "true"}
    )
    assert "No account named nobody that you can add" in response.content.decode()
    assert "nobody was added" in response.content.decode()
    assert list(evaluation.annotators.values_list("username", flat=True)) == ["anna"]


def test_new_account_gets_a_one_time_set_password_link(researcher_client, evaluation):
    response = researcher_client.post(
        url("annotator_create", evaluation),
        {"username": "carla", "email": "c@example.org"},
        headers={"HX-Request": "true"},
    )
    page = response.content.decode()
    found = re.search(r'<code class="set-password-link">(http://testserver/set-password/[^<]+)</code>', page)
    assert found is not None
    link = found.group(1)
    carla = get_user_model().objects.get(username="carla")
    assert not carla.has_usable_password() and evaluation.annotators.filter(pk=carla.pk).exists()

    visitor = Client()
    form_page = visitor.get(link, follow=True)
    assert "Set your password" in form_page.content.decode()
    done = visitor.post(
        form_page.redirect_chain[-1][0],
        {"new_password1": "a-long-pass-123", "new_password2": "a-long-pass-123"},
    )
    assert done.status_code == 302
    logged_in = Client().post("/login/", {"username": "carla", "password": "a-long-pass-123"})
    assert logged_in.status_code == 302
    reused = Client().get(link, follow=True)
    assert "already been used" in reused.content.decode()


def post_settings(client, evaluation, **fields) -> str:
    data = {"reservation_minutes": "10", **fields}
    return client.post(
        url("assignment_settings", evaluation), data, headers={"HX-Request": "true"}
    ).content.decode()


def test_settings_change_overlap_timeout_and_refuse_bad_numbers(researcher_client, evaluation):
    researcher_client.post(
        url("assignment_settings", evaluation),
        {"overlap": "3", "reservation_minutes": "10", "order": "shuffled"},
    )
    evaluation.refresh_from_db()
    assert (evaluation.overlap, evaluation.reservation_minutes, evaluation.order) == (3, 10, "shuffled")
    page = post_settings(researcher_client, evaluation, overlap="zero")
    assert "Overlap N must be a whole number, not “zero”. Nothing was changed." in page
    # Seen in a browser review: 100,000 ratings per item saved without a word, so it could never finish.
    page = post_settings(researcher_client, evaluation, overlap="100000")
    assert "Overlap must be between 1 and 1,000 ratings per item, not 100,000." in page
    evaluation.refresh_from_db()
    assert evaluation.overlap == 3
    people = evaluation.annotators.count()
    page = post_settings(researcher_client, evaluation, overlap=str(people + 2))
    assert f"no item can get {people + 2} ratings until more are added" in page


def test_removing_an_annotator_returns_their_reservation(researcher_client, evaluation, annotator):
    held = services.next_assignment(evaluation=evaluation, user=annotator)
    assert held is not None
    researcher_client.post(url("annotator_remove", evaluation, annotator.pk))
    held.refresh_from_db()
    assert held.status == "skipped" and not evaluation.annotators.exists()


@pytest.mark.parametrize("name", ["annotators_add", "annotator_create", "assignment_settings"])
def test_annotators_cannot_manage_annotators(annotator_client, evaluation, name):
    response = annotator_client.post(
        url(name, evaluation), {"usernames": "anna", "username": "x", "overlap": "1"}
    )
    assert response.status_code == 403
    assert get_user_model().objects.filter(username="x").count() == 0


def test_evaluation_page_shows_the_section_and_its_forms_post_back_to_it(researcher_client, evaluation):
    page = researcher_client.get(reverse("evaluation_detail", args=[evaluation.project.slug, evaluation.pk]))
    assert page.status_code == 200
    assert 'id="evaluation_annotators"' in page.content.decode()
    response = researcher_client.post(
        url("assignment_settings", evaluation), {"overlap": "2", "reservation_minutes": "7"}
    )
    assert response.status_code == 302
    assert response.url == reverse("evaluation_detail", args=[evaluation.project.slug, evaluation.pk]) + (
        "#evaluation_annotators"
    )
