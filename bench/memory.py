"""Memory benchmark: the analytical peak against every measured peak we hold, per source, left-one-source-out.

Per source: runs, median and mean absolute percentage error of the peak (compared as the source measured it:
the record's `memory_metric` and `memory_stage` columns), the share within 10%, the bias (median predicted /
measured), and the 80% band a user on a stack the band never saw would get: its quantiles come from the other
sources' log residuals, every source weighted equally (calibration.corrector.conformal_band), so the band
holds across sources and not only within the ones it was fitted on. Then the runs that ran (every row here
did) that the model calls out of memory: on the point estimate, and on the verdict (oom only when the band's
low end is over usable memory; calibration/evaluation/verdict.py).

Usage: python bench/memory.py [--data FILE ...] [--rows]
Default files: the shipped dataset's torchtitan peaks and bench/data's memory sets (memory_runs*.csv,
sweeps.csv), less the holdout (bench/data/holdout/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.evaluation.verdict import OOM, memory_verdict
from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.models.corrector import conformal_band
from autopar.data import published_runs_path

ROOT = Path(__file__).resolve().parents[1]
COVERAGE = 0.8


def default_files() -> list[Path]:
    data = ROOT / "bench" / "data"
    return [published_runs_path(), data / "sweeps.csv", *sorted(data.glob("memory_runs*.csv"))]


def load(paths: list[Path]) -> pd.DataFrame:
    """Every record with a measured peak, evaluated analytically (no calibration)."""
    frames = [read_run_records(p) for p in paths]
    df = pd.concat(frames, ignore_index=True)
    df = df[pd.to_numeric(df["measured_mem_gb_per_gpu"], errors="coerce").notna()].reset_index(drop=True)
    pred = calibrated_batch(df.fillna(""), None)
    out = pd.DataFrame({"id": df["id"].astype(str), "source": df["source"].astype(str)})
    out["meas"] = pd.to_numeric(df["measured_mem_gb_per_gpu"], errors="coerce")
    out["pred"] = pd.to_numeric(pred["pred_mem_gib_per_gpu"], errors="coerce")
    out["usable"] = pd.to_numeric(pred["usable_gib"], errors="coerce")
    out["peak"] = pd.to_numeric(pred["pred_peak_gib_per_gpu"], errors="coerce")
    out["status"] = pred["status"].astype(str)
    out = out[out["status"] == "ok"].reset_index(drop=True)
    out["resid"] = np.log(out["meas"] / out["pred"])
    return out


def loso_bands(ev: pd.DataFrame) -> pd.DataFrame:
    """Each row's 80% band from the other sources' residuals (every source weighted equally)."""
    ev = ev.copy()
    ev["lo"], ev["hi"] = np.nan, np.nan
    for src in ev["source"].unique():
        held = ev["source"] == src
        lo, hi = conformal_band(ev.loc[~held, "resid"].to_numpy(), ev.loc[~held, "source"].tolist(), COVERAGE)
        ev.loc[held, "lo"] = ev.loc[held, "pred"] * np.exp(lo)
        ev.loc[held, "hi"] = ev.loc[held, "pred"] * np.exp(hi)
        ev.loc[held, "peak_lo"] = ev.loc[held, "peak"] * np.exp(lo)
    return ev


def table(ev: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for name, g in [*ev.groupby("source", sort=True), ("ALL", ev)]:
        ape = (g["pred"] / g["meas"] - 1).abs()
        covered = ((g["meas"] >= g["lo"]) & (g["meas"] <= g["hi"])).mean()
        oom_point = (g["peak"] > g["usable"]).sum()
        oom_band = sum(
            memory_verdict(p, lo, u) == OOM
            for p, lo, u in zip(g["peak"], g["peak_lo"], g["usable"], strict=True)
        )
        rows.append(
            {
                "source": name,
                "n": len(g),
                "median APE %": round(100 * ape.median(), 1),
                "mean APE %": round(100 * ape.mean(), 1),
                "within 10 %": round(100 * (ape <= 0.10).mean()),
                "bias": round(float((g["pred"] / g["meas"]).median()), 3),
                "LOSO 80% cover %": round(100 * covered),
                "band width %": round(100 * float((g["hi"] / g["lo"]).median() - 1)),
                "ran, OOM (point|band)": f"{oom_point}|{oom_band}",
            }
        )
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", type=Path, help="record file (repeatable; default: see doc)")
    ap.add_argument("--rows", action="store_true", help="print every row too")
    args = ap.parse_args(argv)
    ev = loso_bands(load(args.data or default_files()))
    pd.set_option("display.width", 200)
    if args.rows:
        print(ev.to_string(index=False))
    print("peak memory per source (analytical, compared as measured; band: left-one-source-out, 80%)")
    print(table(ev).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
