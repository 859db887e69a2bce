from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .access import (
    RESEARCHER,
    AnyUser,
    get_project_for,
    get_role_for,
    may_create_projects,
    projects_for,
    require_project_creator,
)
from .forms import MemberForm, ProjectForm
from .models import Membership, Project


@require_GET
@login_required
def project_list(request: HttpRequest) -> HttpResponse:
    if _rates_only(request.user):  # annotators land on their rating queue, with nothing they cannot open
        return redirect("annotator_home")
    context = {
        "projects": projects_for(request.user),
        "may_create_projects": may_create_projects(request.user),
    }
    return render(request, "projects/project_list.html", context)


def _rates_only(user: AnyUser) -> bool:
    """An annotator and nothing more: a member of projects only as annotator, not staff."""
    if user.is_staff or user.is_superuser:
        return False
    roles = set(Membership.objects.filter(user=user.pk).values_list("role", flat=True))
    return roles == {Membership.Role.ANNOTATOR}


@require_http_methods(["GET", "POST"])
@login_required
def project_create(request: HttpRequest) -> HttpResponse:
    require_project_creator(request.user)
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            project = form.save()  # its slug made by the form from its name
            creator = cast(User, request.user)  # signed in: login_required
            Membership.objects.create(project=project, user=creator, role=RESEARCHER)
        messages.success(request, f"Project {project.name} created. You are its researcher.")
        return redirect("project_detail", slug=project.slug)
    return render(request, "projects/project_create.html", {"form": form})


@require_GET
@login_required
def project_detail(request: HttpRequest, slug: str) -> HttpResponse:
    project, role = get_role_for(request.user, slug)
    if role != RESEARCHER:
        return render(request, "projects/project_detail.html", annotator_context(request.user, project))
    return render(request, "projects/project_detail.html", researcher_context(request.user, project))


def researcher_context(user: AnyUser, project: Project, member_form: MemberForm | None = None) -> dict:
    from rubrics.models import Rubric

    return {
        "project": project,
        "is_researcher": True,
        "datasets": project.datasets.all(),
        "rubrics": Rubric.objects.filter(project=project) | Rubric.objects.filter(project__isnull=True),
        "evaluations": project.evaluations.select_related("dataset"),
        "judges": project.judges.filter(archived=False).order_by("name"),
        "memberships": project.memberships.select_related("user").order_by("role", "user__username"),
        "member_form": member_form or MemberForm(project=project, added_by=user),
    }


def annotator_context(user: AnyUser, project: Project) -> dict:
    return {
        "project": project,
        "is_researcher": False,
        "evaluations": project.evaluations.filter(annotators=user.pk).select_related("dataset"),
    }


@require_POST
@login_required
def project_member_add(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_for(request.user, slug, role=RESEARCHER)
    form = MemberForm(request.POST, project=project, added_by=request.user)
    if not form.is_valid():
        context = researcher_context(request.user, project, form)
        return render(request, "projects/project_detail.html", context, status=400)
    user, role = form.cleaned_data["username"], form.cleaned_data["role"]
    Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    messages.success(request, f"{user.username} is now a {role} of {project.name}.")
    return redirect("project_detail", slug=project.slug)
