"""Researchers manage who rates an evaluation: add people, create accounts, change settings."""

import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.db.models import Count, Q
from django.http import HttpRequest, QueryDict
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from evaluations.models import Evaluation
from projects.access import AnyUser, shareable_users
from projects.models import Membership

from . import services
from .models import Assignment

USERNAME = re.compile(r"^[\w.@+-]{1,150}$")


@dataclass
class Outcome:
    ok: bool
    message: str
    link: str = ""  # a one-time set-password link, shown once


def _make_annotator(evaluation: Evaluation, user: User) -> None:
    """Annotators of an evaluation are members of its project; people new to it join as annotators."""
    Membership.objects.get_or_create(
        project=evaluation.project, user=user, defaults={"role": Membership.Role.ANNOTATOR}
    )
    evaluation.annotators.add(user)


def add_existing(*, evaluation: Evaluation, usernames: str, added_by: AnyUser) -> Outcome:
    """Add existing accounts by username (comma or whitespace separated); all or nothing. Only accounts
    `added_by` may share (projects.access.shareable_users): others are "no account" alike."""
    names = [name for name in re.split(r"[\s,]+", usernames) if name]
    if not names:
        return Outcome(False, "Type at least one username to add.")
    users = {user.username: user for user in shareable_users(added_by).filter(username__in=names)}
    unknown = [name for name in names if name not in users]
    if unknown:
        return Outcome(
            False,
            f"No account named {', '.join(unknown)} that you can add (only people who share a project "
            "with you); nobody was added. Create new accounts with the form below.",
        )
    with transaction.atomic():
        for user in users.values():
            _make_annotator(evaluation, user)
    return Outcome(True, f"Added {', '.join(sorted(users))} as annotators.")


def set_password_link(*, user: User, link_base: str) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return link_base.rstrip("/") + reverse("set_password", args=[uid, token])


def create_account(
    *, evaluation: Evaluation, username: str, email: str, link_base: str, added_by: AnyUser
) -> Outcome:
    """A new account with no usable password, added as annotator; returns its one-time set-password link."""
    username, email = username.strip(), email.strip()
    if not USERNAME.match(username):
        return Outcome(
            False, f"“{username}” is not a valid username: use letters, digits and @ . + - _ only."
        )
    users = get_user_model().objects
    if users.filter(username=username).exists():
        if shareable_users(added_by).filter(username=username).exists():
            return Outcome(False, f"An account named {username} already exists; add it with the form above.")
        # Taken by someone this researcher does not share a project with: say no more than that.
        return Outcome(False, f"The username {username} cannot be used; choose another.")
    with transaction.atomic():
        user = users.create_user(username=username, email=email, password=None)
        _make_annotator(evaluation, user)
    link = set_password_link(user=user, link_base=link_base)
    return Outcome(
        True, f"Created {username}. Send them this one-time link to set a password: {link}", link=link
    )


def remove(*, evaluation: Evaluation, user_id: int) -> Outcome:
    """Take someone off the evaluation; their open reservation goes back to the pool, their ratings stay."""
    user = evaluation.annotators.filter(pk=user_id).first()
    if user is None:
        return Outcome(False, "That person is not an annotator of this evaluation.")
    with transaction.atomic():
        reserved = Assignment.objects.select_for_update().filter(
            evaluation=evaluation, user=user, status=Assignment.Status.RESERVED
        )
        for assignment in reserved:
            services.set_aside(
                evaluation=evaluation,
                item_id=assignment.item_id,
                user=user,
                reason="annotator removed from the evaluation",
                flag=False,
            )
        evaluation.annotators.remove(user)
    return Outcome(True, f"Removed {user.username}; the ratings they gave are kept.")


def _whole_number(data: QueryDict, name: str, label: str) -> int:
    raw = str(data.get(name, "")).strip()
    try:
        return int(raw)
    except ValueError:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise services.RatingRefused(f"{label} must be a whole number, not “{shown}”.", field=name) from None


def change_settings(*, evaluation: Evaluation, data: QueryDict) -> Outcome:
    try:
        overlap = _whole_number(data, "overlap", "Overlap N")
        minutes = _whole_number(data, "reservation_minutes", "The reservation timeout")
        services.update_assignment_settings(
            evaluation=evaluation,
            overlap=overlap,
            reservation_minutes=minutes,
            order=str(data.get("order", evaluation.order)),
        )
    except services.RatingRefused as refusal:
        return Outcome(False, refusal.message + " Nothing was changed.")
    saved = f"Saved: {overlap} ratings per item, reservations last {minutes} minutes."
    people = evaluation.annotators.count()
    if overlap > people:
        saved += (
            f" Only {people} annotator{'s' if people != 1 else ''} rate{'' if people != 1 else 's'} this "
            f"evaluation: no item can get {overlap} ratings until more are added."
        )
    return Outcome(True, saved)


def section_context(
    *, evaluation: Evaluation, request: HttpRequest | None = None, outcome: Outcome | None = None
) -> dict[str, Any]:
    """The Annotators section: who rates, how far each got, what was skipped or flagged."""
    done, reserved = Assignment.Status.DONE, Assignment.Status.RESERVED
    people = evaluation.annotators.order_by("username").annotate(
        done=Count("assignments", filter=Q(assignments__evaluation=evaluation, assignments__status=done)),
        reserved=Count(
            "assignments", filter=Q(assignments__evaluation=evaluation, assignments__status=reserved)
        ),
        set_aside=Count(
            "assignments",
            filter=Q(assignments__evaluation=evaluation, assignments__status__in=["skipped", "flagged"]),
        ),
    )
    flagged = (
        Assignment.objects.filter(evaluation=evaluation, status=Assignment.Status.FLAGGED)
        .select_related("item", "user")
        .order_by("-finished")[:20]
    )
    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "request": request,
        "people": people,
        "flagged": flagged,
        "outcome": outcome,
        "orders": Evaluation.Order.choices,
    }
