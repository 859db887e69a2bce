"""What the rating pages show: the rubric forms of one item, and a person's history. Read-only."""

import json
import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.core.paginator import Paginator

from datasets.models import Item
from evaluations.models import Evaluation, Rater, Rating
from evaluations.values import value_as_shown
from rubrics.models import Rubric, RubricVersion

from . import rater_view, revisit, services
from .models import Assignment, RaterView, Slot
from .progress import AnnotatorProgress, annotator_progress
from .shortcuts import Shortcuts, shortcuts_of

HISTORY_PAGE_SIZE = 50
LAST_TURNS = 3  # turns of the dialog shown before the rated reply on a phone; the earlier ones fold away


# The rating page's stages. An evaluation that mixes pairwise and other rubrics asks for the
# comparison first, with the dialog up to the prompt and the candidates only as cards A and B;
# the other rubrics, which show the rated response, come after the comparison is made.
COMPARE, REST = "compare", "rest"


@dataclass
class Option:
    value: str  # what the form sends: a scale value; for pairwise the letter as shown (A = left card)
    label: str
    description: str
    key: str  # the keyboard key that picks it
    where: str = ""  # pairwise: the side its card is on, "left" or "right" (top or bottom when stacked)


@dataclass
class RubricForm:
    version: RubricVersion
    options: list[Option]
    selected: str = ""
    explanation: str = ""
    error: str = ""
    explanation_error: str = ""
    show_explanation: bool = False
    explanation_required: bool = False  # for people in this evaluation (rater_view.people_explain)
    sentence: dict | None = None

    @property
    def kind(self) -> str:
        return self.version.rubric.kind

    @property
    def name(self) -> str:
        return f"rubric-{self.version.pk}"


@dataclass
class PageSettings:
    """What shapes one person's rating page besides the item: their shortcuts, the evaluation's rater view."""

    keys: Shortcuts
    view: RaterView | None


def page_settings(*, evaluation: Evaluation, user_id: int) -> PageSettings:
    return PageSettings(keys=shortcuts_of(user_id), view=rater_view.rater_view_of(evaluation))


@dataclass
class Pair:
    left: dict
    right: dict
    left_is: str  # "baseline" or "response"


def typed_values(data: services.FormData) -> dict[str, str]:
    """What the person typed into a form, to put back when a submit is refused."""
    return {
        key: str(data.get(key, ""))
        for key in data
        if key.startswith(("rubric-", "explanation-")) or key == "reason"
    }


def scale_options(version: RubricVersion) -> list[Option]:
    """Scale options in rubric order; the key is the value when it is one digit, else the position; a
    tenth option (10 of a 1-10 scale) takes 0 when no option's value is 0."""
    options = []
    values = [str(entry.get("value", "")) for entry in version.scale]
    for position, entry in enumerate(version.scale, start=1):
        value = str(entry.get("value", ""))
        key = value if len(value) == 1 and value.isdigit() else (str(position) if position <= 9 else "")
        if not key and position == 10 and "0" not in values:  # the keyboard's row: 1 ... 9, 0
            key = "0"
        options.append(
            Option(
                value=value,
                label=str(entry.get("label") or value),
                description=str(entry.get("description", "")),
                key=key,
            )
        )
    return options


# (letter, label, side of its card) of the pairwise options, as the person sees them.
PAIRWISE_LETTERS = [("A", "A (left)", "left"), ("SAME", "SAME", ""), ("B", "B (right)", "right")]


def pairwise_options(version: RubricVersion, keys: Shortcuts | None = None) -> list[Option]:
    """A / SAME / B as the person sees them: A is the left card, whichever response that is for them.

    The form sends these letters; `services.read_answers` turns them into canonical values
    (A = baseline), so nothing in the page tells which card is the rated response.
    """
    by_value = {str(entry.get("value")): entry for entry in version.scale}
    return [
        Option(
            value=letter,
            label=label,
            description=str(by_value.get(letter, {}).get("description", "")),
            key=keys.key(letter) if keys else letter[0].lower(),
            where=where,
        )
        for letter, label, where in PAIRWISE_LETTERS
    ]


def _current_answers(*, evaluation: Evaluation, assignment: Assignment) -> dict[str, str]:
    if assignment.status == Assignment.Status.RESERVED:
        return {}  # nobody is handed an item twice, so a fresh reservation has no answers yet
    rater = Rater.objects.filter(project_id=evaluation.project_id, user_id=assignment.user_id).first()
    if rater is None:
        return {}
    answers: dict[str, str] = {}
    ratings = Rating.objects.filter(evaluation=evaluation, rater=rater, item_id=assignment.item_id)
    for rating in ratings:
        answers[f"rubric-{rating.rubric_version_id}"] = value_as_shown(rating.value, rating.side_shown)
        answers[f"explanation-{rating.rubric_version_id}"] = rating.explanation
    return answers


