"""
A picture of the demo's "Retry tiers" view, taken from its own running Airflow (``demo --screenshot``).

The demo's API server lets every visitor in as an admin (``simple_auth_manager_all_admins``), so a
token comes from ``GET /auth/token`` with no credentials. The page is loaded in headless Chromium (the
system browser, driven by Playwright from the test extra) and saved once its data has loaded.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

VIEWPORT = {"width": 1400, "height": 1000}
LOAD_TIMEOUT_MS = 60_000


class ScreenshotError(RuntimeError):
    """The view could not be pictured; the message says what is missing."""


def chromium_path() -> str:
    path = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
    if path is None:
        raise ScreenshotError(
            "--screenshot needs a Chromium on PATH (Debian: apt-get install chromium; scripts/test installs "
            "it as root)"
        )
    return path


def check_ready() -> None:
    """Fail before the demo starts, not after minutes of it, when the browser or Playwright is missing."""
    chromium_path()
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        raise ScreenshotError(
            "--screenshot needs Playwright: pip install -e '.[test]' (it drives the system Chromium)"
        ) from exc


def view_screenshot(api_url: str, path: Path) -> Path:
    """Save the Retry tiers view of the Airflow at ``api_url`` (all visitors admins) as a PNG at ``path``."""
    from playwright.sync_api import sync_playwright

    with urllib.request.urlopen(f"{api_url}/auth/token", timeout=30) as answer:
        token = json.loads(answer.read())["access_token"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
            context.add_cookies([{"name": "_token", "value": token, "url": api_url}])
            page = context.new_page()
            page.goto(f"{api_url}/kafka-retry/")
            page.wait_for_selector("body[data-loaded=true]", timeout=LOAD_TIMEOUT_MS)
            page.screenshot(path=str(path), full_page=True)
        finally:
            browser.close()
    return path
