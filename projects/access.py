"""Access control in one place. Views call these helpers and never test membership inline.

Someone who is not a member gets 404 (a project's existence is not revealed); a member whose
role is too low gets 403.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404
from django_stubs_ext import WithAnnotations

from .models import Membership, Project

if TYPE_CHECKING:
    from evaluations.models import Evaluation
    from judges.models import JudgeRun

# Who a view's request is from: a signed-in user, or nobody yet (`request.user`).
AnyUser = User | AnonymousUser

RESEARCHER = Membership.Role.RESEARCHER
ANNOTATOR = Membership.Role.ANNOTATOR


def get_project_for(user: AnyUser, slug: str, *, role: str = ANNOTATOR) -> Project:
    """The project `slug` if `user` is a member with at least `role` (researcher > annotator)."""
    if not user.is_authenticated:
        raise Http404("No such project")
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise Http404("No such project")
    member_role = project.role_of(user)
    if member_role is None and not user.is_superuser:
        raise Http404("No such project")
    if role == RESEARCHER and member_role != RESEARCHER and not user.is_superuser:
        raise PermissionDenied("Only the project's researchers can open this page.")
    return project


def get_role_for(user: AnyUser, slug: str) -> tuple[Project, str]:
    """The project `slug` and `user`'s role in it (superusers count as researchers); 404 for others."""
    project = get_project_for(user, slug)
    role = RESEARCHER if user.is_superuser else project.role_of(user)
    if role is None:  # get_project_for lets only members and superusers through
        raise Http404("No such project")
    return project, role


def get_evaluation_for(user: AnyUser, slug: str, pk: int, *, role: str = RESEARCHER) -> Evaluation:
    """Evaluation `pk` of project `slug`, with its project and dataset.

    `role=RESEARCHER`: for the project's researchers (annotators get 403, outsiders 404).
    `role=ANNOTATOR`: for the people who rate in it; anyone else, the project's researchers too, gets 404.
    One query: the evaluation with the person's role in its project and whether they annotate it.
    """
    from django.db.models import Exists, OuterRef, Subquery

    from evaluations.models import Evaluation

    if not user.is_authenticated:
        raise Http404("No such project")
    membership = Membership.objects.filter(project_id=OuterRef("project_id"), user=user).values("role")[:1]
    annotates = Evaluation.annotators.through.objects.filter(evaluation_id=OuterRef("pk"), user_id=user.pk)
    evaluation = (
        Evaluation.objects.select_related("project", "dataset")
        .annotate(member_role=Subquery(membership), annotates=Exists(annotates))
        .filter(project__slug=slug, pk=pk)
        .first()
    )
    if evaluation is None:
        get_project_for(user, slug, role=role)  # 404 or 403 for the project, as its pages answer
        raise Http404("No such evaluation")
    member_role = RESEARCHER if user.is_superuser else evaluation.member_role
    if member_role is None:
        raise Http404("No such project")
    if role == RESEARCHER and member_role != RESEARCHER:
        raise PermissionDenied("Only the project's researchers can open this page.")
    if role == ANNOTATOR and not evaluation.annotates:
        raise Http404("No such evaluation")
    return evaluation


def get_judge_run_for(user: AnyUser, slug: str, pk: int) -> JudgeRun:
    """Judge run `pk` of an evaluation of project `slug`, for the project's researchers."""
    from judges.models import JudgeRun

    project = get_project_for(user, slug, role=RESEARCHER)
    run = (
        JudgeRun.objects.select_related(
            "judge", "evaluation__project", "evaluation__dataset", "rubric_version__rubric", "rater"
        )
        .filter(evaluation__project=project, pk=pk)
        .first()
    )
    if run is None:
        raise Http404("No such judge run")
    return run


class _Role(TypedDict):
    role: str | None


def projects_for(user: AnyUser) -> QuerySet[WithAnnotations[Project, _Role]]:
    """The projects `user` belongs to, each annotated with the user's `role`."""
    from django.db.models import OuterRef, Subquery

    role = Membership.objects.filter(project=OuterRef("pk"), user=user.pk).values("role")[:1]
    queryset = Project.objects.annotate(role=Subquery(role))
    if user.is_superuser:
        return queryset
    return queryset.filter(memberships__user=user.pk)


def may_create_projects(user: AnyUser) -> bool:
    """CONCORD_PROJECT_CREATORS: staff only (the default), or every logged-in user."""
    if not user.is_authenticated:
        return False
    return settings.CONCORD_PROJECT_CREATORS == "everyone" or user.is_staff or user.is_superuser


def require_project_creator(user: AnyUser) -> None:
    if not may_create_projects(user):
        raise PermissionDenied(
            "Only staff can create projects on this server."
            " Ask a staff member to create one and add you to it."
        )


def shareable_users(user: AnyUser) -> QuerySet[User]:
    """The accounts `user` may add to a project by username: people who share a project with them. Staff
    invite people to the server, so they may add any account. Anyone else needs a new account (made from
    an evaluation's Annotators section, with a set-password link): a researcher must not learn which
    usernames exist elsewhere on the server, so a caller answers alike for "none" and "not shareable"."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True)
    if user.is_staff or user.is_superuser:
        return users
    shared = Membership.objects.filter(user=user.pk).values("project")
    return users.filter(pk__in=Membership.objects.filter(project__in=shared).values("user"))
