"""End to end: a real (small) search through autopar.search.optimize, rendered as a report."""

from __future__ import annotations

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.reports.figures import memory_bar_info, pareto_plot_info, time_bar_info
from autopar.reports.html import write_search_report
from autopar.reports.table import pareto_table_info
from autopar.search import optimize
from autopar.specs import ClusterSpec, Workload

GiB = 2**30


@pytest.fixture(scope="module")
def real_result():
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    return optimize(
        get_model("llama-3-8b"), cluster, Workload(seq_len=4096, global_batch=64), budget=40, seed=0
    )


def test_real_search_report(real_result, tmp_path) -> None:
    r = real_result
    front = {t.number for t in r.trials if t.shown}  # the front and its near-ties
    assert front and set(r.pareto["trial"]) == front
    info = pareto_plot_info(r)
    assert all(set(p.pareto.numbers) == front for p in info.panels)
    assert len(pareto_table_info(r).rows) == len(r.pareto)
    mem, tim = memory_bar_info(r), time_bar_info(r)
    for i, n in enumerate(mem.numbers):
        e = next(t for t in r.trials if t.number == n).estimate
        assert sum(s.values[i] for s in mem.segments) == pytest.approx(e.memory.total / GiB)
        assert sum(s.values[i] for s in tim.segments) == pytest.approx(e.step_time_s)
    page = write_search_report(r, tmp_path / "real.html", plotlyjs="cdn").read_text()
    for rec in r.recommended:
        assert rec.trial.strategy.label() in page


def test_calibrated_search_report_shows_band_and_corrector(tmp_path) -> None:
    from autopar.calibration.apply import load_default_calibration

    cal = load_default_calibration()
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    r = optimize(
        get_model("llama-3-8b"),
        cluster,
        Workload(seq_len=4096, global_batch=64),
        budget=30,
        seed=0,
        calibration=cal,
    )
    assert r.calibration is not None
    rec = r.recommended[0].trial.estimate
    lo, hi = rec.tokens_per_s_band
    assert lo <= rec.tokens_per_s <= hi  # the default corrector may be the identity (issue 12 gate)
    # the calibrated breakdown still adds up to the calibrated step time
    assert rec.time.total == pytest.approx(rec.step_time_s)
    page = write_search_report(r, tmp_path / "cal.html", plotlyjs="cdn").read_text()
    assert "80% band" in page and "published runs" in page
