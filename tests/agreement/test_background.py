"""Large reports are computed by a Celery task while the page shows a computing note or the stale report."""

import time
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agreement import services
from agreement.models import ReportCache
from agreement.tasks import compute_agreement_report
from evaluations.models import Rating
from tests.agreement.helpers import make_rated_evaluation
from tests.workers import unreachable_broker

pytestmark = pytest.mark.django_db

TABLE = {
    "anna": ["A", "B", "SAME", "A", "B", "A"],
    "bob": ["A", "B", "SAME", "B", "B", "A"],
    "judge": ["A", "SAME", "SAME", "A", "!", "B"],
}
FIGURE = "Krippendorff&#x27;s alpha"


@pytest.fixture
def evaluation(project):
    evaluation, _ = make_rated_evaluation(
        project, kind="pairwise", table=TABLE, models=["judge"], metadata=[{"topic": "music"}] * 6
    )
    return evaluation


@pytest.fixture
def enqueued(monkeypatch):
    """The (args) of every compute_agreement_report.delay call, instead of sending them to the broker."""
    calls: list[tuple] = []
    monkeypatch.setattr(compute_agreement_report, "delay", lambda *args: calls.append(args))
    return calls


@pytest.fixture
def large(settings):
    """Every evaluation here counts as large: no report is cheap enough for a request."""
    settings.AGREEMENT_INLINE_SECONDS = 0


def _url(evaluation, name="agreement_report"):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk])


def _judge_distribution(evaluation) -> list[int]:
    payload = ReportCache.objects.get(evaluation=evaluation).payload
    assert payload is not None
    return payload["rubrics"][0]["distribution"]["judge"]


def _get(client, evaluation, captured, **kwargs):
    with captured(execute=True):
        response = client.get(_url(evaluation), **kwargs)
    assert response.status_code == 200
    return response.content.decode()


def test_a_large_evaluation_enqueues_one_task_and_the_page_shows_the_computing_note(
    researcher_client, evaluation, enqueued, large, django_capture_on_commit_callbacks
):
    page = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert "computing…" in page and FIGURE not in page
    assert 'hx-trigger="every 2s"' in page
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in page
    assert f'<a href="{_url(evaluation)}">Reload</a>' in page
    poll = _get(
        researcher_client, evaluation, django_capture_on_commit_callbacks, headers={"HX-Request": "true"}
    )
    assert poll.lstrip().startswith('<div id="report" hx-get=') and "<html" not in poll
    assert enqueued == [(evaluation.pk, {}, services.DEFAULT_RESAMPLES)]
    entry = ReportCache.objects.get(evaluation=evaluation)
    assert entry.payload is None and entry.computing == services.ratings_fingerprint(evaluation)


def test_running_the_task_fills_the_cache_and_the_page_then_shows_the_figures(
    researcher_client, evaluation, enqueued, large, django_capture_on_commit_callbacks
):
    _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert compute_agreement_report(*enqueued[0]) is True
    entry = ReportCache.objects.get(evaluation=evaluation)
    assert entry.payload is not None and entry.computing == "" and entry.computing_since is None
    page = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert FIGURE in page and "computing…" not in page and "hx-trigger" not in page.split('id="report"')[1]
    assert len(enqueued) == 1


def test_a_redelivered_task_finds_the_report_current_and_does_nothing(
    researcher_client, evaluation, enqueued, large, django_capture_on_commit_callbacks
):
    _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert compute_agreement_report(*enqueued[0]) is True
    computed = ReportCache.objects.get(evaluation=evaluation).computed
    assert compute_agreement_report(*enqueued[0]) is False
    assert ReportCache.objects.get(evaluation=evaluation).computed == computed


def test_a_stale_report_is_shown_marked_updating_while_the_new_one_computes(
    researcher_client, evaluation, enqueued, settings, django_capture_on_commit_callbacks
):
    before = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)  # small: inline
    assert FIGURE in before and enqueued == []
    settings.AGREEMENT_INLINE_SECONDS = 0
    rating = Rating.objects.get(evaluation=evaluation, rater__name="judge", item__position=0)
    rating.value = "B"
    rating.save()

    page = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert "updating…" in page and FIGURE in page and 'hx-trigger="every 2s"' in page
    assert _judge_distribution(evaluation) == [2, 2, 1]
    assert len(enqueued) == 1

    compute_agreement_report(*enqueued[0])
    after = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert "updating…" not in after and FIGURE in after and len(enqueued) == 1
    assert _judge_distribution(evaluation) != [2, 2, 1]


