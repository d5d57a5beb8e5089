"""Data-level tests of the search report: figure data, breakdown sums, table, page assembly."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_fixtures import H100, LLAMA8B, make_estimate, make_result

from autopar.errors import SpecError
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.reports.figures import (
    highlighted_trials,
    hover_text,
    memory_bar_info,
    parallel_coords_info,
    pareto_plot_info,
    time_bar_info,
)
from autopar.reports.html import calibration_text, search_report_html, write_search_report
from autopar.reports.plots import plot_pareto, plot_stacked_bars
from autopar.reports.table import pareto_table_info, table_html
from autopar.search.result import Recommendation, SearchResult, TrialRecord
from autopar.specs import Strategy, Workload

GiB = 2**30


@pytest.fixture(scope="module")
def result() -> SearchResult:
    return make_result()


def _front(r: SearchResult) -> set[int]:
    return {t.number for t in r.trials if t.feasible and not t.dominated}


def test_pareto_info_holds_exactly_the_pareto_points(result: SearchResult) -> None:
    info = pareto_plot_info(result)
    front = _front(result)
    assert set(info.pareto_numbers) == front == set(result.pareto["trial"])
    assert len(info.panels) == 3  # 3 objectives -> 3 pairs
    feasible = {t.number for t in result.trials if t.feasible}
    with_values = {t.number for t in result.trials if not t.feasible and t.values}
    by_num = {t.number: t for t in result.trials}
    for p in info.panels:
        assert set(p.pareto.numbers) == front and len(p.pareto.numbers) == len(front)
        assert set(p.dominated.numbers) == feasible - front
        assert set(p.infeasible.numbers) == with_values  # the rule-broken trial has nothing to plot
        for n, x, y in zip(p.pareto.numbers, p.pareto.x, p.pareto.y, strict=True):
            assert (x, y) == (by_num[n].values[p.x_name], by_num[n].values[p.y_name])
    first = info.panels[0]
    assert (first.x_name, first.y_name) == ("throughput", "headroom")
    assert first.x_title == "Throughput (tokens/s, cluster) ↑ better"
    assert info.panels[1].y_title == "Cost ($/Mtoken) ↓ better"
    # Fastest and cheapest are the same point here (one cluster, one price): one star, both labels.
    texts = dict(zip(first.recommended.numbers, first.recommended.text, strict=True))
    fastest = next(r.trial.number for r in result.recommended if r.role == "fastest")
    assert texts[fastest] == "Pick · Fastest · Cheapest"  # the first card is the pick
    assert len(first.recommended.numbers) == len({r.trial.number for r in result.recommended})


def test_pareto_figure_traces(result: SearchResult) -> None:
    """The rendered figure carries the same points; infeasible ones start hidden (legend toggle)."""
    fig = plot_pareto(pareto_plot_info(result))
    front = _front(result)
    pareto_traces = [t for t in fig.data if t.name == "Pareto front"]
    assert len(pareto_traces) == 3 and all(len(t.x) == len(front) for t in pareto_traces)
    infeasible = [t for t in fig.data if t.name.startswith("Infeasible")]
    assert infeasible and all(t.visible == "legendonly" for t in infeasible)
    assert fig.layout.height == 480  # explicit height: one row of panels
    assert all("tp=" in h for h in pareto_traces[0].hovertext)


def test_one_objective_plots_against_trial_number(result: SearchResult) -> None:
    r = make_result()
    r.objectives = r.objectives[:1]
    info = pareto_plot_info(r)
    assert len(info.panels) == 1 and info.panels[0].x_name == "trial"


def test_hover_text_shows_full_strategy(result: SearchResult) -> None:
    t = result.recommended[0].trial
    h = hover_text(t, result.objectives)
    s = t.strategy
    assert s.label() in h
    for part in (
        f"tp={s.tp}",
        f"pp={s.pp}",
        f"dp={s.dp}",
        f"cp={s.cp}",
        f"ep={s.ep}",
        f"vpp={s.vpp}",
        f"zero={s.zero}",
        f"mb={s.micro_batch}",
        f"recompute={s.recompute}",
        "16 × H100-SXM",
    ):
        assert part in h


def test_memory_bars_sum_to_peak(result: SearchResult) -> None:
    info = memory_bar_info(result)
    items = highlighted_trials(result)
    assert len(info.categories) == len(items) == 3  # fastest+cheapest merged, headroom, balanced
    for i, (_, t) in enumerate(items):
        total = sum(seg.values[i] for seg in info.segments)
        assert total == pytest.approx(t.estimate.memory.total / GiB, rel=1e-12)
        assert info.totals[i] == pytest.approx(total)
        assert info.capacity[i] == pytest.approx(79.0)
    # Hand check of the fastest point, TP2 DP8 ZeRO-1 mb1 no recompute (fixture formulas):
    # weights 16e9/2 = 8e9 B = 7.4506 GiB; grads 32e9/2 = 16e9; optimizer 96e9/2/8 = 6e9;
    # activations 34e9/2 = 17e9; other 2.1e9/2 + 0.6e9 + 2.5e9 = 4.15e9; total 51.15e9 B = 47.637 GiB.
    t0 = items[0][1]
    assert t0.strategy.label() == "TP2+SP DP8/Z1 mb1"
    seg = {s.name: s.values[0] for s in info.segments}
    assert seg["Weights"] == pytest.approx(8e9 / GiB) == pytest.approx(7.4506, abs=1e-4)
    assert seg["Other (logits, buffers, overhead)"] == pytest.approx(4.15e9 / GiB)
    assert info.totals[0] == pytest.approx(47.637, abs=1e-3)
    fig = plot_stacked_bars(info)
    cap = next(t for t in fig.data if t.name == "GPU capacity")
    assert [y for y in cap.y if y is not None] == pytest.approx([79.0] * 6)


def test_time_bars_sum_to_step_time(result: SearchResult) -> None:
    info = time_bar_info(result)
    for i, (_, t) in enumerate(highlighted_trials(result)):
        assert sum(s.values[i] for s in info.segments) == pytest.approx(t.estimate.step_time_s, rel=1e-12)
    names = [s.name for s in info.segments]
    assert "Recompute" in names  # the most-headroom point uses full recompute
    assert "CP comm (exposed)" not in names  # all zero -> not drawn
    assert info.y_title == "Time per optimizer step (s)"


def _estimate(step: float, tb: TimeBreakdown) -> Estimate:
    mem = MemoryBreakdown(1, 1, 1, 1, 1, 1, 1)
    return Estimate(
        memory=mem,
        time=tb,
        step_time_s=step,
        tokens_per_s=1,
        tokens_per_s_per_gpu=1,
        model_flops_per_step=1,
        model_flops_per_step_full_attn=1,
        hw_flops_per_step=1,
        model_tflops_per_gpu=1,
        hw_tflops_per_gpu=1,
        mfu=0.5,
        mfu_causal=0.5,
        hfu=0.5,
        peak_flops=1,
        capacity_bytes=10,
        headroom_bytes=3,
        fits=True,
        bottleneck="compute",
    )


times = st.floats(0, 10, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    c=st.floats(0.01, 10),
    rfrac=st.floats(0, 1),
    tp=times,
    cp=times,
    ep=times,
    pp=times,
    dp=times,
    bubble=times,
    opt=times,
    extra=st.floats(0, 5),
)
def test_time_segments_property(c, rfrac, tp, cp, ep, pp, dp, bubble, opt, extra) -> None:
    """Any breakdown: segments are non-negative and stack exactly to the step time (extra -> 'Other')."""
    tb = TimeBreakdown(
        compute=c,
        recompute=c * rfrac,
        tp_comm=tp,
        cp_comm=cp,
        ep_comm=ep,
        pp_comm=pp,
        dp_comm=dp,
        bubble=bubble,
        optimizer=opt,
    )
    step = tb.total + extra
    t = TrialRecord(
        number=0,
        strategy=Strategy(dp=1),
        num_gpus=1,
        gpu="X",
        precision="bf16",
        estimate=_estimate(step, tb),
        values={},
        feasible=True,
        dominated=False,
    )
    r = make_result()
    r.recommended = [Recommendation("fastest", t, "")]
    info = time_bar_info(r)
    assert all(v >= 0 for s in info.segments for v in s.values)
    assert math.isclose(sum(s.values[0] for s in info.segments), step, rel_tol=1e-9, abs_tol=1e-12)


def test_parallel_coords(result: SearchResult) -> None:
    info = parallel_coords_info(result)
    feasible = {t.number for t in result.trials if t.feasible}
    assert set(info.numbers) == feasible
    assert sum(info.is_pareto) == len(_front(result))
    assert list(info.is_pareto) == sorted(info.is_pareto)  # Pareto lines last = drawn on top
    labels = [d.label for d in info.dimensions]
    assert labels[:2] == ["TP", "PP"] and "recompute" in labels
    assert labels[-3:] == ["throughput (tokens/s)", "headroom (GiB)", "cost ($/Mtoken)"]
    assert "CP" not in labels  # constant knobs other than the core ones are dropped


@pytest.mark.parametrize("with_number", [True, False])
def test_table_rows_and_roles(with_number: bool) -> None:
    r = make_result(with_number_column=with_number)
    info = pareto_table_info(r)
    assert len(info.rows) == len(r.pareto)
    labels = [row[0][0] for row in info.rows]
    front_labels = {t.strategy.label() for t in r.trials if t.feasible and not t.dominated}
    assert set(labels) == front_labels
    fastest = next(x for x in r.recommended if x.role == "fastest").trial.strategy.label()
    assert info.roles[labels.index(fastest)] == "Fastest · Cheapest"
    assert sum(bool(x) for x in info.roles) == 3
    headers = [c.label for c in info.columns]
    assert "Throughput (tokens/s, cluster)" in headers and "mfu (%)" in headers
    assert "trial" not in headers
    html = table_html(info)
    assert html.count("<tr") == len(r.pareto) + 1 and html.count('class="rec"') == 3


def test_calibration_text() -> None:
    r = make_result()
    assert calibration_text(r).startswith("uncalibrated")
    r.calibration = {"name": "hgb-corrector", "version": "3", "mape": 0.081, "n_runs": 120}
    assert calibration_text(r) == "hgb-corrector, v3, mape 0.081, n_runs=120"


def test_page_inline_and_cdn(tmp_path) -> None:
    r = make_result()
    p = write_search_report(r, tmp_path / "sub" / "report.html")
    text = p.read_text()
    # plotly.js inlined (partial bundle, gzip + base64): works offline, well under 1.5 MB
    assert 500_000 < p.stat().st_size < 1_500_000
    assert '<script id="autopar-plotlyjs" type="application/octet-stream">' in text
    assert '<script src="https://cdn.plot.ly' not in text
    for needle in (
        "Llama-3-8B",
        "Fastest · Cheapest",
        "Most headroom",
        "uncalibrated",
        "fig-pareto",
        "fig-memory",
        "fig-time",
        "fig-parcoords",
        "pareto-table",
        "--tensor-model-parallel-size 2",
        "data_parallel_shard_degree",
        "#SBATCH --nodes=2",
        "on_demand",
        "1,000 B tokens",
    ):
        assert needle in text, needle
    small = write_search_report(r, tmp_path / "cdn.html", plotlyjs="cdn")
    assert small.stat().st_size < 600_000 and "https://cdn.plot.ly/plotly-" in small.read_text()
    with pytest.raises(SpecError, match="plotly='none'"):
        search_report_html(r, plotlyjs="none")


def test_page_escapes_names() -> None:
    r = make_result()
    r.model = LLAMA8B.model_copy(update={"name": "Evil<script>x</script>"})
    page = search_report_html(r, plotlyjs="cdn")
    assert "Evil<script>" not in page and "Evil&lt;script&gt;" in page


def test_empty_front_still_renders() -> None:
    r = make_result()
    for t in r.trials:
        t.feasible, t.dominated = False, True
    r.recommended = []
    r.pareto = r.pareto.iloc[0:0]
    page = search_report_html(r, plotlyjs="cdn")
    assert "No recommendation" in page and "fig-pareto" not in page


def test_multi_cluster_groups() -> None:
    """Trials on two GPU counts: Pareto points are grouped (coloured) by cluster."""
    r = make_result()
    w = Workload(seq_len=4096, global_batch=64)
    s = Strategy(tp=1, zero=3).with_dp(8)
    e = make_estimate(s, 8, w)
    extra = TrialRecord(
        number=999,
        strategy=s,
        num_gpus=8,
        gpu=H100.name,
        precision="bf16",
        estimate=e,
        values={"throughput": 1.0, "headroom": 1000.0, "cost": 0.01},
        feasible=True,
        dominated=False,
    )
    r.trials.append(extra)
    r.clusters.append(r.clusters[0].model_copy(update={"num_gpus": 8}))
    info = pareto_plot_info(r)
    assert set(info.groups) == {"16 × H100-SXM", "8 × H100-SXM"}
    fig = plot_pareto(info)
    assert {t.name for t in fig.data if t.name.startswith("Pareto")} == {
        "Pareto front · 16 × H100-SXM",
        "Pareto front · 8 × H100-SXM",
    }


def test_parallel_coords_log2_size_axes(result: SearchResult) -> None:
    """Size knobs sit on a log2 axis (1, 2, 4, 8 evenly spaced) with the sizes as tick labels."""
    info = parallel_coords_info(result)
    tp = next(d for d in info.dimensions if d.label == "TP")
    assert tp.ticktext == ("1", "2", "4", "8") and tp.tickvals == (0.0, 1.0, 2.0, 3.0)
    by_num = {t.number: t for t in result.trials}
    assert all(2**v == by_num[n].strategy.tp for n, v in zip(info.numbers, tp.values, strict=True))


def test_calibration_description_is_shown() -> None:
    r = make_result()
    r.calibration = {"name": "default", "description": "hgb corrector on 140 runs; median APE 18% -> 7%"}
    assert calibration_text(r) == "default, hgb corrector on 140 runs; median APE 18% -> 7%"
