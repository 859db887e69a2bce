"""Rubric work that spans rows: importing, new versions, project copies of built-ins.

Versions are append-only: every change makes a new RubricVersion (ratings point at exact
versions, and the trigger of evaluations/migrations/0002 refuses updates of rated ones).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from projects.models import Project
from projects.names import fit, max_length

from .models import Rubric, RubricVersion
from .parsing import (
    KINDS,
    OUTPUT_FORMATS,
    TARGETS,
    ParsedRubric,
    RubricParseError,
    find_mojibake,
    parse_rubric_source,
    placeholder_problems,
    scale_problems,
    unique_names,
)
from .source import DERIVED_FIELDS, is_read_from_text, one_source, read_from_text, unread_texts

VERSION_FIELDS = (
    "criterion", "description", "instructions", "steps", "scale", "prompt_template", "target",
    "output_format", "explanation_required", "notes",
)  # fmt: skip


@dataclass
class RubricImportResult:
    """The rubric and version an import made or found unchanged."""

    rubric: Rubric
    version: RubricVersion
    parsed: ParsedRubric
    created_rubric: bool
    created_version: bool


def metadata_key_checker(project: Project | None) -> Callable[[str], bool] | None:
    """A function telling whether a name is a metadata key of any item in `project`'s datasets."""
    if project is None:
        return None
    from datasets.models import Item

    def is_metadata_key(name: str) -> bool:
        items = Item.objects.filter(dataset__project=project)
        return any(items.filter(metadata__has_key=key).exists() for key in {name, name.lower()})

    return is_metadata_key


def version_problems(
    *, kind: str, fields: dict[str, Any], project: Project | None, declared: Collection[str] = frozenset()
) -> list[str]:
    """What is wrong with the fields of a version of a rubric of `kind` (empty when nothing).

    `declared`: placeholder names accepted anyway (those the previous version already used).
    """
    problems = []
    if not str(fields.get("criterion", "")).strip():
        problems.append("criterion: missing")
    template = fields.get("prompt_template", "")
    if not template.strip():
        problems.append("prompt template: empty")
    problems += scale_problems(kind, fields.get("scale"))
    problems += placeholder_problems(
        template, declared=declared, is_metadata_key=metadata_key_checker(project)
    )
    if fields.get("target") not in TARGETS:
        problems.append(f"target: must be one of {', '.join(TARGETS)}")
    if fields.get("output_format") not in OUTPUT_FORMATS:
        problems.append(f"output format: must be one of {', '.join(OUTPUT_FORMATS)}")
    if kind == "pairwise" and fields.get("target") != "pairwise":
        problems.append("target: a pairwise rubric compares two responses (target pairwise)")
    return problems + unread_texts(fields)


def _fields_of(version: RubricVersion | None) -> dict[str, Any]:
    return {name: getattr(version, name) for name in VERSION_FIELDS} if version else {}


def _same_text(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(name) == b.get(name) for name in VERSION_FIELDS if name != "notes")


def new_version(rubric: Rubric, *, start_from: RubricVersion | None = None, **changes: Any) -> RubricVersion:
    """A new version of `rubric`: the latest version's (or `start_from`'s) fields with `changes` applied.

    The human-form fields are read from the text when it carries them (rubrics.source); a change to
    one of them that the text does not say is refused. Notes belong to one version: they never carry
    over unless given. Raises ValidationError naming each problem (the database is unchanged then).
    """
    unknown = set(changes) - set(VERSION_FIELDS)
    if unknown:
        raise ValueError(f"not rubric version fields: {', '.join(sorted(unknown))}")
    with transaction.atomic():
        Rubric.objects.select_for_update().filter(pk=rubric.pk).first()  # numbers stay gap-free and unique
        latest = rubric.latest_version()
        fields = {**_fields_of(start_from or latest), "notes": "", **changes}
        fields = one_source(kind=rubric.kind, fields=fields, name=rubric.name)
        base = start_from or latest
        declared = set(unique_names(base.prompt_template)) if base else set()
        problems = version_problems(
            kind=rubric.kind, fields=fields, project=rubric.project, declared=declared
        )
        problems += [
            f"{key}: read from the prompt text; change it there so people and the judge read the same words"
            for key in DERIVED_FIELDS
            if key in changes and changes[key] != fields[key]
        ]
        template = fields.get("prompt_template", "")
        lost = read_from_text(kind=rubric.kind, template=template, name=rubric.name) is None
        if problems and latest and lost and is_read_from_text(latest):
            problems.insert(0, TEXT_LOST_SCALE)
        if problems:
            raise ValidationError(problems)
        number = latest.number + 1 if latest else 1
        return RubricVersion.objects.create(rubric=rubric, number=number, **fields)


TEXT_LOST_SCALE = (
    "The text no longer has a scale Concord can read, so the rating form would not follow it: keep lines "
    "like 'Rating 1 (Label): ...', '- 1 (Label): ...', '1 point: ...' or '\"A\": ...'."
)


def builtin_named(name: str) -> Rubric | None:
    """The built-in rubric called `name` (case-insensitive): no project rubric may take its name, or two
    rubrics would answer to one name (`Repetitiveness@1` twice in an export that could not be imported)."""
    return Rubric.objects.filter(project__isnull=True, name__iexact=name.strip()).first()


def builtin_name_problem(name: str) -> str:
    builtin = builtin_named(name)
    if builtin is None:
        return ""
    return f"name: {builtin.name} is the name of a built-in rubric; give this one a name of its own."


