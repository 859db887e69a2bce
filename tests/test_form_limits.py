"""Issue 34: every form and import, swept with the longest values it accepts and one past them: no 500.

The sweep reads each form's limits from the form itself (max_length, max_value) or, for a model form,
from the column its field is saved in, so a field added later is swept too; a form of the code that no
case below posts fails `test_every_form_of_the_code_is_swept`, and a text field whose column is not
named fails `test_every_text_limit_is_the_limit_of_the_column_that_stores_it`.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import FieldDoesNotExist
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.validators import MaxValueValidator
from django.db import connection, models
from django.test import Client
from django.urls import reverse

from datasets.models import Dataset, Item
from datasets.records import MAX_SPEAKER_CHARS
from datasets.services import import_dataset
from evaluations.models import Evaluation, Rater
from evaluations.ratings_import import import_ratings
from judges.models import Judge
from projects.models import Membership, Project
from projects.names import max_length
from rubrics.models import Rubric, RubricVersion
from tests import factories

pytestmark = pytest.mark.django_db

FORM_MODULES = [
    "agreement.forms",
    "datasets.forms",
    "evaluations.forms",
    "judges.forms",
    "projects.forms",
    "rubrics.forms",
]
# Forms no case posts, each with why; their text limits are still checked against their columns.
NOT_POSTED = {
    "ColumnMappingForm": "its choices are the header of an upload waiting for a mapping; its one text "
    "field (the response speaker) is held to the importer's limit below",
}


@dataclass
class World:
    """One project with the longest names the forms accept, and a client of its researcher."""

    client: Client
    project: Project
    researcher: User
    dataset: Dataset
    version: RubricVersion
    evaluation: Evaluation
    judge: Judge
    colleague: User


@dataclass
class Case:
    form: str  # the form's class name
    url: Callable[[World], str]
    data: Callable[[World], dict[str, Any]]  # a valid post
    files: Callable[[World], dict[str, Any]] = lambda world: {}
    # Fields the sweep leaves as `data` has them (a choice, a username that must exist).
    pinned: set[str] = field(default_factory=set)
    # Plain-form text fields and the column each is stored in: (model, field) or a number for a JSON value.
    stores: dict[str, tuple[type[models.Model], str] | int] = field(default_factory=dict)


def _jsonl(*records: dict) -> SimpleUploadedFile:
    text = "".join(json.dumps(record) + "\n" for record in records)
    return SimpleUploadedFile("items.jsonl", text.encode(), content_type="application/jsonl")


def _longest_item() -> dict:
    speaker = "S" * MAX_SPEAKER_CHARS
    return {
        "id": "i" * max_length(Item, "external_id"),
        "turns": [{"speaker": speaker, "text": "hi"}, {"speaker": "BOT", "text": "ho"}],
        "metadata": {"k" * 200: "v"},
    }


def _spec(name: str, criterion: str) -> str:
    return json.dumps(
        {
            "name": name,
            "kind": "likert",
            "criterion": criterion,
            "scale": factories.LIKERT_SCALE,
            "prompt_template": "Rate {criterion}.\n\n{scale}\n\n{{Dialog}}",
        }
    )


def _version_form(world: World) -> dict[str, Any]:
    version = world.version
    return {
        "name": version.rubric.name,
        "criterion": version.criterion,
        "scale": "\n".join(f"{o['value']} | {o['label']} | {o['description']}" for o in version.scale),
        "prompt_template": "Rate {criterion} again.\n\n{scale}\n\n{{Dialog}}",
        "target": version.target,
        "output_format": version.output_format,
    }


def _url(name: str, *args: Callable[[World], Any]) -> Callable[[World], str]:
    return lambda world: reverse(name, args=[world.project.slug, *(arg(world) for arg in args)])


CASES = [
    Case(
        "ProjectForm",
        lambda world: reverse("project_create"),
        lambda world: {"name": "Study", "description": "d"},
    ),
    Case(
        "MemberForm",
        _url("project_member_add"),
        lambda world: {"username": world.colleague.username, "role": "annotator"},
        pinned={"username", "role"},
        stores={"username": (User, "username")},
    ),
    Case(
        "DatasetUploadForm",
        _url("dataset_upload"),
        lambda world: {"name": "Upload", "format": "auto"},
        files=lambda world: {"file": _jsonl(_longest_item())},
        pinned={"format"},
        stores={"name": (Dataset, "name")},
    ),
    Case(
        "EvaluationForm",
        _url("evaluation_create"),
        lambda world: {
            "name": "Evaluation",
            "dataset": world.dataset.pk,
            "rubric_versions": [world.version.pk],
            "overlap": "2",
            "order": "dataset",
        },
        pinned={"dataset", "rubric_versions", "order"},
        stores={"name": (Evaluation, "name")},
    ),
    Case(
        "RatingsImportForm",
        _url("ratings_import", lambda world: world.evaluation.pk),
        lambda world: {},
        files=lambda world: {
            "file": SimpleUploadedFile(
                "ratings.jsonl",
                json.dumps(
                    {
                        "item_id": world.dataset.items.get().external_id,
                        "rubric": world.version.rubric.name,
                        "rater": "r" * max_length(Rater, "name"),
                        "rater_kind": "human",
                        "value": "3",
                        "explanation": "e" * 10_000,
                    }
                ).encode(),
            )
        },
    ),
    Case(
        "RubricImportForm",
        _url("rubric_import"),
        lambda world: {
            "text": _spec("n" * max_length(Rubric, "name"), "c" * max_length(RubricVersion, "criterion"))
        },
        pinned={"text"},
        stores={"name": (Rubric, "name")},
    ),
    Case(
        "RubricVersionForm",
        _url("rubric_edit", lambda world: world.version.rubric_id),
        _version_form,
        pinned={"scale", "prompt_template", "target", "output_format"},
        stores={"name": (Rubric, "name"), "criterion": (RubricVersion, "criterion")},
    ),
    Case(
        "JudgeForm",
        _url("judge_create"),
        lambda world: {
            "name": "Judge",
            "base_url": "https://api.example.test/v1",
            "model": "m",
            "credential": "none",
            "max_tokens": "64",
            "samples": "1",
            "requests_per_minute": "0",
            "tokens_per_minute": "0",
            "concurrency": "1",
            "price_input_per_million": "0",
            "price_output_per_million": "0",
            "request_timeout": "5",
        },
        pinned={"credential", "base_url", "api_key", "endpoint", "reasoning_effort"},
    ),
    Case(
        "ReplaceKeyForm",
        _url("judge_replace_key", lambda world: world.judge.pk),
        lambda world: {"api_key": "sk-" + "k" * 40},
    ),
    Case(
        "RunChoiceForm",  # launches a run of the longest judge name on the longest rubric name
        _url("judge_run_create", lambda world: world.evaluation.pk),
        lambda world: {"judge": world.judge.pk, "rubric_versions": [world.version.pk], "confirm": "yes"},
        pinned={"judge", "rubric_versions"},
    ),
    Case(
        "AltTestSettingsForm",
        _url("alt_test_settings", lambda world: world.evaluation.pk),
        lambda world: {"annotator_expertise": "custom", "custom_epsilon": "0.5"},
        pinned={"annotator_expertise", "alt_test_metric"},
    ),
]


def form_classes() -> dict[str, Any]:  # form classes, by name
    found = {}
    for module_name in FORM_MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, forms.BaseForm)
                and value.__module__ == module_name
            ):
                found[name] = value
    return found


@pytest.fixture
def world(client, settings) -> World:
    settings.CONCORD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]  # pasted keys can be stored
    researcher = factories.make_user("r" * max_length(User, "username"), is_staff=True)
    colleague = factories.make_user("c" * max_length(User, "username"))
    project = Project.objects.create(name="P" * max_length(Project, "name"), slug="longest")
    Membership.objects.create(project=project, user=researcher, role=Membership.Role.RESEARCHER)
    factories.make_project(name="Earlier", researchers=[researcher], annotators=[colleague])
    dataset = factories.make_dataset(project, items=1, name="D" * max_length(Dataset, "name"))
    template = "Rate {criterion}.\n\n{scale}\n\n{{Dialog}}"
    version = factories.make_rubric(project=project, name="R" * max_length(Rubric, "name"), template=template)
    evaluation = factories.make_evaluation(
        project, dataset, [version], name="E" * max_length(Evaluation, "name"), annotators=[colleague]
    )
    judge = Judge.objects.create(
        project=project,
        name="J" * max_length(Judge, "name"),
        model="m" * max_length(Judge, "model"),
        base_url="http://127.0.0.1:9/v1",
    )
    client.force_login(researcher)
    return World(client, project, researcher, dataset, version, evaluation, judge, colleague)


def _model_field(form: type[forms.BaseForm], name: str) -> models.Field | None:
    meta = getattr(form, "_meta", None)
    model = getattr(meta, "model", None)
    if model is None or name not in (getattr(meta, "fields", None) or []):
        return None
    try:
        found = model._meta.get_field(name)
    except FieldDoesNotExist:  # a field of the form alone
        return None
    return found if isinstance(found, models.Field) else None


def declared_bound(form: type[forms.BaseForm], name: str, form_field: forms.Field) -> Any:
    """The highest number `form_field` says it accepts: its max_value, or its column's MaxValueValidator."""
    bounds = [getattr(form_field, "max_value", None)]
    column = _model_field(form, name)
    if column is not None and not isinstance(column, models.IntegerField | models.DecimalField):
        bounds += [v.limit_value for v in column.validators if isinstance(v, MaxValueValidator)]
    elif column is not None:  # beyond Django's own column-range validator, only a bound of our own counts
        ours = [v.limit_value for v in column.validators if isinstance(v, MaxValueValidator)]
        ours = [v for v in ours if v != connection.ops.integer_field_range(column.get_internal_type())[1]]
        bounds += ours
    known = [bound for bound in bounds if bound is not None]
    return min(known) if known else None


