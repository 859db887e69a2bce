"""What an evaluation shows its raters besides the item (RaterView): guidelines, chosen metadata, and
which rubrics ask people for an explanation; read here, saved from the evaluation's rater settings page."""

import json
from dataclasses import dataclass, field

import markdown
import nh3
from django.http import QueryDict
from django.utils.safestring import SafeString, mark_safe

from datasets.models import Item
from evaluations.models import Evaluation
from rubrics.models import RubricVersion

from .models import RaterView

MAX_METADATA_KEYS = 20
MAX_GUIDELINES_CHARS = 50_000


def rater_view_of(evaluation: Evaluation) -> RaterView | None:
    return RaterView.objects.filter(evaluation=evaluation).first()


def people_explain(view: RaterView | None, versions: list[RubricVersion]) -> set[int]:
    """The rubric versions whose rating needs an explanation from people in this evaluation.

    The researcher's choice once saved; before that, a custom rubric that asks for one. Never a built-in
    rubric by default: their "explanation" is for the judge's output (its prompt is unchanged), and
    writing one on every item costs a crowd rater about a fifth of their time.
    """
    if view is not None:
        return {version.pk for version in versions if version.pk in set(view.explain_versions)}
    custom = [version for version in versions if version.rubric.project_id is not None]
    return {version.pk for version in custom if version.explanation_required}


def guidelines_html(text: str) -> SafeString:
    """The guidelines' Markdown as HTML with nothing a page could run: nh3 keeps only harmless tags
    and attributes (no script, style, event handler or javascript: link)."""
    html = markdown.markdown(text, extensions=["sane_lists"])
    return mark_safe(nh3.clean(html, link_rel="noopener noreferrer nofollow"))  # noqa: S308 (cleaned above)


def shown_metadata(item: Item, view: RaterView | None) -> list[tuple[str, str]]:
    """(key, value as text) of the metadata chosen to be shown, in the chosen order; missing ones left out."""
    if view is None or not isinstance(item.metadata, dict):
        return []
    shown = []
    for key in view.metadata_keys:
        if key in item.metadata:
            value = item.metadata[key]
            shown.append((key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))
    return shown


@dataclass
class RaterViewForm:
    guidelines: str = ""
    metadata_keys: list[str] = field(default_factory=list)
    explain: set[int] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)


def form_of(evaluation: Evaluation, versions: list[RubricVersion]) -> RaterViewForm:
    view = rater_view_of(evaluation)
    return RaterViewForm(
        guidelines=view.guidelines if view else "",
        metadata_keys=list(view.metadata_keys) if view else [],
        explain=people_explain(view, versions),
    )


def read_form(evaluation: Evaluation, versions: list[RubricVersion], data: QueryDict) -> RaterViewForm:
    """The submitted settings, each problem named by its field."""
    form = RaterViewForm(guidelines=str(data.get("guidelines", "")).replace("\r\n", "\n"))
    if len(form.guidelines) > MAX_GUIDELINES_CHARS:
        form.errors["guidelines"] = f"Guidelines: at most {MAX_GUIDELINES_CHARS:,} characters."
    raw_keys = str(data.get("metadata_keys", ""))
    keys = [key.strip() for key in raw_keys.replace("\n", ",").split(",") if key.strip()]
    form.metadata_keys = list(dict.fromkeys(keys))
    if len(form.metadata_keys) > MAX_METADATA_KEYS:
        form.errors["metadata_keys"] = f"Metadata shown to raters: at most {MAX_METADATA_KEYS} keys."
    else:
        items = evaluation.items()
        missing = [key for key in form.metadata_keys if not items.filter(metadata__has_key=key).exists()]
        if missing:
            form.errors["metadata_keys"] = (
                "Metadata shown to raters: no item of the dataset has the key "
                + ", ".join(f"“{key}”" for key in missing)
                + " (keys are case-sensitive)."
            )
    known = {str(version.pk): version.pk for version in versions}
    chosen = data.getlist("explain")
    unknown = [value for value in chosen if value not in known]
    if unknown:
        form.errors["explain"] = (
            f"Explanations: rubric version {unknown[0]!r} is not part of this evaluation."
        )
    form.explain = {known[value] for value in chosen if value in known}
    return form


def save_form(evaluation: Evaluation, form: RaterViewForm) -> RaterView:
    """Keep the settings (one row: all or nothing); `form` must have no errors."""
    view, _ = RaterView.objects.update_or_create(
        evaluation=evaluation,
        defaults={
            "guidelines": form.guidelines,
            "metadata_keys": form.metadata_keys,
            "explain_versions": sorted(form.explain),
        },
    )
    return view
