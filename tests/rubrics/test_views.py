"""The rubric pages through HTTP: access for each persona, the live preview, edit and import."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from rubrics.forms import RubricVersionForm
from rubrics.models import Rubric
from tests import factories
from tests.rubrics.conftest import seed_text

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def own_version(project):
    template = "{criterion} of {response} on {topic}\n{scale}"
    return factories.make_rubric(project=project, name="Warmth", template=template)


def url(name: str, project, rubric=None) -> str:
    args = [project.slug] if rubric is None else [project.slug, rubric.pk]
    return reverse(name, args=args)


@pytest.mark.parametrize("page", ["rubric_detail", "rubric_edit", "rubric_preview"])
def test_rubric_pages_are_for_researchers_only(
    page, builtins, project, client, researcher, annotator, outsider
):
    rubric = builtins["Repetitiveness"].rubric
    expected = {researcher: 200, annotator: 403, outsider: 404}
    for user, status in expected.items():
        client.force_login(user)
        assert client.get(url(page, project, rubric)).status_code == status, user


def test_import_page_is_for_researchers_only(project, client, researcher, annotator, outsider):
    for user, status in {researcher: 200, annotator: 403, outsider: 404}.items():
        client.force_login(user)
        assert client.get(url("rubric_import", project)).status_code == status


def test_another_projects_rubric_is_not_found(researcher_client, project, researcher):
    other = factories.make_project(name="Elsewhere", researchers=[researcher])
    foreign = factories.make_rubric(project=other)
    assert researcher_client.get(url("rubric_detail", project, foreign.rubric)).status_code == 404


def test_detail_shows_criterion_scale_versions_and_the_repair_note(researcher_client, builtins, project):
    rubric = builtins["Context fit and emotion attention"].rubric
    page = researcher_client.get(url("rubric_detail", project, rubric)).content.decode()
    assert "Context Fit and Emotion Attention" in page
    assert "5 points" in page and "The current sentence perfectly fits" in page
    assert "Repaired mojibake" in page and "can’t" in page
    assert "A built-in rubric, shared by every project" in page
    assert 'id="versions"' in page and "v1" in page


def test_detail_without_datasets_previews_the_builtin_sample_item(researcher_client, builtins, project):
    page = researcher_client.get(
        url("rubric_detail", project, builtins["Repetitiveness"].rubric)
    ).content.decode()
    assert "a built-in sample item is shown" in page
    assert "USER: I finally got tickets for the concert on Saturday!" in page


def test_htmx_preview_renders_only_the_region_for_the_chosen_item(researcher_client, builtins, project):
    dataset = factories.make_dataset(project, items=3)
    rubric = builtins["Repetitiveness"].rubric
    response = researcher_client.get(
        url("rubric_preview", project, rubric), {"dataset": dataset.pk, "item": "d-2"}, **HTMX
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="preview"')
    assert "<html" not in body
    assert "USER: Hello number 2, how are you?\nBOT: I am fine, thanks for asking (2)." in body
    assert "number 1" not in body


def test_plain_preview_returns_the_whole_page_with_the_prompt(researcher_client, builtins, project):
    dataset = factories.make_dataset(project, items=2)
    rubric = builtins["Multi-turn chat quality"].rubric
    response = researcher_client.get(
        url("rubric_preview", project, rubric), {"dataset": dataset.pk, "item": "d-1", "swapped": "1"}
    )
    body = response.content.decode()
    assert "<html" in body and 'id="preview"' in body
    assert "### Response A\nI am fine, thanks for asking (1)." in body


def test_preview_of_a_missing_item_says_so_and_shows_the_first(researcher_client, builtins, project):
    dataset = factories.make_dataset(project, items=1)
    response = researcher_client.get(
        url("rubric_preview", project, builtins["Repetitiveness"].rubric),
        {"dataset": dataset.pk, "item": "zz"},
        **HTMX,
    )
    body = response.content.decode()
    assert f"No item &#x27;zz&#x27; in {dataset.name}; showing its first item." in body
    assert "USER: Hello number 0, how are you?" in body


def test_preview_of_a_pairwise_rubric_for_an_item_without_baseline_says_so(
    researcher_client, builtins, project
):
    factories.make_dataset(project, items=1, baseline=False)
    response = researcher_client.get(
        url("rubric_preview", project, builtins["Multi-turn chat quality"].rubric), **HTMX
    )
    assert "item d-0 has no baseline" in response.content.decode()


def test_detail_page_query_count_does_not_grow_with_versions(
    researcher_client, own_version, project, django_assert_max_num_queries
):
    from rubrics.services import new_version

    for n in range(5):
        new_version(own_version.rubric, criterion=f"Warmth {n}")
    with django_assert_max_num_queries(14):
        assert researcher_client.get(url("rubric_detail", project, own_version.rubric)).status_code == 200


def form_data(version, **changes):
    data = {
        key: value for key, value in RubricVersionForm.initial_from(version).items() if value is not False
    }
    data.update(changes)
    return data


def test_edit_post_creates_a_new_version_and_redirects(researcher_client, own_version, project):
    data = form_data(own_version, criterion="Warmth (kind)")
    response = researcher_client.post(url("rubric_edit", project, own_version.rubric), data)
    assert response.status_code == 302
    assert response["Location"] == url("rubric_detail", project, own_version.rubric)
    assert [v.criterion for v in own_version.rubric.versions.order_by("number")] == [
        "Warmth",
        "Warmth (kind)",
    ]


def test_edit_form_round_trips_a_seed_exactly(researcher_client, builtins, project):
    version = builtins["Repetitiveness"]
    response = researcher_client.post(url("rubric_edit", project, version.rubric), form_data(version))
    assert response.status_code == 400
    assert "Nothing changed: version 1 already says exactly this." in response.content.decode()


def test_editing_a_builtin_in_the_browser_makes_this_projects_copy(researcher_client, builtins, project):
    version = builtins["Multi-turn chat quality"]
    old = version.scale[1]["description"]
    text = version.prompt_template.replace(old, "Both are equally good or equally bad.")
    data = form_data(version, prompt_template=text, name="Chat quality (ours)", description="Ignored.")
    response = researcher_client.post(url("rubric_edit", project, version.rubric), data, follow=True)
    copy = Rubric.objects.get(project=project, name="Chat quality (ours)")
    page = response.content.decode()
    assert "this project&#x27;s own copy of the built-in rubric" in page
    latest = copy.versions.latest("number")
    assert latest.scale[1]["description"] == "Both are equally good or equally bad."
    assert latest.description == version.description  # read from the text, not from a second copy
    assert latest.prompt_template == text
    assert 'class="diff-line removed">− ' in page and "equally good or equally bad" in page
    assert version.rubric.versions.count() == 1
    listing = researcher_client.get(reverse("project_detail", args=[project.slug])).content.decode()
    assert "Chat quality (ours)" in listing


def test_edit_with_an_unknown_placeholder_is_refused_and_saves_nothing(
    researcher_client, own_version, project
):
    data = form_data(own_version, prompt_template="Rate {{Dialgo}}")
    response = researcher_client.post(url("rubric_edit", project, own_version.rubric), data)
    assert response.status_code == 400
    assert "unknown placeholder {{Dialgo}}" in response.content.decode()
    assert own_version.rubric.versions.count() == 1


def test_edit_page_shows_the_latest_text_in_the_form(researcher_client, builtins, project):
    page = researcher_client.get(
        url("rubric_edit", project, builtins["Repetitiveness"].rubric)
    ).content.decode()
    assert "Rating 1 (Very Repetitive): The response is highly repetitive" in page
    assert 'name="scale"' not in page and 'name="criterion"' not in page  # one place to edit: the text
    assert "your edit becomes this project's own copy" in page


def test_import_pasted_seed_text(researcher_client, project):
    data = {"text": seed_text("000_92fb41b17348cc69.txt"), "name": "Repetition"}
    response = researcher_client.post(url("rubric_import", project), data)
    rubric = Rubric.objects.get(project=project, name="Repetition")
    assert response.status_code == 302 and response["Location"] == url("rubric_detail", project, rubric)
    assert rubric.versions.latest("number").scale[4]["label"] == "Not Repetitive"


def test_import_uploaded_json_spec_with_mojibake_repair(researcher_client, project):
    spec = {
        "name": "Polite",
        "kind": "likert",
        "scale": [{"value": 1, "label": "Rude"}, {"value": 2}],
        "prompt_template": "Isn’t it polite? {scale} {{Dialog}}".encode().decode("cp1252"),
    }
    upload = SimpleUploadedFile("polite.json", json.dumps(spec).encode("utf-8"))
    response = researcher_client.post(
        url("rubric_import", project), {"file": upload, "repair_text": "on"}, follow=True
    )
    version = Rubric.objects.get(project=project, name="Polite").versions.latest("number")
    assert version.prompt_template == "Isn’t it polite? {scale} {{Dialog}}"
    assert "Repaired mojibake at prompt_template line 1" in response.content.decode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"text": "   "}, "The text is empty"),
        ({"text": "Evaluation Criteria:\nClarity (1-5) - c.\n{{Dialog}}"}, "no scale"),
        ({"text": '{"name": "x"'}, "malformed JSON at line 1"),
    ],
)
def test_import_refusals_are_shown_and_nothing_is_saved(researcher_client, project, data, message):
    response = researcher_client.post(url("rubric_import", project), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Rubric.objects.filter(project=project).exists()


def test_preview_region_carries_its_picker_with_the_datasets_item_ids(researcher_client, builtins, project):
    dataset = factories.make_dataset(project, items=3, name="Small talk")
    response = researcher_client.get(
        url("rubric_preview", project, builtins["Repetitiveness"].rubric), {"dataset": dataset.pk}, **HTMX
    )
    body = response.content.decode()
    assert 'name="item" value="d-0"' in body
    assert '<option value="d-0"><option value="d-1"><option value="d-2">' in body
    assert f'<option value="{dataset.pk}" selected>Small talk</option>' in body
    assert 'hx-get="/p/demo-study/rubrics/' in body and 'action="/p/demo-study/rubrics/' in body


def test_history_restore_of_a_pushed_preview_url_gets_the_whole_page(researcher_client, builtins, project):
    headers = {**HTMX, "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"}
    response = researcher_client.get(
        url("rubric_preview", project, builtins["Repetitiveness"].rubric), **headers
    )
    assert "<html" in response.content.decode()
    assert "HX-Request" in response["Vary"]