def limits(case: Case) -> dict[str, tuple[str | None, list[str]]]:
    """Per field the sweep may change: the longest value it says it accepts (None: not declared; a bound
    kept in a clean method) and the values past any limit, which must be refused."""
    form = form_classes()[case.form]
    out: dict[str, tuple[str | None, list[str]]] = {}
    for name, form_field in form.base_fields.items():
        if name in case.pinned or isinstance(form_field, forms.FileField | forms.ChoiceField):
            continue
        if isinstance(form_field, forms.IntegerField | forms.FloatField | forms.DecimalField):
            bound = declared_bound(form, name, form_field)
            step = 1 if isinstance(form_field, forms.IntegerField) else Decimal("0.01")
            huge = [str(10**20), str(2**63), "1" * 5_000]
            out[name] = (None, huge) if bound is None else (str(bound), [str(bound + step), *huge])
        elif isinstance(form_field, forms.CharField) and form_field.max_length:
            out[name] = ("x" * form_field.max_length, ["x" * (form_field.max_length + 1)])
    return out


def post(world: World, case: Case, data: dict[str, Any]):
    return world.client.post(case.url(world), {**data, **case.files(world)})


def test_every_form_of_the_code_is_swept():
    swept = {case.form for case in CASES}
    assert set(form_classes()) == swept | set(NOT_POSTED)


