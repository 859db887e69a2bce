"""The Agreement section of the evaluation page, owned by the agreement app."""

from typing import Any

from django import template
from django.template import Context

from agreement.services import fresh_cached_report
from evaluations.models import Evaluation

register = template.Library()


@register.inclusion_tag("agreement/_evaluation_agreement_summary.html", takes_context=True)
def evaluation_agreement_summary(context: Context, evaluation: Evaluation) -> dict[str, Any]:
    """A link to the report and, when a current report is cached, its headline figures (never computes)."""
    report = fresh_cached_report(evaluation)
    headlines = []
    for block in (report or {}).get("rubrics", []):
        headlines.append(
            {
                "rubric": block["rubric"],
                "version": block["version"],
                "alpha": block["human_human"].get("krippendorff_alpha"),
                "verdicts": [
                    (r["rater"], r["verdict"].get("label"), r["verdict"].get("text")) for r in block["raters"]
                ],
            }
        )
    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "request": context.get("request"),
        "cached": report is not None,
        "headlines": headlines,
    }


@register.inclusion_tag("agreement/alt_test_settings.html#alt-test-settings", takes_context=True)
def evaluation_alt_test_settings(context: Context, evaluation: Evaluation) -> dict[str, Any]:
    """The alt-test's epsilon and metric, editable on the evaluation page."""
    from agreement.forms import AltTestSettingsForm

    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
        "alt_test_form": AltTestSettingsForm(instance=evaluation),
    }


@register.filter
def split_rows(rater: dict) -> list[dict]:
    """[{label, tune, held_out}] of a model's figures on the tune and held-out items (report JSON `split`)."""
    from agreement.presentation import metric_rows

    split = rater.get("split") or {}
    tune = {row["metric"]: row for row in metric_rows(split.get("tune", {}))}
    held = {row["metric"]: row for row in metric_rows(split.get("held_out", {}))}
    return [
        {
            "label": row["label"],
            "tune": row["value"],
            "held_out": held[metric]["value"] if metric in held else "–",
        }
        for metric, row in tune.items()
    ]
