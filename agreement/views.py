"""The agreement report page, its JSON and CSV downloads, and one item with every rating."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from agreement.presentation import present_rubric, report_csv
from agreement.reading import metadata_keys
from agreement.services import cached_report, report_for_page
from datasets.models import Item
from evaluations.models import Evaluation, Rating
from projects.access import get_evaluation_for


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
    context = {
        "project": evaluation.project,
        "evaluation": evaluation,
        "page": page,
        "report": report,
        "rubrics": [present_rubric(block) for block in report["rubrics"]] if report else [],
        "cache": page.entry,
        "where": where,
        "keys": metadata_keys(evaluation=evaluation),
        "query": f"?{query}" if query else "",
    }
    template = "agreement/agreement_report.html"
    return render(request, f"{template}#report" if request.htmx else template, context)


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
    }
    return render(request, "agreement/agreement_item.html", context)
