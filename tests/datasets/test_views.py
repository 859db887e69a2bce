import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from datasets import db
from datasets.models import Dataset, Item, UploadJob
from datasets.services import import_dataset

from .helpers import database_state, dialog, write_jsonl


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    settings.CONCORD_UPLOAD_DIR = tmp_path / "uploads"
    return settings.CONCORD_UPLOAD_DIR


def upload(client, project, content: bytes, *, filename="d.jsonl", name="Uploaded", follow=False, **fields):
    data = {"name": name, "format": "auto", **fields, "file": SimpleUploadedFile(filename, content)}
    return client.post(reverse("dataset_upload", args=[project.slug]), data, follow=follow)


def jsonl_bytes(objects) -> bytes:
    return "".join(json.dumps(obj) + "\n" for obj in objects).encode()


# ---------------------------------------------------------------- upload


def test_researcher_sees_the_upload_form(researcher_client, project):
    response = researcher_client.get(reverse("dataset_upload", args=[project.slug]))
    assert response.status_code == 200
    assert b'enctype="multipart/form-data"' in response.content


def client_for(user) -> Client:
    # The persona *_client fixtures share one Client, so a test that needs two logins makes its own.
    client = Client()
    client.force_login(user)
    return client


def test_annotator_gets_403_and_outsider_404_on_upload(annotator, outsider, project):
    url = reverse("dataset_upload", args=[project.slug])
    assert client_for(annotator).get(url).status_code == 403
    assert client_for(outsider).get(url).status_code == 404
    before = database_state()
    assert upload(client_for(annotator), project, jsonl_bytes([dialog(0)])).status_code == 403
    assert upload(client_for(outsider), project, jsonl_bytes([dialog(0)])).status_code == 404
    assert database_state() == before


def test_small_upload_imports_inline_and_the_page_says_how_many(researcher_client, project, upload_dir):
    response = upload(researcher_client, project, jsonl_bytes([dialog(n) for n in range(4)]), follow=False)
    job = UploadJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("dataset_upload_job", args=[project.slug, job.pk])
    assert job.status == "done" and job.items_imported == 4
    dataset = Dataset.objects.get(name="Uploaded")
    assert (
        dataset.item_count == 4 and dataset.source_filename == "d.jsonl"
    )  # not the name it was stored under
    page = researcher_client.get(response["Location"])
    assert b"4 items imported" in page.content
    assert (
        "from d.jsonl"
        in researcher_client.get(reverse("dataset_detail", args=[project.slug, dataset.pk])).content.decode()
    )
    assert list(upload_dir.iterdir()) == []  # the stored file is gone once the job has finished


def test_refused_upload_lists_every_error_and_imports_nothing(researcher_client, project):
    objects = [dialog(0), {"id": "x", "turns": []}, dialog(0)]
    before = database_state()
    response = upload(researcher_client, project, jsonl_bytes(objects), follow=True)
    assert database_state() == before
    content = response.content.decode()
    assert "Nothing was imported: 2 problems" in content
    assert "empty turns" in content and "duplicate id" in content


def test_repair_checkbox_repairs_mojibake_and_lists_the_change(researcher_client, project):
    item = dialog(0, response={"speaker": "BOT", "text": "I canâ€™t"})
    response = upload(researcher_client, project, jsonl_bytes([item]), repair_text="on", follow=True)
    assert "Repaired text (1)" in response.content.decode()
    assert Item.objects.get().response["text"] == "I can’t"


def test_convert_checkbox_converts_latin1(researcher_client, project):
    content = (
        json.dumps(
            dialog(0, response={"speaker": "BOT", "text": "Grüße aus Köln, schön!"}), ensure_ascii=False
        )
        + "\n"
    ).encode("latin-1")
    refused = upload(researcher_client, project, content, follow=True).content.decode()
    assert "not UTF-8" in refused and "Latin-1" in refused
    upload(researcher_client, project, content, convert_encoding="on", name="Converted")
    assert Item.objects.get().response["text"] == "Grüße aus Köln, schön!"


def test_upload_over_the_size_limit_is_refused_before_it_is_stored(
    researcher_client, project, settings, upload_dir
):
    settings.CONCORD_MAX_UPLOAD_BYTES = 1000
    before = database_state()
    response = upload(researcher_client, project, b"x" * 200_000)
    assert response.status_code == 413
    assert "larger than the upload limit of 1,000 bytes" in response.content.decode()
    assert database_state() == before and UploadJob.objects.count() == 0
    assert not upload_dir.exists() or list(upload_dir.iterdir()) == []