def rubric_forms(
    *,
    versions: list[RubricVersion],
    assignment: Assignment,
    values: dict[str, str],
    errors: services.AnswerErrors,
    explain: set[int],
    keys: Shortcuts | None = None,
) -> list[RubricForm]:
    """`explain`: the versions whose rating needs an explanation from people; `keys`: their shortcuts."""
    forms = []
    for version in versions:
        pairwise = version.rubric.kind == Rubric.Kind.PAIRWISE
        options = pairwise_options(version, keys) if pairwise else scale_options(version)
        if keys is not None and not keys.on:
            for option in options:
                option.key = ""
        sentence = assignment.item.response if version.target == RubricVersion.Target.SENTENCE else None
        forms.append(
            RubricForm(
                version=version,
                options=options,
                selected=values.get(f"rubric-{version.pk}", ""),
                explanation=values.get(f"explanation-{version.pk}", ""),
                error=errors.fields.get(f"rubric-{version.pk}", ""),
                explanation_error=errors.fields.get(f"explanation-{version.pk}", ""),
                show_explanation=pairwise or version.pk in explain,
                explanation_required=version.pk in explain,
                sentence=sentence,
            )
        )
    return forms


def _pair(item: Item, assignment: Assignment, forms: list[RubricForm]) -> Pair | None:
    if not item.baseline or not any(form.kind == Rubric.Kind.PAIRWISE for form in forms):
        return None
    baseline_left = assignment.left_side == Assignment.Side.BASELINE
    return Pair(
        left=item.baseline if baseline_left else item.response,
        right=item.response if baseline_left else item.baseline,
        left_is=assignment.left_side,
    )


def _stage_forms(
    forms: list[RubricForm], pair: Pair | None, stage: str | None
) -> tuple[str, list[RubricForm], list[RubricForm]]:
    """(stage, forms shown, forms of the other stage carried as hidden fields) for a mixed evaluation.

    Carrying the other stage's answers keeps them through the step: the comparison made, or the
    answers being revised or brought back by an undo.
    """
    pairwise = [form for form in forms if form.kind == Rubric.Kind.PAIRWISE]
    others = [form for form in forms if form.kind != Rubric.Kind.PAIRWISE]
    if pair is None or not pairwise or not others:
        return "", forms, []
    if stage == REST and all(form.selected for form in pairwise):  # the rest only once the comparison is made
        return REST, others, pairwise
    return COMPARE, pairwise, others


def _undo_offer(
    evaluation: Evaluation, assignment: Assignment, last: Assignment | None = None
) -> Assignment | None:
    """The person's last submit, offered for undo while they look at the item handed to them after it.

    `last`: that submit when the caller has just made it."""
    if assignment.status != Assignment.Status.RESERVED or assignment.pk is None:
        return None
    last = last or revisit.last_submit(evaluation=evaluation, user=assignment.user_id)
    if last is None or last.finished is None or last.finished > assignment.started:
        return None
    return last


