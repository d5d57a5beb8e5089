"""The service's web page in a real headless Chromium (issue 47): start `autopar serve`, fill the problem form,
get the answer (the verdict first), open the search report it shows and read a launch file from it; a bad field
shows the service's one-line message under that field."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from autopar.reports.screenshot import CHROMIUM, CHROMIUM_ARGS

_REQUIRED = os.environ.get("AUTOPAR_REQUIRE_BROWSER") == "1"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not _REQUIRED and not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}"
    ),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="needs the playwright package"),
    pytest.mark.skipif(importlib.util.find_spec("fastapi") is None, reason="needs the serve extra"),
]
TOKEN = "browser-test-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """`autopar serve` as a user starts it, on a free port, with a write token and its own store."""
    port = _free_port()
    env = {**os.environ, "AUTOPAR_TOKEN": TOKEN, "AUTOPAR_HOME": str(tmp_path_factory.mktemp("home"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autopar", "serve", "--port", str(port), "--max-jobs", "1", "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/api/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"autopar serve exited: {proc.stdout.read().decode() if proc.stdout else ''}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_form_to_answer_to_launch_file(server: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server + "/")
            page.fill("input[name=model]", "llama-3.1-8b")
            page.fill("input[name=gpus]", "8")
            page.fill("input[name=token]", TOKEN)
            page.click("#go")
            page.wait_for_selector("#verdict li", timeout=120_000)
            first = page.locator("#verdict li").first.inner_text()
            frame = page.frame_locator("#report")
            frame.locator("#verdict").wait_for(timeout=30_000)
            hero = frame.locator(".card.hero")
            hero.locator("details.launch > summary").click()
            hero.locator(".tabs button[data-tab=slurm]").click()
            slurm = hero.locator(".tabpanel.on pre").inner_text()
            page.fill("input[name=gpus]", "abc")
            page.click("#go")
            page.wait_for_function("document.querySelector('.error[data-for=gpus]').textContent.length > 0")
            field_error = page.locator(".error[data-for=gpus]").inner_text()
        finally:
            browser.close()
    assert first.startswith("pick (row ") and "8 × H100-SXM" in first
    assert slurm.startswith("#!/bin/bash") and "#SBATCH" in slurm
    assert field_error.startswith("gpus='abc'")
    assert errors == []


def test_compare_studies_and_runs_pages(server: str) -> None:
    """compare: the two default labels estimated with their bands; runs: the example Megatron-LM log added and a
    fit's plain-words summary shown; studies: the plan page's job listed with a report link."""
    from playwright.sync_api import sync_playwright

    log = (Path(__file__).resolve().parents[1] / "examples" / "megatron_llama3_8b.log").read_text()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server + "/compare")
            page.click("#go")
            page.wait_for_function("document.querySelectorAll('#rows tr').length === 3", timeout=60_000)
            compared = page.locator("#rows tr").nth(1).inner_text()
            page.goto(server + "/runs")
            page.fill("textarea[name=log]", log)
            page.select_option("select[name=format]", "megatron-log")
            page.fill("input[name=model]", "Llama-3.1-8B")
            page.fill("input[name=gpu]", "H100-SXM")
            page.fill("input[name=group]", "browser-lab")
            page.fill("input[name=token]", TOKEN)
            page.click("#add")
            page.wait_for_function(
                "document.getElementById('status').textContent.startsWith('added')", timeout=60_000
            )
            added = page.locator("#status").inner_text()
            page.click("#fit")
            page.wait_for_selector("#summary li", timeout=180_000)
            summary = page.locator("#summary li").first.inner_text()
            page.goto(server + "/studies")
            page.wait_for_function("document.querySelectorAll('#studies tr').length > 1", timeout=30_000)
            studies = page.locator("#studies").inner_text()
        finally:
            browser.close()
    assert compared.startswith("TP8+SP DP8/Z1 mb1") and "–" in compared  # the band column: low–high
    assert added.startswith("added 1 run")
    assert "your 1 run(s) measured" in summary
    assert "serve-" in studies and "report" in studies
    assert errors == []
