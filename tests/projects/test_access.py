import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404

from projects.access import (
    ANNOTATOR,
    RESEARCHER,
    get_evaluation_for,
    get_judge_run_for,
    get_project_for,
    get_role_for,
    projects_for,
)
from tests import factories


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
def test_researcher_adds_someone_they_share_a_project_with_as_annotator(
    researcher_client, researcher, project, outsider
):
    factories.make_project(name="Earlier study", researchers=[researcher], annotators=[outsider])
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
    assert "No account named &#x27;ghost&#x27; that you can add" in response.content.decode()


@pytest.mark.django_db
def test_annotator_cannot_add_members(annotator_client, project, outsider):
    response = annotator_client.post(
        f"/p/{project.slug}/members/", {"username": "otto", "role": "researcher"}
    )
    assert response.status_code == 403
    assert project.role_of(outsider) is None


@pytest.fixture
def evaluation(project, annotator):
    version = factories.make_rubric(project=project, name="Quality")
    dataset = factories.make_dataset(project, items=2)
    return factories.make_evaluation(project, dataset, [version], annotators=[annotator])


@pytest.fixture
def judge_run(project, evaluation):
    from types import SimpleNamespace

    from judges import services
    from tests.judges.conftest import make_judge

    judge = make_judge(project, SimpleNamespace(base_url="http://127.0.0.1:9/v1"))
    return services.launch_run(
        judge=judge, evaluation=evaluation, rubric_version=evaluation.rubric_versions.get()
    )


@pytest.mark.django_db
class TestGetEvaluationFor:
    def test_researcher_gets_the_evaluation_with_project_and_dataset(self, evaluation, researcher):
        found = get_evaluation_for(researcher, evaluation.project.slug, evaluation.pk)
        assert found == evaluation
        assert found.project == evaluation.project and found.dataset == evaluation.dataset

    def test_annotator_is_refused_the_researcher_pages_with_403(self, evaluation, annotator):
        with pytest.raises(PermissionDenied):
            get_evaluation_for(annotator, evaluation.project.slug, evaluation.pk)

    @pytest.mark.parametrize("role", [RESEARCHER, ANNOTATOR])
    def test_outsider_cannot_learn_the_evaluation_exists(self, evaluation, outsider, role):
        with pytest.raises(Http404):
            get_evaluation_for(outsider, evaluation.project.slug, evaluation.pk, role=role)

    def test_annotator_of_the_evaluation_gets_it_to_rate(self, evaluation, annotator):
        assert (
            get_evaluation_for(annotator, evaluation.project.slug, evaluation.pk, role=ANNOTATOR)
            == evaluation
        )

    def test_researcher_who_does_not_rate_in_it_gets_404_at_annotator_role(self, evaluation, researcher):
        with pytest.raises(Http404):
            get_evaluation_for(researcher, evaluation.project.slug, evaluation.pk, role=ANNOTATOR)

    def test_annotator_of_the_project_not_in_this_evaluation_gets_404(self, evaluation, project, outsider):
        from projects.models import Membership

        Membership.objects.create(project=project, user=outsider, role=ANNOTATOR)
        with pytest.raises(Http404):
            get_evaluation_for(outsider, project.slug, evaluation.pk, role=ANNOTATOR)

    def test_an_evaluation_of_another_project_is_404(self, evaluation, researcher):
        other = factories.make_project(name="Other study", researchers=[researcher])
        with pytest.raises(Http404):
            get_evaluation_for(researcher, other.slug, evaluation.pk)


@pytest.mark.django_db
class TestGetJudgeRunFor:
    def test_researcher_gets_the_run_with_its_evaluation_and_project(self, judge_run, researcher, project):
        found = get_judge_run_for(researcher, project.slug, judge_run.pk)
        assert found == judge_run and found.evaluation.project == project

    def test_annotator_is_refused_with_403(self, judge_run, annotator, project):
        with pytest.raises(PermissionDenied):
            get_judge_run_for(annotator, project.slug, judge_run.pk)

    def test_outsider_cannot_learn_the_run_exists(self, judge_run, outsider, project):
        with pytest.raises(Http404):
            get_judge_run_for(outsider, project.slug, judge_run.pk)

    def test_a_run_of_another_project_is_404(self, judge_run, researcher):
        other = factories.make_project(name="Other study", researchers=[researcher])
        with pytest.raises(Http404):
            get_judge_run_for(researcher, other.slug, judge_run.pk)


@pytest.mark.django_db
class TestGetRoleFor:
    def test_researcher_annotator_and_superuser_get_their_role(self, project, researcher, annotator):
        superuser = factories.make_user("root", is_superuser=True)
        assert get_role_for(researcher, project.slug) == (project, RESEARCHER)
        assert get_role_for(annotator, project.slug) == (project, ANNOTATOR)
        assert get_role_for(superuser, project.slug) == (project, RESEARCHER)

    def test_outsider_gets_404(self, project, outsider):
        with pytest.raises(Http404):
            get_role_for(outsider, project.slug)


@pytest.mark.django_db
@pytest.mark.parametrize(("persona", "is_researcher"), [("researcher", True), ("annotator", False)])
def test_project_page_is_chosen_by_the_role(request, client, evaluation, persona, is_researcher):
    client.force_login(request.getfixturevalue(persona))
    response = client.get(f"/p/{evaluation.project.slug}/")
    assert response.status_code == 200
    assert response.context["is_researcher"] is is_researcher
    assert ("member_form" in response.context) is is_researcher


@pytest.mark.django_db
def test_a_project_page_lists_its_own_judges_not_archived_ones_or_another_projects(
    researcher_client, project
):
    from judges.models import Judge
    from projects.models import Project

    make = Judge.objects.create
    make(
        project=project,
        name="Kind judge",
        model="fake-judge",
        base_url="http://127.0.0.1:9/v1",
        simulated=True,
    )
    make(
        project=project, name="Old judge", model="gpt-x", base_url="https://api.example.com/v1", archived=True
    )
    other = Project.objects.create(name="Other", slug="other")
    make(project=other, name="Their judge", model="gpt-y", base_url="https://api.example.com/v1")
    page = researcher_client.get(f"/p/{project.slug}/").content.decode()
    assert "Kind judge" in page and "simulated" in page
    assert "Old judge" not in page and "Their judge" not in page
