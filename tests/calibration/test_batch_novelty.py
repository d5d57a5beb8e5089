"""`estimate --batch` widens each record's throughput band for its novelty, as a single `estimate` does.

Before issue 21's eighth session the batch path gave every record the corrector's band alone: on the 9
layouts of the H800 Qwen3-235B sweep (bench/data/sweeps.csv XTSW-*), 8-10 steps from the nearest published
run, that band covered 1 measurement in 9 where the single-estimate band (widened) covers 7.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from autopar.calibration.apply import load_default_calibration
from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.evaluation import novelty
from autopar.calibration.records.specs import row_to_specs
from autopar.data import published_runs_path
from autopar.perf import estimate
from autopar.search.evidence import widen_for_novelty

SWEEPS = Path(__file__).resolve().parents[2] / "bench" / "data" / "sweeps.csv"


def test_batch_band_is_the_single_estimates_band() -> None:
    rows = pd.read_csv(SWEEPS, dtype=str, keep_default_na=False)
    row = rows[rows["id"] == "XTSW-2048-01"]
    cal = load_default_calibration()
    got = calibrated_batch(row, cal).iloc[0]
    sp = row_to_specs(row.iloc[0].to_dict())
    ana = estimate(sp.model, sp.cluster, sp.workload, sp.strategy, check=False)
    s = ana.strategy or sp.strategy
    one = widen_for_novelty(
        cal.apply(sp.model, sp.cluster, sp.workload, s, ana), sp.model, sp.cluster, sp.workload, s, cal
    )
    assert one.tokens_per_s_band is not None
    lo, hi = (x / sp.cluster.num_gpus for x in one.tokens_per_s_band)
    assert got["pred_tokens_per_s_per_gpu_lo"] == pytest.approx(lo, rel=1e-9)
    assert got["pred_tokens_per_s_per_gpu_hi"] == pytest.approx(hi, rel=1e-9)
    assert got["pred_novelty_steps"] > novelty.KNEE_STEPS  # far from every published run: widened
    width = math.log(got["pred_tokens_per_s_per_gpu_hi"] / got["pred_tokens_per_s_per_gpu"])
    assert width > novelty.widening(got["pred_novelty_steps"])


def test_a_calibration_run_is_not_widened() -> None:
    """A published run the shipped calibration was fitted on is 0 steps from itself: its band is the corrector's."""
    df = pd.read_csv(published_runs_path(), dtype=str, keep_default_na=False)
    got = calibrated_batch(df[df["id"] == "NAR21-T2-04"], load_default_calibration()).iloc[0]
    assert got["pred_novelty_steps"] == 0.0


def test_novelty_bench_fits_on_the_unwidened_band(tmp_path) -> None:
    """bench/novelty.py fits the widening on the corrector's band as calibrated: were its unseen runs' bands
    already widened (the batch default), the fit would see them covered and find nothing to widen."""
    from runfiles import load_bench

    nv = load_bench("novelty")
    rows = pd.read_csv(SWEEPS, dtype=str, keep_default_na=False)
    path = tmp_path / "one.csv"
    rows[rows["id"] == "XTSW-2048-01"].to_csv(path, index=False)
    got = nv._unseen_rows("dev", path).iloc[0]
    cal = load_default_calibration()
    plain = calibrated_batch(pd.read_csv(path, dtype=str, keep_default_na=False), cal, widen=False).iloc[0]
    wide = calibrated_batch(pd.read_csv(path, dtype=str, keep_default_na=False), cal).iloc[0]
    assert got["hi"] == pytest.approx(plain["pred_tokens_per_s_per_gpu_hi"], rel=1e-9)
    assert wide["pred_tokens_per_s_per_gpu_hi"] > plain["pred_tokens_per_s_per_gpu_hi"]
