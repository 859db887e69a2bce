"""What the rating pages show: the rubric forms of one item, and a person's history. Read-only."""

import time
from dataclasses import dataclass

from django.core.paginator import Paginator

from evaluations.models import Evaluation, Rater, Rating
from rubrics.models import Rubric, RubricVersion

from . import services
from .models import Assignment

HISTORY_PAGE_SIZE = 50


@dataclass
class Option:
    value: str  # what is stored (canonical for pairwise: A = baseline, B = response)
    label: str
    description: str
    key: str  # the keyboard key that picks it


@dataclass
class RubricForm:
    version: RubricVersion
    options: list[Option]
    selected: str = ""
    explanation: str = ""
    error: str = ""
    explanation_error: str = ""
    show_explanation: bool = False
    sentence: dict | None = None

    @property
    def kind(self) -> str:
        return self.version.rubric.kind

    @property
    def name(self) -> str:
        return f"rubric-{self.version.pk}"


@dataclass
class Pair:
    left: dict
    right: dict
    left_is: str  # "baseline" or "response"


def typed_values(data) -> dict[str, str]:
    """What the person typed into a form, to put back when a submit is refused."""
    return {
        key: str(data.get(key, ""))
        for key in data
        if key.startswith(("rubric-", "explanation-")) or key == "reason"
    }


def scale_options(version: RubricVersion) -> list[Option]:
    """Scale options in rubric order; the key is the value when it is one digit, else the position."""
    options = []
    for position, entry in enumerate(version.scale, start=1):
        value = str(entry.get("value", ""))
        key = value if len(value) == 1 and value.isdigit() else (str(position) if position <= 9 else "")
        options.append(
            Option(
                value=value,
                label=str(entry.get("label") or value),
                description=str(entry.get("description", "")),
                key=key,
            )
        )
    return options


def pairwise_options(version: RubricVersion, left_side: str) -> list[Option]:
    """A / SAME / B as the person sees them: A is the left response, whichever that is for them.

    The stored value stays canonical (A = baseline, B = response).
    """
    by_value = {str(entry.get("value")): entry for entry in version.scale}
    left_value, right_value = ("A", "B") if left_side == "baseline" else ("B", "A")
    shown = [("A", left_value, "a"), ("SAME", "SAME", "s"), ("B", right_value, "b")]
    return [
        Option(
            value=value,
            label={"A": "A (left)", "SAME": "SAME", "B": "B (right)"}[label],
            description=str(by_value.get(label, {}).get("description", "")),
            key=key,
        )
        for label, value, key in shown
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
        answers[f"rubric-{rating.rubric_version_id}"] = rating.value
        answers[f"explanation-{rating.rubric_version_id}"] = rating.explanation
    return answers


def rubric_forms(
    *,
    versions: list[RubricVersion],
    assignment: Assignment,
    values: dict[str, str],
    errors: services.AnswerErrors,
) -> list[RubricForm]:
    forms = []
    for version in versions:
        pairwise = version.rubric.kind == Rubric.Kind.PAIRWISE
        options = pairwise_options(version, assignment.left_side) if pairwise else scale_options(version)
        sentence = assignment.item.response if version.target == RubricVersion.Target.SENTENCE else None
        forms.append(
            RubricForm(
                version=version,
                options=options,
                selected=values.get(f"rubric-{version.pk}", ""),
                explanation=values.get(f"explanation-{version.pk}", ""),
                error=errors.fields.get(f"rubric-{version.pk}", ""),
                explanation_error=errors.fields.get(f"explanation-{version.pk}", ""),
                show_explanation=pairwise or version.explanation_required,
                sentence=sentence,
            )
        )
    return forms


def rating_context(
    *,
    evaluation: Evaluation,
    assignment: Assignment,
    typed: dict[str, str] | None = None,
    errors: services.AnswerErrors | None = None,
    versions: list[RubricVersion] | None = None,
    notice: str = "",
) -> dict:
    """Everything the rating page needs for one item: dialog, pair, one form per rubric, errors."""
    versions = versions if versions is not None else services.evaluation_versions(evaluation)
    errors = errors or services.AnswerErrors()
    item = assignment.item
    values = typed if typed is not None else _current_answers(evaluation=evaluation, assignment=assignment)
    forms = rubric_forms(versions=versions, assignment=assignment, values=values, errors=errors)
    pair = None
    if item.baseline and any(form.kind == Rubric.Kind.PAIRWISE for form in forms):
        baseline_left = assignment.left_side == Assignment.Side.BASELINE
        pair = Pair(
            left=item.baseline if baseline_left else item.response,
            right=item.response if baseline_left else item.baseline,
            left_is=assignment.left_side,
        )
    done = Assignment.objects.filter(
        evaluation=evaluation, user_id=assignment.user_id, status=Assignment.Status.DONE
    ).count()
    return {
        "evaluation": evaluation,
        "project": evaluation.project,
        "assignment": assignment,
        "item": item,
        "forms": forms,
        "pair": pair,
        "show_target": any(form.kind != Rubric.Kind.PAIRWISE for form in forms),
        "general_errors": errors.general,
        "reason": values.get("reason", "") if typed is not None else "",
        "reason_error": errors.fields.get("reason", ""),
        "notice": notice,
        "shown_at": f"{time.time():.1f}",
        "done_count": done,
        "revising": assignment.status == Assignment.Status.DONE,
    }


@dataclass
class HistoryRow:
    assignment: Assignment
    values: list[tuple[str, str]]  # (criterion, value as the person saw it)


def _shown_value(rating: Rating) -> str:
    """A pairwise value as the person saw it (A = their left), others as stored."""
    if rating.side_shown != "response" or rating.value not in {"A", "B"}:
        return rating.value
    return {"A": "B", "B": "A"}[rating.value]


def history_context(*, evaluation: Evaluation, user, page: str | None) -> dict:
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
        by_item.setdefault(rating.item_id, []).append((rating.rubric_version.criterion, _shown_value(rating)))
    rows = [HistoryRow(assignment=a, values=by_item.get(a.item_id, [])) for a in page_obj]
    return {"evaluation": evaluation, "project": evaluation.project, "rows": rows, "page_obj": page_obj}
