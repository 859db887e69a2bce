"""Annotators rate items here; researchers manage an evaluation's annotators from its page."""

from typing import Any, TypedDict

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse, reverse_lazy
from django.utils import timezone
from django.views import csrf as csrf_views
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, push_url, reswap, retarget
from django_stubs_ext import WithAnnotations

from config.htmx import SignedInHtmxRequest
from datasets.models import Item
from evaluations.models import Evaluation, Rater
from projects.access import ANNOTATOR, get_evaluation_for
from rubrics.models import Rubric, RubricVersion

from . import annotators, pages, rater_view, revisit, services, shortcuts
from .models import Assignment, KeyboardSettings, RaterView, pairwise_left_side
from .progress import annotator_progress

RATE_TEMPLATE = "rating/rate_item.html"
FORMS_REGION = "rating-forms"  # the element (and partial) a refused form is put back into


def _assignment(evaluation: Evaluation, item_id: int, user: User) -> Assignment:
    return get_object_or_404(
        Assignment.objects.select_related("item"), evaluation=evaluation, item_id=item_id, user=user
    )


class _RaterOf(TypedDict):
    rater_id: int | None
    keys_on: bool | None
    keys_map: dict | None
    view_pk: int | None
    view_guidelines: str | None
    view_metadata: list | None
    view_explain: list | None


def _own_assignment(
    evaluation: Evaluation, item_id: int, user: User
) -> "WithAnnotations[Assignment, _RaterOf] | None":
    """The person's assignment of the item, with the item, (as `rater_id`) their rater in the project, and
    what shapes their page (`_page_settings`), all in one statement: this is the submit's hot path."""
    rater = Rater.objects.filter(project_id=evaluation.project_id, user=OuterRef("user_id")).values("pk")[:1]
    keys = KeyboardSettings.objects.filter(user_id=OuterRef("user_id"))
    view = RaterView.objects.filter(evaluation_id=OuterRef("evaluation_id"))
    return (
        Assignment.objects.select_related("item")
        .annotate(
            rater_id=Subquery(rater),
            keys_on=Subquery(keys.values("shortcuts_on")[:1]),
            keys_map=Subquery(keys.values("keys")[:1]),
            view_pk=Subquery(view.values("pk")[:1]),
            view_guidelines=Subquery(view.values("guidelines")[:1]),
            view_metadata=Subquery(view.values("metadata_keys")[:1]),
            view_explain=Subquery(view.values("explain_versions")[:1]),
        )
        .filter(evaluation=evaluation, item_id=item_id, user=user)
        .first()
    )


def _page_settings(held: "WithAnnotations[Assignment, _RaterOf]") -> pages.PageSettings:
    """`pages.page_settings` from what `_own_assignment` read along with the assignment."""
    keys = shortcuts.Shortcuts(on=True, keys=dict(shortcuts.DEFAULT_KEYS))
    if held.keys_on is not None:
        keys = shortcuts.Shortcuts(on=held.keys_on, keys={**keys.keys, **shortcuts.known_keys(held.keys_map)})
    view = None
    if held.view_pk is not None:
        view = RaterView(
            pk=held.view_pk,
            evaluation_id=held.evaluation_id,
            guidelines=held.view_guidelines or "",
            metadata_keys=held.view_metadata or [],
            explain_versions=held.view_explain or [],
        )
    return pages.PageSettings(keys=keys, view=view)


def evaluation_page_url(evaluation: Evaluation) -> str:
    try:
        return reverse("evaluation_detail", args=[evaluation.project.slug, evaluation.pk])
    except NoReverseMatch:  # the evaluation page belongs to another app; tolerate its absence
        return reverse("project_detail", args=[evaluation.project.slug])


# --- annotators ------------------------------------------------------------------------------


@require_GET
@login_required
def annotator_home(request: SignedInHtmxRequest) -> HttpResponse:
    return _home(request, shortcuts.shortcuts_of(request.user))


def _home(
    request: SignedInHtmxRequest,
    keys: shortcuts.Shortcuts,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "progress": annotator_progress(user=request.user),
        "keys": keys,
        "actions": [
            (action, label, keys.keys[action], (errors or {}).get(f"key-{action}", ""))
            for action, label in shortcuts.ACTIONS
        ],
    }
    return render(request, "rating/annotator_home.html", context, status=status)


