"""Creating evaluations: pick a dataset and rubric versions, check the items fit, then store.

`create_evaluation` refuses, before anything is written, when an item lacks what a rubric needs
(or, asked to exclude such items, leaves them out of the evaluation and says why):

- every rubric rates the item's response, so every item needs a response (an empty text is an
  empty answer and counts; only a missing one lacks);
- a pairwise rubric (and any template naming `{baseline}` / `{baseline_model_response}`) needs a
  baseline on every item;
- a template that names any other placeholder (`{topic}`, `{{Topic}}`, `{metadata.topic}`; the
  syntax of rubrics.rendering) that is not one of rendering's built-in variables names a metadata
  key, which every item must then have (names match case-insensitively, as in rendering).

The message names the rubric version, what is missing, how many items lack it and the first ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from datasets.models import Dataset, Item
from projects.models import Project
from rubrics.models import Rubric, RubricVersion
from rubrics.rendering import BASELINE_VARIABLES, BUILTIN_VARIABLES, METADATA_PREFIX, placeholders

from .models import Evaluation, ExcludedItem

SHOW_IDS = 5


def template_placeholders(template: str) -> set[str]:
    """Lower-cased names of the placeholders a prompt template uses (rendering's own syntax)."""
    return {name.lower() for name, _line, _written in placeholders(template)}


def metadata_keys_needed(version: RubricVersion) -> set[str]:
    """Lower-cased metadata keys a rubric version's template names: `{topic}` or `{metadata.topic}`."""
    keys = set()
    for name in template_placeholders(version.prompt_template):
        if name.startswith(METADATA_PREFIX):
            keys.add(name.removeprefix(METADATA_PREFIX))
        elif name not in BUILTIN_VARIABLES:
            keys.add(name)
    return keys


def needs_baseline(version: RubricVersion) -> bool:
    return version.requires_baseline or bool(
        template_placeholders(version.prompt_template) & BASELINE_VARIABLES
    )


@dataclass
class _Lack:
    what: str
    count: int
    first_ids: list[str]


def _missing(field_name: str) -> Q:
    """Items whose `<field>` or its text is missing. An empty text is an (empty) answer, not a lack."""
    return Q(**{f"{field_name}__isnull": True}) | Q(**{f"{field_name}__text__isnull": True})


def _lack_from_query(dataset: Dataset, condition: Q, what: str) -> _Lack | None:
    lacking = Item.objects.filter(dataset=dataset).filter(condition)
    first_ids = list(lacking.order_by("position").values_list("external_id", flat=True)[:SHOW_IDS])
    if not first_ids:
        return None
    return _Lack(what, lacking.count(), first_ids)


def _lacks_metadata(dataset: Dataset, keys: set[str]) -> list[_Lack]:
    """Items without each metadata key, compared case-insensitively (one pass over the metadata)."""
    counts = dict.fromkeys(keys, 0)
    first: dict[str, list[str]] = {key: [] for key in keys}
    rows = Item.objects.filter(dataset=dataset).order_by("position").values_list("external_id", "metadata")
    for external_id, metadata in rows.iterator(chunk_size=5000):
        present = {str(key).lower() for key in metadata} if isinstance(metadata, dict) else set()
        for key in keys - present:
            counts[key] += 1
            if len(first[key]) < SHOW_IDS:
                first[key].append(external_id)
    return [_Lack(f"metadata key '{key}'", counts[key], first[key]) for key in sorted(keys) if counts[key]]


def item_problems(dataset: Dataset, versions: Iterable[RubricVersion]) -> list[str]:
    """Why the dataset's items do not fit the rubric versions; empty when they all fit."""
    problems = []
    total = Item.objects.filter(dataset=dataset).count()
    if total == 0:
        return [f"Dataset '{dataset.name}' has no items."]
    lacks_response = _lack_from_query(dataset, _missing("response"), "a response")
    lacks_baseline = _lack_from_query(dataset, _missing("baseline"), "a baseline")
    for version in versions:
        lacks = [lacks_response]
        if needs_baseline(version):
            lacks.append(lacks_baseline)
        keys = metadata_keys_needed(version)
        if keys:
            lacks.extend(_lacks_metadata(dataset, keys))
        for lack in filter(None, lacks):
            reason = f" ({version.kind})" if lack.what == "a baseline" and version.requires_baseline else ""
            problems.append(
                f"Rubric {version}{reason} needs {lack.what} on every item: {lack.count} of {total} items "
                f"lack it (first: {', '.join(lack.first_ids)})."
            )
    return problems


def lacking_items(dataset: Dataset, versions: Iterable[RubricVersion]) -> dict[int, str]:
    """{item pk: what it lacks and which rubric needs it} for the items that do not fit every version."""
    lacking: dict[int, str] = {}

    def add(pks: Iterable[int], reason: str) -> None:
        for pk in pks:
            lacking.setdefault(pk, reason)

    items = Item.objects.filter(dataset=dataset)
    for version in versions:
        add(items.filter(_missing("response")).values_list("pk", flat=True), f"no response ({version})")
        if needs_baseline(version):
            add(items.filter(_missing("baseline")).values_list("pk", flat=True), f"no baseline ({version})")
        keys = metadata_keys_needed(version)
        if keys:
            rows = items.values_list("pk", "metadata").iterator(chunk_size=5000)
            for pk, metadata in rows:
                present = {str(key).lower() for key in metadata} if isinstance(metadata, dict) else set()
                missing = sorted(keys - present)
                if missing:
                    add([pk], f"no metadata key '{missing[0]}' ({version})")
    return lacking


def visible_rubrics(project: Project) -> QuerySet[Rubric]:
    """Rubrics a project can use: its own and the built-ins."""
    return Rubric.objects.filter(Q(project=project) | Q(project__isnull=True))


def resolve_rubric_version(project: Project, spec: str) -> RubricVersion:
    """`NAME` (latest version) or `NAME@VERSION` among the project's and the built-in rubrics.

    A project's own rubric wins over a built-in of the same name (a project-owned copy).
    Raises ValidationError naming what was not found.
    """
    name, _, number = spec.strip().rpartition("@") if "@" in spec else (spec.strip(), "", "")
    name = name.strip()
    candidates = sorted(
        visible_rubrics(project).filter(name=name), key=lambda rubric: rubric.project_id is None
    )
    if not candidates:
        raise ValidationError(f"No rubric named '{name}' in project '{project.slug}' or among the built-ins.")
    rubric = candidates[0]
    if not number:
        version = rubric.latest_version()
        if version is None:
            raise ValidationError(f"Rubric '{name}' has no version yet.")
        return version
    if not number.strip().isdigit():
        raise ValidationError(f"'{spec}': the version after @ must be a whole number, e.g. '{name}@2'.")
    version = rubric.versions.filter(number=int(number)).first()
    if version is None:
        known = ", ".join(str(n) for n in rubric.versions.values_list("number", flat=True))
        raise ValidationError(f"Rubric '{name}' has no version {number} (versions: {known or 'none'}).")
    return version


def _check_choices(
    *, project: Project, dataset: Dataset, versions: Sequence[RubricVersion], name: str, overlap: int
) -> list[str]:
    problems = []
    if not name.strip():
        problems.append("The evaluation needs a name.")
    elif Evaluation.objects.filter(project=project, name=name.strip()).exists():
        problems.append(f"Project '{project.slug}' already has an evaluation named '{name.strip()}'.")
    if dataset.project_id != project.pk:
        problems.append(f"Dataset '{dataset.name}' belongs to another project.")
    if overlap < 1:
        problems.append(f"Overlap must be at least 1, not {overlap}.")
    if not versions:
        problems.append("Pick at least one rubric version.")
    seen: dict[int, RubricVersion] = {}
    for version in versions:
        rubric = version.rubric
        if rubric.project_id not in (None, project.pk):
            problems.append(f"Rubric {version} belongs to another project.")
        if rubric.pk in seen and seen[rubric.pk].pk != version.pk:
            problems.append(
                f"Pick one version of rubric '{rubric.name}', not {seen[rubric.pk]} and {version}."
            )
        seen[rubric.pk] = version
    return problems


def create_evaluation(
    *,
    project: Project,
    dataset: Dataset,
    rubric_versions: Sequence[RubricVersion],
    name: str,
    overlap: int = 3,
    created_by: User | None = None,
    order: str = Evaluation.Order.DATASET,
    description: str = "",
    exclude_lacking: bool = False,
) -> Evaluation:
    """Create an evaluation of `dataset` under `rubric_versions` once every item fits every rubric.

    With `exclude_lacking`, items that lack what a rubric needs (e.g. a baseline) are left out of
    the evaluation (stored as ExcludedItem rows with the reason) instead of refusing it; it is still
    refused when no item is left.

    Raises django.core.exceptions.ValidationError listing every problem (the evaluation's name,
    dataset, rubric versions, overlap, and which items lack what a rubric needs); nothing is stored then.
    """
    versions = list(dict.fromkeys(rubric_versions))
    problems = _check_choices(project=project, dataset=dataset, versions=versions, name=name, overlap=overlap)
    if order not in Evaluation.Order.values:
        problems.append(f"Order must be one of {', '.join(Evaluation.Order.values)}, not '{order}'.")
    excluded: dict[int, str] = {}
    if not problems:
        problems = item_problems(dataset, versions)
        if problems and exclude_lacking and Item.objects.filter(dataset=dataset).exists():
            excluded = lacking_items(dataset, versions)
            left = Item.objects.filter(dataset=dataset).count() - len(excluded)
            problems = [] if left > 0 else ["No item would be left: every item lacks something.", *problems]
    if problems:
        raise ValidationError(problems)
    try:
        with transaction.atomic():
            evaluation = Evaluation.objects.create(
                project=project,
                dataset=dataset,
                name=name.strip(),
                overlap=overlap,
                order=order,
                description=description,
                created_by=created_by,
            )
            evaluation.rubric_versions.set(versions)
            ExcludedItem.objects.bulk_create(
                (ExcludedItem(evaluation=evaluation, item_id=pk, reason=why) for pk, why in excluded.items()),
                batch_size=5000,
            )
    except IntegrityError:  # a concurrent create with the same name
        raise ValidationError(
            f"Project '{project.slug}' already has an evaluation named '{name.strip()}'."
        ) from None
    return evaluation
