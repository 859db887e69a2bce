"""Small factories: plain functions that make valid rows with as few arguments as possible."""

import itertools

from django.contrib.auth import get_user_model

from datasets.models import Dataset, Item
from evaluations.models import Evaluation, Rater, Rating
from projects.models import Membership, Project
from rubrics.models import Rubric, RubricVersion

_counter = itertools.count(1)

LIKERT_SCALE = [
    {"value": str(n), "label": label, "description": f"{label} response."}
    for n, label in enumerate(["Poor", "Fair", "Good", "Very Good", "Excellent"], start=1)
]
PAIRWISE_SCALE = [
    {"value": "A", "label": "A", "description": "Response A is better."},
    {"value": "SAME", "label": "SAME", "description": "Comparable."},
    {"value": "B", "label": "B", "description": "Response B is better."},
]


def make_user(username: str | None = None, *, password: str | None = "pw-concord-123", **extra):
    username = username or f"user{next(_counter)}"
    return get_user_model().objects.create_user(username=username, password=password, **extra)


def make_project(*, name: str | None = None, researchers=(), annotators=()) -> Project:
    name = name or f"Project {next(_counter)}"
    project = Project.objects.create(name=name, slug=name.lower().replace(" ", "-"))
    for user in researchers:
        Membership.objects.create(project=project, user=user, role=Membership.Role.RESEARCHER)
    for user in annotators:
        Membership.objects.create(project=project, user=user, role=Membership.Role.ANNOTATOR)
    return project


def make_rubric(
    *,
    project: Project | None = None,
    name: str | None = None,
    kind: str = "likert",
    scale=None,
    template: str = "Rate the last response.\n\n{{Dialog}}\n\nScore:",
    target: str | None = None,
) -> RubricVersion:
    rubric = Rubric.objects.create(project=project, name=name or f"Rubric {next(_counter)}", kind=kind)
    if scale is None:
        scale = PAIRWISE_SCALE if kind == "pairwise" else LIKERT_SCALE
    if target is None:
        target = "pairwise" if kind == "pairwise" else "last_turn"
    return RubricVersion.objects.create(
        rubric=rubric,
        number=1,
        criterion=rubric.name,
        scale=scale,
        prompt_template=template,
        target=target,
        output_format="pairwise_json" if kind == "pairwise" else "score",
    )


def make_dataset(
    project: Project, *, items: int = 3, name: str | None = None, baseline: bool = True
) -> Dataset:
    dataset = Dataset.objects.create(project=project, name=name or f"Dataset {next(_counter)}")
    Item.objects.bulk_create(
        Item(
            dataset=dataset,
            external_id=f"d-{n}",
            position=n,
            context=[{"speaker": "USER", "text": f"Hello number {n}, how are you?"}],
            response={"speaker": "BOT", "text": f"I am fine, thanks for asking ({n})."},
            baseline={"speaker": "BOT", "text": f"Fine ({n})."} if baseline else None,
            metadata={"topic": "smalltalk" if n % 2 else "weather"},
        )
        for n in range(items)
    )
    Dataset.objects.filter(pk=dataset.pk).update(item_count=items)  # as the importer keeps it
    dataset.item_count = items
    return dataset


def make_evaluation(
    project: Project, dataset: Dataset, versions, *, overlap: int = 2, annotators=(), name: str | None = None
) -> Evaluation:
    evaluation = Evaluation.objects.create(
        project=project, dataset=dataset, name=name or f"Evaluation {next(_counter)}", overlap=overlap
    )
    evaluation.rubric_versions.set(versions)
    evaluation.annotators.set(annotators)
    return evaluation


def make_rater(project: Project, *, name: str | None = None, kind: str = "human", user=None) -> Rater:
    return Rater.objects.create(project=project, name=name or f"rater{next(_counter)}", kind=kind, user=user)


def make_rating(
    evaluation: Evaluation, item: Item, version: RubricVersion, rater: Rater, value: str, **extra
):
    return Rating.objects.create(
        evaluation=evaluation, item=item, rubric_version=version, rater=rater, value=value, **extra
    )