def test_a_file_over_the_limit_is_dropped_as_its_bytes_arrive(
    researcher_client, project, settings, upload_dir
):
    # The request is small enough to pass the Content-Length check, so the byte counter must catch it.
    settings.CONCORD_MAX_UPLOAD_BYTES = 1000
    response = upload(researcher_client, project, jsonl_bytes([dialog(n) for n in range(100)]))
    assert response.status_code == 413
    assert UploadJob.objects.count() == 0 and Dataset.objects.count() == 0
    assert not upload_dir.exists() or list(upload_dir.iterdir()) == []


def test_wide_csv_goes_through_the_mapping_step(researcher_client, project):
    content = b'conv,history,answer,topic\nq1,"USER: Hi",Hello there,greeting\n'
    response = upload(researcher_client, project, content, filename="wide.csv")
    job = UploadJob.objects.get()
    assert job.status == "mapping"
    page = researcher_client.get(response["Location"]).content.decode()
    assert "Map the CSV columns" in page and "conv, history, answer, topic" in page
    url = reverse("dataset_upload_mapping", args=[project.slug, job.pk])
    bad = researcher_client.post(url, {"id": "", "response": "answer", "response_speaker": "BOT"})
    assert bad.status_code == 400 and Item.objects.count() == 0
    researcher_client.post(
        url, {"id": "conv", "dialog": "history", "response": "answer", "response_speaker": "BOT"}
    )
    item = Item.objects.get()
    assert item.external_id == "q1" and item.context == [{"speaker": "USER", "text": "Hi"}]
    assert item.metadata == {"topic": "greeting"}


def test_large_upload_is_queued_for_a_worker(
    researcher_client, project, settings, django_capture_on_commit_callbacks, monkeypatch
):
    settings.CONCORD_INLINE_IMPORT_BYTES = 10
    queued = []
    monkeypatch.setattr("datasets.tasks.import_upload.delay", lambda job_id: queued.append(job_id))
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(researcher_client, project, jsonl_bytes([dialog(0), dialog(1)]))
    job = UploadJob.objects.get()
    assert queued == [job.pk] and job.status == "queued" and Item.objects.count() == 0
    page = researcher_client.get(response["Location"], headers={"HX-Request": "true"})
    content = page.content.decode()
    assert 'role="progressbar"' in content and 'hx-trigger="every 1s"' in content
    assert "<html" not in content  # the htmx poll gets the status partial only


# ---------------------------------------------------------------- browsing


@pytest.fixture
def imported(project, tmp_path):
    def make(count: int, name: str = "Browse"):
        objects = [
            dialog(n, metadata={"topic": "music" if n % 3 == 0 else "sports", "turns": n % 2})
            for n in range(count)
        ]
        objects[1]["response"] = {"speaker": "BOT", "text": "<script>alert('x')</script> Zebra crossing"}
        result = import_dataset(
            project=project, name=name, path=write_jsonl(tmp_path / f"{name}.jsonl", objects)
        )
        assert result.ok
        return result.dataset

    return make


def test_dataset_page_lists_items_with_counts_and_pages(researcher_client, project, imported):
    dataset = imported(60)
    url = reverse("dataset_detail", args=[project.slug, dataset.pk])
    content = researcher_client.get(url, {"size": 25, "page": 3}).content.decode()
    assert "Items 51–60 of 60" in content and "Page 3 of 3" in content
    assert ">d-59<" in content and ">d-49<" not in content


def test_search_by_text_and_id_and_filter_by_metadata(researcher_client, project, imported):
    dataset = imported(30)
    url = reverse("dataset_detail", args=[project.slug, dataset.pk])
    by_text = researcher_client.get(url, {"q": "ZEBRA"}).content.decode()
    assert "Items 1–1 of 1 matching" in by_text and ">d-1<" in by_text
    assert "&lt;script&gt;" in by_text and "<script>alert" not in by_text
    by_id = researcher_client.get(url, {"q": "d-17"}).content.decode()
    assert ">d-17<" in by_id
    music = researcher_client.get(url, {"meta": "topic=music"}).content.decode()
    assert "of 10 matching" in music
    numeric = researcher_client.get(url, {"meta": "turns=1"}).content.decode()
    assert "of 15 matching" in numeric
    assert "key=value" in researcher_client.get(url, {"meta": "nonsense"}).content.decode()


def test_dataset_page_queries_do_not_grow_with_page_size_or_dataset(researcher_client, project, imported):
    small, large = imported(5, "Small"), imported(250, "Large")

    def queries(dataset, **params):
        url = reverse("dataset_detail", args=[project.slug, dataset.pk])
        with CaptureQueriesContext(connection) as captured:
            assert researcher_client.get(url, params).status_code == 200
        return len(captured)

    baseline = queries(small, size=25)
    assert queries(large, size=200) == baseline
    assert queries(large, size=25, page=5) == baseline
    # Filtered: on PostgreSQL one statement more, which lets the search use parallel workers
    # (db.parallel_scans_priced_by_work). The matches fit on the page, so they are their own count; else the
    # COUNT is a second request.
    parallel = 1 if connection.vendor == "postgresql" else 0
    assert queries(large, size=200, q="topic", meta="topic=music") == baseline + parallel
    assert queries(large, size=25, q="topic", meta="topic=music") == baseline + parallel
    assert queries(large, size=25, q="topic", meta="topic=music", count=1) == baseline + parallel + 1


