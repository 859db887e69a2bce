"""Evaluation pages: create, detail (summary, exports, ratings import, other apps' sections),
export downloads and the ratings import. Researchers only (projects.access)."""

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from config.htmx import HtmxHttpRequest
from datasets.uploads import store_upload
from projects.access import RESEARCHER, get_evaluation_for, get_project_for

from . import exports, workbook
from .forms import EvaluationForm, RatingsImportForm
from .models import Evaluation
from .ratings_import import RatingsImportError, RatingsImportResult, import_ratings
from .services import create_evaluation
from .summary import summarise

DETAIL = "evaluations/evaluation_detail.html"


@require_http_methods(["GET", "POST"])
@login_required
def evaluation_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    form = EvaluationForm(request.POST or None, project=project)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            evaluation = create_evaluation(
                project=project,
                dataset=data["dataset"],
                rubric_versions=list(data["rubric_versions"]),
                name=data["name"],
                overlap=data["overlap"],
                order=data["order"],
                created_by=cast(User, request.user),  # signed in: login_required
                exclude_lacking=data["exclude_lacking"],
            )
        except ValidationError as error:
            for message in error.messages:
                form.add_error(None, message)
        else:
            messages.success(request, f"Evaluation {evaluation.name} created.")
            return redirect("evaluation_detail", slug=project.slug, pk=evaluation.pk)
    status = 400 if form.errors else 200
    return render(
        request, "evaluations/evaluation_create.html", {"project": project, "form": form}, status=status
    )


def _detail_context(evaluation: Evaluation, import_form: RatingsImportForm, **extra: Any) -> dict:
    return {
        "project": evaluation.project,
        "evaluation": evaluation,
        "summary": summarise(evaluation),
        "import_form": import_form,
        "layouts": exports.LAYOUTS,
        **extra,
    }


@require_GET
@login_required
def evaluation_detail(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    # Its judge runs settled (judges' runs section): the summary alone, counted again.
    template = f"{DETAIL}#summary" if request.htmx.target == "summary" else DETAIL
    return render(request, template, _detail_context(evaluation, RatingsImportForm()))


def _flag(request: HttpRequest, name: str) -> bool:
    return request.GET.get(name, "").lower() in {"1", "on", "true", "yes"}


@require_GET
@login_required
def evaluation_export(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse | StreamingHttpResponse:
    """?layout=long|wide|jsonl|xlsx: the ratings as a streamed download.

    &item_text=1 adds the items' context, response and baseline to the wide CSV and the workbook's wide
    sheet; &excel=1 starts a CSV with a byte order mark so that Excel reads it as UTF-8.
    """
    evaluation = get_evaluation_for(request.user, slug, pk)
    layout = request.GET.get("layout", "long")
    if layout == workbook.LAYOUT:
        return _workbook_download(evaluation, item_texts=_flag(request, "item_text"))
    if layout not in exports.LAYOUTS:
        layouts = ", ".join([*exports.LAYOUTS, workbook.LAYOUT])
        raise Http404(f"No export layout {layout!r}; use one of {layouts}.")
    content_type = "application/x-ndjson" if layout == "jsonl" else "text/csv"
    chunks = exports.stream(
        evaluation, layout, item_texts=_flag(request, "item_text"), excel=_flag(request, "excel")
    )
    response = StreamingHttpResponse(chunks, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(evaluation, layout)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _workbook_download(evaluation: Evaluation, *, item_texts: bool) -> HttpResponse | FileResponse:
    """The workbook, written to a temporary file first (a zip file is finished before it is sent), then
    streamed from it; the file is already deleted and goes away when the response closes it."""
    ratings = evaluation.ratings.count()
    if ratings > workbook.WEB_MAX_RATINGS:
        return _no_workbook(
            f"this evaluation has {ratings:,} ratings, and a workbook of more than "
            f"{workbook.WEB_MAX_RATINGS:,} takes too long to build while the page waits: download the CSVs, "
            f"or run manage.py export_ratings --evaluation NAME --layout xlsx --item-text -o FILE"
        )
    try:
        handle = workbook.open_workbook(evaluation, item_texts=item_texts)
    except workbook.WorkbookTooWide as error:
        return _no_workbook(str(error))
    response = FileResponse(
        handle, as_attachment=True, filename=workbook.filename(evaluation), content_type=workbook.CONTENT_TYPE
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _no_workbook(reason: str) -> HttpResponse:
    return HttpResponse(f"No workbook: {reason}.", status=400, content_type="text/plain; charset=utf-8")


def _import_upload(evaluation: Evaluation, upload: UploadedFile) -> RatingsImportResult:
    """Store the upload on disk with its suffix (the import streams from disk), import it, delete it."""
    path = store_upload(upload)
    try:
        return import_ratings(evaluation=evaluation, path=path)
    finally:
        path.unlink(missing_ok=True)


@require_POST
@login_required
def ratings_import(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Import the uploaded ratings, or show every problem with its line (the form is on the detail page)."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    detail_url = reverse("evaluation_detail", args=[evaluation.project.slug, evaluation.pk])
    form = RatingsImportForm(request.POST, request.FILES)
    problems: list[str] = []
    if form.is_valid():
        try:
            result = _import_upload(evaluation, form.cleaned_data["file"])
        except RatingsImportError as error:
            name = form.cleaned_data["file"].name
            problems = [f"{name}: {error.summary().splitlines()[0]}", *error.messages]
        else:
            messages.success(
                request, f"Ratings imported from {form.cleaned_data['file'].name}: {result.summary()}"
            )
            return HttpResponseClientRedirect(detail_url) if request.htmx else redirect(detail_url)
    context = _detail_context(evaluation, form, import_problems=problems)
    if request.htmx:  # htmx swaps only 2xx responses: the problems replace the form's section
        return render(request, f"{DETAIL}#ratings-import", context)
    return render(request, DETAIL, context, status=400)