@require_POST
@login_required
def keyboard_settings(request: SignedInHtmxRequest) -> HttpResponse:
    """Turn the person's single-key shortcuts on or off, or rebind them (WCAG 2.1.4)."""
    on = request.POST.get("shortcuts_on") == "on"
    keys, errors = shortcuts.read_keys(request.POST)
    if errors:  # nothing kept; the form comes back with what was typed and each problem beside its field
        typed = {action: str(request.POST.get(f"key-{action}", "")) for action in shortcuts.DEFAULT_KEYS}
        return _home(request, shortcuts.Shortcuts(on=on, keys=typed), errors, status=400)
    shortcuts.save_shortcuts(user=request.user, on=on, keys=keys)
    state = "on" if on else "off"
    messages.success(request, f"Keyboard shortcuts saved: single-key shortcuts are {state}.")
    return redirect(reverse("annotator_home") + "#keyboard")


@require_GET
@login_required
def rate_next(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk, role=ANNOTATOR)
    assignment = services.next_assignment(evaluation=evaluation, user=request.user)
    if assignment is None:
        messages.success(request, nothing_left(evaluation, request.user))
        return redirect("annotator_home")
    return redirect("rate_item", slug=slug, pk=pk, item_id=assignment.item_id)


def nothing_left(evaluation: Evaluation, user: User) -> str:
    """What the person is told when the queue has nothing more for them, with their true counts."""
    (progress,) = annotator_progress(user=user, evaluation=evaluation)
    text = f"Nothing left for you to rate in “{evaluation.name}” now: you rated {progress.done}"
    if progress.skipped:
        text += f" and set aside {progress.skipped} (reopen them from History)"
    return text + ". Thank you!"


@require_GET
@login_required
def rate_item(request: SignedInHtmxRequest, slug: str, pk: int, item_id: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk, role=ANNOTATOR)
    assignment = _assignment(evaluation, item_id, request.user)
    # ?stage=rest opens the other rubrics of an item whose comparison is already made (revising).
    stage, typed = request.GET.get("stage"), None
    kept = _kept_comparison(request, assignment)
    if kept is not None and stage is None:  # a reload after step 1: step 2, with the comparison made
        stage, typed = pages.REST, kept
    context = pages.rating_context(evaluation=evaluation, assignment=assignment, stage=stage, typed=typed)
    return render(request, RATE_TEMPLATE + ("#panel" if request.htmx else ""), context)


STEP_ONE = "rating_step_one"  # the session key of the comparison made in step 1, until the item is saved


def _keep_comparison(request: SignedInHtmxRequest, assignment: Assignment, typed: dict[str, str]) -> None:
    request.session[STEP_ONE] = {
        "assignment": assignment.pk,
        "typed": {key: value for key, value in typed.items() if key != "reason"},
    }


def _kept_comparison(request: SignedInHtmxRequest, assignment: Assignment) -> dict[str, str] | None:
    """The comparison made in step 1 of this reservation, so a reload opens step 2 rather than losing it."""
    kept = request.session.get(STEP_ONE)
    if not isinstance(kept, dict) or kept.get("assignment") != assignment.pk:
        return None
    if assignment.status != Assignment.Status.RESERVED:
        return None
    typed = kept.get("typed")
    return {str(key): str(value) for key, value in typed.items()} if isinstance(typed, dict) else None


def _after_rating(
    request: SignedInHtmxRequest,
    evaluation: Evaluation,
    notice: str,
    versions: list[RubricVersion] | None = None,
) -> HttpResponse:
    """The next item: swapped in place for htmx, a redirect otherwise."""
    if not request.htmx:
        messages.success(request, notice)
        return redirect("rate_next", slug=evaluation.project.slug, pk=evaluation.pk)
    assignment = services.next_assignment(evaluation=evaluation, user=request.user)
    if assignment is None:
        messages.success(request, f"{notice} {nothing_left(evaluation, request.user)}")
        return HttpResponseClientRedirect(reverse("annotator_home"))
    context = pages.rating_context(
        evaluation=evaluation, assignment=assignment, notice=notice, versions=versions
    )
    response = render(request, RATE_TEMPLATE + "#panel", context)
    return push_url(
        response, reverse("rate_item", args=[evaluation.project.slug, evaluation.pk, assignment.item_id])
    )


def _refused(
    request: SignedInHtmxRequest,
    evaluation: Evaluation,
    assignment: Assignment,
    errors: services.AnswerErrors,
    *,
    status: int,
    stage: str | None = None,
    **extra: Any,
) -> HttpResponse:
    """The page again with the problems and the answers as the person typed them (and when the item was
    shown, so its time still counts); for htmx only the forms, put back in place of the old ones.

    The dialog, header and scroll position stay; rating.js swaps this 4xx answer in and focuses
    the first unanswered rubric.
    """
    context = pages.rating_context(
        evaluation=evaluation,
        assignment=assignment,
        typed=pages.typed_values(request.POST),
        shown_at=request.POST.get("shown_at"),
        errors=errors,
        stage=stage or request.POST.get("stage") or pages.REST,
    )
    context.update(unsaved=True, **extra)  # what was typed came back unsaved: the page asks before it is left
    if not request.htmx:
        return render(request, RATE_TEMPLATE, context, status=status)
    response = render(request, f"{RATE_TEMPLATE}#{FORMS_REGION}", context, status=status)
    return reswap(retarget(response, f"#{FORMS_REGION}"), "outerHTML")


