"""Issue 9, server half, played as an attacker: an annotator, an outsider, a researcher of another project.

Each test states what must hold on a shared lab server; each failed on the code before the fix.
"""

import pytest

from projects.models import Project

# --- Who may create projects ------------------------------------------------------------------


@pytest.mark.django_db
def test_annotator_cannot_create_a_project_by_default(annotator_client, project):
    before = Project.objects.count()
    response = annotator_client.post("/projects/new/", {"name": "My own study", "description": ""})
    assert response.status_code == 403
    assert "Only staff can create projects" in response.content.decode()
    assert Project.objects.count() == before


@pytest.mark.django_db
def test_outsider_gets_a_clear_refusal_page_for_the_new_project_form(outsider_client):
    response = outsider_client.get("/projects/new/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "Not allowed" in page and "Ask a staff member" in page


@pytest.mark.django_db
def test_project_list_hides_new_project_from_non_staff_and_shows_it_to_staff(annotator_client, annotator):
    assert "New project" not in annotator_client.get("/").content.decode()
    annotator.is_staff = True
    annotator.save(update_fields=["is_staff"])
    assert "New project" in annotator_client.get("/").content.decode()
