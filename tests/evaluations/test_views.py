"""Evaluation pages through HTTP: create, detail, export downloads and the ratings import."""

import csv
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from evaluations import exports
from evaluations.models import Evaluation, Rating
from tests import factories


@pytest.fixture
def evaluation(project):
    dataset = factories.make_dataset(project, items=4, name="Chats")
    quality = factories.make_rubric(project=project, name="Quality")
    return factories.make_evaluation(project, dataset, [quality], name="Study")


def url(name, evaluation, query=""):
    return reverse(name, args=[evaluation.project.slug, evaluation.pk]) + query


def upload(text, name="ratings.csv"):
    return SimpleUploadedFile(name, text.encode("utf-8"), content_type="text/csv")


def test_researcher_creates_an_evaluation_in_the_browser(researcher_client, project):
    dataset = factories.make_dataset(project, items=2)
    version = factories.make_rubric(project=project, name="Quality")
    response = researcher_client.post(
        reverse("evaluation_create", args=[project.slug]),
        {
            "name": "Pilot",
            "dataset": dataset.pk,
            "rubric_versions": [version.pk],
            "overlap": 2,
            "order": "shuffled",
        },
    )
    evaluation = Evaluation.objects.get(name="Pilot")
    assert response.status_code == 302
    assert response["Location"] == url("evaluation_detail", evaluation)
    assert (evaluation.overlap, evaluation.order, list(evaluation.rubric_versions.all())) == (
        2,
        "shuffled",
        [version],
    )


def test_create_form_shows_why_items_do_not_fit_and_creates_nothing(researcher_client, project):
    dataset = factories.make_dataset(project, items=2, baseline=False)
    version = factories.make_rubric(project=project, name="Pref", kind="pairwise")
    page = researcher_client.get(reverse("evaluation_create", args=[project.slug]))
    assert "Pref@1 (pairwise)" in page.content.decode()
    response = researcher_client.post(
        reverse("evaluation_create", args=[project.slug]),
        {
            "name": "Pilot",
            "dataset": dataset.pk,
            "rubric_versions": [version.pk],
            "overlap": 3,
            "order": "dataset",
        },
    )
    assert response.status_code == 400
    assert (
        "Pref@1 (pairwise) needs a baseline on every item: 2 of 2 items lack it" in response.content.decode()
    )
    assert not Evaluation.objects.exists()


def test_detail_shows_summary_exports_import_form_and_sections(researcher_client, evaluation, project):
    item = evaluation.dataset.items.first()
    version = evaluation.rubric_versions.get()
    factories.make_rating(evaluation, item, version, factories.make_rater(project, name="ann"), "4")
    factories.make_rating(
        evaluation, item, version, factories.make_rater(project, name="gpt", kind="model"), "3"
    )
    page = researcher_client.get(url("evaluation_detail", evaluation)).content.decode()
    for expected in [
        "Chats",
        "Quality v1",
        "?layout=long",
        "?layout=wide",
        "?layout=jsonl",
        'id="ratings-import"',
        "A is the item's baseline, B its response",  # so pairwise labels are not imported flipped
        'id="evaluation_annotators"',
    ]:
        assert expected in page
    assert "<strong>2</strong>" in page  # ratings


def logged_in(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("name", ["evaluation_detail", "evaluation_export"])
def test_annotators_get_403_and_outsiders_404(annotator, outsider, evaluation, name):
    assert logged_in(annotator).get(url(name, evaluation)).status_code == 403
    assert logged_in(outsider).get(url(name, evaluation)).status_code == 404


def test_annotators_and_outsiders_cannot_import_ratings(annotator, outsider, evaluation):
    text = "item_id,rubric,rater,rater_kind,value\nd-0,Quality,x,human,3\n"
    assert (
        logged_in(annotator).post(url("ratings_import", evaluation), {"file": upload(text)}).status_code
        == 403
    )
    assert (
        logged_in(outsider).post(url("ratings_import", evaluation), {"file": upload(text)}).status_code == 404
    )
    assert not Rating.objects.exists()


def test_annotators_cannot_create_evaluations(annotator, project):
    assert logged_in(annotator).get(reverse("evaluation_create", args=[project.slug])).status_code == 403


def test_anonymous_visitors_are_sent_to_log_in(client, evaluation):
    response = client.get(url("evaluation_export", evaluation, "?layout=long"))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_detail_page_queries_do_not_grow_with_ratings_raters_or_rubrics(researcher_client, project):
    def setup(items, raters, rubrics, name):
        dataset = factories.make_dataset(project, items=items, name=f"{name} data")
        versions = [factories.make_rubric(project=project) for _ in range(rubrics)]
        evaluation = factories.make_evaluation(project, dataset, versions, name=name)
        people = [factories.make_rater(project, kind="human" if n % 2 else "model") for n in range(raters)]
        for item in dataset.items.all():
            for version in versions:
                for rater in people:
                    factories.make_rating(evaluation, item, version, rater, "3")
        return evaluation

    def count(evaluation):
        with CaptureQueriesContext(connection) as queries:
            assert researcher_client.get(url("evaluation_detail", evaluation)).status_code == 200
        return len(queries)

    small, large = setup(1, 1, 1, "small"), setup(6, 4, 3, "large")
    count(small)  # warm caches (session, content types)
    assert count(large) == count(small)


def test_export_view_streams_an_attachment(researcher_client, evaluation, project):
    item = evaluation.dataset.items.first()
    factories.make_rating(
        evaluation, item, evaluation.rubric_versions.get(), factories.make_rater(project, name="@x"), "5"
    )
    response = researcher_client.get(url("evaluation_export", evaluation, "?layout=long"))
    assert response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="demo-study-Study-ratings-long.csv"'
    jsonl = researcher_client.get(url("evaluation_export", evaluation, "?layout=jsonl"))
    assert jsonl["Content-Disposition"] == 'attachment; filename="demo-study-Study-ratings.jsonl"'
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(row["item_id"], row["rater"], row["value"]) for row in rows] == [("d-0", "'@x", "5")]
    wide = researcher_client.get(url("evaluation_export", evaluation, "?layout=wide"))
    quality = exports.version_heading(evaluation.rubric_versions.get())
    assert (
        b"".join(wide.streaming_content).decode().splitlines()[0]
        == f"item_id,{quality} | @x,{quality} | human mean"
    )
    assert researcher_client.get(url("evaluation_export", evaluation, "?layout=xml")).status_code == 404


