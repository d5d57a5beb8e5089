"""Accuracy benchmark: the analytical model against published, measured training runs.

Prints per source and overall the median / mean absolute percentage error (APE) of tokens/s/GPU
and of memory, and Kendall tau of predicted vs measured throughput within each group of rows that
share model + cluster size. Throughput is compared as tokens/s/GPU, derived from step time or from
the source's own TFLOP/s formula where that is what a row has (see measured_tokens_per_s_per_gpu).

Usage: python bench/accuracy.py [runs.csv] [--rows] [--calibrated]
(--calibrated adds the leave-one-source-out table of the default corrector: each source predicted by a
model trained on the others.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from autopar.calibration.records import batch_estimate, measured_tokens_per_s_per_gpu, read_run_records
from autopar.data import published_runs_path


def kendall_tau(x: list[float], y: list[float]) -> float:
    """Kendall tau-b of two equally long sequences (nan for fewer than 2 pairs)."""
    n = len(x)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif dx == dy:
                conc += 1
            else:
                disc += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return float("nan") if denom == 0 else (conc - disc) / denom


def evaluate(df: pd.DataFrame) -> pd.DataFrame:
    """Join predictions with measurements; one row per record with APE columns."""
    pred = batch_estimate(df)
    out = df[["id", "source", "model", "gpu", "num_gpus"]].copy()
    meas = [measured_tokens_per_s_per_gpu(r) for r in df.to_dict(orient="records")]
    out["meas_tps"] = [m[0] for m in meas]
    out["meas_how"] = [m[1] for m in meas]
    out["meas_mem_gib"] = pd.to_numeric(df["measured_mem_gb_per_gpu"], errors="coerce")
    out = out.merge(pred, on="id", how="left")
    out["tps_ape"] = (out["pred_tokens_per_s_per_gpu"] - out["meas_tps"]).abs() / out["meas_tps"]
    out["tps_ratio"] = out["pred_tokens_per_s_per_gpu"] / out["meas_tps"]
    out["mem_ape"] = (out["pred_mem_gib_per_gpu"] - out["meas_mem_gib"]).abs() / out["meas_mem_gib"]
    return out


def summarize(ev: pd.DataFrame) -> pd.DataFrame:
    """Per-source and overall error table."""
    rows = []
    for src, g in list(ev.groupby("source", sort=True)) + [("OVERALL", ev)]:
        ok = g[g["status"] == "ok"]
        t = ok["tps_ape"].dropna()
        mm = ok["mem_ape"].dropna()
        taus = []
        for _, grp in ok.groupby(["model", "num_gpus"]):
            grp = grp.dropna(subset=["meas_tps"])
            if len(grp) >= 2:
                tau = kendall_tau(list(grp["pred_tokens_per_s_per_gpu"]), list(grp["meas_tps"]))
                if not np.isnan(tau):
                    taus.append(tau)
        rows.append(
            {
                "source": src,
                "rows": len(g),
                "evaluated": len(ok),
                "tps_n": len(t),
                "tps_median_ape_%": 100 * t.median() if len(t) else np.nan,
                "tps_mean_ape_%": 100 * t.mean() if len(t) else np.nan,
                "tps_median_ratio": ok["tps_ratio"].median() if len(t) else np.nan,
                "mem_n": len(mm),
                "mem_median_ape_%": 100 * mm.median() if len(mm) else np.nan,
                "mem_mean_ape_%": 100 * mm.mean() if len(mm) else np.nan,
                "oom_predicted": int((ok["pred_fits"] == False).sum()),  # noqa: E712
                "groups": len(taus),
                "min_tau": min(taus) if taus else np.nan,
                "mean_tau": float(np.mean(taus)) if taus else np.nan,
            }
        )
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default=str(published_runs_path()))
    ap.add_argument("--rows", action="store_true", help="print every row's prediction")
    ap.add_argument("--calibrated", action="store_true", help="also leave-one-source-out with the corrector")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = read_run_records(Path(args.runs))
    ev = evaluate(df)
    table = summarize(ev)
    wall = time.perf_counter() - t0
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.max_rows", 500)
    if args.rows:
        cols = [
            "id",
            "status",
            "strategy",
            "meas_tps",
            "pred_tokens_per_s_per_gpu",
            "tps_ratio",
            "meas_mem_gib",
            "pred_mem_gib_per_gpu",
            "bottleneck",
        ]
        print(ev[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print()
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    bad = ev[ev["status"] != "ok"]
    for _, r in bad.iterrows():
        print(f"  not evaluated: {r['id']}: {r['status']}")
    print(f"\n{len(df)} rows in {wall:.2f} s")
    if args.calibrated:
        print_loso(df)
    return 0


def print_loso(df: pd.DataFrame) -> None:
    """Leave-one-source-out error of the default corrector (median/mean APE before -> after, per source)."""
    from autopar.calibration.evaluate import error_table, leave_one_source_out

    from autopar.calibration.corrector import ThroughputCorrector
    from autopar.calibration.features import build_training_set

    t0 = time.perf_counter()
    res = leave_one_source_out(build_training_set(df.to_dict(orient="records")), ThroughputCorrector())
    for by in ("source", "family"):
        print(f"\nleave-one-source-out by {by} (APE of tokens/s per GPU, before -> after the corrector)")
        print(error_table(res, by).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
