"""Open a generated report in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from test_report_fixtures import make_held_out, make_result

from autopar.reports.html import write_search_report
from autopar.reports.screenshot import CHROMIUM, screenshot_report

# CI (.ci/run) installs chromium and sets AUTOPAR_REQUIRE_BROWSER=1: there a missing browser is a failure.
_REQUIRED = os.environ.get("AUTOPAR_REQUIRE_BROWSER") == "1"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not _REQUIRED and not Path(CHROMIUM).exists(),
        reason=f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)",
    ),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="needs the playwright package"),
]

FIRST_SCREEN = {"width": 1400, "height": 900}
# The element's box at scroll 0, and whether it lies wholly inside the first screen.
IN_FIRST_SCREEN = """sel => { window.scrollTo(0, 0); const r = document.querySelector(sel).getBoundingClientRect();
  return {box: [r.left, r.top, r.right, r.bottom], inside: r.width > 0 && r.height > 0 && r.left >= 0
    && r.top >= 0 && r.right <= window.innerWidth && r.bottom <= window.innerHeight}; }"""
# Per plot: does the plotly toolbar's box overlap the legend's box?
MODEBAR_OVER_LEGEND = """() => Array.from(document.querySelectorAll('.plotly-graph-div')).map(d => {
  const m = d.querySelector('.modebar'), l = d.querySelector('g.legend');
  if (!m || !l) { return [d.id, false]; }
  const a = m.getBoundingClientRect(), b = l.getBoundingClientRect();
  return [d.id, a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom]; })"""


def first_screen(page, selector: str) -> dict:
    """Where `selector` is before any scrolling, and whether it is wholly visible."""
    return page.evaluate(IN_FIRST_SCREEN, selector)


INFEASIBLE_VISIBILITY = (
    "() => document.getElementById('fig-pareto').data"
    ".filter(t => t.name.startsWith('Infeasible')).map(t => t.visible)"
)


def test_report_renders_offline_in_chromium(tmp_path) -> None:
    """Plots render (SVG in each), no console errors, labels visible, table = Pareto set, no network;
    then sorting, the infeasible toggle and the launch tabs work. Screenshot kept in tmp_path."""
    result = make_result()
    path = write_search_report(result, tmp_path / "report.html")
    fastest = next(r.trial for r in result.recommended if r.role == "fastest")
    seen: dict[str, object] = {}

    def interact(page) -> None:
        page.set_default_timeout(15_000)
        th = page.locator("#pareto-table th", has_text="Throughput")
        th.click()
        th.click()  # descending: the fastest strategy comes first
        seen["first_row"] = page.locator("#pareto-table tbody tr").first.locator("td").first.inner_text()
        seen["before"] = set(page.evaluate(INFEASIBLE_VISIBILITY))
        n_points = page.locator("#fig-pareto .scatterlayer .point").count()
        page.locator("#fig-pareto .legend .traces", has_text="Infeasible").locator(".legendtoggle").click()
        # plotly waits out its double-click delay before toggling
        page.wait_for_function(f"() => ({INFEASIBLE_VISIBILITY})().every(v => v === true)")
        seen["more_points"] = page.locator("#fig-pareto .scatterlayer .point").count() > n_points
        seen["answer"] = first_screen(page, "#recommended-strategy")
        seen["answer_text"] = page.locator("#recommended-strategy").inner_text()
        seen["overlaps"] = page.evaluate(MODEBAR_OVER_LEGEND)
        card = page.locator(".card").first
        card.locator("details.launch > summary").click()
        card.locator(".tabs button[data-tab=slurm]").click()
        seen["slurm"] = card.locator(".tabpanel.on pre").inner_text()

    png = tmp_path / "report.png"
    check = screenshot_report(
        path,
        png,
        expect_texts=("Fastest · Cheapest", "Most headroom", "Balanced"),
        actions=interact,
        **FIRST_SCREEN,
    )
    assert check.plot_ids == ["fig-pareto", "fig-memory", "fig-time", "fig-parcoords"]
    assert check.rendered_ids == check.plot_ids  # plotly .main-svg inside every plot div
    assert check.console_errors == []
    assert check.blocked_requests == []  # nothing fetched from the network: self-contained
    assert all(check.visible_texts.values()), check.visible_texts
    assert check.table_rows == len(result.pareto)
    assert str(seen["first_row"]).startswith(fastest.strategy.label())
    assert seen["before"] == {"legendonly"} and seen["more_points"] is True
    assert str(seen["slurm"]).startswith("#!/bin/bash")
    assert png.stat().st_size > 50_000
    # the answer is on the first screen (1400x900) without scrolling
    assert seen["answer"]["inside"], seen["answer"]
    assert seen["answer_text"] == result.recommended[0].trial.strategy.label()
    assert [name for name, overlap in seen["overlaps"] if overlap] == []  # toolbar never over a legend


def test_whatif_report_renders_offline_in_chromium(tmp_path) -> None:
    """The what-if report from a real (small) run: every plot rendered, no console errors, no network,
    one table row per hardware option; screenshot kept in tmp_path."""
    from autopar.catalog import get_model
    from autopar.costs.whatif import run_whatif
    from autopar.reports import write_whatif_report
    from autopar.specs import Workload

    r = run_whatif(
        get_model("llama-3-8b"),
        ["H100-SXM:16", "A100-80GB:16", "H200:8"],
        Workload(seq_len=4096, global_batch=128),
        token_budget=1e11,
        budget=30,
        seed=0,
    )
    path = write_whatif_report(r, tmp_path / "whatif.html")
    seen: dict[str, object] = {}

    def interact(page) -> None:
        seen["answer"] = first_screen(page, "#recommended-option")
        seen["answer_text"] = page.locator("#recommended-option").inner_text()
        seen["overlaps"] = page.evaluate(MODEBAR_OVER_LEGEND)

    check = screenshot_report(path, tmp_path / "whatif.png", actions=interact, **FIRST_SCREEN)
    assert check.plot_ids and check.rendered_ids == check.plot_ids
    assert check.console_errors == []
    assert check.blocked_requests == []
    assert check.table_rows >= len(r.options)
    assert (tmp_path / "whatif.png").stat().st_size > 20_000
    assert seen["answer"]["inside"], seen["answer"]  # the best option is on the first screen
    assert seen["answer_text"] == r.winner.label
    assert [name for name, overlap in seen["overlaps"] if overlap] == []


def test_calibration_report_renders_offline_in_chromium(tmp_path) -> None:
    """The calibration report with the inlined partial bundle: the scatter renders with its error bars
    (the band), no console errors, no network."""
    from autopar.reports.calibration_html import write_report

    path = write_report(make_held_out(), tmp_path / "calibration.html")
    seen: dict[str, int] = {}

    def interact(page) -> None:
        seen["error_bars"] = page.locator("#fig-calibration path.yerror").count()
        seen["overlaps"] = page.evaluate(MODEBAR_OVER_LEGEND)

    check = screenshot_report(path, tmp_path / "calibration.png", actions=interact)
    assert check.plot_ids == ["fig-calibration"] and check.rendered_ids == check.plot_ids
    assert check.console_errors == []
    assert check.blocked_requests == []
    assert seen["error_bars"] > 0
    assert [name for name, overlap in seen["overlaps"] if overlap] == []


def test_compare_page_answer_on_the_first_screen(tmp_path) -> None:
    """`autopar compare --out`: the three answer cards lie wholly on the first 1400x900 screen, the
    step-split chart renders offline, no console errors, the toolbar clears the legend."""
    from typer.testing import CliRunner

    from autopar.cli import app

    labels = ["TP8+SP PP4 DP2/Z1 mb1", "TP4+SP PP4v5 DP4/Z1 mb1 full-AC", "TP8+SP PP8 DP1 mb1"]
    path = tmp_path / "compare.html"
    r = CliRunner().invoke(app, ["compare", *labels, "--no-calibration", "--out", str(path)])
    assert r.exit_code == 0, r.output
    seen: dict[str, object] = {}

    def interact(page) -> None:
        seen["cards"] = [first_screen(page, f"#best-{o}") for o in ("throughput", "memory", "cost")]
        seen["fastest"] = page.locator("#best-throughput").inner_text()
        seen["overlaps"] = page.evaluate(MODEBAR_OVER_LEGEND)

    check = screenshot_report(path, tmp_path / "compare.png", actions=interact, **FIRST_SCREEN)
    assert check.plot_ids == ["fig-step-split"] and check.rendered_ids == check.plot_ids
    assert check.console_errors == [] and check.blocked_requests == []
    assert all(c["inside"] for c in seen["cards"]), seen["cards"]
    assert seen["fastest"] == labels[0]  # 72.3k tokens/s against 56.7k and 68.4k (compare --json)
    assert [name for name, overlap in seen["overlaps"] if overlap] == []


def test_tune_report_renders_offline_in_chromium(tmp_path, monkeypatch) -> None:
    """The tune report of a real tune (a fake cluster through the cmd: runner): both plots rendered, no
    console errors, no network, one table row per run, the measured pick on the first screen."""
    import json
    import sys

    from typer.testing import CliRunner

    from autopar.cli import app

    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    speeds = {"TP8+SP PP2v4 DP4/Z1 mb1": 900.0, "TP8+SP DP8/Z1 mb1": 1010.0, "TP4+SP PP4 DP4/Z1 mb1": 700.0}
    (tmp_path / "labels.txt").write_text("\n".join(speeds) + "\n")
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import json, os\n"
        f"x = {speeds!r}[os.environ['AUTOPAR_STRATEGY']]\n"
        "json.dump({'status': 'ok', 'tokens_per_s_per_gpu': x}, open(os.environ['AUTOPAR_RESULT'], 'w'))\n"
    )
    args = ["tune", "--runner", f"cmd:{sys.executable} {fake}", "--candidates", "labels.txt", "--no-store"]
    res = CliRunner().invoke(app, [*args, "--json", "--out", "tune.html"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    seen: dict[str, object] = {}

    def interact(page) -> None:
        seen["pick"] = first_screen(page, "#pick")
        seen["pick_text"] = page.locator("#pick").inner_text()
        seen["overlaps"] = page.evaluate(MODEBAR_OVER_LEGEND)

    check = screenshot_report(tmp_path / "tune.html", tmp_path / "tune.png", actions=interact, **FIRST_SCREEN)
    assert check.plot_ids == ["fig-runs", "fig-belief"] and check.rendered_ids == check.plot_ids
    assert check.console_errors == []
    assert check.blocked_requests == []
    assert check.table_rows == len(doc["runs"])
    assert seen["pick"]["inside"], seen["pick"]
    assert seen["pick_text"] == "TP8+SP DP8/Z1 mb1"  # the fastest the fake cluster measured
    assert [name for name, overlap in seen["overlaps"] if overlap] == []
