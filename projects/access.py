"""Access control in one place. Views call these helpers and never test membership inline.

Someone who is not a member gets 404 (a project's existence is not revealed); a member whose
role is too low gets 403.
"""

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404

from .models import Membership, Project

RESEARCHER = Membership.Role.RESEARCHER
ANNOTATOR = Membership.Role.ANNOTATOR


def get_project_for(user, slug: str, *, role: str = ANNOTATOR) -> Project:
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


def projects_for(user):
    """The projects `user` belongs to, each annotated with the user's `role`."""
    from django.db.models import OuterRef, Subquery

    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    queryset = Project.objects.annotate(role=Subquery(role))
    if user.is_superuser:
        return queryset
    return queryset.filter(memberships__user=user)


def is_researcher(user, project: Project) -> bool:
    return user.is_superuser or project.role_of(user) == RESEARCHER


def may_create_projects(user) -> bool:
    """CONCORD_PROJECT_CREATORS: staff only (the default), or every logged-in user."""
    if not user.is_authenticated:
        return False
    return settings.CONCORD_PROJECT_CREATORS == "everyone" or user.is_staff or user.is_superuser


def require_project_creator(user) -> None:
    if not may_create_projects(user):
        raise PermissionDenied(
            "Only staff can create projects on this server."
            " Ask a staff member to create one and add you to it."
        )
