"""Issue 46 items 1 and 7: the verdict first (CLI, JSON, HTML), the pick marked in its table, the reasoning behind
--explain, and the Pareto output's hygiene (no no-op twins, a table that fits a laptop, every GPU in the legend)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.cli import app
from autopar.reports.verdict import TieMate, chosen_because

runner = CliRunner()


@pytest.fixture(scope="module")
def default_json() -> dict:
    """The default problem's --json (Llama-3.1-70B on 64 H100-SXM, exhaustive sweep: about a second)."""
    res = runner.invoke(app, ["optimize", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.fixture(scope="module")
def default_text() -> str:
    res = runner.invoke(app, ["optimize"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.output


def test_verdict_is_the_first_thing_in_json(default_json: dict) -> None:
    """`verdict` is the document's first key and names the first recommendation with its band."""
    assert next(iter(default_json)) == "verdict"
    v, first = default_json["verdict"], default_json["recommended"][0]
    assert v["label"] == first["label"]
    assert v["tokens_per_s_low"] <= v["tokens_per_s"] <= v["tokens_per_s_high"]
    assert 1 <= len(v["lines"]) <= 3


def test_verdict_row_is_the_picks_row_on_the_front(default_json: dict) -> None:
    """The row the verdict names holds the pick (the friction: 'fastest' was row 2 of its own table unsaid)."""
    v = default_json["verdict"]
    assert default_json["pareto"][v["row"] - 1]["label"] == v["label"]


def test_train_bands_follow_from_the_throughput_band(default_json: dict) -> None:
    """time = tokens / throughput: its short end comes from the throughput band's high end (and cost alike)."""
    v = default_json["verdict"]
    assert (
        v["tokens"] == 1e12 and v["budget_given"] is False
    )  # the report's reference budget without --tokens
    days = v["tokens"] / v["tokens_per_s"] / 86_400
    assert v["train_days"] == pytest.approx(days)
    assert v["train_days_low"] == pytest.approx(v["tokens"] / v["tokens_per_s_high"] / 86_400)
    assert v["train_days_high"] == pytest.approx(v["tokens"] / v["tokens_per_s_low"] / 86_400)
    ratio = v["train_usd_high"] / v["train_usd"]
    assert ratio == pytest.approx(v["tokens_per_s"] / v["tokens_per_s_low"])


def test_near_ties_are_every_point_within_two_percent_or_faster(default_json: dict) -> None:
    """Independently from the front: rows with throughput >= 0.98 x the pick's, the pick excluded."""
    v = default_json["verdict"]
    expected = {r["label"] for r in default_json["pareto"] if r["throughput"] >= 0.98 * v["tokens_per_s"]}
    expected.discard(v["label"])
    assert {t["label"] for t in v["ties"]} == expected
    faster = [t for t in v["ties"] if t["tokens_per_s"] > v["tokens_per_s"]]
    assert bool(faster) == bool(v["chosen_because"])


def test_text_output_puts_the_verdict_before_the_table_and_marks_the_pick(default_text: str) -> None:
    lines = default_text.splitlines()
    pick = next(i for i, line in enumerate(lines) if line.startswith("pick (row "))
    table = next(i for i, line in enumerate(lines) if line.startswith("Pareto set"))
    assert pick < table
    row = int(re.search(r"pick \(row (\d+) ★\)", lines[pick]).group(1))
    marked = [line for line in lines[table:] if re.match(rf"│ {row}★≈? ", line)]
    assert len(marked) == 1
    assert "--explain for the reasoning" in default_text
    assert "Its " not in default_text.split("recipe:")[0]  # the long 'why' paragraph is behind --explain


def test_explain_prints_the_reasoning() -> None:
    res = runner.invoke(app, ["optimize", "--explain"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "compute-bound" in res.output and "runner-up" in res.output


def test_explain_with_json_is_an_error() -> None:
    res = runner.invoke(app, ["optimize", "--explain", "--json"])
    assert res.exit_code != 0
    assert "explain" in res.output and "Traceback" not in res.output


def test_front_has_no_rows_differing_only_in_a_noop_zero_stage(default_json: dict) -> None:
    """At DP1 without CP there is no group to shard over: Z0/Z1/Z2 are one layout (the friction's twin rows)."""
    seen: dict[tuple, str] = {}
    for r in default_json["pareto"]:
        key = (r["gpu"], r["num_gpus"], round(r["throughput"], 6), round(r["headroom"], 6))
        assert key not in seen, (seen.get(key), r["label"])
        seen[key] = r["label"]


def test_chosen_because_names_what_the_pick_leads_on() -> None:
    """Hand-built: the pick's band starts at 62k against 60k, and it frees 10.1 against 9.3 GiB."""
    pick = TieMate("A", "64 × H100", 2, 72_000.0, (62_000.0, 77_000.0), 10.1)
    ahead = [TieMate("B", "64 × H100", 1, 73_000.0, (60_000.0, 81_000.0), 9.3)]
    why = chosen_because(pick, ahead)
    assert "62k vs 60k" in why and "10.1 vs 9.3 GiB" in why
    assert chosen_because(pick, []) == ""


@settings(max_examples=60, deadline=None)
@given(
    st.floats(1e3, 1e6),
    st.floats(0.5, 0.99),
    st.floats(1.01, 1.5),
    st.floats(1e9, 1e14),
)
def test_scaled_band_brackets_the_value(tps: float, lo: float, hi: float, tokens: float) -> None:
    """Property: a time derived from throughput keeps its band ordered and around its centre."""
    from autopar.reports.verdict import _scaled

    days = tokens / tps / 86_400
    band = _scaled(days, tps, (lo * tps, hi * tps))
    assert band is not None
    assert band[0] <= days <= band[1]
    assert band[0] == pytest.approx(days / hi) and band[1] == pytest.approx(days / lo)


# --------------------------------------------------------------------------- the report's first screen (Chromium)

PAGE_FITS = """() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
  table: document.querySelector('#pareto-table').getBoundingClientRect().width,
  wrap: document.querySelector('#pareto-table').parentElement.getBoundingClientRect().width,
  legend: Array.from(document.querySelectorAll('#fig-pareto .legendtext')).map(e => e.textContent)})"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1400, 800])
def test_report_first_screen_shows_the_verdict(tmp_path, width: int) -> None:
    """At 1400x900 and 800x900: the verdict lies wholly inside the first screen, the page does not scroll
    sideways, the Pareto table starts at its first-screen columns, and a GPU with no point on the front is
    still in the legend (the friction: a dominated GPU vanished)."""
    import importlib.util
    import os
    from pathlib import Path

    from autopar.reports.screenshot import CHROMIUM, screenshot_report

    if os.environ.get("AUTOPAR_REQUIRE_BROWSER") != "1" and not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}")
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("needs the playwright package")
    out = tmp_path / "report.html"
    res = runner.invoke(app, ["optimize", "--gpu", "H100-SXM,A100-80GB", "--out", str(out)])
    assert res.exit_code == 0, res.output
    seen: dict[str, object] = {}

    def look(page) -> None:
        seen["verdict"] = page.evaluate(
            """() => { window.scrollTo(0, 0); const r = document.querySelector('#verdict').getBoundingClientRect();
            return r.top >= 0 && r.bottom <= window.innerHeight && r.right <= window.innerWidth; }"""
        )
        seen.update(page.evaluate(PAGE_FITS))

    check = screenshot_report(out, tmp_path / "shot.png", width=width, height=900, actions=look)
    assert check.console_errors == []
    assert seen["verdict"] is True
    assert seen["scroll"] <= seen["inner"]
    assert seen["wrap"] <= seen["inner"]  # the table scrolls inside its box, never the page
    if width >= 1400:  # a laptop screen holds the first-screen columns whole
        assert seen["table"] <= seen["inner"], seen["table"]
    assert any("A100-80GB" in t for t in seen["legend"]), seen["legend"]
