import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from projects.access import get_project_for, projects_for


@pytest.mark.django_db
class TestGetProjectFor:
    def test_researcher_gets_project_at_researcher_role(self, project, researcher):
        assert get_project_for(researcher, project.slug, role="researcher") == project

    def test_annotator_gets_project_at_annotator_role(self, project, annotator):
        assert get_project_for(annotator, project.slug, role="annotator") == project

    def test_annotator_is_refused_researcher_pages_with_403(self, project, annotator):
        with pytest.raises(PermissionDenied):
            get_project_for(annotator, project.slug, role="researcher")

    @pytest.mark.parametrize("role", ["annotator", "researcher"])
    def test_outsider_cannot_learn_the_project_exists(self, project, outsider, role):
        with pytest.raises(Http404):
            get_project_for(outsider, project.slug, role=role)

    def test_unknown_slug_is_404(self, researcher):
        with pytest.raises(Http404):
            get_project_for(researcher, "no-such-project")


@pytest.mark.django_db
def test_projects_for_lists_only_memberships_with_role(project, researcher, annotator, outsider):
    assert [(p.slug, p.role) for p in projects_for(researcher)] == [(project.slug, "researcher")]
    assert [(p.slug, p.role) for p in projects_for(annotator)] == [(project.slug, "annotator")]
    assert list(projects_for(outsider)) == []


@pytest.mark.django_db
def test_project_list_page_shows_only_own_projects(outsider_client, project):
    response = outsider_client.get("/")
    assert response.status_code == 200
    assert project.name not in response.content.decode()


@pytest.mark.django_db
def test_project_page_is_404_for_outsider(outsider_client, project):
    assert outsider_client.get(f"/p/{project.slug}/").status_code == 404


@pytest.mark.django_db
def test_anonymous_user_is_sent_to_login(client, project):
    response = client.get(f"/p/{project.slug}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.django_db
@pytest.mark.parametrize("creators", ["staff", "everyone"])
def test_allowed_creator_creates_a_project_and_becomes_its_researcher(
    outsider_client, outsider, settings, creators
):
    settings.CONCORD_PROJECT_CREATORS = creators
    if creators == "staff":
        outsider.is_staff = True
        outsider.save(update_fields=["is_staff"])
    assert "New project" in outsider_client.get("/").content.decode()
    response = outsider_client.post("/projects/new/", {"name": "Empathy study", "description": ""})
    assert response.status_code == 302
    assert get_project_for(outsider, "empathy-study", role="researcher").name == "Empathy study"


@pytest.mark.django_db
def test_project_name_taken_is_refused_with_the_reason(outsider_client, project, settings):
    settings.CONCORD_PROJECT_CREATORS = "everyone"
    response = outsider_client.post("/projects/new/", {"name": project.name})
    assert response.status_code == 200
    assert "exists already" in response.content.decode()


@pytest.mark.django_db
def test_researcher_adds_an_existing_user_as_annotator(researcher_client, project, outsider):
    response = researcher_client.post(
        f"/p/{project.slug}/members/", {"username": outsider.username, "role": "annotator"}
    )
    assert response.status_code == 302
    assert project.role_of(outsider) == "annotator"


@pytest.mark.django_db
def test_unknown_username_is_refused_naming_it(researcher_client, project):
    response = researcher_client.post(
        f"/p/{project.slug}/members/", {"username": "ghost", "role": "annotator"}
    )
    assert response.status_code == 400
    assert "No user is called &#x27;ghost&#x27;" in response.content.decode()


@pytest.mark.django_db
def test_annotator_cannot_add_members(annotator_client, project, outsider):
    response = annotator_client.post(
        f"/p/{project.slug}/members/", {"username": "otto", "role": "researcher"}
    )
    assert response.status_code == 403
    assert project.role_of(outsider) is None
