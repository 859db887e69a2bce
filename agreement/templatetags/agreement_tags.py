"""The Agreement section of the evaluation page, owned by the agreement app."""

from django import template

register = template.Library()


@register.inclusion_tag("agreement/_evaluation_agreement_summary.html", takes_context=True)
def evaluation_agreement_summary(context, evaluation):
    return {"evaluation": evaluation, "project": evaluation.project, "request": context.get("request")}
