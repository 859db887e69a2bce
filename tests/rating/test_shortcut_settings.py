"""Each person's single-key shortcuts (WCAG 2.1.4): off or rebound on their account, shown on the page."""

import re

import pytest
from django.http import QueryDict
from django.urls import reverse

from rating.models import Assignment, KeyboardSettings
from rating.shortcuts import DEFAULT_KEYS, read_keys, shortcuts_of

pytestmark = pytest.mark.django_db


def form(**changes: str) -> dict[str, str]:
    data = {f"key-{action}": key for action, key in DEFAULT_KEYS.items()}
    data.update({f"key-{action}": key for action, key in changes.items()})
    return data


def rating_page(client, evaluation) -> str:
    client.get(reverse("rate_next", args=[evaluation.project.slug, evaluation.pk]))
    assignment = Assignment.objects.get(evaluation=evaluation, status="reserved")
    url = reverse("rate_item", args=[evaluation.project.slug, evaluation.pk, assignment.item_id])
    return client.get(url).content.decode()


def test_keys_are_one_printable_character_never_a_digit_never_shared():
    keys, errors = read_keys(QueryDict("&".join(f"{k}={v}" for k, v in form(A="Q", skip="x").items())))
    assert not errors and keys == {**DEFAULT_KEYS, "A": "q", "skip": "x"}  # letters kept in lower case
    _, errors = read_keys(form(A="1", SAME="", B="bb", skip="a", undo=" "))
    assert errors["key-A"] == "The key to pick A (pairwise) cannot be the digit 1: digits pick scale values."
    assert "must be one character (got “”)" in errors["key-SAME"]
    assert "must be one character (got “bb”)" in errors["key-B"]
    assert "must be one character" in errors["key-undo"]
    assert "key-skip" not in errors  # "a" is free once A is refused
    _, errors = read_keys(form(undo="K"))
    assert errors == {"key-undo": "The key “k” is already used to go to the skip reason."}


def test_shortcuts_are_on_with_the_usual_keys_until_the_person_changes_them(annotator):
    assert shortcuts_of(annotator).on and shortcuts_of(annotator).keys == DEFAULT_KEYS


def test_a_person_turns_shortcuts_off_and_the_page_then_offers_none(annotator_client, annotator, evaluation):
    response = annotator_client.post(reverse("keyboard_settings"), form())  # the box unticked: off
    assert response.status_code == 302
    assert KeyboardSettings.objects.get(user=annotator).shortcuts_on is False
    page = rating_page(annotator_client, evaluation)
    assert 'data-shortcuts="off"' in page and "Single-key shortcuts are off" in page
    assert not re.search(r'data-key="[a-z0-9]"', page)  # no option answers to a key
    assert "<kbd>k</kbd>" not in page and "<kbd>a</kbd>" not in page
    home = annotator_client.get(reverse("annotator_home")).content.decode()
    assert 'name="shortcuts_on" checked' not in home


def test_rebound_keys_are_kept_on_the_account_and_shown_on_the_page(annotator_client, annotator, evaluation):
    data = {**form(A="j", SAME="x", B="l", skip="q", undo="z", guidelines="?"), "shortcuts_on": "on"}
    assert annotator_client.post(reverse("keyboard_settings"), data).status_code == 302
    kept = KeyboardSettings.objects.get(user=annotator)
    assert kept.shortcuts_on and kept.keys == {
        "A": "j",
        "SAME": "x",
        "B": "l",
        "skip": "q",
        "undo": "z",
        "guidelines": "?",
    }
    page = rating_page(annotator_client, evaluation)
    assert 'data-key="j"' in page and 'data-key="x"' in page and 'data-key="l"' in page
    assert "<kbd>q</kbd> skip" in page and "<kbd>?</kbd> guidelines" in page
    assert 'data-key="a"' not in page
    assert "&quot;A&quot;: &quot;j&quot;" in page  # the page's script reads the same keys


def test_bad_keys_are_refused_each_named_and_nothing_is_kept(annotator_client, annotator):
    data = {**form(A="7", skip="s"), "shortcuts_on": "on"}
    response = annotator_client.post(reverse("keyboard_settings"), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "cannot be the digit 7: digits pick scale values" in page
    assert "The key “s” is already used to pick SAME (pairwise)." in page
    assert 'value="7"' in page  # what was typed comes back to be corrected
    assert not KeyboardSettings.objects.filter(user=annotator).exists()
