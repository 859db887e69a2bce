"""An evaluation may leave out the items that lack what a rubric needs instead of refusing; the left-out
items are not rated by people, not counted in reports, and the evaluation page says how many there are."""

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

from agreement.report import build_report
from datasets.models import Item
from evaluations.models import Evaluation, ExcludedItem
from evaluations.services import create_evaluation
from rating.services import next_assignment
from tests import factories


def pairwise_setup(project, *, items=5, missing=("d-1", "d-3")):
    dataset = factories.make_dataset(project, items=items)
    Item.objects.filter(external_id__in=missing).update(baseline=None)
    version = factories.make_rubric(project=project, name="Preference", kind="pairwise")
    return dataset, version


def test_lacking_items_are_excluded_with_their_reason_when_asked(project):
    dataset, version = pairwise_setup(project)
    with pytest.raises(ValidationError):
        create_evaluation(project=project, dataset=dataset, rubric_versions=[version], name="Strict")
    evaluation = create_evaluation(
        project=project, dataset=dataset, rubric_versions=[version], name="E", exclude_lacking=True
    )
    assert sorted(evaluation.items().values_list("external_id", flat=True)) == ["d-0", "d-2", "d-4"]
    reasons = set(
        ExcludedItem.objects.filter(evaluation=evaluation).values_list("item__external_id", "reason")
    )
    assert reasons == {("d-1", "no baseline (Preference@1)"), ("d-3", "no baseline (Preference@1)")}


def test_item_count_counts_the_items_the_evaluation_rates(project):
    dataset, version = pairwise_setup(project)
    evaluation = create_evaluation(
        project=project, dataset=dataset, rubric_versions=[version], name="E", exclude_lacking=True
    )
    plain = factories.make_evaluation(project, dataset, [version], name="Plain")
    other = factories.make_dataset(project, items=2, name="Other")
    ExcludedItem.objects.create(evaluation=plain, item=Item.objects.filter(dataset=dataset)[0], reason="x")
    ExcludedItem.objects.create(evaluation=plain, item=Item.objects.filter(dataset=other)[0], reason="odd")
    assert evaluation.item_count() == evaluation.items().count() == 3
    assert plain.item_count() == plain.items().count() == 4


def test_exclusion_is_refused_when_no_item_would_be_left(project):
    dataset, version = pairwise_setup(project, items=2, missing=("d-0", "d-1"))
    with pytest.raises(ValidationError, match="No item would be left"):
        create_evaluation(
            project=project, dataset=dataset, rubric_versions=[version], name="E", exclude_lacking=True
        )
    assert not Evaluation.objects.exists()


def test_create_evaluation_command_excludes_lacking_items(project, capsys):
    dataset, _ = pairwise_setup(project)
    args = ["--project", project.slug, "--dataset", dataset.name, "--rubric", "Preference", "--name", "E"]
    call_command("create_evaluation", *args, "--exclude-lacking")
    assert "Excluded 2 items that lack what a rubric needs." in capsys.readouterr().out
    assert Evaluation.objects.get(name="E").items().count() == 3


def test_form_option_excludes_and_the_evaluation_page_says_how_many(researcher_client, project):
    dataset, version = pairwise_setup(project)
    url = reverse("evaluation_create", args=[project.slug])
    data = {
        "name": "E",
        "dataset": dataset.pk,
        "rubric_versions": [version.pk],
        "overlap": 2,
        "order": "dataset",
    }
    assert researcher_client.post(url, data).status_code == 400
    response = researcher_client.post(url, {**data, "exclude_lacking": "on"}, follow=True)
    page = response.content.decode()
    assert 'data-role="excluded"' in page and "<strong>2</strong> items of the dataset lack" in page
    assert "no baseline (Preference@1): 2" in page
    assert '<span class="muted">Items</span> <strong>3</strong>' in page


def test_people_are_never_given_excluded_items_and_reports_do_not_count_them(project, annotator):
    dataset, version = pairwise_setup(project)
    evaluation = create_evaluation(
        project=project, dataset=dataset, rubric_versions=[version], name="E", exclude_lacking=True, overlap=1
    )
    evaluation.annotators.add(annotator)
    handed = []
    while (assignment := next_assignment(evaluation=evaluation, user=annotator)) is not None:
        handed.append(assignment.item.external_id)
        assignment.status = assignment.Status.DONE
        assignment.save(update_fields=["status"])
    assert sorted(handed) == ["d-0", "d-2", "d-4"]
    report = build_report(evaluation=evaluation, resamples=10).as_json()
    assert [block["items"] for block in report["rubrics"]] == [3]
