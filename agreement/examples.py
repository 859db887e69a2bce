"""Examples from disagreements: a new rubric version whose prompt shows tune items the judge got wrong.

Candidates are tune-split items (agreement.split) that two or more people rated alike (the same
label, or for likert the same score) and the run did not (likert: its score rounded to the nearest
scale point). The researcher picks some; the new version's prompt carries them, each with the
people's answer, just before the part where the item under judgment is inserted. It becomes a
judge-only version of the evaluation (people never rate it), ready for a judge run whose figures on
the held-out items say whether the examples helped. A held-out item is refused, always.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from agreement.compare import Run, human_raters, reference_versions
from agreement.reading import RubricRatings, load_ratings
from agreement.split import held_out
from agreement.tables import category_codes
from datasets.models import Item
from evaluations.models import Evaluation, JudgeOnlyVersion
from rubrics.models import Rubric, RubricVersion
from rubrics.rendering import PLACEHOLDER_RE, turn_lines
from rubrics.services import VERSION_FIELDS, edit_rubric, free_copy_name, new_version


@dataclass(frozen=True)
class Candidate:
    item: Item
    people: str  # the label all people gave
    model: str  # the run's label


def _labels_by_item(data: RubricRatings, raters: set[int]) -> dict[int, list[int]]:
    codes = category_codes(data.values, data)
    mine = np.isin(data.rater_ids, list(raters)) & (codes >= 0)
    out: dict[int, list[int]] = {}
    for item, code in zip(data.item_ids[mine].tolist(), codes[mine].tolist(), strict=True):
        out.setdefault(item, []).append(code)
    return out


def candidates(*, evaluation: Evaluation, run: Run) -> list[Candidate]:
    """Tune items where the people agree with each other and the run does not, in dataset order."""
    agreed: dict[int, int] = {}
    labels: list[str] = []
    for version in reference_versions(evaluation, run.version):
        data = load_ratings(evaluation=evaluation, version=version)
        labels = data.labels
        humans = human_raters(data)
        for item, codes in _labels_by_item(data, humans).items():
            if len(codes) >= 2 and len(set(codes)) == 1:
                agreed[item] = codes[0]
    judged = _labels_by_item(load_ratings(evaluation=evaluation, version=run.version), {run.rater.pk})
    wrong = np.array(
        sorted(i for i, code in agreed.items() if i in judged and judged[i][0] != code), dtype=np.int64
    )
    tune = wrong[~held_out(evaluation.pk, wrong)]
    items = Item.objects.filter(pk__in=tune.tolist()).order_by("position")
    return [Candidate(item, labels[agreed[item.pk]], labels[judged[item.pk][0]]) for item in items]


def example_text(item: Item, answer: str, kind: str) -> str:
    if kind == "pairwise":
        shown = (
            f"{turn_lines(item.context)}\n[Response A]\n{(item.baseline or {}).get('text', '')}\n"
            f"[Response B]\n{item.response.get('text', '')}"
        )
    else:
        shown = turn_lines([*item.context, item.response])
    return f"{shown}\nAnswer: {answer}"


def with_examples(template: str, examples: list[str]) -> str:
    """The template with an examples block before the paragraph where the item is inserted.

    That paragraph is the one holding the first placeholder; a template without placeholders gets
    the item appended after its last paragraph, so the block goes before that one.
    """
    block = "Examples rated by people:\n\n" + "\n\n".join(
        f"Example {n}:\n{text}" for n, text in enumerate(examples, start=1)
    )
    found = PLACEHOLDER_RE.search(template)
    at = found.start() if found else len(template.rstrip())
    start = template.rfind("\n\n", 0, at)
    start = 0 if start < 0 else start + 2
    return f"{template[:start]}{block}\n\n{template[start:]}"


def _project_copy(source: RubricVersion, evaluation: Evaluation) -> Rubric | None:
    """The project's examples copy of a built-in rubric ("NAME (examples)"), where an earlier version was
    made: the next examples version of the built-in goes there rather than to another copy."""
    if not source.rubric.is_builtin:
        return None
    return (
        Rubric.objects.filter(
            project=evaluation.project,
            copied_from__rubric=source.rubric,
            name__istartswith=f"{source.rubric.name} (examples",
        )
        .order_by("-pk")
        .first()
    )


def make_examples_version(
    *, evaluation: Evaluation, run: Run, item_ids: list[int], created_by: User | None = None
) -> RubricVersion:
    """A new version of the run's rubric with the chosen items as examples, judge-only in `evaluation`."""
    chosen = list(dict.fromkeys(item_ids))
    if not chosen:
        raise ValidationError("Choose at least one item to show as an example.")
    items = {item.pk: item for item in Item.objects.filter(pk__in=chosen, dataset_id=evaluation.dataset_id)}
    unknown = [str(pk) for pk in chosen if pk not in items]
    if unknown:
        raise ValidationError(f"Not items of this evaluation: {', '.join(unknown)}.")
    refused = [
        items[pk].external_id
        for pk, out in zip(chosen, held_out(evaluation.pk, np.array(chosen)), strict=True)
        if out
    ]
    if refused:
        raise ValidationError(f"Held-out items can never be examples: {', '.join(refused)}.")
    allowed = {c.item.pk: c for c in candidates(evaluation=evaluation, run=run)}
    other = [items[pk].external_id for pk in chosen if pk not in allowed]
    if other:
        raise ValidationError(
            f"Not tune items where the people agree and {run.rater.name} did not: {', '.join(other)}."
        )
    source = run.version
    texts = [example_text(allowed[pk].item, allowed[pk].people, source.rubric.kind) for pk in chosen]
    changes = {name: getattr(source, name) for name in VERSION_FIELDS}
    names = ", ".join(items[pk].external_id for pk in chosen)
    changes["prompt_template"] = with_examples(source.prompt_template, texts)
    changes["notes"] = (
        f"{source} with {len(chosen)} examples from disagreements of {run.rater.name} in evaluation "
        f"{evaluation.name} (tune items {names})."
    )
    with transaction.atomic():
        copy = _project_copy(source, evaluation)
        if copy is not None:  # a built-in already copied here: its next version, not a second copy
            version = new_version(copy, start_from=source, **changes)
        else:
            # A built-in's examples go to a project copy named apart from it (and from other copies).
            name = (
                free_copy_name(project=evaluation.project, name=source.rubric.name, label="examples")
                if source.rubric.is_builtin
                else ""
            )
            version = edit_rubric(
                rubric=source.rubric, project=evaluation.project, changes=changes, name=name
            )
        # Its label ("NAME vN + K examples") counts every example its prompt carries, the source's too.
        version.example_count = source.example_count + len(chosen)
        version.save(update_fields=["example_count"])
        JudgeOnlyVersion.objects.create(
            evaluation=evaluation, rubric_version=version, example_items=chosen, created_by=created_by
        )
    return version
