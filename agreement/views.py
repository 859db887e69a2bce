"""The agreement report page, its JSON and CSV downloads, and one item with every rating."""

from __future__ import annotations

from typing import cast
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import BadRequest, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods

from agreement.compare import Run, compare_runs, find_run, runs_of
from agreement.consistency import position_consistency, with_position_consistency
from agreement.cost import ReportTooLarge
from agreement.disagreements import neighbours, ranked_disagreements
from agreement.examples import candidates, make_examples_version
from agreement.forms import AltTestSettingsForm
from agreement.overview import judge_run_ids, overview_rows
from agreement.presentation import present_rubric, report_csv
from agreement.reading import metadata_keys
from agreement.services import cached_report, report_for_page
from config.htmx import HtmxHttpRequest
from datasets.models import Item
from evaluations.models import Evaluation, Rating
from judges.models import JudgeRun
from projects.access import get_evaluation_for
from rubrics.models import RubricVersion


def _where(request: HttpRequest) -> dict[str, str]:
    key = request.GET.get("key", "").strip()
    if not key:
        return {}
    value = request.GET.get("value", "").strip()
    if "\x00" in key + value:  # no metadata holds one, and PostgreSQL refuses it in a query: a 400, not a 500
        raise BadRequest("The metadata filter holds a NUL character (\\0), which no item has; remove it.")
    return {key: value}


@require_GET
@login_required
def agreement_report(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    where = _where(request)
    page = report_for_page(evaluation=evaluation, where=where)
    report = page.payload
    query = request.GET.urlencode()
    rubrics = [present_rubric(block) for block in report["rubrics"]] if report else []
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "page": page,
        "report": report,
        "rubrics": with_version_ids(evaluation, rubrics),
        "overview": report_overview(report["rubrics"]) if report else [],
        "cache": page.entry,
        "where": where,
        "keys": metadata_keys(evaluation=evaluation),
        "query": f"?{query}" if query else "",
    }
    template = "agreement/agreement_report.html"
    return render(request, f"{template}#report" if request.htmx else template, context)


def report_overview(blocks: list[dict]) -> list[dict]:
    return overview_rows(blocks, position_consistency(judge_run_ids(blocks)))


def with_version_ids(evaluation: Evaluation, rubrics: list[dict]) -> list[dict]:
    """Each presented rubric with its disagreements grouped by model, each group with the query that
    names its version and model (for the paged list and the item page's previous / next)."""
    ids = {
        (name, number): pk
        for pk, name, number in evaluation.rubric_versions.values_list("pk", "rubric__name", "number")
    }
    for rubric in rubrics:
        version_id = ids.get((rubric["rubric"], rubric["version"]))
        rubric["disagreement_groups"] = [
            {"model": model, "entries": entries, "query": _nav_query(version_id, model)}
            for model, entries in rubric["disagreements_by_model"].items()
        ]
    return rubrics


DISAGREEMENTS_PER_PAGE = 25


def _disagreements_of(request: HttpRequest, evaluation: Evaluation) -> tuple[RubricVersion, str, list[dict]]:
    """The version and model named in the query and their ranked disagreements; 404 when unknown."""
    raw = request.GET.get("version", "")
    version = get_object_or_404(
        evaluation.rubric_versions.select_related("rubric"), pk=int(raw) if raw.isdigit() else 0
    )
    model = request.GET.get("model", "")
    return version, model, ranked_disagreements(evaluation=evaluation, version=version, model=model)


def _nav_query(version_id: int | None, model: str) -> str:
    return urlencode({"version": version_id, "model": model})


