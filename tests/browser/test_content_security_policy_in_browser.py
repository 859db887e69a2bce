"""With the production Content-Security-Policy (settings.CONCORD_CSP, sent when DEBUG is off), the demo's
pages, walked as its researcher and its annotator would, load and run htmx with no violation reported, while
an inline script put into a page is refused."""

import re

import pytest
from django.core.management import call_command

from rubrics.builtins import ensure_builtin_rubrics

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

COLLECT_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const what = event.blockedURI || "inline";
  window.cspViolations.push(`${event.violatedDirective} blocked ${what} on ${location.pathname}`);
});
"""
PAGES_PER_USER = 24


def walk(page, live_server, user: str, start: str) -> tuple[list[str], list[str]]:
    """Log in as `user` and open `start` and the pages it links to (breadth first, GET links under the
    site only); each page must come with the policy. The addresses landed on, and the violations."""
    page.goto(f"{live_server.url}/login/", wait_until="domcontentloaded")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", "concord-demo")
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/login/" not in url)
    queue, seen = [start], set()
    landed: list[str] = []
    violations: list[str] = []
    while queue and len(landed) < PAGES_PER_USER:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        response = page.goto(f"{live_server.url}{path}", wait_until="networkidle")
        assert response is not None and response.status == 200, path
        assert "script-src 'self'" in (response.header_value("Content-Security-Policy") or ""), path
        landed.append(page.url)
        violations += page.evaluate("window.cspViolations")
        links = page.eval_on_selector_all("a[href^='/']", "links => links.map(a => a.getAttribute('href'))")
        queue += [
            link.split("#")[0]
            for link in links
            if not re.search(r"logout|export|download|\.csv|\.json|/static/", link)
        ]
    return landed, violations


def test_the_demo_pages_run_under_the_content_security_policy_with_no_violation(
    chromium, live_server, settings
):
    settings.SECURE_CSP = settings.CONCORD_CSP
    ensure_builtin_rubrics()  # a transactional test before this one may have flushed them
    call_command("setup_demo", verbosity=0)
    console: list[str] = []
    context = chromium.new_context(viewport={"width": 1366, "height": 900})
    context.add_init_script(COLLECT_VIOLATIONS)
    violations: list[str] = []
    try:
        for user, start in [("researcher", "/p/demo/"), ("annotator", "/rate/")]:
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.on("console", lambda message: console.append(message.text))
            landed, found = walk(page, live_server, user, start)
            violations += found
            assert len(landed) >= (10 if user == "researcher" else 2), landed
            if user == "annotator":  # the rating page, with its own script
                assert any(re.search(r"/rate/\d+/$", url) for url in landed), landed
            page.close()
        # The policy is enforced and the listener hears it: an inline script is refused and reported.
        page = context.new_page()
        page.goto(f"{live_server.url}/login/", wait_until="domcontentloaded")
        page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1';"
            " document.body.append(s); }"
        )
        page.wait_for_function("window.cspViolations.length > 0")
        assert page.evaluate("window.ran") is None
    finally:
        context.close()
    assert violations == []
    assert [text for text in console if "Content Security Policy" in text] == []
