"""A researcher edits a built-in rubric's scale in a real browser, on a desktop and on a phone: the one text
changes both the form people see and the prompt the judge reads, the copy carries its new name, and the page
shows the change as a diff without clipping anything on a phone."""

import pytest

from rubrics.builtins import ensure_builtin_rubrics
from rubrics.models import Rubric
from rubrics.rendering import render_prompt
from tests import factories
from tests.browser.layout import clipped, page_scrolls_sideways
from tests.browser.pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
OLD = "The response is free from repetition"
NEW = "Nothing in the response is said twice"


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_researcher_edits_the_scale_once_and_form_and_prompt_follow(
    chromium, live_server, researcher, viewport
):
    ensure_builtin_rubrics()
    project = factories.make_project(name=f"Edit {viewport}", researchers=[researcher])
    builtin = Rubric.objects.get(project__isnull=True, name="Repetitiveness")
    context = chromium.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        edit = f"/p/{project.slug}/rubrics/{builtin.pk}/edit/"
        log_in(page, live_server, "rita", edit)
        page.wait_for_selector("textarea[name=prompt_template]")
        assert page.locator("textarea[name=scale]").count() == 0  # one place to edit the scale
        text = page.input_value("textarea[name=prompt_template]")
        page.fill("textarea[name=prompt_template]", text.replace(OLD, NEW))
        page.fill("input[name=name]", f"Repetition ({viewport})")
        page.click("form.rubric-form button[type=submit]")
        page.wait_for_selector("#diff")
        page.screenshot(path=f"/tmp/concord-rubric-edit-{viewport}.png", full_page=True)

        assert NEW in page.inner_text("#scale") and OLD not in page.inner_text("#scale")
        assert NEW in page.inner_text("[data-role=rendered-prompt]")
        assert page.locator("#diff .diff-line.added", has_text=NEW).count() == 1
        assert page.locator("#diff .diff-line.removed", has_text=OLD).count() == 1
        assert clipped(page) == [] and not page_scrolls_sideways(page)

        copy = Rubric.objects.get(project=project)
        version = copy.versions.latest("number")
        assert copy.name == f"Repetition ({viewport})"
        assert version.scale[4]["description"].startswith(NEW)
        assert NEW in render_prompt(version, factories_item())
        page.goto(f"{live_server.url}/p/{project.slug}/", wait_until="domcontentloaded")
        assert page.locator("#rubrics a", has_text=f"Repetition ({viewport})").count() == 1
    finally:
        context.close()


def factories_item():
    from datasets.records import ItemRecord

    return ItemRecord(
        external_id="x",
        context=[{"speaker": "USER", "text": "Hi"}],
        response={"speaker": "BOT", "text": "Hello"},
    )
