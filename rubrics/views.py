"""Rubric pages for a project's researchers: detail with a live prompt preview, edit, import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Count, Exists, OuterRef, Q
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods

from config.htmx import HtmxHttpRequest
from evaluations.models import Rating
from projects.access import RESEARCHER, get_project_for
from projects.models import Project

from .forms import RubricImportForm, RubricVersionForm
from .models import Rubric, RubricVersion
from .parsing import RubricParseError
from .rendering import BUILTIN_VARIABLES, RenderError, render_prompt
from .samples import SAMPLE_ITEM
from .services import RubricImportResult, edit_rubric, import_rubric, mojibake_warnings
from .source import is_read_from_text, version_diff


def rubric_for(project: Project, pk: int) -> Rubric:
    """A rubric the project can see: its own or a built-in; anything else is 404."""
    visible = Rubric.objects.filter(Q(project=project) | Q(project__isnull=True))
    return get_object_or_404(visible.select_related("copied_from__rubric"), pk=pk)


def chosen_version(rubric: Rubric, raw: str | None) -> RubricVersion:
    versions = rubric.versions.all()
    if raw and raw.isdigit():
        return get_object_or_404(versions, number=int(raw))
    version = rubric.latest_version()
    if version is None:
        raise Http404(f"{rubric.name} has no version yet.")
    return version


PREVIEW_ITEM_CHOICES = 100


@dataclass
class Preview:
    """What the preview region shows: the picked item, its rendered prompt or why there is none."""

    datasets: list
    dataset_id: int | None
    item_id: str
    swapped: bool
    item_ids: list[str] = field(default_factory=list)
    item: Any = None  # a datasets Item, or the sample ItemRecord
    prompt: str = ""
    warning: str = ""
    error: str = ""
    sample: bool = False


def pick_item(preview: Preview, datasets: list, params: QueryDict) -> None:
    """The item of the chosen dataset (default: the first dataset) named in the request, else its first."""
    raw = params.get("dataset") or ""
    dataset = next((d for d in datasets if str(d.pk) == raw), datasets[0])
    preview.dataset_id = dataset.pk
    items = dataset.items.order_by("position")
    preview.item_ids = list(items.values_list("external_id", flat=True)[:PREVIEW_ITEM_CHOICES])
    if preview.item_id:
        preview.item = items.filter(external_id=preview.item_id).first()
        if preview.item is None:
            preview.warning = f"No item {preview.item_id!r} in {dataset.name}; showing its first item."
    if preview.item is None:
        preview.item = items.first()
    if preview.item is None:
        preview.error = f"{dataset.name} has no items."
        return
    preview.item_id = preview.item.external_id


def build_preview(project: Project, version: RubricVersion, params: QueryDict) -> Preview:
    datasets = list(project.datasets.order_by("name").only("id", "name"))
    preview = Preview(
        datasets=datasets, dataset_id=None, item_id=(params.get("item") or "").strip(),
        swapped=params.get("swapped") in ("1", "on", "true"),
    )  # fmt: skip
    if datasets:
        pick_item(preview, datasets, params)
    else:
        preview.item, preview.sample = SAMPLE_ITEM, True
    if preview.error:
        return preview
    try:
        preview.prompt = render_prompt(version, preview.item, swapped=preview.swapped)
    except RenderError as error:
        preview.error = str(error)
    return preview


def previous_version(rubric: Rubric, version: RubricVersion) -> RubricVersion | None:
    """The version `version` was made from: the one before it, or for a project copy's first, the built-in."""
    if version.number > 1:
        return rubric.versions.filter(number=version.number - 1).first()
    return rubric.copied_from