def _unsaved_assignment(evaluation: Evaluation, item: Item, user: User) -> Assignment:
    """An assignment shown but never saved, to put a refused form back on the screen."""
    return Assignment(
        evaluation=evaluation,
        item=item,
        user=user,
        status=Assignment.Status.EXPIRED,
        left_side=pairwise_left_side(user_id=user.pk, item_id=item.pk),
    )


def _not_yours(request: SignedInHtmxRequest, evaluation: Evaluation, item_id: int) -> HttpResponse:
    """A submit for an item of the evaluation the person does not hold: refused, their answers shown back."""
    item = get_object_or_404(Item, pk=item_id, dataset_id=evaluation.dataset_id)
    unsaved = _unsaved_assignment(evaluation, item, request.user)
    errors = services.AnswerErrors(
        general=[
            "This item is not reserved for you or assigned to you, so nothing was saved. "
            "Use “Next item” to get one."
        ]
    )
    return _refused(request, evaluation, unsaved, errors, status=403, not_yours=True)


@require_POST
@login_required
def rate_submit(request: SignedInHtmxRequest, slug: str, pk: int, item_id: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk, role=ANNOTATOR)
    assignment = _own_assignment(evaluation, item_id, request.user)
    if assignment is None:
        return _not_yours(request, evaluation, item_id)
    versions = evaluation.ordered_versions()
    typed = pages.typed_values(request.POST)
    comparing = request.POST.get("stage") == pages.COMPARE
    settings = _page_settings(assignment)
    explain = rater_view.people_explain(settings.view, versions)
    answers, errors = services.read_answers(
        versions=versions, data=request.POST, left_side=assignment.left_side, explain=explain
    )
    if comparing:  # the first of two stages: only the comparison is checked before the other rubrics
        pairwise = {str(version.pk) for version in versions if version.kind == Rubric.Kind.PAIRWISE}
        errors.fields = {
            key: text for key, text in errors.fields.items() if key.partition("-")[2] in pairwise
        }
    if errors:
        stage = _stage_of(errors, versions)
        return _refused(request, evaluation, assignment, errors, status=400, stage=stage)
    if comparing:
        _keep_comparison(request, assignment, typed)
        context = pages.rating_context(
            evaluation=evaluation,
            assignment=assignment,
            typed=typed,
            shown_at=request.POST.get("shown_at"),
            stage=pages.REST,
        )
        return render(request, RATE_TEMPLATE + ("#panel" if request.htmx else ""), context)
    request.session.pop(STEP_ONE, None)
    was_done = assignment.status == Assignment.Status.DONE
    seconds_spent = services.seconds_since(request.POST.get("shown_at"))
    try:
        if request.htmx and not was_done:  # the usual submit: saved and the next item in one transaction
            return _submit_and_next(
                request, evaluation, assignment, answers, seconds_spent, versions, settings
            )
        result = services.submit_ratings(
            evaluation=evaluation,
            item_id=item_id,
            user=request.user,
            answers=answers,
            seconds_spent=seconds_spent,
            rater_id=assignment.rater_id,
            held=assignment,
        )
    except services.RatingRefused as refusal:
        errors = services.AnswerErrors(general=[refusal.message])
        return _refused(request, evaluation, assignment, errors, status=409, stage=pages.REST)
    name = _neutral_name(assignment)
    if was_done:
        notice = (
            f"Revised {name}."
            if result.revised
            else f"{name.capitalize()} was already saved with these answers."
        )
        messages.success(request, notice)
        history = reverse("rate_history", args=[slug, pk])
        return HttpResponseClientRedirect(history) if request.htmx else redirect(history)
    return _after_rating(request, evaluation, f"Saved {name}.", versions=versions)


