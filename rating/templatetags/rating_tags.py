"""The Annotators section of the evaluation page, owned by the rating app."""

from django import template

register = template.Library()


@register.inclusion_tag("rating/_evaluation_annotators.html", takes_context=True)
def evaluation_annotators(context, evaluation):
    return {"evaluation": evaluation, "project": evaluation.project, "request": context.get("request")}
