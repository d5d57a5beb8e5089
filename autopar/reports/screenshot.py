"""Render a report in headless Chromium (Playwright) to check it and to take a PNG screenshot.

Uses the system Chromium (Debian's package at /usr/bin/chromium); never downloads a browser.
Playwright is a test/dev dependency, imported only when these functions run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autopar.errors import AutoparError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@dataclass
class PageCheck:
    """What the browser saw: plot divs, how many rendered an SVG, console errors, table rows."""

    plot_ids: list[str] = field(default_factory=list)
    rendered_ids: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    table_rows: int = 0
    visible_texts: dict[str, bool] = field(default_factory=dict)
    blocked_requests: list[str] = field(default_factory=list)  # network requests the page tried to make


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise AutoparError("screenshots need the 'playwright' Python package (pip install playwright)") from e
    if not Path(CHROMIUM).exists():
        raise AutoparError(f"screenshots need Chromium at {CHROMIUM} (apt-get install chromium)")
    return sync_playwright


def screenshot_report(
    html_path: str | Path,
    png_path: str | Path,
    *,
    width: int = 1440,
    height: int = 900,
    full_page: bool = True,
    expect_texts: tuple[str, ...] = (),
    block_network: bool = True,
    actions: Callable[[Any], None] | None = None,
) -> PageCheck:
    """Open a report via file://, wait for every plot, save a PNG and return what rendered.

    With `block_network` every http(s) request is refused (and listed), proving the page is
    self-contained. `actions(page)` runs after the checks and before the screenshot (tests use it
    to click through the page in the same browser session).
    """
    sync_playwright = _playwright()
    url = Path(html_path).resolve().as_uri()
    check = PageCheck()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            page.on("console", lambda m: check.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: check.console_errors.append(str(exc)))
            if block_network:
                page.route(
                    "http*://**",
                    lambda route: (check.blocked_requests.append(route.request.url), route.abort()),
                )
            page.goto(url, wait_until="load")
            page.wait_for_function(
                "() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
                ".every(d => d.querySelector('.main-svg'))",
                timeout=30_000,
            )
            check.plot_ids = page.eval_on_selector_all(".plotly-graph-div", "els => els.map(e => e.id)")
            check.rendered_ids = page.eval_on_selector_all(
                ".plotly-graph-div", "els => els.filter(e => e.querySelector('.main-svg')).map(e => e.id)"
            )
            check.table_rows = page.locator("table.sortable tbody tr").count()
            for text in expect_texts:
                loc = page.locator("svg text", has_text=text)
                check.visible_texts[text] = loc.count() > 0 and loc.first.is_visible()
            if actions is not None:
                actions(page)
            Path(png_path).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(png_path), full_page=full_page)
        finally:
            browser.close()
    return check
