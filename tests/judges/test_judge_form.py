"""The new-judge form: grouped in the order it is filled, list prices offered with their date, and a
connection test of the settings as filled in before anything is saved."""

import re

from django.urls import reverse

from judges import prices
from judges.models import Judge
from tests.judges.conftest import TEST_KEY_ENV, judge_form_data


def _create(client, project, data):
    return client.post(reverse("judge_create", args=[project.slug]), data)


def test_the_form_is_grouped_with_limits_and_prices_folded(researcher_client, project):
    page = researcher_client.get(reverse("judge_create", args=[project.slug])).content.decode()
    order = [page.index(f"<legend>{title}</legend>") for title in ("Endpoint", "Model", "API key")]
    assert order == sorted(order)
    assert "<summary>Limits and prices</summary>" in page and "<summary>How it judges</summary>" in page
    assert page.index("<summary>Limits and prices</summary>") < page.index('name="price_input_per_million"')
    assert "Longest answer, in output tokens" in page and "Max tokens" not in page
    assert f"list prices on {prices.DATE}" in page


def test_list_prices_fill_the_price_boxes_without_saving(researcher_client, project):
    data = judge_form_data(
        model="gpt-4o-mini-2024-07-18", price_input_per_million="", price_output_per_million=""
    )
    page = _create(researcher_client, project, {**data, "action": "prices"}).content.decode()
    assert not Judge.objects.exists()
    assert f"List prices of gpt-4o-mini on {prices.DATE} filled in" in page
    assert 'name="price_input_per_million" value="0.15"' in page
    assert 'name="price_output_per_million" value="0.60"' in page
    assert 'name="name" value="gpt judge"' in page  # the rest as filled in


def test_a_model_without_a_list_price_says_so(researcher_client, project):
    page = _create(researcher_client, project, {**judge_form_data(model="my-llama"), "action": "prices"})
    assert "No list price known for model &#x27;my-llama&#x27;" in page.content.decode()


def test_list_price_matches_dated_snapshots_and_never_a_shorter_name():
    assert prices.list_price("gpt-4o-2024-08-06")[0] == "gpt-4o"
    assert prices.list_price("openai/gpt-4o-mini")[0] == "gpt-4o-mini"
    assert prices.list_price("claude-sonnet-4-5-20250929")[0] == "claude-sonnet-4-5"
    assert prices.list_price("gpt-4o-audio-preview") is None


def test_prices_left_empty_are_unset_and_one_alone_is_refused(researcher_client, project):
    data = judge_form_data(price_input_per_million="", price_output_per_million="")
    assert _create(researcher_client, project, data).status_code == 302
    assert Judge.objects.get().price_input_per_million is None
    data = judge_form_data(name="half", price_input_per_million="1", price_output_per_million="")
    assert (
        "Give both prices, or leave both empty" in _create(researcher_client, project, data).content.decode()
    )
    assert not Judge.objects.filter(name="half").exists()


def test_the_connection_is_tested_before_saving(researcher_client, project, fake_llm):
    data = judge_form_data(base_url=fake_llm.base_url, model="fake-judge", credential=f"env:{TEST_KEY_ENV}")
    page = _create(researcher_client, project, {**data, "action": "test"}).content.decode()
    assert "connected" in page and "fake-judge answered" in page
    assert not Judge.objects.exists()
    data["model"] = "gpt-unknown"
    page = _create(researcher_client, project, {**data, "action": "test"}).content.decode()
    assert "failed" in page and "the endpoint has no model" in page and not Judge.objects.exists()


def test_a_pasted_key_is_tested_only_after_saving(researcher_client, project, fake_llm, settings):
    from cryptography.fernet import Fernet

    settings.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    data = judge_form_data(base_url=fake_llm.base_url, credential="pasted", api_key="sk-abcdef123456")
    page = _create(researcher_client, project, {**data, "action": "test"}).content.decode()
    assert "A pasted key is stored only when the judge is saved" in page and "sk-abcdef123456" not in page
    assert not Judge.objects.exists()


def test_saving_is_what_enter_does(researcher_client, project):
    page = researcher_client.get(reverse("judge_create", args=[project.slug])).content.decode()
    form = page[page.index('<form method="post" action="/p/') :]
    first = form.index('type="submit"')
    assert 'name="action" value="save"' in form[first : first + 80]


def test_a_judge_saved_as_tested_keeps_the_test_and_another_model_does_not(
    researcher_client, project, fake_llm
):
    data = judge_form_data(base_url=fake_llm.base_url, model="fake-judge", credential=f"env:{TEST_KEY_ENV}")
    page = _create(researcher_client, project, {**data, "action": "test"}).content.decode()
    tested = re.search(r'name="tested" value="([^"]+)"', page).group(1)
    _create(researcher_client, project, {**data, "tested": tested, "action": "save"})
    judge = Judge.objects.get(name="gpt judge")
    assert judge.probed_at is not None and judge.capabilities and judge.connection_warning == ""
    other = {**data, "name": "other", "model": "fake-gpt", "tested": tested, "action": "save"}
    _create(researcher_client, project, other)
    assert Judge.objects.get(name="other").probed_at is None  # tested with another model: nothing kept
    _create(researcher_client, project, {**data, "name": "forged", "tested": tested + "x", "action": "save"})
    assert Judge.objects.get(name="forged").probed_at is None
