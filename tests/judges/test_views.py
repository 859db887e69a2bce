import re
from decimal import Decimal

import pytest
from django.template import Context, Template
from django.urls import reverse

from judges import services
from judges.models import Judge, JudgeCall, JudgeRun
from tests import factories
from tests.judges.conftest import TEST_KEY_ENV, judge_form_data, make_judge


def judge_pages(project, judge):
    return [
        reverse("judge_list", args=[project.slug]),
        reverse("judge_create", args=[project.slug]),
        reverse("judge_detail", args=[project.slug, judge.pk]),
    ]


def test_researcher_sees_judge_pages(researcher_client, project, judge):
    for url in judge_pages(project, judge):
        assert researcher_client.get(url).status_code == 200


def test_annotator_is_refused_judge_pages(annotator_client, project, judge):
    for url in judge_pages(project, judge):
        assert annotator_client.get(url).status_code == 403


def test_outsider_does_not_learn_the_project_exists(outsider_client, project, judge):
    for url in judge_pages(project, judge):
        assert outsider_client.get(url).status_code == 404


def test_simulated_judges_are_labelled_in_the_list(researcher_client, project, judge):
    page = researcher_client.get(reverse("judge_list", args=[project.slug])).content.decode()
    assert "fake judge" in page and "simulated" in page


def test_creating_a_judge_with_a_server_credential_stores_its_name_not_a_key(researcher_client, project):
    form = judge_form_data(
        credential=f"env:{TEST_KEY_ENV}", requests_per_minute="500", cache_enabled="on", request_timeout="30"
    )
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    judge = Judge.objects.get(name="gpt judge")
    assert response.status_code == 302
    assert judge.api_key_env == TEST_KEY_ENV and not judge.api_key_encrypted and not judge.is_simulated


def test_a_key_given_as_the_credential_is_refused_naming_the_setting(researcher_client, project):
    form = judge_form_data(name="oops", credential="sk-abc-123")
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    assert response.status_code == 200
    page = response.content.decode()
    assert "That is not a server credential" in page and "CONCORD_JUDGE_CREDENTIALS" in page
    assert "sk-abc-123" not in page
    assert not Judge.objects.filter(name="oops").exists()


def test_the_api_key_never_appears_on_the_judge_page(researcher_client, project, judge, monkeypatch):
    monkeypatch.setenv(TEST_KEY_ENV, "sk-very-secret-value")
    page = researcher_client.get(reverse("judge_detail", args=[project.slug, judge.pk])).content.decode()
    assert TEST_KEY_ENV in page
    assert "sk-very-secret-value" not in page


