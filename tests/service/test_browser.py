"""The service's web page in a real headless Chromium (issue 47): start `autopar serve`, fill the problem form,
get the answer (the verdict first), open the search report it shows and read a launch file from it; a bad field
shows the service's one-line message under that field."""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
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
sys.path.insert(0, str(Path(__file__).parents[1]))
from service_server import TOKEN, serving  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """`autopar serve` as a user starts it, on a free port, with a write token and its own store."""
    with serving(tmp_path_factory.mktemp("home")) as url:
        yield url


@contextmanager
def browser_page(width: int = 1400):
    """A headless Chromium page (Debian's) and the page errors it raised, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            browser.close()


def test_form_to_answer_to_launch_file(server: str) -> None:
    with browser_page() as (page, errors):
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
    assert first.startswith("pick (row ") and "8 × H100-SXM" in first
    assert slurm.startswith("#!/bin/bash") and "#SBATCH" in slurm
    assert field_error.startswith("gpus='abc'")
    assert errors == []


def test_compare_studies_and_runs_pages(server: str) -> None:
    """compare: the two default labels estimated with their bands; runs: the example Megatron-LM log added and a
    fit's plain-words summary shown; studies: the plan page's job listed with a report link."""
    log = (Path(__file__).resolve().parents[2] / "examples" / "megatron_llama3_8b.log").read_text()
    with browser_page() as (page, errors):
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
    assert compared.startswith("TP8+SP DP8/Z1 mb1") and "–" in compared  # the band column: low–high
    assert added.startswith("added 1 run")
    assert "your 1 run(s) measured" in summary
    assert "serve-" in studies and "report" in studies
    assert errors == []


XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def test_no_field_that_reaches_a_page_runs_as_markup(server: str) -> None:
    """Issue 45's XSS fuzz: a hostile string in every field that comes back to a page (an error echoing the model,
    a stored run's id and source on the runs page, a compare label) shows as its literal text and runs nothing."""
    import json
    import urllib.request

    record = {
        "id": XSS, "source": XSS, "model": "GPT-test", "arch": "dense", "layers": 96, "hidden": 12288,
        "ffn_hidden": 49152, "heads": 96, "kv_heads": 96, "vocab": 51200, "seq_len": 2048, "gpu": "A100-80GB",
        "num_gpus": 64, "gpus_per_node": 8, "tp": 8, "pp": 8, "dp": 1, "cp": 1, "ep": 1, "sp": 1, "zero": 0,
        "recompute": "selective", "micro_batch": 1, "global_batch": 64, "precision": "bf16",
        "framework": "Megatron-LM", "measured_step_s": 13.75,
    }  # fmt: skip
    req = urllib.request.Request(
        server + "/api/calibrate/ingest",
        data=json.dumps({"records": [record]}).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}"},
    )
    urllib.request.urlopen(req, timeout=60).read()
    with browser_page() as (page, errors):
        page.goto(server + "/")
        page.fill("input[name=model]", XSS)
        page.fill("input[name=token]", TOKEN)
        page.click("#go")
        page.wait_for_function("document.querySelector('.error[data-for=model]').textContent.length > 0")
        shown = page.locator(".error[data-for=model]").inner_text()
        page.goto(server + "/compare")
        page.fill("textarea[name=labels]", XSS)
        page.click("#go")
        page.wait_for_function("document.querySelector('.error[data-for=labels]').textContent.length > 0 || "
                               "document.getElementById('status').textContent.length > 12")  # fmt: skip
        page.goto(server + "/runs")
        page.wait_for_function("document.querySelectorAll('#runs tr').length > 1")
        runs = page.locator("#runs").inner_text()
        ran = page.evaluate("window.__xss === undefined")
    assert "<img src=x" in shown  # the message echoes the value as text
    assert runs.count("<script>window.__xss=2</script>") == 2  # id and source, literally
    assert ran is True


def test_whatif_page_shows_bands_ties_and_evidence(server: str) -> None:
    """The what-if page: every option with its time and cost band, the evidence line of each GPU family, and the
    tie the command calls (B200 and MI300X on cost for 2T tokens at 64 GPUs, as `whatif` says)."""
    with browser_page() as (page, errors):
        page.goto(server + "/whatif")
        page.fill("input[name=token]", TOKEN)
        page.click("#go")
        page.wait_for_function("document.querySelectorAll('#options tr').length === 4", timeout=300_000)
        table = page.locator("#options").inner_text()
        evidence = page.locator("#evidence").inner_text()
        ties = page.locator("#ties").inner_text()
    assert table.count("$") >= 6 and "–" in table  # each cost with its band
    assert "MI300X: no measured run of this GPU family" in evidence
    assert "B200:64 and MI300X:64: a tie on cost" in ties
