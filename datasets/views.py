from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from projects.access import RESEARCHER, get_project_for
from projects.models import Project

from . import db
from .forms import ColumnMappingForm, DatasetUploadForm
from .jobs import create_upload_job, queue_again, set_mapping, stalled_jobs, start_upload_job
from .models import Dataset, Item, UploadJob
from .uploads import SizeLimitHandler, store_upload, upload_limit

PAGE_SIZES = [25, 50, 100, 200]
COUNT_CAP = 10_000  # filtered counts stop here: "10,000+" is enough to know and cheap to get
OPTION_FIELDS = ["append", "repair_text", "keep_mojibake", "convert_encoding"]


def _template(request: HttpRequest, page: str, partial: str) -> str:
    return f"{page}#{partial}" if getattr(request, "htmx", False) else page


# ---------------------------------------------------------------- upload


@csrf_exempt  # checked by csrf_protect below, after the size-limiting upload handler is installed
@require_http_methods(["GET", "POST"])
@login_required
def dataset_upload(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    handler = SizeLimitHandler(request, limit=upload_limit())
    if request.method == "POST":
        request.upload_handlers.insert(0, handler)
    return _dataset_upload(request, project, handler)


@csrf_protect
def _dataset_upload(request: HttpRequest, project: Project, handler: SizeLimitHandler) -> HttpResponse:
    if request.method != "POST":
        name = request.GET.get("name", "")
        # "Append items" on a dataset page links here with its name: appending is what is meant.
        form = DatasetUploadForm(initial={"name": name, "append": bool(name)})
        return _render_upload(request, project, form)
    form = DatasetUploadForm(request.POST, request.FILES)
    if handler.refused:
        form.is_valid()
        form.errors.pop("file", None)
        form.add_error(
            "file",
            f"The file is larger than the upload limit of {upload_limit():,} bytes; it was refused "
            "before being stored. Import it with `manage.py import_dataset` or split it.",
        )
        return _render_upload(request, project, form, status=413)
    if not form.is_valid():
        return _render_upload(request, project, form, status=400)
    data = form.cleaned_data
    path = store_upload(data["file"])
    job = create_upload_job(
        project=project,
        user=request.user,
        name=data["name"],
        path=path,
        filename=data["file"].name,
        format=data["format"],
        options={key: bool(data[key]) for key in OPTION_FIELDS},
    )
    start_upload_job(job)
    return redirect("dataset_upload_job", project.slug, job.pk)


def _render_upload(
    request: HttpRequest, project: Project, form: DatasetUploadForm, status: int = 200
) -> HttpResponse:
    recent = UploadJob.objects.filter(project=project).select_related("dataset")[:5]
    context = {"project": project, "form": form, "limit": upload_limit(), "recent": recent}
    return render(request, "datasets/dataset_upload.html", context, status=status)


@require_GET
@login_required
def dataset_upload_job(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    job = get_object_or_404(UploadJob.objects.select_related("dataset"), pk=job_id, project=project)
    context = {"project": project, "job": job, "mapping_form": _mapping_form(job)}
    return render(request, _template(request, "datasets/upload_job.html", "status"), context)


@require_POST
@login_required
def dataset_upload_requeue(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    """Queue a stalled job's import again (its message lost with a restarted broker, or its worker dead)."""
    project = get_project_for(request.user, slug, role=RESEARCHER)
    job = get_object_or_404(UploadJob, pk=job_id, project=project)
    stalled = stalled_jobs(UploadJob.objects.filter(pk=job.pk), stale_seconds=settings.UPLOAD_STALE_SECONDS)
    if not stalled.exists():
        messages.info(request, "This upload is not stalled: nothing was queued again.")
    elif queue_again([job.pk]):
        messages.success(request, "Queued again: the next free worker imports it from the beginning.")
    else:
        messages.error(
            request, "The task queue did not take it (its broker could not be reached): try again later."
        )
    return redirect("dataset_upload_job", project.slug, job.pk)


@require_POST
@login_required
def dataset_upload_mapping(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    job = get_object_or_404(UploadJob, pk=job_id, project=project)
    form = _mapping_form(job, request.POST)
    if form is None:
        return redirect("dataset_upload_job", project.slug, job.pk)
    if not form.is_valid():
        context = {"project": project, "job": job, "mapping_form": form}
        return render(request, "datasets/upload_job.html", context, status=400)
    set_mapping(job, form.mapping())
    start_upload_job(job)
    return redirect("dataset_upload_job", project.slug, job.pk)


def _mapping_form(job: UploadJob, data: QueryDict | None = None) -> ColumnMappingForm | None:
    if job.status != UploadJob.Status.MAPPING:
        return None
    header = job.report.get("header", [])
    return ColumnMappingForm(data, header=header, initial_mapping=job.report.get("mapping", {}))


# ---------------------------------------------------------------- browsing


@require_GET
@login_required
def dataset_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    dataset = get_object_or_404(Dataset, pk=pk, project=project)
    query = request.GET.get("q", "").strip()
    meta = request.GET.get("meta", "").strip()
    size = _int(request.GET.get("size"), 50)
    size = size if size in PAGE_SIZES else 50
    items, problem = _filtered_items(dataset, query=query, meta=meta)
    filtered = bool(query or meta)
    # No dataset has more pages than items: a page number past that is the last page (and an offset that
    # fits the database's integers).
    page = min(max(1, _int(request.GET.get("page"), 1)), _pages(max(dataset.item_count, 1), 1))
    counting = filtered and request.GET.get("count") == "1"
    if counting and getattr(request, "htmx", False):
        with db.parallel_scans_priced_by_work():
            counted = _count(dataset, items, filtered=True)
        return render(
            request, "datasets/dataset_detail.html#total", _totals(counted, size=size, filtered=True)
        )
    total: int | None
    if filtered:
        probe = db.page_probe(query, page=page, item_count=dataset.item_count)
        with db.parallel_scans_priced_by_work():
            rows, total, page = _filtered_page(
                dataset, items, page=page, size=size, count=counting, probe=probe
            )
    else:
        total = _count(dataset, items, filtered=False)
        page = min(page, _pages(total, size))
        # Positions run 0..n-1 (the importer numbers items densely and appends after the last), so a
        # deep page is an index range rather than an OFFSET that walks every earlier row.
        rows = list(items.filter(position__gte=(page - 1) * size).defer("search_text")[:size])
    totals = _totals(total, size=size, filtered=filtered)
    more = len(rows) > size if filtered else page < totals["pages"]  # a filtered page reads one row more
    rows = rows[:size]
    first = (page - 1) * size + 1
    context = {
        "project": project,
        "dataset": dataset,
        "items": rows,
        "query": query,
        "meta": meta,
        "sizes": PAGE_SIZES,
        "page": page,
        "more": more,
        "problem": problem,
        "first": first if rows else 0,
        "last": first + len(rows) - 1,
        "count_url": _count_url(request, query=query, meta=meta, size=size, page=page)
        if total is None
        else "",
        **totals,
    }
    return render(request, _template(request, "datasets/dataset_detail.html", "items"), context)


def _filtered_page(
    dataset: Dataset, items: QuerySet[Item], *, page: int, size: int, count: bool, probe: int | None = None
) -> tuple[list[Item], int | None, int]:
    """A page of matching items plus the next one (whether there are more), their total and the page shown.
    Counting every match of a frequent phrase means reading the text of most of the dataset, while its first
    page is found among the first few thousand items: unless this page shows the last match or `count` asks
    for it, the total is None and the page fetches it with a second request (htmx, `count=1`). With `probe`
    (db.page_probe) the page is looked for below that position first: when the items there hold the whole
    page and the next match, those are the page, as the items are in position order."""
    start, stop = (page - 1) * size, page * size + 1
    rows: list[Item] = []
    if probe is not None:
        rows = list(items.filter(position__lt=probe).defer("search_text")[start:stop])
    if len(rows) < stop - start:
        rows = list(items.defer("search_text")[start:stop])
    if len(rows) <= size and (rows or page == 1):
        return rows, (page - 1) * size + len(rows), page
    if rows and not count:
        return rows, None, page
    total = _count(dataset, items, filtered=True)
    if rows:
        return rows, total, page
    last = _pages(min(total, COUNT_CAP), size)  # a page past the last match: show the last one
    return list(items.defer("search_text")[(last - 1) * size : last * size]), total, last


def _pages(total: int, size: int) -> int:
    return max(1, -(-total // size))


def _totals(total: int | None, *, size: int, filtered: bool) -> dict[str, Any]:
    """The count's part of the page: total (None: not counted yet), whether it reached the cap, pages."""
    return {
        "total": total,
        "capped": filtered and total is not None and total > COUNT_CAP,
        "pages": 0 if total is None else _pages(min(total, COUNT_CAP) if filtered else total, size),
        "size": size,
        "filtered": filtered,
    }


def _count_url(request: HttpRequest, *, query: str, meta: str, size: int, page: int) -> str:
    """The page again with its matches counted: htmx asks for the count alone, a plain link for the page."""
    params = {"q": query, "meta": meta, "size": size, "page": page, "count": 1}
    return f"{request.path}?{urlencode(params)}"


def _int(raw: str | None, default: int) -> int:
    if raw is None:
        return default
    try:
        return int(raw)
    except (TypeError, ValueError):
        return default


def _filtered_items(dataset: Dataset, *, query: str, meta: str) -> tuple[QuerySet[Item], str]:
    items = Item.objects.filter(dataset=dataset).order_by("position")
    # No stored text holds a NUL (the importer refuses it) and PostgreSQL refuses one in a query's text.
    nul = [label for label, text in (("search", query), ("metadata filter", meta)) if "\x00" in text]
    if nul:
        problem = f"The {' and '.join(nul)} holds a NUL character (\\0), which no item has; remove it."
        return items.none(), problem
    problem = ""
    if query:
        items = items.filter(db.text_matches(query) | Q(external_id=query))
    if meta:
        key, sep, value = meta.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            problem = "Filter metadata as key=value, for example topic=Concert."
        else:
            items = db.metadata_filter(items, key=key, value=value)
    return items, problem


def _count(dataset: Dataset, items: QuerySet[Item], *, filtered: bool) -> int:
    if not filtered:
        # The importer keeps item_count; rows made some other way (admin, fixtures) fall back to COUNT.
        return dataset.item_count or items.count()
    return db.capped_count(items, COUNT_CAP)


@require_GET
@login_required
def item_detail(request: HttpRequest, slug: str, pk: int, item_pk: int) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    item = get_object_or_404(
        Item.objects.select_related("dataset").defer("search_text"),
        pk=item_pk,
        dataset_id=pk,
        dataset__project=project,
    )
    neighbours = Item.objects.filter(dataset_id=pk)
    previous = neighbours.filter(position__lt=item.position).order_by("-position").values("pk").first()
    following = neighbours.filter(position__gt=item.position).order_by("position").values("pk").first()
    context = {
        "project": project,
        "dataset": item.dataset,
        "item": item,
        "previous": previous["pk"] if previous else None,
        "next": following["pk"] if following else None,
    }
    return render(request, "datasets/item_detail.html", context)
