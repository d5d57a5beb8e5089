"""The memory verdict (fits / uncertain / oom): hand-made cases, an invariant, and a published run at the edge."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from autopar.calibration.apply import load_default_calibration
from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.evaluation.verdict import (
    FITS,
    MEMORY_VERDICTS,
    OOM,
    UNCERTAIN,
    memory_verdict,
    memory_verdicts,
)
from autopar.data import published_runs_path


def test_verdict_by_hand():
    assert memory_verdict(70.0, 60.0, 79.2) == FITS  # point and band (up to the point) inside usable memory
    assert memory_verdict(70.0, 60.0, 79.2, 78.0) == FITS  # the band's high end fits too
    assert memory_verdict(70.0, 60.0, 79.2, 82.0) == UNCERTAIN  # usable memory inside the band
    assert memory_verdict(79.2, None, 79.2) == FITS  # exactly full still fits
    assert memory_verdict(80.0, 66.0, 79.2) == UNCERTAIN  # over, but the band reaches below 79.2
    assert memory_verdict(100.0, 80.0, 79.2) == OOM  # the whole band is over: only then a confident OOM
    assert memory_verdict(80.0, None, 79.2) == OOM  # no band (analytical mode): the point estimate decides
    assert memory_verdict(80.0, math.nan, 79.2) == OOM
    assert memory_verdicts([80.0, math.nan], [66.0, 1.0], [79.2, 79.2]) == [UNCERTAIN, ""]
    assert memory_verdicts([70.0], [60.0], [79.2], [82.0]) == [UNCERTAIN]


_GIB = st.floats(1.0, 400.0)


@given(_GIB, _GIB, _GIB, _GIB, st.floats(0.0, 50.0))
def test_more_memory_never_improves_the_verdict(mem, lo, usable, hi, extra):
    """Raising the estimate and its band by the same amount never moves the verdict towards 'fits'; 'oom' only
    when the band's low end is over usable memory."""
    rank = MEMORY_VERDICTS.index
    lo, hi = min(lo, mem), max(hi, mem)
    before = memory_verdict(mem, lo, usable, hi)
    assert rank(memory_verdict(mem + extra, lo + extra, usable, hi + extra)) >= rank(before)
    assert (before == OOM) == (lo > usable)


def test_published_run_at_the_edge_is_at_risk_not_oom():
    """NAR21-T2-04 ran (Narayanan et al. 2021, Table 1: 145.6B on A100-80GB); the model puts it 0.2 GiB over
    79.2 GiB usable, well inside its memory band: 'uncertain' and pred_fits True, never a confident OOM."""
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
    assert cal["pred_memory_verdict"] == UNCERTAIN and bool(cal["pred_fits"])


def test_far_over_is_oom_with_the_band():
    """The same run with selective instead of full recompute keeps every layer's activations: far over: oom even with the band."""
    df = pd.read_csv(published_runs_path())
    row = df[df["id"] == "NAR21-T2-04"].copy()
    row["recompute"] = "selective"
    cal = calibrated_batch(row, load_default_calibration()).iloc[0]
    assert cal["status"] == "ok"
    assert cal["pred_mem_gib_per_gpu_lo"] > 79.2
    assert cal["pred_memory_verdict"] == OOM and not cal["pred_fits"]
