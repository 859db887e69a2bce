"""Examples from disagreements: tune items only, a judge-only version ready to run, held-out items refused."""

import re

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agreement.compare import runs_of
from agreement.examples import candidates, make_examples_version, with_examples
from agreement.split import held_out
from evaluations.models import JudgeOnlyVersion
from judges.forms import RunChoiceForm
from judges.models import Judge
from judges.services import check_launch
from tests.agreement.helpers import make_rated_evaluation

pytestmark = pytest.mark.django_db

N = 40


@pytest.fixture
def evaluation(project):
    rng = np.random.default_rng(9)
    truth = rng.integers(1, 6, N)
    ann = [str(v) for v in truth]
    bob = [str(v) if n % 5 else str(max(1, v - 1)) for n, v in enumerate(truth)]  # disagrees on every 5th
    judge = [
        str(v) if n % 3 else str(6 - v if v != 3 else 4) for n, v in enumerate(truth)
    ]  # wrong on every 3rd
    evaluation, _ = make_rated_evaluation(
        project, kind="likert", table={"ann": ann, "bob": bob, "judge": judge}, models=["judge"]
    )
    return evaluation


def _expected(evaluation):
    items = list(evaluation.dataset.items.order_by("position"))
    ids = np.array([item.pk for item in items])
    held = held_out(evaluation.pk, ids)
    wanted = [items[n].pk for n in range(N) if n % 5 and n % 3 == 0 and not held[n]]
    refused = [items[n].pk for n in range(N) if n % 5 and n % 3 == 0 and held[n]]
    return wanted, refused


def test_candidates_are_tune_items_where_people_agree_and_the_judge_does_not(evaluation):
    (run,) = runs_of(evaluation)
    wanted, refused = _expected(evaluation)
    assert wanted and refused  # the fixture has both kinds
    assert [c.item.pk for c in candidates(evaluation=evaluation, run=run)] == wanted


def test_examples_version_carries_the_items_before_the_dialog_and_is_ready_to_run(evaluation, project):
    (run,) = runs_of(evaluation)
    wanted, _ = _expected(evaluation)
    version = make_examples_version(evaluation=evaluation, run=run, item_ids=wanted[:2])

    assert version.number == 2 and version.rubric_id == run.version.rubric_id
    assert version.label == f"{run.version.rubric.name} v2 + 2 examples" != run.version.label
    first = evaluation.dataset.items.get(pk=wanted[0])
    assert "Examples rated by people:" in version.prompt_template
    assert version.prompt_template.index(first.response["text"]) < version.prompt_template.index("{{Dialog}}")
    assert JudgeOnlyVersion.objects.get(evaluation=evaluation).example_items == wanted[:2]
    assert list(evaluation.rubric_versions.all()) == [run.version]  # people keep rating version 1
    judge = Judge.objects.create(project=project, name="j", model="m", base_url="http://127.0.0.1:9/v1")
    check_launch(judge=judge, evaluation=evaluation, rubric_version=version)  # raises if not runnable here
    form = RunChoiceForm(evaluation=evaluation)
    assert version in form.fields["rubric_versions"].queryset  # type: ignore[attr-defined]


def test_a_held_out_item_is_refused_and_nothing_is_made(evaluation):
    (run,) = runs_of(evaluation)
    wanted, refused = _expected(evaluation)
    with pytest.raises(ValidationError, match="Held-out items can never be examples"):
        make_examples_version(evaluation=evaluation, run=run, item_ids=[wanted[0], refused[0]])
    assert not JudgeOnlyVersion.objects.exists() and run.version.rubric.versions.count() == 1


def test_page_lists_candidates_and_a_posted_held_out_item_is_a_clear_error(researcher_client, evaluation):
    (run,) = runs_of(evaluation)
    wanted, refused = _expected(evaluation)
    url = reverse("examples_from_disagreements", args=[evaluation.project.slug, evaluation.pk])
    page = researcher_client.get(url, {"run": run.key}).content.decode()
    assert f'value="{wanted[0]}"' in page and f'value="{refused[0]}"' not in page
    response = researcher_client.post(url, {"run": run.key, "item": [refused[0]]})
    assert response.status_code == 400 and "Held-out items can never be examples" in response.content.decode()
    response = researcher_client.post(url, {"run": run.key, "item": wanted[:1]})
    assert response.status_code == 302 and JudgeOnlyVersion.objects.count() == 1
    made = JudgeOnlyVersion.objects.get().rubric_version
    assert made.label.endswith("v2 + 1 example")
    # The launch form it leads to ticks the new version alone, under a label of its own.
    assert response.url.endswith(f"?version={made.pk}")
    page = researcher_client.get(response.url).content.decode()
    assert re.search(rf'value="{made.pk}" checked>\s*{re.escape(made.label)}</label>', page)
    assert re.search(rf'value="{run.version.pk}">\s*{re.escape(run.version.label)}</label>', page)


def test_examples_block_goes_before_the_paragraph_of_the_first_placeholder():
    template = "Rate it.\n\nDialog:\n{{Dialog}}\n\nScore:"
    assert with_examples(template, ["X\nAnswer: 2"]) == (
        "Rate it.\n\nExamples rated by people:\n\nExample 1:\nX\nAnswer: 2\n\nDialog:\n{{Dialog}}\n\nScore:"
    )
    assert with_examples("Rate it.\n\nYour Turn:", ["X"]).endswith("Example 1:\nX\n\nYour Turn:")


def test_a_built_in_rubric_can_get_examples_twice(evaluation):
    """The first time makes the project's copy of the built-in; the second must not be refused as a second
    copy of that name (a dead end of the iteration before)."""
    (run,) = runs_of(evaluation)
    run.version.rubric.project = None  # the evaluation's rubric as a built-in
    run.version.rubric.save()
    wanted, _ = _expected(evaluation)
    first = make_examples_version(evaluation=evaluation, run=run, item_ids=wanted[:1])
    second = make_examples_version(evaluation=evaluation, run=run, item_ids=wanted[1:3])
    name = f"{run.version.rubric.name} (examples)"
    assert (first.label, second.label) == (f"{name} v1 + 1 example", f"{name} v2 + 2 examples")
    assert first.rubric_id == second.rubric_id != run.version.rubric_id
