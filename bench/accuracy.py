"""Accuracy benchmark: analytical model and corrector against published, measured training runs.

Per source, side by side: the analytical model, the corrector in-sample (fitted on every run, the
source's own cluster offset included) and the corrector leave-one-source-out (the whole fit redone
without the source: ridge penalty and shrink re-selected by the gate on the remaining sources, what a
new user's cluster gets). The one thing kept from the fit on every source is the shrink cap, which
the nested gate (autopar.calibration.evaluation.validation.nested_cap) chose so that exactly these refits are no
worse on the source each leaves out; this column is therefore the gate's own evidence, and the cap
(one of 11 values, chosen with all sources in view) is the only selection not redone per fold. Metrics: median and mean
absolute percentage error (APE) of tokens/s/GPU, Spearman rho within the source over runs of the same
model and GPU count, runs that ran but are predicted out of memory, and the 80% band's coverage and
mean width, and the bias (median predicted / measured). Then peak memory (only some sources report it) and the adaptation curve: each source
fitted on the others plus k = 0/3/5 of its runs, scored on its remaining runs.

Usage: python bench/accuracy.py [--data runs.csv ...] [--no-published] [--rows]
(--data: extra run-record files with the 42-column schema, e.g. bench/data/frontier_runs*.csv.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from autopar.calibration.apply import fit_calibration
from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.evaluation.validation import adaptation, adaptation_summary, select_params
from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.models.features import build_training_set, group_of
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
from autopar.data import published_runs_path

MODES = ("ana", "in", "loso")


def load(paths: list[Path], published: bool) -> pd.DataFrame:
    """Every run record from the published dataset and the --data files (cells as read)."""
    frames = ([read_run_records(published_runs_path())] if published else []) + [
        read_run_records(p) for p in paths
    ]
    if not frames:
        raise SystemExit("no data: pass --data FILE or drop --no-published")
    df = pd.concat(frames, ignore_index=True).fillna("")
    df["group"] = [group_of(r) for r in df.to_dict("records")]
    return df


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    meas = [measured_tokens_per_s_per_gpu(r)[0] for r in df.to_dict("records")]
    out = pd.DataFrame({"id": df["id"].astype(str), "group": df["group"], "meas_tps": meas})
    out["meas_mem"] = pd.to_numeric(df["measured_mem_gb_per_gpu"].replace("", np.nan), errors="coerce")
    out["cohort"] = df["model"].astype(str) + "|" + df["num_gpus"].astype(str)
    return out


def predictions(df: pd.DataFrame) -> pd.DataFrame:
    """Per run: measurements and, for each mode, predicted tokens/s, band, memory and fit."""
    recs = df.to_dict("records")
    out = _measured(df)
    ana = calibrated_batch(df, None)
    cal_all = fit_calibration(recs, name="in-sample", evaluate=False)
    full = calibrated_batch(df, cal_all)
    caps = (cal_all.meta.choice.get("cap"), cal_all.meta.memory_choice.get("cap"))
    loso = []
    for grp in sorted(df["group"].unique()):
        mask = (df["group"] == grp).to_numpy()
        train = [r for r, m in zip(recs, mask, strict=True) if not m]
        cal = fit_calibration(train, name=f"without {grp}", evaluate=False, caps=caps) if train else None
        loso.append(calibrated_batch(df[mask], cal).set_index(df.index[mask]))
    for mode, p in zip(MODES, (ana, full, pd.concat(loso).sort_index()), strict=True):
        p = p.reset_index(drop=True)
        out[f"tps_{mode}"] = pd.to_numeric(p["pred_tokens_per_s_per_gpu"], errors="coerce")
        out[f"lo_{mode}"] = pd.to_numeric(p["pred_tokens_per_s_per_gpu_lo"], errors="coerce")
        out[f"hi_{mode}"] = pd.to_numeric(p["pred_tokens_per_s_per_gpu_hi"], errors="coerce")
        out[f"mem_{mode}"] = pd.to_numeric(p["pred_mem_gib_per_gpu"], errors="coerce")
        out[f"mlo_{mode}"] = pd.to_numeric(p["pred_mem_gib_per_gpu_lo"], errors="coerce")
        out[f"mhi_{mode}"] = pd.to_numeric(p["pred_mem_gib_per_gpu_hi"], errors="coerce")
        out[f"fits_{mode}"] = p["pred_fits"]
    out["status"] = ana["status"].to_numpy()
    return out


def _rho(g: pd.DataFrame, col: str) -> float:
    """Mean Spearman rho of measured vs predicted over cohorts (same model and GPU count) with 2+ runs."""
    rhos = []
    for _, c in g.dropna(subset=["meas_tps", col]).groupby("cohort"):
        if len(c) >= 2 and np.ptp(c.meas_tps) > 0 and np.ptp(c[col]) > 0:
            rhos.append(float(spearmanr(c.meas_tps, c[col]).statistic))
    return float(np.mean(rhos)) if rhos else np.nan


def _block(g: pd.DataFrame, meas: str, pred: str, lo: str, hi: str) -> dict[str, list[float]]:
    """Median/mean APE, coverage and width per mode for one measured quantity."""
    out: dict[str, list[float]] = {"med": [], "mean": [], "bias": [], "cover": [], "width": []}
    for mode in MODES:
        ok = g.dropna(subset=[meas, f"{pred}_{mode}"])
        ape = (ok[f"{pred}_{mode}"] / ok[meas] - 1).abs()
        out["bias"].append((ok[f"{pred}_{mode}"] / ok[meas]).median() if len(ok) else np.nan)
        out["med"].append(100 * ape.median() if len(ok) else np.nan)
        out["mean"].append(100 * ape.mean() if len(ok) else np.nan)
        if mode == "ana":
            continue
        b = ok.dropna(subset=[f"{lo}_{mode}", f"{hi}_{mode}"])
        inside = (b[meas] >= b[f"{lo}_{mode}"]) & (b[meas] <= b[f"{hi}_{mode}"])
        out["cover"].append(100 * inside.mean() if len(b) else np.nan)
        width = (b[f"{hi}_{mode}"] - b[f"{lo}_{mode}"]) / b[f"{pred}_{mode}"]
        out["width"].append(100 * width.mean() if len(b) else np.nan)
    return out


def _fmt(vals: list[float], digits: int = 1) -> str:
    return " | ".join("–" if v != v else f"{v:.{digits}f}" for v in vals)


def throughput_table(ev: pd.DataFrame) -> pd.DataFrame:
    """Per source and overall: APE, rho, predicted-OOM runs, coverage and width (analytical | in | LOSO)."""
    rows = []
    for name, g in [*ev.groupby("group", sort=True), ("ALL", ev)]:
        t = g.dropna(subset=["meas_tps"])
        b = _block(t, "meas_tps", "tps", "lo", "hi")
        oom = [int((g[f"fits_{m}"] == False).sum()) for m in MODES]  # noqa: E712 - runs that ran
        rows.append(
            {
                "source": name,
                "n": len(t),
                "median APE % ana|in|loso": _fmt(b["med"]),
                "mean APE % ana|in|loso": _fmt(b["mean"]),
                "bias pred/meas ana|in|loso": _fmt(b["bias"], 3),
                "Spearman ana|in|loso": _fmt([_rho(t, f"tps_{m}") for m in MODES], 2),
                "pred. OOM ana|in|loso": " | ".join(map(str, oom)),
                "80% cover % in|loso": _fmt(b["cover"], 0),
                "width % in|loso": _fmt(b["width"], 0),
            }
        )
    return pd.DataFrame(rows)


def memory_table(ev: pd.DataFrame) -> pd.DataFrame:
    """Peak memory per source that reports it: APE (analytical | in | LOSO), coverage and width."""
    rows = []
    mem = ev.dropna(subset=["meas_mem"])
    for name, g in [*mem.groupby("group", sort=True), ("ALL", mem)]:
        b = _block(g, "meas_mem", "mem", "mlo", "mhi")
        rows.append(
            {
                "source": name,
                "n": len(g),
                "median APE % ana|in|loso": _fmt(b["med"]),
                "mean APE % ana|in|loso": _fmt(b["mean"]),
                "80% cover % in|loso": _fmt(b["cover"], 0),
                "width % in|loso": _fmt(b["width"], 0),
            }
        )
    return pd.DataFrame(rows)


def adaptation_tables(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The k = 0/3/5 adaptation curve per source and summarised, and the parameter choice."""
    ts = build_training_set(df.to_dict("records"))
    ch = select_params(ts.X, ts.y, ts.groups)
    curve = adaptation(ts, ch.alpha, ch.shrink, ch.prior_scale, folds=ch.folds)
    return curve, adaptation_summary(curve), ch.reason


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", action="append", type=Path, default=[], help="extra run-record file (repeatable)"
    )
    ap.add_argument("--no-published", action="store_true", help="leave out autopar/data/published_runs.csv")
    ap.add_argument("--rows", action="store_true", help="print every run's predictions")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = load(args.data, not args.no_published)
    ev = predictions(df)
    pd.set_option("display.width", 220)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.max_rows", 1000)
    if args.rows:
        cols = ["id", "group", "meas_tps", "tps_ana", "tps_in", "tps_loso", "lo_loso", "hi_loso"]
        cols += ["meas_mem", "mem_ana", "mem_loso"]
        print(ev[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("tokens/s per GPU — analytical | corrector in-sample | corrector leave-one-source-out")
    print(throughput_table(ev).to_string(index=False))
    print("\npeak memory (GiB per GPU) — only sources that report it")
    print(memory_table(ev).to_string(index=False))
    curve, summary, reason = adaptation_tables(df)
    print(
        f"\nadaptation (fit on the other sources + k runs of this one; error on its remaining runs); {reason}"
    )
    print(curve.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for _, r in ev[ev["status"] != "ok"].iterrows():
        print(f"  not evaluated: {r['id']}: {r['status']}")
    print(f"\n{len(df)} rows in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