def test_a_full_page_of_matches_leaves_its_count_to_a_second_request(researcher_client, project, imported):
    dataset = imported(60)
    url = reverse("dataset_detail", args=[project.slug, dataset.pk])
    content = researcher_client.get(url, {"q": "topic", "size": 25}).content.decode()
    assert "Items 1–25 of" in content and ">d-24<" in content and "Page 1</span>" in content
    found = re.search(
        r'<a id="total" href="([^"]+)" hx-get="\1" hx-trigger="load"[^>]*>more than 25</a>', content
    )
    assert found is not None
    count_url = found.group(1).replace("&amp;", "&")
    partial = researcher_client.get(count_url, headers={"HX-Request": "true"}).content.decode()
    assert partial.strip() == "60"
    page = researcher_client.get(count_url).content.decode()  # the link without htmx: the page, counted
    assert "Items 1–25 of 60 matching" in page and "Page 1 of 3" in page


def test_a_capped_count_counts_every_match_up_to_one_past_the_cap_without_sorting(project, imported):
    dataset = imported(60)
    items = Item.objects.filter(dataset=dataset).order_by("position")
    music = [item for item in items if item.metadata["topic"] == "music"]  # 20 of the 60
    matching = db.metadata_filter(items.filter(db.text_matches("topic")), key="topic", value="music")
    with CaptureQueriesContext(connection) as captured:
        counts = [db.capped_count(matching, cap) for cap in (0, 5, 19, 20, 100)]
    assert counts == [1, 6, 20, 20, 20] and len(music) == 20
    assert db.capped_count(items.filter(db.text_matches("zebra crossing")), 10) == 1
    counted = [query["sql"] for query in captured.captured_queries if "COUNT(" in query["sql"]]
    assert len(counted) == 5 and not any("ORDER BY" in sql for sql in counted)


def test_filtered_pages_past_the_last_match_show_the_last_one(researcher_client, project, imported):
    dataset = imported(60)
    url = reverse("dataset_detail", args=[project.slug, dataset.pk])
    content = researcher_client.get(url, {"meta": "topic=sports", "size": 25, "page": 9}).content.decode()
    assert "Items 26–40 of 40 matching" in content and "Page 2 of 2" in content
    middle = researcher_client.get(url, {"meta": "topic=sports", "size": 25, "page": 2, "count": 1})
    assert "Items 26–40 of 40 matching" in middle.content.decode()
    huge = str(10**30)  # an offset past the database's integers was an error page
    for params in ({"meta": "topic=sports"}, {"q": "Zebra"}, {}):
        response = researcher_client.get(url, {**params, "size": 25, "page": huge})
        assert response.status_code == 200 and "Items " in response.content.decode()


def test_a_phrase_page_is_looked_for_among_the_first_items_before_the_whole_dataset(
    researcher_client, project, imported, monkeypatch
):
    monkeypatch.setattr(db, "PROBE_ITEMS", 30)  # pages of 25 below position 30, in a dataset of 120 items
    dataset = imported(120)
    url = reverse("dataset_detail", args=[project.slug, dataset.pk])

    def page(query: str, number: int = 1) -> tuple[list[str], bool]:
        with CaptureQueriesContext(connection) as captured:
            content = researcher_client.get(url, {"q": query, "size": 25, "page": number}).content.decode()
        probed = any('"position" < 30' in executed["sql"] for executed in captured.captured_queries)
        return list(dict.fromkeys(re.findall(r">(d-\d+)<", content))), probed

    postgresql = connection.vendor == "postgresql"
    # Every item matches: the first 30 items hold the page and the next match.
    assert page("fine thing") == ([f"d-{n}" for n in range(25)], postgresql)
    # One match, past the first 30 items: looked for there, then in the whole dataset.
    assert page("topic 100 is") == (["d-100"], postgresql)
    assert page("topic 7 is") == (["d-7"], postgresql)
    # Page 2 would look at 60 items, more than a quarter of the dataset: the whole dataset at once.
    assert page("fine thing", 2) == ([f"d-{n}" for n in range(25, 50)], False)
    # One word: the words index answers it.
    assert page("fine") == ([f"d-{n}" for n in range(25)], False)


