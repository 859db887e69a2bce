"""The researcher's iteration path in a browser: "Make a new version with these examples" lands on the
launch form with the new version alone ticked, under a label of its own, and its estimate ready."""

import numpy as np
import pytest

from evaluations.models import JudgeOnlyVersion
from judges.models import Judge
from tests.agreement.helpers import make_rated_evaluation
from tests.browser.pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_new_version_with_examples_is_preselected_on_the_launch_form(browser_page, live_server, project):
    truth = np.random.default_rng(9).integers(1, 6, 40)
    people = [str(v) for v in truth]
    judge_said = [
        str(v) if n % 3 else str(6 - v if v != 3 else 4) for n, v in enumerate(truth)
    ]  # wrong on every 3rd
    evaluation, version = make_rated_evaluation(
        project, kind="likert", table={"ann": people, "bob": people, "judge": judge_said}, models=["judge"]
    )
    Judge.objects.create(
        project=project, name="only judge", base_url="https://api.openai.com/v1", model="gpt-4o"
    )
    page = browser_page
    log_in(page, live_server, "rita", f"/p/{project.slug}/evaluations/{evaluation.pk}/examples/")
    page.get_by_label("Run").select_option(label=f"judge on {version.label}")
    page.get_by_role("button", name="Show disagreements").click()
    boxes = page.locator("ul.examples input[type=checkbox]")
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.get_by_role("button", name="Make a new version with these examples").click()

    made = JudgeOnlyVersion.objects.get(evaluation=evaluation).rubric_version
    assert made.label == f"{version.rubric.name} v2 + 2 examples"
    page.locator("#version-boxes").wait_for()
    assert page.get_by_label(made.label).is_checked()
    assert not page.get_by_label(version.label).is_checked()
    labels = page.locator("#version-boxes label").all_inner_texts()
    assert [label.strip() for label in labels] == [version.label, made.label]  # never two alike
    # The project's only judge is picked, so the estimate for the new version alone comes at once.
    launch = page.locator("#run-estimate button.primary")
    launch.wait_for()
    assert launch.inner_text() == "Launch 1 run: 40 calls"
    assert page.locator("#run-estimates tbody tr").all_inner_texts()[0].startswith(made.label)
    assert "prices not set" in page.locator("#run-estimate").inner_text()
