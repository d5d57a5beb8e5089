"""The reports stay small and self-contained: a partial plotly.js bundle (scatter, bar, parcoords),
gzip + base64 inline (search and calibration reports); log cost axis past a 10x range; recommended labels that do not overlap;
header counts equal to the CLI's."""

from __future__ import annotations

import base64
import gzip
import json
import re

import plotly.offline as po
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_fixtures import make_held_out
from typer.testing import CliRunner

import autopar as ap
from autopar.cli import app
from autopar.errors import SpecError
from autopar.reports.calibration_html import report_html, scatter_figure
from autopar.reports.counts import search_counts
from autopar.reports.figures import PointSet, log_scale, pareto_plot_info
from autopar.reports.labels import place_labels, text_box
from autopar.reports.plotlyjs import PARTIAL_TRACES, _partial_meta, trace_types
from autopar.reports.plots import plot_parallel_coords, plot_pareto, plot_stacked_bars
from autopar.search.study import optimize

MB = 1_000_000


@pytest.fixture(scope="module")
def result_300():
    """The README problem (70B, 64..512 H100) with 300 evaluated strategies."""
    clusters = [ap.ClusterSpec(gpu=ap.get_gpu("H100-SXM"), num_gpus=n) for n in (64, 128, 256, 512)]
    wl = ap.Workload(seq_len=8192, global_batch=512)
    return optimize(ap.get_model("llama-3.1-70b"), clusters, wl, budget=300, sampler="nsga2")


def _assert_partial_bundle_inlined(page: str) -> None:
    """Nothing loaded from elsewhere; the inlined script is the shipped partial bundle."""
    assert not re.search(r"<script[^>]+src=", page)
    b64 = re.search(r'<script id="autopar-plotlyjs" type="application/octet-stream">([^<]+)</script>', page)[
        1
    ]
    js = gzip.decompress(base64.b64decode(b64))
    meta = _partial_meta()
    assert len(js) == meta["bytes"] and meta["plotly_js"] == po.get_plotlyjs_version()
    assert f'version:"{meta["plotly_js"]}"'.encode() in js or meta["plotly_js"].encode() in js


def test_300_trial_report_under_1_5_mb_and_self_contained(result_300, tmp_path) -> None:
    assert search_counts(result_300)["evaluated"] == 300
    page = ap.write_search_report(result_300, tmp_path / "r.html").read_text()
    assert len(page.encode()) < 1.5 * MB  # was 4.8-6.1 MB with the full plotly.js inlined
    _assert_partial_bundle_inlined(page)
    cdn = ap.write_search_report(result_300, tmp_path / "c.html", plotlyjs="cdn")
    # 0.59 MB before the cloud's hover text was shortened, 0.36 MB after (README: ~0.35 MB)
    assert cdn.stat().st_size < 0.4 * MB and "https://cdn.plot.ly/plotly-" in cdn.read_text()


def test_calibration_report_inlines_the_partial_bundle() -> None:
    res = make_held_out()
    assert trace_types(scatter_figure(res)) <= set(PARTIAL_TRACES)
    page = report_html(res, title="t", description="d")
    assert len(page.encode()) < 1.0 * MB  # was 4.9 MB with the full plotly.js inlined
    _assert_partial_bundle_inlined(page)
    assert 'data-autopar-fig="fig-calibration"' in page and "window.autoparPlotly.then" in page
    cdn = report_html(res, title="t", description="d", plotlyjs="cdn")
    assert len(cdn.encode()) < 0.3 * MB and "https://cdn.plot.ly/plotly-" in cdn
    with pytest.raises(SpecError, match="plotly='none'"):
        report_html(res, title="t", description="d", plotlyjs="none")