def test_every_text_limit_is_the_limit_of_the_column_that_stores_it():
    by_name = {case.form: case for case in CASES}
    stores = {name: case.stores for name, case in by_name.items()}
    stores["ColumnMappingForm"] = {"response_speaker": MAX_SPEAKER_CHARS}
    for name, form in form_classes().items():
        for field_name, form_field in form.base_fields.items():
            if not isinstance(form_field, forms.CharField) or not form_field.max_length:
                continue
            column = _model_field(form, field_name)
            if column is not None:  # a model form's field: Django takes the column's length
                assert form_field.max_length == column.max_length, f"{name}.{field_name}"
                continue
            if name == "JudgeForm" or name == "ReplaceKeyForm":
                continue  # the pasted key: encrypted into a text column, any length fits
            stored = stores.get(name, {}).get(field_name)
            assert stored is not None, f"{name}.{field_name}: name the column it is stored in"
            width = stored if isinstance(stored, int) else max_length(*stored)
            assert form_field.max_length == width, f"{name}.{field_name}"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.form)
def test_the_longest_accepted_values_are_taken_and_one_past_them_refused_never_a_500(world, case):
    base = case.data(world)
    fields = limits(case)
    longest = {name: value for name, (value, _) in fields.items() if value is not None}
    response = post(world, case, {**base, **longest})
    assert response.status_code == 302, (case.form, response.content.decode()[:3000])
    for name, (_, overs) in fields.items():
        for value in overs:
            response = post(world, case, {**base, name: value})
            assert response.status_code in (200, 400), (case.form, name, value[:30], response.status_code)


def test_an_upload_and_a_ratings_import_of_the_longest_values_are_taken(world, tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_bytes(_jsonl(_longest_item()).read())
    result = import_dataset(project=world.project, name="N" * max_length(Dataset, "name"), path=path)
    assert result.ok, result.errors
    ratings = tmp_path / "ratings.csv"
    rows = io.StringIO()
    rows.write("item_id,rubric,rater,rater_kind,value\n")
    rows.write(f"d-0,{world.version.rubric.name},{'q' * max_length(Rater, 'name')},model,4\n")
    ratings.write_text(rows.getvalue())
    import_ratings(evaluation=world.evaluation, path=ratings)
    assert world.evaluation.ratings.filter(rater__name="q" * 200).count() == 1
