"""Calibrated batch estimates: every run record's analytical figure, corrected figure and 80% band.

Columns added to `batch_estimate`'s: `pred_tokens_per_s_per_gpu_analytical`, `pred_tokens_per_s_per_gpu`
(corrected), `pred_tokens_per_s_per_gpu_lo` / `_hi` (80% band), the same four for `pred_mem_gib_per_gpu`,
`calibration_factor` / `memory_factor` and `pred_memory_verdict` (fits / uncertain / oom, autopar.calibration.evaluation.verdict).
The throughput band is widened for each record's novelty, its distance in steps to the nearest measured run
(`pred_novelty_steps`; calibration/evaluation/novelty.py), as `estimate` widens one strategy's band.
Step time, TFLOP/s and MFU follow the throughput factor; headroom follows the memory factor, and `pred_fits` is
False only when the verdict is oom (the whole 80% memory band over usable memory). Without a calibration the corrected columns equal the analytical
ones and the band columns are empty. A row's cluster offset is its own group's (its `cluster`, else its
source) when the model knows that group, else the model's own group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from autopar.calibration.evaluation import novelty
from autopar.calibration.evaluation.verdict import OOM, memory_verdicts
from autopar.calibration.models.features import features, group_of, memory_features
from autopar.calibration.records.estimate import batch_estimate, distinct_records, stage_estimate

TPS, MEM = "pred_tokens_per_s_per_gpu", "pred_mem_gib_per_gpu"
PEAK = "pred_peak_gib_per_gpu"  # the whole peak of the most loaded GPU: what the verdict weighs
_THROUGHPUT_LIKE = ("pred_tflops_per_gpu", "pred_hw_tflops_per_gpu", "pred_mfu")


def _row_features(row: Mapping[str, Any], evaluated: tuple[Any, Any] | None, cal: Any) -> tuple | None:
    """(throughput features, memory features, group) of one record from its specs and analytical
    estimate; None if it could not be evaluated."""
    if evaluated is None:
        return None
    sp, est = evaluated
    try:
        args = (sp.model, sp.cluster, sp.workload, sp.strategy)
        x, xm = features(*args, est), memory_features(*args, stage_estimate(row, sp, est))
    except Exception:  # noqa: BLE001 - the row's status column already says why
        return None
    g = group_of(row)
    return x, xm, g if g in cal.corrector.offsets_ else cal.meta.group, sp.workload.stack


def _batch_factors(uniq: list, evaluated: list, cal: Any) -> np.ndarray:
    """(throughput factor, lo, hi, memory factor, lo, hi) of each distinct record (NaN if unevaluated)."""
    feats = [_row_features(r, ev, cal) for r, ev in zip(uniq, evaluated, strict=True)]
    rows = [i for i, x in enumerate(feats) if x is not None]
    out = np.full((len(feats), 6), np.nan)
    if rows:
        X = np.vstack([feats[i][0] for i in rows])
        Xm = np.vstack([feats[i][1] for i in rows])
        groups = [feats[i][2] for i in rows]
        stacks = [feats[i][3] for i in rows]
        out[rows, :3] = np.column_stack(cal.bands("throughput", X, groups, stacks))
        out[rows, 3:] = np.column_stack(cal.bands("memory", Xm, groups))
    return out


def _novelty_steps(evaluated: list, calibration: Any) -> np.ndarray:
    """Steps from each distinct record to the nearest measured run (NaN where unevaluated), against the
    published runs and the calibration's own (search/evidence.py `reference_for`, as `estimate` uses)."""
    ref = novelty.reference_with(getattr(calibration.meta, "layouts", None) or ())
    out = np.full(len(evaluated), np.nan)
    for i, ev in enumerate(evaluated):
        if ev is not None:
            sp, est = ev
            s = est.strategy or sp.strategy
            out[i] = ref.evidence(novelty.point(sp.model, sp.cluster, sp.workload, s)).steps
    return out