def test_report_figures_use_only_bundled_trace_types(result_300) -> None:
    from autopar.reports.figures import memory_bar_info, parallel_coords_info, time_bar_info

    figs = [
        plot_pareto(pareto_plot_info(result_300)),
        plot_stacked_bars(memory_bar_info(result_300)),
        plot_stacked_bars(time_bar_info(result_300)),
        plot_parallel_coords(parallel_coords_info(result_300)),
    ]
    assert set().union(*(trace_types(f) for f in figs)) <= set(PARTIAL_TRACES)


def test_header_counts_equal_cli(tmp_path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(
        app, ["optimize", "--sampler", "nsga2", "--budget", "120", "--out", str(out)], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 0, res.output
    cli = re.search(
        r"([\d,]+) trials = ([\d,]+) evaluated \+ [\d,]+ invalid layouts \(pruned\) · ([\d,]+) feasible, "
        r"([\d,]+) on the front(?: \+ ([\d,]+) near-ties)?",
        " ".join(res.output.split()),
    )
    page = out.read_text()
    kpi = dict(
        (k.lower(), v.replace(",", ""))
        for v, k in re.findall(r'<div class="v">([^<]+)</div><div class="k">([^<]+)</div>', page)
    )
    tiles = (kpi["evaluated"], kpi["feasible"], kpi["pareto points"])
    evaluated, feasible, front, ties = (g and g.replace(",", "") for g in cli.groups()[1:])
    assert tiles == (evaluated, feasible, front + (f" + {ties} near-ties" if ties else ""))
    assert cli.group(2) == "120"  # the budget counts evaluated strategies


def _ps(xs, ys) -> PointSet:
    return PointSet(x=tuple(xs), y=tuple(ys), numbers=tuple(range(len(xs))), hover=("",) * len(xs))


def test_log_cost_axis_past_10x(result_300) -> None:
    assert log_scale(_ps([1, 2], [0.9, 9.0]), axis="y", name="cost") is False  # exactly 10x
    assert log_scale(_ps([1, 2], [0.8, 9.0]), axis="y", name="cost") is True  # 11.25x
    assert log_scale(_ps([1, 2], [0.8, 90.0]), axis="y", name="headroom") is False  # linear quantity
    info = pareto_plot_info(result_300)
    fig = plot_pareto(info).to_dict()["layout"]
    for i, p in enumerate(info.panels):
        ref = "" if i == 0 else str(i + 1)
        costs = [*p.pareto.y, *p.dominated.y, *p.recommended.y] if p.y_name == "cost" else None
        if costs:
            want = "log" if max(costs) / min(costs) > 10 else "linear"
            assert fig[f"yaxis{ref}"]["type"] == want


@settings(max_examples=150, deadline=None)
@given(
    pts=st.lists(st.tuples(st.floats(0, 380), st.floats(0, 330)), min_size=1, max_size=4),
    names=st.lists(
        st.sampled_from(["Fastest", "Cheapest", "Most headroom", "Balanced", "Fastest · Cheapest"]),
        min_size=4,
        max_size=4,
    ),
)
def test_recommended_labels_never_overlap(pts, names) -> None:
    """Up to four labels (the four roles) in a 380 x 330 px panel, points anywhere, even coincident."""
    texts = names[: len(pts)]
    offs = place_labels(pts, texts, 380, 330)
    boxes = [text_box(x + ax, y + ay, t) for (x, y), (ax, ay), t in zip(pts, offs, texts, strict=True)]
    for i in range(len(boxes)):
        for j in range(i):
            assert not boxes[i].overlaps(boxes[j])


def test_plotly_mode_needs_out() -> None:
    res = CliRunner().invoke(app, ["optimize", "--budget", "5", "--plotly", "cdn"])
    assert res.exit_code == 2 and "--plotly applies to the HTML report" in res.output
    res = CliRunner().invoke(app, ["optimize", "--budget", "5", "--plotly", "none", "--out", "x.html"])
    assert res.exit_code == 2 and "plotly='none'" in res.output


def test_partial_bundle_metadata() -> None:
    meta = json.loads(json.dumps(_partial_meta()))
    assert meta["traces"] == list(PARTIAL_TRACES)
