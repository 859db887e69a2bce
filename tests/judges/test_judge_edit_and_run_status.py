"""Judges can be edited, deleted or archived; run pages never hang silently and offer only meaningful
actions; the evaluation page's statuses update while anything runs."""

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from judges import services
from judges.models import Judge, JudgeRun


def edit_data(judge: Judge, **changes) -> dict:
    data = {
        "name": judge.name,
        "endpoint": judge.endpoint,
        "base_url": judge.base_url,
        "model": judge.model,
        "credential": judge.credential_source,
        "temperature": "0",
        "max_tokens": "64",
        "samples": "1",
        "requests_per_minute": "0",
        "tokens_per_minute": "0",
        "concurrency": "2",
        "price_input_per_million": "0",
        "price_output_per_million": "0",
        "request_timeout": "5",
    }
    return {**data, **changes}


def test_an_edited_judge_applies_to_later_runs_and_launched_runs_keep_their_frozen_settings(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    first = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    url = reverse("judge_edit", args=[project.slug, judge.pk])
    response = researcher_client.post(url, edit_data(judge, max_tokens="500", model="fake-gpt"))
    assert response.status_code == 302
    judge.refresh_from_db()
    assert judge.max_tokens == 500 and judge.model == "fake-gpt"
    first.refresh_from_db()
    assert first.frozen_parameters.max_tokens == 256 and first.frozen_parameters.model == "fake-judge"
    second = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    assert second.frozen_parameters.max_tokens == 500


def test_changing_the_model_forgets_what_the_connection_test_found(researcher_client, project, judge):
    Judge.objects.filter(pk=judge.pk).update(capabilities={"logprobs": False}, probed_at=timezone.now())
    researcher_client.post(
        reverse("judge_edit", args=[project.slug, judge.pk]), edit_data(judge, model="fake-gpt")
    )
    judge.refresh_from_db()
    assert judge.capabilities == {} and judge.probed_at is None


def test_a_bad_edit_is_refused_and_nothing_changes(researcher_client, project, judge):
    response = researcher_client.post(
        reverse("judge_edit", args=[project.slug, judge.pk]), edit_data(judge, samples="50", model="other")
    )
    assert (
        response.status_code == 200
        and "Samples per item must be between 1 and 20" in response.content.decode()
    )
    judge.refresh_from_db()
    assert judge.model == "fake-judge"


def test_a_judge_no_run_used_is_deleted(researcher_client, project, judge):
    researcher_client.post(reverse("judge_delete", args=[project.slug, judge.pk]))
    assert not Judge.objects.filter(pk=judge.pk).exists()


def test_a_judge_with_runs_is_archived_hidden_from_the_launch_form_and_kept_for_its_runs(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    researcher_client.post(reverse("judge_delete", args=[project.slug, judge.pk]))
    judge.refresh_from_db()
    assert judge.archived and run.judge_id == judge.pk
    form_page = researcher_client.get(reverse("judge_run_create", args=[project.slug, evaluation.pk]))
    assert f'value="{judge.pk}"' not in form_page.content.decode()
    assert researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).status_code == 200


def test_annotators_cannot_edit_or_delete_judges(annotator_client, project, judge):
    assert annotator_client.get(reverse("judge_edit", args=[project.slug, judge.pk])).status_code == 403
    assert annotator_client.post(reverse("judge_delete", args=[project.slug, judge.pk])).status_code == 403
    assert Judge.objects.filter(pk=judge.pk).exists()


def test_queued_work_no_worker_took_is_named_on_the_run_and_evaluation_pages(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    run_url = reverse("judge_run_detail", args=[project.slug, run.pk])
    assert "no worker has picked this up" not in researcher_client.get(run_url).content.decode()
    JudgeRun.objects.filter(pk=run.pk).update(queued_at=timezone.now() - timedelta(minutes=3))
    warning = "no worker has picked this up for 3 min: is a Celery worker running?"
    assert warning in researcher_client.get(run_url).content.decode()
    evaluation_page = researcher_client.get(reverse("evaluation_detail", args=[project.slug, evaluation.pk]))
    assert warning in evaluation_page.content.decode()


def test_a_worker_that_went_silent_mid_run_is_named_too(researcher_client, project, judge, evaluation_setup):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    long_ago = timezone.now() - timedelta(minutes=10)
    JudgeRun.objects.filter(pk=run.pk).update(queued_at=long_ago, heartbeat=long_ago + timedelta(minutes=5))
    page = researcher_client.get(reverse("judge_run_detail", args=[project.slug, run.pk])).content.decode()
    assert "no worker has reported on this run for 5 min" in page


def test_evaluation_statuses_poll_while_a_run_runs_and_stop_when_done(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    section_url = reverse("evaluation_judge_runs", args=[project.slug, evaluation.pk])
    page = researcher_client.get(
        reverse("evaluation_detail", args=[project.slug, evaluation.pk])
    ).content.decode()
    assert f'hx-get="{section_url}"' in page and "Running" in page
    services.work_lane(run_id=run.pk, lane=0)
    section = researcher_client.get(section_url).content.decode()
    assert "Done" in section and "hx-get" not in section


def test_two_runs_of_one_judge_and_rubric_are_told_apart_by_number_and_start_time(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    first = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    second = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    section = researcher_client.get(reverse("evaluation_judge_runs", args=[project.slug, evaluation.pk]))
    html = section.content.decode()
    assert "run 1" in html and "run 2" in html
    assert first.created.strftime("%Y-%m-%d %H:%M") in html and second.rater.name != first.rater.name


def test_a_done_run_offers_neither_cancel_nor_resume_and_refuses_a_resume(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    run = services.launch_run(judge=judge, evaluation=evaluation, rubric_version=version)
    url = reverse("judge_run_detail", args=[project.slug, run.pk])
    running = researcher_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert ">Cancel<" in running and ">Resume<" not in running
    services.work_lane(run_id=run.pk, lane=0)
    done = researcher_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert ">Cancel<" not in done and ">Resume<" not in done
    researcher_client.post(reverse("judge_run_resume", args=[project.slug, run.pk]))
    run.refresh_from_db()
    assert run.status == JudgeRun.Status.DONE


def test_the_estimate_shows_usd_duration_and_the_parameters_sent(
    researcher_client, project, judge, evaluation_setup
):
    evaluation, version = evaluation_setup
    Judge.objects.filter(pk=judge.pk).update(price_input_per_million=1, price_output_per_million=2)
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    page = researcher_client.get(url, {"judge": judge.pk, "rubric_versions": [version.pk]}).content.decode()
    assert "USD" in page and "Expected duration" in page
    assert "assuming 2 s per call" in page
    assert "<code>max_tokens, seed</code>" in page  # no temperature set: the endpoint's default, none sent
    Judge.objects.filter(pk=judge.pk).update(temperature=0)
    page = researcher_client.get(url, {"judge": judge.pk, "rubric_versions": [version.pk]}).content.decode()
    assert "<code>max_tokens, temperature, seed</code>" in page


def test_the_estimate_says_when_the_judges_key_is_missing(
    researcher_client, project, judge, evaluation_setup, monkeypatch
):
    evaluation, version = evaluation_setup
    url = reverse("judge_run_create", args=[project.slug, evaluation.pk])
    page = researcher_client.get(url, {"judge": judge.pk, "rubric_versions": [version.pk]}).content.decode()
    assert "is not available on this server" not in page
    monkeypatch.delenv(judge.api_key_env)
    page = researcher_client.get(url, {"judge": judge.pk, "rubric_versions": [version.pk]}).content.decode()
    assert f"This judge's API key (server credential {judge.api_key_env}) is not available" in page


def test_an_edit_with_the_paste_box_empty_keeps_the_pasted_key(researcher_client, project, judge, settings):
    from cryptography.fernet import Fernet

    from judges import credentials

    settings.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    judge.set_pasted_key("sk-pasted-once-1234567890")
    judge.save()
    Judge.objects.filter(pk=judge.pk).update(capabilities={"logprobs": False}, probed_at=timezone.now())
    url = reverse("judge_edit", args=[project.slug, judge.pk])
    response = researcher_client.post(url, edit_data(judge, credential="pasted", api_key="", max_tokens="99"))
    assert response.status_code == 302
    judge.refresh_from_db()
    assert judge.max_tokens == 99 and judge.api_key_hint == "sk-...7890"
    assert credentials.credential_for(
        judge_id=judge.pk, source=judge.credential_source, base_url=judge.base_url
    ).api_key == ("sk-pasted-once-1234567890")
    assert judge.probed_at is not None  # the key did not change: the connection test still holds


def test_pasting_a_new_key_forgets_what_the_connection_test_found(
    researcher_client, project, judge, settings
):
    from cryptography.fernet import Fernet

    settings.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    Judge.objects.filter(pk=judge.pk).update(capabilities={"logprobs": False}, probed_at=timezone.now())
    url = reverse("judge_replace_key", args=[project.slug, judge.pk])
    assert researcher_client.post(url, {"api_key": "sk-another-account-1234"}).status_code == 302
    judge.refresh_from_db()
    assert judge.api_key_hint == "sk-...1234" and judge.capabilities == {} and judge.probed_at is None