def test_small_evaluations_are_still_computed_in_the_request(
    researcher_client, evaluation, enqueued, django_capture_on_commit_callbacks
):
    page = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert FIGURE in page and "computing…" not in page and "updating…" not in page
    assert enqueued == []


def test_downloads_of_a_large_evaluation_stay_synchronous(researcher_client, evaluation, enqueued, large):
    response = researcher_client.get(_url(evaluation, "agreement_report_json"))
    assert response.json()["rubrics"][0]["items"] == 6
    assert researcher_client.get(_url(evaluation, "agreement_report_csv")).status_code == 200
    assert enqueued == []


def test_each_filter_gets_its_own_task(
    researcher_client, evaluation, enqueued, large, django_capture_on_commit_callbacks
):
    _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    _get(
        researcher_client,
        evaluation,
        django_capture_on_commit_callbacks,
        data={"key": "topic", "value": "music"},
    )
    assert [args[1] for args in enqueued] == [{}, {"topic": "music"}]


def test_an_expired_claim_is_taken_again(
    researcher_client, evaluation, enqueued, large, django_capture_on_commit_callbacks
):
    _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    ReportCache.objects.update(computing_since=timezone.now() - timedelta(hours=1))  # its worker died
    _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert len(enqueued) == 2


def test_a_failed_computation_is_shown_and_not_enqueued_again(
    researcher_client, evaluation, enqueued, large, monkeypatch, django_capture_on_commit_callbacks
):
    _get(researcher_client, evaluation, django_capture_on_commit_callbacks)

    def broken(**_kwargs):
        raise ValueError("rubric 7 has no scale")

    monkeypatch.setattr(services, "build_report", broken)
    with pytest.raises(ValueError):
        compute_agreement_report(*enqueued[0])
    page = _get(researcher_client, evaluation, django_capture_on_commit_callbacks)
    assert "could not be computed: ValueError: rubric 7 has no scale" in page
    assert "hx-trigger" not in page and len(enqueued) == 1


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_computes_the_report_the_page_asked_for(
    researcher_client, evaluation, large, celery_worker_process
):
    page = researcher_client.get(_url(evaluation)).content.decode()
    assert "computing…" in page
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        entry = ReportCache.objects.get(evaluation=evaluation)
        if entry.payload is not None and entry.computing == "":
            break
        time.sleep(0.2)
    assert FIGURE in researcher_client.get(_url(evaluation)).content.decode()


@pytest.mark.django_db(transaction=True)  # as the server runs a view: the task is sent as the claim commits
def test_when_the_broker_refuses_the_page_says_so_and_the_next_view_tries_again(
    researcher_client, evaluation, large, monkeypatch
):
    down = unreachable_broker(monkeypatch)
    monkeypatch.setattr(
        compute_agreement_report, "delay", lambda *args: down.send_task(compute_agreement_report.name, args)
    )
    response = researcher_client.get(_url(evaluation))
    page = response.content.decode()
    assert response.status_code == 200
    assert "the task queue could not be reached (its broker is down); reload the page to try again" in page
    assert "hx-trigger" not in page  # no polling for a computation that was never queued
    assert ReportCache.objects.get(evaluation=evaluation).computing == ""  # the claim is released

    sent: list[tuple] = []
    monkeypatch.setattr(
        compute_agreement_report, "delay", lambda *args: sent.append(args)
    )  # the queue is back
    assert "computing…" in researcher_client.get(_url(evaluation)).content.decode()
    assert [args[0] for args in sent] == [evaluation.pk]


def test_the_cache_keeps_the_latest_reports_of_an_evaluation_however_many_filters_are_asked_for(
    project, monkeypatch
):
    """Each distinct ?key=&value= made a report row that stayed for ever."""
    monkeypatch.setattr(services, "KEPT_REPORTS", 5)
    evaluation, _ = make_rated_evaluation(project, kind="likert", table={"a": ["1", "2"], "b": ["1", "3"]})
    for n in range(8):
        services.cached_report(evaluation=evaluation, where={"topic": f"t{n}"}, resamples=10)
    kept = ReportCache.objects.filter(evaluation=evaluation)
    assert kept.count() == 5
    assert sorted(entry.parameters["where"]["topic"] for entry in kept) == ["t3", "t4", "t5", "t6", "t7"]