@require_GET
@login_required
def agreement_disagreements(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Every item where one model disagrees with the people under one rubric version, a page at a time."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    version, model, entries = _disagreements_of(request, evaluation)
    page_obj = Paginator(entries, DISAGREEMENTS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "version": version,
        "model": model,
        "page_obj": page_obj,
        "query": _nav_query(version.pk, model),
    }
    return render(request, "agreement/agreement_disagreements.html", context)


def disagreement_nav(request: HttpRequest, evaluation: Evaluation, item: Item) -> dict | None:
    """Previous / next among one model's disagreements, when the item page was opened from that list."""
    if not request.GET.get("version") or not request.GET.get("model"):
        return None
    version, model, entries = _disagreements_of(request, evaluation)
    position, before, after = neighbours(entries, item.pk)
    if position is None:
        return None
    return {
        "model": model, "version": version, "position": position + 1, "total": len(entries),
        "before": before, "after": after, "query": _nav_query(version.pk, model),
        "page": position // DISAGREEMENTS_PER_PAGE + 1,
    }  # fmt: skip


def _filename(evaluation: Evaluation, where: dict[str, str], suffix: str) -> str:
    parts = [f"agreement-{slugify(evaluation.name) or evaluation.pk}"]
    parts += [slugify(f"{key}-{value}") for key, value in where.items()]
    return "-".join(parts) + suffix


def _too_large(refused: ReportTooLarge) -> HttpResponse:
    """The download of a report above the server's budgets: what to reduce, as text (422: the request is
    understood and will not be computed)."""
    return HttpResponse(
        f"This report is not computed: {refused}.\n", status=422, content_type="text/plain; charset=utf-8"
    )


@require_GET
@login_required
def agreement_report_json(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    where = _where(request)
    try:
        report, _ = cached_report(evaluation=evaluation, where=where)
    except ReportTooLarge as refused:
        return _too_large(refused)
    response = JsonResponse(
        with_position_consistency(report), json_dumps_params={"indent": 2, "ensure_ascii": False}
    )
    response["Content-Disposition"] = f'attachment; filename="{_filename(evaluation, where, ".json")}"'
    return response


@require_GET
@login_required
def agreement_report_csv(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    where = _where(request)
    try:
        report, _ = cached_report(evaluation=evaluation, where=where)
    except ReportTooLarge as refused:
        return _too_large(refused)
    response = HttpResponse(
        report_csv(with_position_consistency(report)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{_filename(evaluation, where, ".csv")}"'
    return response


@require_GET
@login_required
def agreement_item(request: HttpRequest, slug: str, pk: int, item_pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    item = get_object_or_404(Item, pk=item_pk, dataset_id=evaluation.dataset_id)
    ratings = (
        Rating.objects.filter(evaluation=evaluation, item=item)
        .select_related("rater__judge_run", "rubric_version__rubric")
        .order_by("rubric_version__rubric__name", "rubric_version__number", "rater__kind", "rater__name")
    )
    groups: dict[str, list[Rating]] = {}
    for rating in ratings:
        groups.setdefault(rating.rubric_version.label, []).append(rating)
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "item": item,
        "groups": groups,
        "nav": disagreement_nav(request, evaluation, item),
    }
    return render(request, "agreement/agreement_item.html", context)


@require_http_methods(["GET", "POST"])
@login_required
def alt_test_settings(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Who the people are (hence the alt-test's epsilon) and the alignment score (evaluation page)."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    form = AltTestSettingsForm(request.POST or None, instance=evaluation)
    saved = request.method == "POST" and form.is_valid()
    if saved:
        form.save()
        if not request.htmx:
            messages.success(request, f"Alt-test epsilon is now {evaluation.alt_test_epsilon:g}.")
            return redirect("evaluation_detail", slug=evaluation.project.slug, pk=evaluation.pk)
        form = AltTestSettingsForm(instance=evaluation)
    context = {"project": evaluation.project, "evaluation": evaluation, "alt_test_form": form, "saved": saved}
    template = "agreement/alt_test_settings.html"
    status = 400 if form.errors and not request.htmx else 200  # htmx swaps only 2xx responses
    return render(
        request, f"{template}#alt-test-settings" if request.htmx else template, context, status=status
    )


@require_GET
@login_required
def compare_runs_page(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Two model runs (two judges, or two rubric versions) side by side on the same items."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    runs = runs_of(evaluation)
    chosen = {side: request.GET.get(side, "") for side in ("a", "b")}
    comparison, error = None, ""
    if chosen["a"] and chosen["b"]:
        try:
            a, b = find_run(runs, chosen["a"]), find_run(runs, chosen["b"])
            comparison = compare_runs(evaluation=evaluation, a=a, b=b)
        except ValueError as problem:
            error = str(problem)
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "runs": runs,
        "chosen": chosen,
        "comparison": comparison,
        "error": error,
    }
    template = "agreement/compare_runs.html"
    status = 400 if error and not request.htmx else 200  # htmx swaps only 2xx responses
    return render(request, f"{template}#comparison" if request.htmx else template, context, status=status)


def launch_url(evaluation: Evaluation, version: RubricVersion, run: Run) -> str:
    """The launch form with only the new version ticked, and the judge of the run it learnt from picked
    (so its estimate shows at once) when that run was a judge's."""
    url = reverse("judge_run_create", args=[evaluation.project.slug, evaluation.pk])
    judge_run = JudgeRun.objects.filter(rater=run.rater, judge__archived=False).first()
    if judge_run is None:
        return f"{url}?{urlencode({'version': version.pk})}"
    return f"{url}?{urlencode({'judge': judge_run.judge_id, 'rubric_versions': version.pk})}"


@require_http_methods(["GET", "POST"])
@login_required
def examples_from_disagreements(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """GET: tune items where the people agree and the chosen run did not. POST: a new rubric version
    showing the ticked ones as examples, judge-only in this evaluation and ready to run."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    runs = runs_of(evaluation)
    key = request.POST.get("run") or request.GET.get("run", "")
    run = next((r for r in runs if r.key == key), None)
    error = ""
    if request.method == "POST" and run is not None:
        try:
            chosen = [int(value) for value in request.POST.getlist("item")]
            version = make_examples_version(
                evaluation=evaluation, run=run, item_ids=chosen, created_by=cast(User, request.user)
            )
        except (ValueError, ValidationError) as problem:
            error = "; ".join(problem.messages) if isinstance(problem, ValidationError) else "bad item id"
        else:
            messages.success(request, f"{version.label} made: launch a judge run on it.")
            return redirect(launch_url(evaluation, version, run))
    elif request.method == "POST":
        error = "Choose a run."
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "runs": runs,
        "run": run,
        "candidates": candidates(evaluation=evaluation, run=run) if run else [],
        "error": error,
    }
    return render(
        request, "agreement/examples_from_disagreements.html", context, status=400 if error else 200
    )
