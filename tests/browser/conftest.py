"""Headless Debian chromium driven by Playwright against pytest-django's live_server."""

import os
import socket
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django's ORM refuses to run beside one
# unless told it is safe (it is: the loop only talks to the browser).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
# This part of the suite's own range, on loopback only, split between pytest-xdist's processes (gw0, gw1,
# ...): each probes its own tenth, so two processes probing at the same moment never pick the same port.
_XDIST_INDEX = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 10
PORTS = range(8300 + 10 * _XDIST_INDEX, 8310 + 10 * _XDIST_INDEX)


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


# pytest-django's live_server reads this once, when the first browser test starts it. Set in every process,
# not defaulted: xdist's workers inherit the controller's environment, and with it the controller's port.
os.environ["DJANGO_LIVE_TEST_SERVER_ADDRESS"] = f"127.0.0.1:{free_port()}"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium():
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium (bin/test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(chromium):
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(20_000)  # the suite shares two cores; a cold chromium can be slow
    yield page
    context.close()
