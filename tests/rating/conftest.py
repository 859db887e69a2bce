"""Evaluations ready for human rating: a likert and a pairwise rubric over a small dataset."""

import pytest

from tests import factories


@pytest.fixture
def likert(project):
    return factories.make_rubric(project=project, name="Repetition")


@pytest.fixture
def pairwise(project):
    version = factories.make_rubric(project=project, name="Which is better", kind="pairwise")
    version.explanation_required = True
    version.save()
    return version


@pytest.fixture
def dataset(project):
    return factories.make_dataset(project, items=4)


@pytest.fixture
def evaluation(project, dataset, likert, pairwise, annotator):
    return factories.make_evaluation(project, dataset, [likert, pairwise], overlap=2, annotators=[annotator])


def add_annotators(evaluation, count: int, *, prefix: str = "ann"):
    """`count` more annotators of the evaluation (project members too)."""
    from projects.models import Membership

    users = [factories.make_user(f"{prefix}{n}", password=None) for n in range(count)]  # no hashing: fast
    for user in users:
        Membership.objects.create(project=evaluation.project, user=user, role=Membership.Role.ANNOTATOR)
    evaluation.annotators.add(*users)
    return users
