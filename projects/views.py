from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .access import get_project_for, is_researcher, projects_for


@require_GET
@login_required
def project_list(request):
    return render(request, "projects/project_list.html", {"projects": projects_for(request.user)})


@require_GET
@login_required
def project_detail(request, slug: str):
    project = get_project_for(request.user, slug)
    researcher = is_researcher(request.user, project)
    context = {"project": project, "is_researcher": researcher}
    if researcher:
        from rubrics.models import Rubric

        context.update(
            datasets=project.datasets.all(),
            rubrics=Rubric.objects.filter(project=project) | Rubric.objects.filter(project__isnull=True),
            evaluations=project.evaluations.select_related("dataset"),
            memberships=project.memberships.select_related("user").order_by("role", "user__username"),
        )
    else:
        context["evaluations"] = project.evaluations.filter(annotators=request.user).select_related("dataset")
    return render(request, "projects/project_detail.html", context)