def _submit_and_next(
    request: SignedInHtmxRequest,
    evaluation: Evaluation,
    held: "WithAnnotations[Assignment, _RaterOf]",
    answers: dict[int, services.Answer],
    seconds_spent: float | None,
    versions: list[RubricVersion],
    settings: pages.PageSettings,
) -> HttpResponse:
    """Save the answers and answer with the next item's panel, as `_after_rating` does after a submit."""
    now = timezone.now()
    _result, assignment, progress = services.submit_and_next(
        evaluation=evaluation,
        held=held,
        user=request.user,
        answers=answers,
        seconds_spent=seconds_spent,
        rater_id=held.rater_id,
        now=now,
    )
    # The held item was the newest the person rated or set aside (a late submit: their place is read).
    place = progress.done + progress.skipped if held.status == Assignment.Status.RESERVED else None
    notice = f"Saved item {place}." if place else f"Saved {_neutral_name(held)}."
    if assignment is None:
        messages.success(request, f"{notice} {nothing_left(evaluation, request.user)}")
        return HttpResponseClientRedirect(reverse("annotator_home"))
    held.status, held.finished = Assignment.Status.DONE, now
    context = pages.rating_context(
        evaluation=evaluation,
        assignment=assignment,
        notice=notice,
        versions=versions,
        progress=progress,
        last_submit=held,
        settings=settings,
    )
    response = render(request, RATE_TEMPLATE + "#panel", context)
    return push_url(
        response, reverse("rate_item", args=[evaluation.project.slug, evaluation.pk, assignment.item_id])
    )


def _neutral_name(assignment: Assignment) -> str:
    """How a rater is told which item: its place in their queue, never its external id."""
    position = pages.position_of(assignment)
    return f"item {position}" if position else "the item"


def _stage_of(errors: services.AnswerErrors, versions: list[RubricVersion]) -> str:
    """The stage that shows the fields in error: the comparison when a pairwise field is wrong."""
    pairwise = {str(version.pk) for version in versions if version.kind == Rubric.Kind.PAIRWISE}
    return pages.COMPARE if any(key.partition("-")[2] in pairwise for key in errors.fields) else pages.REST


@require_POST
@login_required
def rate_undo(request: SignedInHtmxRequest, slug: str, pk: int, item_id: int) -> HttpResponse:
    """Take back the last submit: its answers come back in the form, unsaved, for the person to change."""
    evaluation = get_evaluation_for(request.user, slug, pk, role=ANNOTATOR)
    try:
        assignment, typed = revisit.undo_submit(evaluation=evaluation, item_id=item_id, user=request.user)
    except services.RatingRefused as refusal:
        messages.error(request, refusal.message)
        history = reverse("rate_history", args=[slug, pk])
        return HttpResponseClientRedirect(history) if request.htmx else redirect(history)
    name = _neutral_name(assignment)
    notice = (
        f"Undone: {name} is yours to rate again; give a reason again to skip it."
        if "reason" in typed
        else f"Undone: your answers to {name} are back in the form; submit to save them."
    )
    context = pages.rating_context(evaluation=evaluation, assignment=assignment, typed=typed, notice=notice)
    context["unsaved"] = True  # the page asks before it is left with them
    response = render(request, RATE_TEMPLATE + ("#panel" if request.htmx else ""), context)
    return push_url(response, reverse("rate_item", args=[slug, pk, item_id])) if request.htmx else response


@require_POST
@login_required
def rate_set_aside(request: SignedInHtmxRequest, slug: str, pk: int, item_id: int) -> HttpResponse:
    """Skip an item, or flag it as a problem, with a reason."""
    evaluation = get_evaluation_for(request.user, slug, pk, role=ANNOTATOR)
    assignment = _assignment(evaluation, item_id, request.user)
    flag = request.POST.get("action") == "flag"
    try:
        services.set_aside(
            evaluation=evaluation,
            item_id=item_id,
            user=request.user,
            reason=request.POST.get("reason", ""),
            flag=flag,
            seconds_spent=services.seconds_since(request.POST.get("shown_at")),
        )
    except services.RatingRefused as refusal:
        errors = services.AnswerErrors(
            fields={"reason": refusal.message} if refusal.field else {},
            general=[] if refusal.field else [refusal.message],
        )
        return _refused(request, evaluation, assignment, errors, status=400)
    what = "Flagged" if flag else "Skipped"
    return _after_rating(request, evaluation, f"{what} {_neutral_name(assignment)}.")


@require_GET
@login_required
def rate_history(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk, role=ANNOTATOR)
    context = pages.history_context(evaluation=evaluation, user=request.user, page=request.GET.get("page"))
    return render(request, "rating/history.html", context)


# --- researchers: what raters see, and the Annotators section of the evaluation page ---------


