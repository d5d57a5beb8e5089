"""The memory verdict (fits / at risk / oom): hand-made cases, an invariant, and a published run at the edge."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from autopar.calibration.apply import load_default_calibration
from autopar.calibration.batch import calibrated_batch
from autopar.calibration.verdict import AT_RISK, FITS, MEMORY_VERDICTS, OOM, memory_verdict, memory_verdicts
from autopar.data import published_runs_path


def test_verdict_by_hand():
    assert memory_verdict(70.0, 60.0, 79.2) == FITS  # point estimate inside usable memory
    assert memory_verdict(79.2, None, 79.2) == FITS  # exactly full still fits
    assert memory_verdict(80.0, 66.0, 79.2) == AT_RISK  # over, but the band reaches below 79.2
    assert memory_verdict(100.0, 80.0, 79.2) == OOM  # the whole band is over
    assert memory_verdict(80.0, None, 79.2) == OOM  # no band (analytical mode): the point estimate decides
    assert memory_verdict(80.0, math.nan, 79.2) == OOM
    assert memory_verdicts([80.0, math.nan], [66.0, 1.0], [79.2, 79.2]) == [AT_RISK, ""]


_GIB = st.floats(1.0, 400.0)


@given(_GIB, _GIB, _GIB, st.floats(0.0, 50.0))
def test_more_memory_never_improves_the_verdict(mem, lo, usable, extra):
    """Raising the estimate and its band's low end by the same amount never moves the verdict towards 'fits'."""
    rank = MEMORY_VERDICTS.index
    lo = min(lo, mem)
    assert rank(memory_verdict(mem + extra, lo + extra, usable)) >= rank(memory_verdict(mem, lo, usable))


def test_published_run_at_the_edge_is_at_risk_not_oom():
    """NAR21-T2-04 ran (Narayanan et al. 2021, Table 1: 145.6B on A100-80GB); the model puts it 0.2 GiB over
    79.2 GiB usable, well inside its memory band: 'at risk' and pred_fits True, never a confident OOM."""
    df = pd.read_csv(published_runs_path())
    row = df[df["id"] == "NAR21-T2-04"]
    ana = calibrated_batch(row, None).iloc[0]
    assert (
        ana["pred_memory_verdict"] == OOM and not ana["pred_fits"]
    )  # analytical: no band, the point decides
    cal = calibrated_batch(row, load_default_calibration()).iloc[0]
    over = cal["pred_mem_gib_per_gpu"] - (cal["pred_headroom_gib"] + cal["pred_mem_gib_per_gpu"])
    assert 0 < -cal["pred_headroom_gib"] == over < 1.0
    assert cal["pred_mem_gib_per_gpu_lo"] < 79.2 < cal["pred_mem_gib_per_gpu"]
    assert cal["pred_memory_verdict"] == AT_RISK and bool(cal["pred_fits"])


def test_far_over_is_oom_with_the_band():
    """The same run with selective instead of full recompute keeps every layer's activations: far over: oom even with the band."""
    df = pd.read_csv(published_runs_path())
    row = df[df["id"] == "NAR21-T2-04"].copy()
    row["recompute"] = "selective"
    cal = calibrated_batch(row, load_default_calibration()).iloc[0]
    assert cal["status"] == "ok"
    assert cal["pred_mem_gib_per_gpu_lo"] > 79.2
    assert cal["pred_memory_verdict"] == OOM and not cal["pred_fits"]
