"""The Judge runs section of the evaluation page, owned by the judges app."""

from typing import Any

from django import template
from django.template import Context

from evaluations.models import Evaluation

register = template.Library()


@register.inclusion_tag("judges/_evaluation_judge_runs.html", takes_context=True)
def evaluation_judge_runs(context: Context, evaluation: Evaluation) -> dict[str, Any]:
    runs = list(evaluation.judge_runs.select_related("judge", "rubric_version__rubric", "rater"))
    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "runs": runs,
        # While any run is running the section polls itself, so statuses change without a reload.
        "active": any(run.is_active for run in runs),
        "request": context.get("request"),
    }