def test_test_connection_shows_the_reply_and_marks_the_fake_server_simulated(
    researcher_client, project, fake_llm
):
    judge = make_judge(project, fake_llm, name="plain name", model="fake-gpt")
    url = reverse("judge_test_connection", args=[project.slug, judge.pk])
    response = researcher_client.post(url, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert 'id="judge-connection"' in html and "<html" not in html
    assert "connected" in html and "simulated model" in html
    judge.refresh_from_db()
    assert judge.simulated


def test_test_connection_shows_the_error_for_an_unknown_model(researcher_client, project, fake_llm):
    judge = make_judge(project, fake_llm, model="gpt-unknown")
    response = researcher_client.post(reverse("judge_test_connection", args=[project.slug, judge.pk]))
    assert "the endpoint has no model &#x27;gpt-unknown&#x27; (it lists: fake-judge, fake-gpt)" in (
        response.content.decode()
    )


def test_the_launch_form_picks_a_projects_only_judge_and_leaves_the_pick_when_there_are_two(
    researcher_client, project, judge, fake_llm, evaluation_setup
):
    evaluation, _version = evaluation_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    page = researcher_client.get(url).content.decode()
    assert f'<option value="{judge.pk}" selected>' in page and "Select an option" not in page
    make_judge(project, fake_llm, name="second judge")
    page = researcher_client.get(url).content.decode()
    assert '<option value="" selected>' in page and f'<option value="{judge.pk}" selected>' not in page


def test_run_create_shows_calls_tokens_and_cost_before_launch(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    page = researcher_client.get(url, {"judge": judge.pk, "rubric_versions": version.pk}).content.decode()
    assert "<strong>3</strong> calls" in page and "Estimated cost" in page
    assert not JudgeRun.objects.exists()


def test_confirming_launches_the_run_and_queues_its_first_lane(
    researcher_client, project, judge, evaluation_setup, django_capture_on_commit_callbacks, no_enqueue
):
    evaluation, version = evaluation_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = researcher_client.post(
            url, {"judge": judge.pk, "rubric_versions": version.pk, "confirm": "yes"}
        )
    run = JudgeRun.objects.get()
    assert response.url == reverse("judge_run_detail", args=[project.slug, run.pk])
    assert run.total_calls == 3 and no_enqueue == [(run.pk, 0)]


@pytest.fixture
def two_version_setup(project):
    quality = factories.make_rubric(project=project, name="Quality")
    fluency = factories.make_rubric(project=project, name="Fluency")
    evaluation = factories.make_evaluation(
        project, factories.make_dataset(project, items=3), [quality, fluency]
    )
    return evaluation, quality, fluency


def test_launch_form_offers_every_rubric_version_of_the_evaluation_checked(
    researcher_client, project, judge, two_version_setup
):
    evaluation, quality, fluency = two_version_setup
    page = researcher_client.get(
        reverse("judge_run_create", args=[project.slug, evaluation.pk])
    ).content.decode()
    for version in (quality, fluency):
        tag = re.search(f'<input type="checkbox" name="rubric_versions" value="{version.pk}"[^>]*>', page)
        assert tag is not None and " checked" in tag.group(0)


def test_estimate_lists_each_version_and_the_total(researcher_client, project, judge, two_version_setup):
    evaluation, quality, fluency = two_version_setup
    judge.price_input_per_million, judge.price_output_per_million = Decimal("2.5"), Decimal("10")
    judge.save()
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    response = researcher_client.get(
        url, {"judge": judge.pk, "rubric_versions": [quality.pk, fluency.pk]}, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert 'id="run-estimate"' in html and "<html" not in html
    estimates = dict(response.context["estimates"])
    total = response.context["total"]
    assert set(estimates) == {quality, fluency}
    assert total.calls == 6 and total.tokens == sum(e.tokens for e in estimates.values())
    assert total.cost == sum(e.cost for e in estimates.values()) > 0
    assert quality.label in html and fluency.label in html
    assert "<strong>6</strong> calls" in html and "Launch 2 runs: 6 calls" in html
    assert not JudgeRun.objects.exists()


def test_confirming_two_versions_launches_two_runs_and_returns_to_the_evaluation(
    researcher_client, project, judge, two_version_setup, django_capture_on_commit_callbacks, no_enqueue
):
    evaluation, quality, fluency = two_version_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = researcher_client.post(
            url, {"judge": judge.pk, "rubric_versions": [quality.pk, fluency.pk], "confirm": "yes"}
        )
    runs = list(JudgeRun.objects.order_by("pk"))
    evaluation_url = reverse("evaluation_detail", args=[project.slug, evaluation.pk])
    assert response.url == f"{evaluation_url}#evaluation_judge_runs"
    assert {run.rubric_version for run in runs} == {quality, fluency}
    assert [run.total_calls for run in runs] == [3, 3]
    assert len({run.rater_id for run in runs}) == 2
    assert sorted(no_enqueue) == sorted((run.pk, 0) for run in runs)


def test_unchecking_every_version_launches_nothing(researcher_client, project, judge, two_version_setup):
    evaluation, _, _ = two_version_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    response = researcher_client.post(url, {"judge": judge.pk, "confirm": "yes"})
    assert response.status_code == 200
    assert "Pick at least one rubric version." in response.content.decode()
    assert not JudgeRun.objects.exists()


def test_a_version_that_cannot_be_judged_refuses_the_whole_launch(
    researcher_client, project, judge, django_capture_on_commit_callbacks, no_enqueue
):
    likert = factories.make_rubric(project=project, name="Quality")
    pairwise = factories.make_rubric(project=project, name="Preference", kind="pairwise")
    dataset = factories.make_dataset(project, items=2, baseline=False)
    evaluation = factories.make_evaluation(project, dataset, [likert, pairwise])
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    chosen = {"judge": judge.pk, "rubric_versions": [likert.pk, pairwise.pk]}
    estimate_page = researcher_client.get(url, chosen).content.decode()
    assert "needs a baseline" in estimate_page and "Launch" not in estimate_page
    with django_capture_on_commit_callbacks(execute=True):
        response = researcher_client.post(url, {**chosen, "confirm": "yes"})
    assert response.status_code == 200
    assert f"Pairwise rubric {pairwise} needs a baseline; items without one: d-0, d-1." in (
        response.content.decode()
    )
    assert not JudgeRun.objects.exists() and not JudgeCall.objects.exists() and no_enqueue == []


def test_a_version_of_another_evaluation_is_not_a_valid_choice(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    other = factories.make_rubric(project=project, name="Elsewhere")
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    response = researcher_client.post(
        url, {"judge": judge.pk, "rubric_versions": [version.pk, other.pk], "confirm": "yes"}
    )
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not JudgeRun.objects.exists()


def test_run_page_polls_progress_while_running_and_stops_when_done(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    url = reverse("judge_run_detail", args=[project.slug, run.pk])
    partial = researcher_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'hx-trigger="every 2s"' in partial and "0 / 3" in partial
    services.work_lane(run_id=run.pk, lane=0)
    page = researcher_client.get(url).content.decode()
    assert "3 / 3" in page and "every 2s" not in page and "simulated model" in page


def test_run_page_query_count_does_not_grow_with_the_run(
    researcher_client, project, judge, evaluation_setup, django_assert_max_num_queries
):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    services.work_lane(run_id=run.pk, lane=0)
    with django_assert_max_num_queries(10):
        researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk]))


def test_cancel_and_resume_from_the_run_page(researcher_client, project, judge, evaluation_setup):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    researcher_client.post(reverse("judge_run_cancel", args=[project.slug, run.pk]))
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.CANCELLED
    page = researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode()
    assert "Cancelled.</strong>" not in page  # the badge says it; a browser review saw "Cancelled Cancelled."
    researcher_client.post(reverse("judge_run_resume", args=[project.slug, run.pk]))
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.RUNNING


def test_annotator_cannot_see_or_cancel_judge_runs(annotator_client, project, judge, evaluation_setup):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    assert annotator_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).status_code == 403
    assert annotator_client.post(reverse("judge_run_cancel", args=[project.slug, run.pk])).status_code == 403
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.RUNNING


def test_evaluation_section_lists_runs_and_links_to_a_new_run(project, judge, evaluation_setup):
    evaluation, version = evaluation_setup
    services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    html = Template("{% load judge_tags %}{% evaluation_judge_runs evaluation %}").render(
        Context({"evaluation": evaluation})
    )
    assert "fake judge" in html and "simulated" in html
    assert reverse("judge_run_create", args=[project.slug, evaluation.pk]) in html


def test_run_page_says_authentication_failed_after_a_wrong_key(researcher_client, project, evaluation_setup):
    from judges.fake_llm import FakeConfig, FakeLLM

    evaluation, version = evaluation_setup
    server = FakeLLM(FakeConfig(latency_ms=0, api_key="right")).start(stop_after=60)
    try:
        run = services.launch_run(
            judge=make_judge(project, server), evaluation=evaluation, rubric_version=version
        )
        services.work_lane(run_id=run.pk, lane=0)
    finally:
        server.stop()
    page = researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode()
    assert "authentication failed (401)" in page and "Failed" in page


def test_evaluation_page_shows_the_judge_runs_section(researcher_client, project, judge, evaluation_setup):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    page = researcher_client.get(
        reverse("evaluation_detail", args=[project.slug, evaluation.pk])
    ).content.decode()
    assert 'id="evaluation_judge_runs"' in page
    assert reverse("judge_run_detail", args=[project.slug, run.pk]) in page


def test_a_form_error_never_renders_the_pasted_key_back(researcher_client, project, judge, settings):
    from cryptography.fernet import Fernet

    settings.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    form = judge_form_data(name=judge.name, credential="pasted", api_key="sk-typed-once-1234567890")
    response = researcher_client.post(reverse("judge_create", args=[project.slug]), form)
    page = response.content.decode()
    assert "already has a judge named" in page and "sk-typed-once-1234567890" not in page
