"""The agreement report page, its JSON and CSV downloads, and one item with every rating."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from agreement.consistency import position_consistency
from agreement.disagreements import neighbours, ranked_disagreements
from agreement.overview import judge_run_ids, overview_rows
from agreement.presentation import present_rubric, report_csv
from agreement.reading import metadata_keys
from agreement.services import cached_report, report_for_page
from datasets.models import Item
from evaluations.models import Evaluation, Rating
from projects.access import get_evaluation_for
from rubrics.models import RubricVersion


def _where(request) -> dict[str, str]:
    key = request.GET.get("key", "").strip()
    if not key:
        return {}
    return {key: request.GET.get("value", "").strip()}


@require_GET
@login_required
def agreement_report(request, slug: str, pk: int):
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


def _disagreements_of(request, evaluation: Evaluation) -> tuple[RubricVersion, str, list[dict]]:
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
def agreement_disagreements(request, slug: str, pk: int):
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


def disagreement_nav(request, evaluation: Evaluation, item: Item) -> dict | None:
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


@require_GET
@login_required
def agreement_report_json(request, slug: str, pk: int):
    evaluation = get_evaluation_for(request.user, slug, pk)
    where = _where(request)
    report, _ = cached_report(evaluation=evaluation, where=where)
    response = JsonResponse(report, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="{_filename(evaluation, where, ".json")}"'
    return response


@require_GET
@login_required
def agreement_report_csv(request, slug: str, pk: int):
    evaluation = get_evaluation_for(request.user, slug, pk)
    where = _where(request)
    report, _ = cached_report(evaluation=evaluation, where=where)
    response = HttpResponse(report_csv(report), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(evaluation, where, ".csv")}"'
    return response


@require_GET
@login_required
def agreement_item(request, slug: str, pk: int, item_pk: int):
    evaluation = get_evaluation_for(request.user, slug, pk)
    item = get_object_or_404(Item, pk=item_pk, dataset_id=evaluation.dataset_id)
    ratings = (
        Rating.objects.filter(evaluation=evaluation, item=item)
        .select_related("rater__judge_run", "rubric_version__rubric")
        .order_by("rubric_version__rubric__name", "rubric_version__number", "rater__kind", "rater__name")
    )
    groups: dict[str, list[Rating]] = {}
    for rating in ratings:
        groups.setdefault(str(rating.rubric_version), []).append(rating)
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "item": item,
        "groups": groups,
        "metadata": json.dumps(item.metadata, ensure_ascii=False, indent=1) if item.metadata else "",
        "nav": disagreement_nav(request, evaluation, item),
    }
    return render(request, "agreement/agreement_item.html", context)