@require_http_methods(["GET", "POST"])
@login_required
def rater_view_settings(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    """The evaluation's settings for its raters: guidelines, metadata shown, explanations required."""
    evaluation = get_evaluation_for(request.user, slug, pk)
    versions = evaluation.ordered_versions()
    status = 200
    if request.method == "POST":
        form = rater_view.read_form(evaluation, versions, request.POST)
        if not form.errors:
            rater_view.save_form(evaluation, form)
            messages.success(request, "Saved what raters see.")
            return redirect("rater_view_settings", slug=slug, pk=pk)
        status = 400
    else:
        form = rater_view.form_of(evaluation, versions)
    context = {
        "evaluation": evaluation,
        "project": evaluation.project,
        "form": form,
        "versions": versions,
        "evaluation_url": evaluation_page_url(evaluation),
    }
    return render(request, "rating/rater_view_settings.html", context, status=status)


def _section_response(request: SignedInHtmxRequest, evaluation: Evaluation, **extra: Any) -> HttpResponse:
    if request.htmx:
        context = annotators.section_context(evaluation=evaluation, request=request, **extra)
        return render(request, "rating/_evaluation_annotators.html", context)
    return redirect(evaluation_page_url(evaluation) + "#evaluation_annotators")


def _report(request: SignedInHtmxRequest, outcome: annotators.Outcome) -> None:
    (messages.success if outcome.ok else messages.error)(request, outcome.message)


@require_POST
@login_required
def annotators_add(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    outcome = annotators.add_existing(
        evaluation=evaluation, usernames=request.POST.get("usernames", ""), added_by=request.user
    )
    if not request.htmx:
        _report(request, outcome)
    return _section_response(request, evaluation, outcome=outcome)


@require_POST
@login_required
def annotator_create(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    outcome = annotators.create_account(
        evaluation=evaluation,
        username=request.POST.get("username", ""),
        email=request.POST.get("email", ""),
        link_base=request.build_absolute_uri("/"),
        added_by=request.user,
    )
    if not request.htmx:
        _report(request, outcome)
    return _section_response(request, evaluation, outcome=outcome)


@require_POST
@login_required
def annotator_remove(request: SignedInHtmxRequest, slug: str, pk: int, user_id: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    outcome = annotators.remove(evaluation=evaluation, user_id=user_id)
    if not request.htmx:
        _report(request, outcome)
    return _section_response(request, evaluation, outcome=outcome)


@require_POST
@login_required
def assignment_settings(request: SignedInHtmxRequest, slug: str, pk: int) -> HttpResponse:
    evaluation = get_evaluation_for(request.user, slug, pk)
    outcome = annotators.change_settings(evaluation=evaluation, data=request.POST)
    if not request.htmx:
        _report(request, outcome)
    evaluation.refresh_from_db()
    return _section_response(request, evaluation, outcome=outcome)


# A new annotator chooses a password through Django's own one-time token machinery.
set_password = auth_views.PasswordResetConfirmView.as_view(
    template_name="rating/set_password.html", success_url=reverse_lazy("set_password_done")
)
set_password_done = auth_views.PasswordResetCompleteView.as_view(
    template_name="rating/set_password_done.html"
)


def csrf_failure(request: SignedInHtmxRequest, reason: str = "") -> HttpResponse:
    """CSRF refusals: a rating submit from one of Concord's own pages gets its form back with what was typed;
    anything else, Django's page.

    Set as CSRF_FAILURE_VIEW. The form it returns carries a fresh token, so submitting again works. A
    submit from another site gets no form back: else that site could fill in an annotator's answers and
    leave them one Enter away from being saved.
    """
    match = request.resolver_match
    if (
        match is not None
        and match.url_name == "rate_submit"
        and request.user.is_authenticated
        and _sent_from_our_pages(request)
    ):
        try:
            evaluation = get_evaluation_for(
                request.user, match.kwargs["slug"], match.kwargs["pk"], role=ANNOTATOR
            )
        except (Http404, PermissionDenied):
            return csrf_views.csrf_failure(request, reason=reason)
        assignment = _own_assignment(evaluation, match.kwargs["item_id"], request.user)
        if assignment is not None:
            errors = services.AnswerErrors(
                general=[
                    "Not saved: the form's security token was missing or out of date (perhaps you logged out "
                    "in another tab). Your answers are still below; submit again."
                ]
            )
            return _refused(request, evaluation, assignment, errors, status=403)
    return csrf_views.csrf_failure(request, reason=reason)


def _sent_from_our_pages(request: HttpRequest) -> bool:
    """Whether the browser says this request came from a page of this site (Sec-Fetch-Site, or an Origin
    header where a browser sends no Sec-Fetch-Site)."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site == "same-origin"
    return request.headers.get("Origin") == f"{request.scheme}://{request.get_host()}"