def free_copy_name(*, project: Project, name: str, label: str) -> str:
    """`name (label)`, else `name (label 2)`, ...: the first that neither `project` nor a built-in has,
    cut to fit the column (the label and number kept)."""
    limit = max_length(Rubric, "name")
    for number in itertools.count(1):
        tail = f" ({label})" if number == 1 else f" ({label} {number})"
        candidate = fit(name, tail, limit=limit)
        visible = Rubric.objects.filter(Q(project=project) | Q(project__isnull=True))
        if not visible.filter(name__iexact=candidate).exists():
            return candidate
    raise AssertionError("unreachable")


def _rename(*, rubric: Rubric, project: Project, name: str) -> None:
    """Give a project's rubric a new name (unique in the project), or refuse saying why."""
    name = name.strip()
    if not name or name == rubric.name:
        return
    limit = max_length(Rubric, "name")
    if len(name) > limit:
        raise ValidationError(f"name: at most {limit} characters.")
    problem = builtin_name_problem(name)
    if problem:
        raise ValidationError(problem)
    taken = Rubric.objects.filter(project=project, name__iexact=name).exclude(pk=rubric.pk).first()
    if taken:
        raise ValidationError(f"name: this project already has a rubric named {taken.name}.")
    Rubric.objects.filter(pk=rubric.pk).update(name=name)
    rubric.name = name


def edit_rubric(
    *, rubric: Rubric, project: Project, changes: dict[str, Any], name: str = ""
) -> RubricVersion:
    """Save an edit made from `project`'s pages as a new version (and a new `name`, when given).

    A built-in rubric is shared by every project, so editing it makes a project-owned copy
    (`copied_from` the built-in version, named `name`, or "<built-in's name> (copy)" when `name` is empty
    or the built-in's) instead of changing it for everyone.
    """
    if rubric.project_id not in (None, project.pk):
        raise ValidationError("This rubric belongs to another project.")
    latest = rubric.latest_version()
    renamed = bool(name.strip()) and name.strip() != rubric.name
    if latest and not renamed and _same_text(_fields_of(latest), {**_fields_of(latest), **changes}):
        raise ValidationError(f"Nothing changed: version {latest.number} already says exactly this.")
    with transaction.atomic():
        if not rubric.is_builtin:
            _rename(rubric=rubric, project=project, name=name)
            if latest and _same_text(_fields_of(latest), {**_fields_of(latest), **changes}):
                return latest  # only the name changed: no new version
            return new_version(rubric, **changes)
        copy_name = name.strip()
        if not copy_name or copy_name.lower() == rubric.name.lower():
            copy_name = fit(rubric.name, " (copy)", limit=max_length(Rubric, "name"))
        problem = builtin_name_problem(copy_name)
        if problem:
            raise ValidationError(problem)
        existing = Rubric.objects.filter(project=project, name__iexact=copy_name).first()
        if existing:
            raise ValidationError(
                f"This project already has a rubric named {existing.name}; "
                f"edit that one (rubric {existing.pk}) or give the copy another name."
            )
        copy = Rubric.objects.create(project=project, name=copy_name, kind=rubric.kind, copied_from=latest)
        # The built-in's own notes (its seed file, repairs) describe the built-in, not this copy.
        note = f"Project copy of the built-in rubric {rubric.name}@{latest.number if latest else 1}."
        return new_version(copy, start_from=latest, **{**changes, "notes": note})


def find_rubric(*, name: str, project: Project | None) -> Rubric | None:
    """A project's rubric called `name` (case-insensitive), else the built-in of that name."""
    if project is not None:
        own = Rubric.objects.filter(project=project, name__iexact=name).first()
        if own:
            return own
    return Rubric.objects.filter(project__isnull=True, name__iexact=name).first()


def import_rubric(
    *,
    text: str,
    project: Project | None = None,
    name: str | None = None,
    filename: str | None = None,
    repair_text: bool = False,
) -> RubricImportResult:
    """Import a seed-style prompt text or a JSON spec; a second import of a name makes a new version.

    Raises RubricParseError (every problem found) and changes nothing when the text is refused.
    """
    parsed = parse_rubric_source(
        text,
        filename=filename,
        name=name,
        repair_text=repair_text,
        is_metadata_key=metadata_key_checker(project),
    )
    if parsed.kind not in KINDS:
        raise RubricParseError([f"kind: must be one of {', '.join(KINDS)}"])
    fields = parsed.version_fields()
    unread = unread_texts(fields)
    if unread:
        raise RubricParseError(unread)
    with transaction.atomic():
        rubric = (
            Rubric.objects.select_for_update().filter(project=project, name__iexact=parsed.name).first()
            if project is not None
            else Rubric.objects.select_for_update()
            .filter(project__isnull=True, name__iexact=parsed.name)
            .first()
        )
        if rubric is None and project is not None and builtin_named(parsed.name):
            raise RubricParseError([builtin_name_problem(parsed.name)])
        if rubric and rubric.kind != parsed.kind:
            raise RubricParseError(
                [f"a rubric named {rubric.name} already exists as {rubric.kind}; this text is {parsed.kind}"]
            )
        created_rubric = rubric is None
        if rubric is None:
            rubric = Rubric.objects.create(project=project, name=parsed.name, kind=parsed.kind)
        latest = rubric.latest_version()
        if latest and _same_text(_fields_of(latest), fields):
            return RubricImportResult(rubric, latest, parsed, created_rubric=False, created_version=False)
        version = RubricVersion.objects.create(
            rubric=rubric, number=latest.number + 1 if latest else 1, **fields
        )
    return RubricImportResult(rubric, version, parsed, created_rubric=created_rubric, created_version=True)


def mojibake_warnings(version: RubricVersion) -> list[str]:
    """Lines of a version's prompt that still look like mojibake (for the rubric page)."""
    return [str(repair) for repair in find_mojibake(version.prompt_template, where="prompt")]
