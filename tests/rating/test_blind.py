"""Blind rating: an annotator never sees other people's ratings, judge ratings, the report or exports.

The test walks every URL pattern of the project as it is when the test runs (so pages added later
are covered too), fills its parameters with real ids and looks for values only others gave.
"""

import itertools
import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from rating import services
from tests import factories

pytestmark = pytest.mark.django_db

# Texts that exist only in ratings the annotator must not see.
SECRETS = [
    "SECRET-BEN-WORDS",
    "SECRET-JUDGE-WORDS",
    "SECRET-RAW-OUTPUT",
    "secret-judge-rater",
    "secret-imported-rater",
]
# Pages that show ratings, judges or the report: refused to annotators outright.
RESEARCHER_ONLY = {
    "evaluation_detail",
    "evaluation_export",
    "ratings_import",
    "agreement_report",
    "judge_list",
    "judge_create",
    "judge_detail",
    "judge_run_create",
    "judge_run_detail",
    "evaluation_create",
    "annotators_add",
}
PARAMETER = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")


def url_patterns(patterns=None, prefix=""):
    """(route, name) of every URL pattern, resolvers included, admin aside (staff only)."""
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route.startswith("admin/"):
                continue
            yield from url_patterns(entry.url_patterns, prefix + route)
        elif isinstance(entry, URLPattern):
            yield prefix + route, entry.name


def candidates(route, name, converter, ids):
    """Real values for one URL parameter, guessed from its name and the path segment before it."""
    if converter == "slug" or name == "slug":
        return [ids["slug"]]
    if converter != "int":
        return ["x"]
    before = (
        route[: route.index(f"<{converter}:{name}>" if converter else f"<{name}>")].rstrip("/").split("/")[-1]
    )
    by_segment = {
        "evaluations": "evaluation",
        "datasets": "dataset",
        "items": "item",
        "rate": "item",
        "rubrics": "rubric",
        "versions": "version",
        "annotators": "user",
    }
    by_name = {
        "item_id": "item",
        "item_pk": "item",
        "user_id": "user",
        "evaluation_id": "evaluation",
        "dataset_id": "dataset",
        "rubric_id": "rubric",
        "version_id": "version",
    }
    kind = by_name.get(name) or by_segment.get(before)
    return [ids[kind]] if kind else sorted(set(ids["all"]))


def filled_urls(route, ids):
    params = list(PARAMETER.finditer(route))
    choices = [candidates(route, m["name"], m["converter"], ids) for m in params]
    for values in itertools.islice(itertools.product(*choices), 30):
        url = route
        for match, value in zip(params, values, strict=True):
            url = url.replace(match.group(0), str(value), 1)
        yield "/" + url.lstrip("^").rstrip("$")


@pytest.fixture
def rated_evaluation(project, annotator, researcher):
    likert = factories.make_rubric(project=project, name="Blind likert")
    dataset = factories.make_dataset(project, items=2)
    ben = factories.make_user("ben", password=None)
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=3, annotators=[annotator, ben])
    item = dataset.items.get(position=0)
    factories.make_rating(
        evaluation,
        item,
        likert,
        factories.make_rater(project, name="ben", user=ben),
        "2",
        explanation="SECRET-BEN-WORDS",
    )
    judge = factories.make_rater(project, name="secret-judge-rater", kind="model")
    factories.make_rating(
        evaluation, item, likert, judge, "1", explanation="SECRET-JUDGE-WORDS", raw_output="SECRET-RAW-OUTPUT"
    )
    imported = factories.make_rater(project, name="secret-imported-rater")
    factories.make_rating(evaluation, item, likert, imported, "5")
    # The annotator has rated this item too, so their own pages show it.
    assignment = services.next_assignment(evaluation=evaluation, user=annotator)
    assert assignment is not None
    services.submit_ratings(
        evaluation=evaluation,
        item_id=assignment.item_id,
        user=annotator,
        answers={likert.pk: services.Answer(version=likert, value="4", explanation="my words")},
    )
    return {
        "slug": project.slug,
        "evaluation": evaluation.pk,
        "dataset": dataset.pk,
        "item": item.pk,
        "rubric": likert.rubric_id,
        "version": likert.pk,
        "user": ben.pk,
        "all": [evaluation.pk, dataset.pk, item.pk, likert.rubric_id, likert.pk, ben.pk, judge.pk],
    }


def body(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


def test_annotator_sees_no_one_elses_ratings_on_any_page(annotator_client, rated_evaluation):
    visited, leaks, not_refused = [], [], []
    for route, name in url_patterns():
        for url in filled_urls(route, rated_evaluation):
            response = annotator_client.get(url)
            visited.append((url, response.status_code))
            text = body(response)
            leaks += [(url, secret) for secret in SECRETS if secret in text]
            if name in RESEARCHER_ONLY and response.status_code not in (403, 404, 405):
                not_refused.append((url, response.status_code))
    assert leaks == []
    assert not_refused == []
    # The walk really reached the annotator's own pages.
    assert ("/rate/", 200) in visited
    assert any(status == 200 and "/rate/history/" in url for url, status in visited)


def test_the_rating_page_shows_only_the_annotators_own_answer(annotator_client, rated_evaluation):
    slug, pk, item = rated_evaluation["slug"], rated_evaluation["evaluation"], rated_evaluation["item"]
    page = annotator_client.get(f"/p/{slug}/evaluations/{pk}/rate/{item}/?stage=rest").content.decode()
    assert 'value="4" data-key="4" checked' in page
    assert not any(secret in page for secret in SECRETS)
    comparison = annotator_client.get(f"/p/{slug}/evaluations/{pk}/rate/{item}/").content.decode()
    assert not any(secret in comparison for secret in SECRETS)