def detail_context(project: Project, rubric: Rubric, version: RubricVersion, params: QueryDict) -> dict:
    # This project's ratings only: a built-in's use in other projects is not this project's business.
    # Whether a version is frozen (rated anywhere) is shown, since it decides what an edit does.
    versions = rubric.versions.annotate(
        rating_count=Count("ratings", filter=Q(ratings__evaluation__project=project)),
        used=Exists(Rating.objects.filter(rubric_version=OuterRef("pk"))),
    ).order_by("-number")
    previous = previous_version(rubric, version)
    return {
        "previous": previous,
        "diff": version_diff(previous, version) if previous else [],
        "read_from_text": is_read_from_text(version),
        "project": project,
        "rubric": rubric,
        "version": version,
        "versions": versions,
        "frozen": version.ratings.exists(),
        "preview": build_preview(project, version, params),
        "mojibake": mojibake_warnings(version),
        "variables": BUILTIN_VARIABLES,
    }


@require_GET
@login_required
def rubric_detail(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    rubric = rubric_for(project, pk)
    version = chosen_version(rubric, request.GET.get("version"))
    return render(
        request, "rubrics/rubric_detail.html", detail_context(project, rubric, version, request.GET)
    )


@require_GET
@login_required
def rubric_preview(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """The rendered prompt for the picked item: the preview region for htmx, the whole page otherwise."""
    project = get_project_for(request.user, slug, role=RESEARCHER)
    rubric = rubric_for(project, pk)
    version = chosen_version(rubric, request.GET.get("version"))
    context = detail_context(project, rubric, version, request.GET)
    # A history restore (back button after hx-push-url) needs the whole page, not the region.
    region = request.htmx and not request.htmx.history_restore_request
    template = "rubrics/rubric_detail.html#preview" if region else "rubrics/rubric_detail.html"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_http_methods(["GET", "POST"])
@login_required
def rubric_edit(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    rubric = rubric_for(project, pk)
    latest = rubric.latest_version()
    form = RubricVersionForm(
        request.POST or None,
        initial=RubricVersionForm.initial_from(latest),
        read_from_text=latest is not None and is_read_from_text(latest),
    )
    if request.method == "POST" and form.is_valid():
        changes = dict(form.cleaned_data)
        name = changes.pop("name")
        try:
            version = edit_rubric(rubric=rubric, project=project, changes=changes, name=name)
        except ValidationError as error:
            for message in error.messages:
                form.add_error(None, message)
        else:
            if rubric.is_builtin:
                messages.success(
                    request, f"Saved as {version}, this project's own copy of the built-in rubric."
                )
            elif latest and version.pk == latest.pk:
                messages.success(request, f"Renamed to {version.rubric.name}; the text is unchanged.")
            else:
                messages.success(request, f"Saved as version {version.number}.")
            return redirect("rubric_detail", project.slug, version.rubric_id)
    status = 400 if form.errors else 200
    context = {"project": project, "rubric": rubric, "latest": latest, "form": form}
    return render(request, "rubrics/rubric_edit.html", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
def rubric_import(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    form = RubricImportForm(request.POST or None, request.FILES or None)
    problems: list[str] = []
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            result = import_rubric(
                text=data["source"], project=project, name=data["name"] or None, filename=data["filename"],
                repair_text=data["repair_text"],
            )  # fmt: skip
        except RubricParseError as error:
            problems = error.problems
        else:
            report_import(request, result)
            return redirect("rubric_detail", project.slug, result.rubric.pk)
    status = 400 if (form.errors or problems) else 200
    context = {"project": project, "form": form, "problems": problems}
    return render(request, "rubrics/rubric_import.html", context, status=status)


def report_import(request: HttpRequest, result: RubricImportResult) -> None:
    for repair in result.parsed.mojibake:
        if result.parsed.repaired:
            messages.warning(
                request, f"Repaired mojibake at {repair.where}: {repair.before} → {repair.after}"
            )
        else:
            messages.warning(
                request, f"Likely mojibake at {repair.where}: {repair.before} (import with repair)"
            )
    if result.created_version:
        messages.success(request, f"Imported {result.version}.")
    else:
        messages.info(request, f"Unchanged: {result.version} already has this text.")