def rating_context(
    *,
    evaluation: Evaluation,
    assignment: Assignment,
    typed: dict[str, str] | None = None,
    errors: services.AnswerErrors | None = None,
    versions: list[RubricVersion] | None = None,
    notice: str = "",
    stage: str | None = None,
    shown_at: str | None = None,
    progress: AnnotatorProgress | None = None,
    last_submit: Assignment | None = None,
    settings: PageSettings | None = None,
) -> dict[str, Any]:
    """Everything the rating page shows for one item: dialog, pair, its stage's forms, errors, progress.

    `progress` and `last_submit`: the person's progress and the submit they just made, when the caller
    has them (`services.submit_and_next`), so they are not read again.
    """
    versions = versions if versions is not None else evaluation.ordered_versions()
    errors = errors or services.AnswerErrors()
    item = assignment.item
    values = typed if typed is not None else _current_answers(evaluation=evaluation, assignment=assignment)
    settings = settings or page_settings(evaluation=evaluation, user_id=assignment.user_id)
    view, keys = settings.view, settings.keys
    explain = rater_view.people_explain(view, versions)
    forms = rubric_forms(
        versions=versions, assignment=assignment, values=values, errors=errors, explain=explain, keys=keys
    )
    pair = _pair(item, assignment, forms)
    stage, shown, carried = _stage_forms(forms, pair, stage)
    if progress is None:
        found = annotator_progress(user=assignment.user_id, evaluation=evaluation)
        progress = found[0] if found else None
    set_aside_before = assignment.status in {Assignment.Status.SKIPPED, Assignment.Status.FLAGGED}
    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "assignment": assignment,
        "item": item,
        "forms": shown,
        "carried": carried,
        "stage": stage,
        "pair": pair if stage != REST else None,
        "show_target": stage != COMPARE and any(form.kind != Rubric.Kind.PAIRWISE for form in shown),
        "general_errors": errors.general,
        "reason": values.get("reason", "") if typed is not None else "",
        "reason_error": errors.fields.get("reason", ""),
        "notice": notice,
        # Kept through the comparison step and refusals, so seconds_spent covers the whole item.
        "shown_at": shown_at if services.seconds_since(shown_at) is not None else f"{time.time():.1f}",
        "progress": progress,
        "revising": assignment.status == Assignment.Status.DONE,
        "set_aside_before": set_aside_before,
        "no_room": set_aside_before and not revisit.has_room(assignment=assignment),
        "undo": _undo_offer(evaluation, assignment, last_submit),
        "position": position_of(assignment, progress),
        # The dialog's last few turns in full; the earlier ones fold on a phone (rating.js).
        "earlier_turns": item.context[:-LAST_TURNS] if len(item.context) > LAST_TURNS + 1 else [],
        "last_turns": item.context[-LAST_TURNS:] if len(item.context) > LAST_TURNS + 1 else item.context,
        "keys": keys,
        "keys_json": json.dumps(keys.keys if keys.on else {}),
        "metadata": rater_view.shown_metadata(item, view),
        "guidelines": rater_view.guidelines_html(view.guidelines) if view and view.guidelines.strip() else "",
        "guideline_versions": versions,
    }


def position_of(assignment: Assignment, progress: AnnotatorProgress | None = None) -> int | None:
    """The item's neutral place for the person: the n-th item they rated or set aside in this evaluation
    (reservations that ran out unused do not count). Raters see this, never the item's external id (in real
    data it often names the system).

    A reservation is the newest (one at a time), so with `progress` at hand its place needs no query."""
    if assignment.pk is None:
        return None
    if progress is not None and assignment.status == Assignment.Status.RESERVED:
        return progress.done + progress.skipped + 1
    return (
        Assignment.objects.filter(
            evaluation_id=assignment.evaluation_id, user_id=assignment.user_id, pk__lte=assignment.pk
        )
        .exclude(status=Assignment.Status.EXPIRED)
        .count()
    )


@dataclass
class HistoryRow:
    assignment: Assignment
    position: int  # the item's place in the person's queue: what they call it, never its external id
    values: list[tuple[str, str]]  # (criterion, value as the person saw it)
    can_reopen: bool = False  # set aside (or expired) and still open: the person can rate it after all


def history_context(*, evaluation: Evaluation, user: User, page: str | None) -> dict[str, Any]:
    """The person's finished items in this evaluation, newest first, with their own current values."""
    assignments = (
        Assignment.objects.filter(evaluation=evaluation, user=user)
        .exclude(status=Assignment.Status.RESERVED)
        .select_related("item")
        .order_by("-finished", "-pk")
    )
    paginator = Paginator(assignments, HISTORY_PAGE_SIZE)
    page_obj = paginator.get_page(page)
    item_ids = [assignment.item_id for assignment in page_obj]
    ratings = Rating.objects.filter(
        evaluation=evaluation, rater__user=user, rater__project_id=evaluation.project_id, item_id__in=item_ids
    ).select_related("rubric_version")
    by_item: dict[int, list[tuple[str, str]]] = {}
    for rating in sorted(ratings, key=lambda r: r.rubric_version.criterion):
        by_item.setdefault(rating.item_id, []).append(
            (rating.rubric_version.criterion, rating.value_as_shown)
        )
    with_room = set(
        Slot.objects.filter(evaluation=evaluation, item_id__in=item_ids, is_open=True).values_list(
            "item_id", flat=True
        )
    )
    handed = (
        Assignment.objects.filter(evaluation=evaluation, user=user)
        .exclude(status=Assignment.Status.EXPIRED)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    position = {pk: place for place, pk in enumerate(handed, start=1)}
    rows = [
        HistoryRow(
            assignment=a,
            position=position.get(a.pk, 0),
            values=by_item.get(a.item_id, []),
            can_reopen=not a.holds_claim and a.item_id in with_room,
        )
        for a in page_obj
    ]
    return {"evaluation": evaluation, "project": evaluation.project, "rows": rows, "page_obj": page_obj}
