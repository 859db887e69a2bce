"""What the browser tests do on the way to the page they test."""

from urllib.parse import urlencode

PASSWORD = "pw-concord-123"  # every user the factories make


def log_in(page, live_server, user: str, next_url: str = "") -> None:
    """Sign in through the login form as `user`, then go on to `next_url` (or where the user lands)."""
    query = f"?{urlencode({'next': next_url})}" if next_url else ""
    page.goto(f"{live_server.url}/login/{query}", wait_until="domcontentloaded")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "/login/" not in url)