def calibrated_batch(df: pd.DataFrame, calibration: Any | None, widen: bool = True) -> pd.DataFrame:
    """batch_estimate(df) plus analytical / corrected / band columns for throughput and memory; `widen=False`
    keeps the corrector's throughput band as calibrated (bench/novelty.py fits the widening on it)."""
    evaluated: list[Any] = []  # (specs, estimate) of each distinct configuration, reused for the factors
    distinct = distinct_records(df)
    out = batch_estimate(df, keep=evaluated, distinct=distinct)
    out.insert(out.columns.get_loc(TPS), TPS + "_analytical", out[TPS])
    out.insert(out.columns.get_loc(MEM), MEM + "_analytical", out[MEM])
    if calibration is None:
        for col in (TPS, MEM):
            out[col + "_lo"] = np.nan
            out[col + "_hi"] = np.nan
        out["calibration_factor"] = np.where(out["status"] == "ok", 1.0, np.nan)
        out["memory_factor"] = out["calibration_factor"]
        return _with_verdict(out)
    codes, uniq = distinct  # the distinct configurations batch_estimate evaluated, in its order
    fac = _batch_factors(uniq, evaluated, calibration)[codes]
    steps = _novelty_steps(evaluated, calibration)[codes]
    wide = np.exp(np.array([novelty.widening(x) if widen else 0.0 for x in steps]))
    tps = pd.to_numeric(out[TPS + "_analytical"], errors="coerce").to_numpy(dtype=float)
    mem = pd.to_numeric(out[MEM + "_analytical"], errors="coerce").to_numpy(dtype=float)
    out[TPS] = tps * fac[:, 0]
    out[TPS + "_lo"], out[TPS + "_hi"] = tps * fac[:, 1] / wide, tps * fac[:, 2] * wide
    out["pred_novelty_steps"] = steps
    out[MEM], out[MEM + "_lo"], out[MEM + "_hi"] = mem * fac[:, 3], mem * fac[:, 4], mem * fac[:, 5]
    if calibration.memory_corrector is None:  # no memory model: no band to report
        out[MEM + "_lo"], out[MEM + "_hi"] = np.nan, np.nan
    for col in _THROUGHPUT_LIKE:
        out[col] = pd.to_numeric(out[col], errors="coerce") * fac[:, 0]
    out["pred_step_s"] = pd.to_numeric(out["pred_step_s"], errors="coerce") / fac[:, 0]
    if "pred_headroom_gib" in out:
        peak = pd.to_numeric(out[PEAK], errors="coerce")
        out[PEAK] = peak * fac[:, 3]
        out["pred_headroom_gib"] = pd.to_numeric(out["usable_gib"], errors="coerce") - out[PEAK]
    out["calibration_factor"], out["memory_factor"] = fac[:, 0], fac[:, 3]
    band = None if calibration.memory_corrector is None else (fac[:, 4] / fac[:, 3], fac[:, 5] / fac[:, 3])
    return _with_verdict(out, band)


def _with_verdict(out: pd.DataFrame, band: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """Add `pred_memory_verdict` and set `pred_fits` from it (False only for oom) on evaluated rows: the whole
    peak of the most loaded GPU (`pred_peak_gib_per_gpu`, corrected) against usable memory, its 80% band at
    `band` = (low, high) x the peak (None: no band)."""
    if "pred_headroom_gib" not in out:  # no row could be evaluated: the column is still there, empty
        out["pred_memory_verdict"] = ""
        return out
    mem = pd.to_numeric(out[PEAK], errors="coerce").to_numpy(dtype=float)
    usable = pd.to_numeric(out["usable_gib"], errors="coerce").to_numpy(dtype=float)
    nan = np.full(len(mem), np.nan)
    lo, hi = (nan, nan) if band is None else (mem * band[0], mem * band[1])
    verdict = np.array(memory_verdicts(mem, lo, usable, hi), dtype=object)
    out["pred_memory_verdict"] = verdict
    ok = (out["status"] == "ok").to_numpy() & (verdict != "")
    out["pred_fits"] = out["pred_fits"].astype(object)
    out.loc[ok, "pred_fits"] = verdict[ok] != OOM
    return out
