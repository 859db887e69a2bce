"""Finding an evaluation by name for the management commands."""

from django.core.management.base import CommandError

from evaluations.models import Evaluation


def find_evaluation(name: str, project_slug: str | None) -> Evaluation:
    """The evaluation called `name` (in project `project_slug` when given); CommandError otherwise."""
    evaluations = Evaluation.objects.filter(name=name).select_related("project", "dataset")
    if project_slug:
        evaluations = evaluations.filter(project__slug=project_slug)
    found = list(evaluations[:10])
    if not found:
        where = f" in project '{project_slug}'" if project_slug else ""
        raise CommandError(f"No evaluation named '{name}'{where}.")
    if len(found) > 1:
        projects = ", ".join(sorted(evaluation.project.slug for evaluation in found))
        raise CommandError(
            f"Several projects have an evaluation named '{name}' ({projects}): add --project SLUG."
        )
    return found[0]