def test_htmx_search_returns_only_the_items_partial(researcher_client, project, imported):
    dataset = imported(5)
    url = reverse("dataset_detail", args=[project.slug, dataset.pk])
    content = researcher_client.get(url, {"q": "d-3"}, headers={"HX-Request": "true"}).content.decode()
    assert content.lstrip().startswith('<section id="items">') and ">d-3<" in content


def test_item_page_shows_the_dialog_with_the_rated_response_marked(
    researcher_client, project, imported, django_assert_max_num_queries
):
    dataset = imported(3)
    item = dataset.items.get(external_id="d-1")
    url = reverse("item_detail", args=[project.slug, dataset.pk, item.pk])
    with django_assert_max_num_queries(8):
        content = researcher_client.get(url).content.decode()
    assert 'class="turn user"' in content and "Hello, I want to talk about topic 1." in content
    assert 'class="turn bot target" data-role="response"' in content
    assert "&lt;script&gt;alert" in content and "<script>alert" not in content
    assert 'rel="prev"' in content and 'rel="next"' in content


def test_item_page_shows_the_baseline_beside_the_response(researcher_client, project, tmp_path):
    obj = dialog(0, baseline={"speaker": "BOT", "text": "The other answer"})
    dataset = import_dataset(
        project=project, name="Pairs", path=write_jsonl(tmp_path / "p.jsonl", [obj])
    ).dataset
    assert dataset is not None
    item = dataset.items.get()
    content = researcher_client.get(
        reverse("item_detail", args=[project.slug, dataset.pk, item.pk])
    ).content.decode()
    assert 'class="pair"' in content and 'data-role="baseline"' in content and "The other answer" in content


def test_browsing_pages_refuse_annotators_and_outsiders(annotator, outsider, project, imported):
    dataset = imported(2)
    item = dataset.items.first()
    annotator_client, outsider_client = client_for(annotator), client_for(outsider)
    for url in (
        reverse("dataset_detail", args=[project.slug, dataset.pk]),
        reverse("item_detail", args=[project.slug, dataset.pk, item.pk]),
    ):
        assert annotator_client.get(url).status_code == 403
        assert outsider_client.get(url).status_code == 404


def test_a_dataset_of_another_project_is_not_found(researcher_client, researcher, project, tmp_path):
    from tests.factories import make_project

    other = make_project(name="Other", researchers=[])
    dataset = import_dataset(
        project=other, name="Theirs", path=write_jsonl(tmp_path / "t.jsonl", [dialog(0)])
    ).dataset
    assert dataset is not None
    assert (
        researcher_client.get(reverse("dataset_detail", args=[project.slug, dataset.pk])).status_code == 404
    )


def test_append_link_prefills_the_name_and_ticks_append(researcher_client, project):
    url = reverse("dataset_upload", args=[project.slug])
    content = researcher_client.get(url, {"name": "Study"}).content.decode()
    assert 'value="Study"' in content and 'name="append" id="id_append" checked' in content


def test_a_csv_with_too_many_columns_is_refused_at_once_naming_the_count(researcher_client, project):
    """200,000 columns in a 1.9 MB wide CSV made every view of its column-mapping page take a minute and
    4 GB (one option per column in four select boxes)."""
    header = ",".join(f"c{n}" for n in range(200_000)) + ",id,response\n"
    response = upload(
        researcher_client, project, (header + "v," * 200_000 + "a,b\n").encode(), filename="w.csv"
    )
    job = UploadJob.objects.get()
    assert job.status == "failed" and "header" not in job.report  # no mapping step, no header kept
    page = researcher_client.get(response["Location"]).content.decode()
    assert "the header has 200,002 columns; at most 1,000 are accepted" in page
    long_name = "x" * 5_000
    upload(
        researcher_client,
        project,
        f"id,response,{long_name}\na,b,c\n".encode(),
        filename="n.csv",
        name="Names",
    )
    refused = UploadJob.objects.get(name="Names")
    assert refused.status == "failed" and "a column name is 5,000 characters long" in str(refused.report)


def test_an_upload_whose_every_line_has_the_same_problem_says_so_before_the_list(researcher_client, project):
    objects = [{"id": f"d-{n}", "dialog": "USER: hi"} for n in range(12)]  # another tool's field names
    page = upload(researcher_client, project, jsonl_bytes(objects), follow=True).content.decode()
    summary = re.search(r'<p class="message error" id="same-problem" role="alert">(.*?)</p>', page, re.S)
    assert summary is not None and summary.group(1).startswith("All 12 problems are the same (lines 1 to 12)")
    assert page.index('id="same-problem"') < page.index("<h3>Problems")


def test_different_problems_get_no_summary_line(researcher_client, project):
    objects = [dialog(0), {"id": "x", "turns": []}, dialog(0), {"id": "y"}]
    page = upload(researcher_client, project, jsonl_bytes(objects), follow=True).content.decode()
    assert "problems are the same" not in page
