"""The launch form is honest: it names versions apart, says what each box would run again, warns about an
untested, failed or stale connection test, and never shows 0 USD for a judge without prices."""

import re
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from judges import services
from judges.models import Judge
from rubrics.models import RubricVersion
from tests.judges.conftest import make_judge


def _launch_page(client, project, evaluation, **query):
    return client.get(reverse("judge_run_create", args=[project.slug, evaluation.pk]), query).content.decode()


def _box(page, version):
    return re.search(
        rf'<li><label><input type="checkbox" name="rubric_versions" value="{version.pk}".*?</li>', page, re.S
    )


def test_each_box_says_what_it_would_run_and_what_it_would_make_again(
    researcher_client, project, judge, evaluation_setup, no_enqueue
):
    evaluation, version = evaluation_setup
    services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    page = _launch_page(researcher_client, project, evaluation, judge=judge.pk, rubric_versions=version.pk)
    box = _box(page, version)
    assert box is not None and " checked" in box.group(0)
    assert "Quality v1" in box.group(0)
    assert (
        "3 calls, made again: this judge already ran it here "
        f"(fake judge · Quality v1 (id {version.pk}) · run 1" in box.group(0)
    )


def test_a_preselected_version_is_the_only_one_ticked(researcher_client, project, evaluation_setup, judge):
    evaluation, version = evaluation_setup
    other = RubricVersion.objects.create(
        rubric=version.rubric,
        number=2,
        scale=version.scale,
        prompt_template=version.prompt_template + " More.",
    )
    evaluation.judge_only_versions.create(rubric_version=other)
    page = _launch_page(researcher_client, project, evaluation, version=other.pk)
    assert " checked" in _box(page, other).group(0) and " checked" not in _box(page, version).group(0)
    labels = re.findall(r'name="rubric_versions" value="\d+"[^>]*>\s*(.*?)</label>', page)
    assert labels == ["Quality v1", "Quality v2"]  # distinct, in rubric and number order
    assert "judges only" in _box(page, other).group(0)


def test_a_judge_without_prices_shows_tokens_and_prices_not_set(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    assert judge.price_input_per_million is None  # the default: not set
    page = _launch_page(researcher_client, project, evaluation, judge=judge.pk, rubric_versions=version.pk)
    assert "prices not set" in page and "0.0000" not in page and " USD" not in page
    assert "tokens" in page


def test_a_judge_with_prices_shows_its_cost(researcher_client, project, judge, evaluation_setup):
    evaluation, version = evaluation_setup
    Judge.objects.filter(pk=judge.pk).update(price_input_per_million=Decimal(1), price_output_per_million=0)
    page = _launch_page(researcher_client, project, evaluation, judge=judge.pk, rubric_versions=version.pk)
    assert "prices not set" not in page and re.search(r"\d\.\d{4} USD", page)


def test_the_launch_form_warns_about_a_failed_connection_test(
    researcher_client, project, fake_llm, evaluation_setup
):
    evaluation, version = evaluation_setup
    judge = make_judge(project, fake_llm, model="gpt-unknown")
    researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    page = _launch_page(researcher_client, project, evaluation, judge=judge.pk, rubric_versions=version.pk)
    assert 'id="run-connection-warning"' in page
    assert (
        "The last connection test of judge fake judge" in page and "failed: the endpoint has no model" in page
    )


def test_the_launch_form_warns_when_the_judge_changed_after_its_test(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    query = {"judge": judge.pk, "rubric_versions": version.pk}
    assert "has not been tested" in _launch_page(researcher_client, project, evaluation, **query)
    researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert 'id="run-connection-warning"' not in _launch_page(researcher_client, project, evaluation, **query)
    Judge.objects.filter(pk=judge.pk).update(edited_at=timezone.now() + timezone.timedelta(seconds=1))
    page = _launch_page(researcher_client, project, evaluation, **query)
    assert "was edited" in page and "after its last connection test" in page


def test_editing_a_judge_marks_it_edited(researcher_client, project, judge):
    from tests.judges.conftest import judge_form_data

    data = judge_form_data(name=judge.name, base_url=judge.base_url, model=judge.model, max_tokens="99")
    data["credential"] = f"env:{judge.api_key_env}"
    response = researcher_client.post(reverse("judge_edit", args=[project.slug, judge.pk]), data)
    assert response.status_code == 302
    judge.refresh_from_db()
    assert judge.edited_at is not None and judge.max_tokens == 99
