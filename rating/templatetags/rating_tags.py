"""The Annotators section of the evaluation page, owned by the rating app."""

from django import template

from rating.annotators import section_context

register = template.Library()


@register.inclusion_tag("rating/_evaluation_annotators.html", takes_context=True)
def evaluation_annotators(context, evaluation):
    return section_context(evaluation=evaluation, request=context.get("request"))
