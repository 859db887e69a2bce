"""The Judge runs section of the evaluation page, owned by the judges app."""

from typing import Any

from django import template
from django.template import Context

from evaluations.models import Evaluation
from judges import selectors

register = template.Library()


@register.inclusion_tag("judges/_evaluation_judge_runs.html", takes_context=True)
def evaluation_judge_runs(context: Context, evaluation: Evaluation) -> dict[str, Any]:
    return {**selectors.evaluation_runs(evaluation), "request": context.get("request")}