def test_wide_csv_download_can_have_item_texts_and_a_byte_order_mark(researcher_client, evaluation, project):
    item = evaluation.dataset.items.get(external_id="d-0")
    factories.make_rating(
        evaluation, item, evaluation.rubric_versions.get(), factories.make_rater(project, name="ann"), "5"
    )
    response = researcher_client.get(url("evaluation_export", evaluation, "?layout=wide&item_text=1&excel=1"))
    data = b"".join(response.streaming_content)
    assert data.startswith(b"\xef\xbb\xbf")
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"))))
    assert list(rows[0])[:4] == ["item_id", "context", "response", "baseline"]
    quality = exports.version_heading(evaluation.rubric_versions.get())
    assert rows[0]["response"] == item.response["text"] and rows[0][f"{quality} | ann"] == "5"


def test_import_form_imports_and_redirects_with_a_summary(researcher_client, evaluation):
    data = {
        "file": upload(
            "item_id,rubric,rater,rater_kind,value\nd-0,Quality,old,human,4\nd-1,Quality,old,human,2\n"
        )
    }
    response = researcher_client.post(url("ratings_import", evaluation), data, follow=True)
    assert Rating.objects.count() == 2
    assert "2 ratings read: 2 new" in response.content.decode()


def test_import_form_lists_every_problem_and_imports_nothing(researcher_client, evaluation):
    data = {
        "file": upload(
            "item_id,rubric,rater,rater_kind,value\nd-0,Quality,old,human,9\nzz,Quality,old,human,2\n"
        )
    }
    response = researcher_client.post(url("ratings_import", evaluation), data, HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200  # htmx swaps 2xx only
    assert page.lstrip().startswith('<section class="card" id="ratings-import">')
    assert "ratings.csv: 2 problems; nothing was imported." in page
    assert "line 2, column value: &#x27;9&#x27; is outside the scale" in page
    assert "line 3, column item_id: no item &#x27;zz&#x27; in dataset &#x27;Chats&#x27;" in page
    assert not Rating.objects.exists()


def test_htmx_import_success_redirects_the_client(researcher_client, evaluation):
    data = {"file": upload("item_id,rubric,rater,rater_kind,value\nd-0,Quality,old,human,4\n")}
    response = researcher_client.post(url("ratings_import", evaluation), data, HTTP_HX_REQUEST="true")
    assert response["HX-Redirect"] == url("evaluation_detail", evaluation)


def test_oversized_import_is_refused_before_reading(researcher_client, evaluation, settings):
    settings.CONCORD_MAX_UPLOAD_BYTES = 10
    data = {"file": upload("item_id,rubric,rater,rater_kind,value\nd-0,Quality,old,human,4\n")}
    response = researcher_client.post(url("ratings_import", evaluation), data)
    assert response.status_code == 400
    assert "the limit is 10." in response.content.decode()
    assert not Rating.objects.exists()


def test_human_progress_counts_what_the_annotators_queues_fill_not_imported_ratings(
    researcher_client, evaluation, project, annotator
):
    """Seen in a browser review: the demo's imported ratings showed 100% at overlap 2 while every annotator
    was still given all twelve items (the queues count only this evaluation's own ratings)."""
    version = evaluation.rubric_versions.get()
    earlier = factories.make_rater(project, name="earlier study")  # imported: no user
    anna = factories.make_rater(project, name="anna", user=annotator)
    for item in evaluation.dataset.items.all():
        factories.make_rating(evaluation, item, version, earlier, "3")
    factories.make_rating(evaluation, evaluation.dataset.items.first(), version, anna, "4")
    page = researcher_client.get(url("evaluation_detail", evaluation)).content.decode()
    assert 'title="1 of 8 by this evaluation\'s annotators"' in page  # 4 items x overlap 2
    assert "12%" in page and "4 imported ratings not counted" in page
