"""What one "submit + next item" costs the database: the rating page's hot path (issue 12's <= 12 queries)."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests import factories
from tests.rating.conftest import add_annotators

pytestmark = pytest.mark.django_db

# PostgreSQL, as in production: issue 12's target. SQLite reserves the next item with the ORM's three
# statements (pick, claim, insert) plus the person's last place, instead of one (rating/db.py).
MAX_QUERIES = {"postgresql": 12, "sqlite": 15}


def submit_and_next(client, evaluation, version, item_id: int):
    url = reverse("rate_submit", args=[evaluation.project.slug, evaluation.pk, item_id])
    data = {f"rubric-{version.pk}": "3", "shown_at": f"{time.time() - 5:.1f}"}
    with CaptureQueriesContext(connection) as captured:
        response = client.post(url, data, headers={"HX-Request": "true"})
    assert response.status_code == 200, response.content[:500]
    return int(response["HX-Push-Url"].rstrip("/").split("/")[-1]), captured


def test_submit_and_next_item_take_at_most_twelve_queries_on_postgresql(client, project, likert):
    """Logged in through the login form (a real session row), as the browser and the benchmark are."""
    dataset = factories.make_dataset(project, items=8)
    evaluation = factories.make_evaluation(project, dataset, [likert], overlap=2)
    (person,) = add_annotators(evaluation, 1)
    person.set_password("rate-pw-123")
    person.save()
    assert (
        client.post(reverse("login"), {"username": person.username, "password": "rate-pw-123"}).status_code
        == 302
    )
    next_url = reverse("rate_next", args=[project.slug, evaluation.pk])
    item_id = int(client.get(next_url)["Location"].rstrip("/").split("/")[-1])
    counts = []
    for _ in range(3):  # the first also creates the person's rater row
        item_id, captured = submit_and_next(client, evaluation, likert, item_id)
        counts.append(len(captured))
    statements = "\n".join(query["sql"][:200] for query in captured.captured_queries)
    assert counts[1] == counts[2] <= MAX_QUERIES[connection.vendor], f"{counts}:\n{statements}"
