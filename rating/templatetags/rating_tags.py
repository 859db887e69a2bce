"""The Annotators section of the evaluation page, owned by the rating app."""

from typing import Any

from django import template
from django.template import Context

from evaluations.models import Evaluation
from rating.annotators import section_context

register = template.Library()


@register.inclusion_tag("rating/_evaluation_annotators.html", takes_context=True)
def evaluation_annotators(context: Context, evaluation: Evaluation) -> dict[str, Any]:
    return section_context(evaluation=evaluation, request=context.get("request"))
