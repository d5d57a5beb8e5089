"""Band widening by novelty (autopar/calibration/evaluation/novelty.py): fit and validate on left-out sources.

Each run is predicted by a corrector that never saw its source: a public run (autopar/data/published_runs.csv)
by the leave-one-source-out refit of bench/accuracy.py, a dev run (bench/data/frontier_runs.csv) and an
Ascend run (bench/data/ascend_runs.csv, a vendor the model never saw) by the shipped default model. Its
novelty is the distance in steps to the nearest published run of *another* source (novelty.evidence). The
band's miss e = how far log(measured/predicted) lies outside the band (0 inside). (KNEE_STEPS,
SLOPE_PER_STEP) minimise the 80%-quantile (pinball) loss of e - widening(novelty), every source weighted
equally, over a grid; the table then shows per source the coverage and mean width of the 80% band before
and after, "after" with the pair refitted without that source (so no source is scored with a widening it
helped to fit).

Usage: python bench/novelty.py [--cache FILE] [--categories]
  --cache FILE: per-run predictions, reused when present; --categories: the left-out-source pinball loss of
  each GPU-family / CP-exchange and ZeRO-sharding / recompute step cost (novelty.CATEGORY_STEPS' comment
  quotes it).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import load, predictions  # noqa: E402

from autopar.calibration.apply import load_default_calibration  # noqa: E402
from autopar.calibration.apply.batch import calibrated_batch  # noqa: E402
from autopar.calibration.evaluation import novelty  # noqa: E402
from autopar.calibration.models.corrector import group_weights  # noqa: E402
from autopar.calibration.models.features import group_of  # noqa: E402
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
UNSEEN = {"dev": DATA / "frontier_runs.csv", "ascend": DATA / "ascend_runs.csv"}
COVERAGE = 0.8
KNEES = np.arange(0.0, 8.01, 0.5)
SLOPES = np.arange(0.0, 0.301, 0.01)


def _unseen_rows(name: str, path: Path) -> pd.DataFrame:
    df = load([path], published=False)
    # the corrector's band as calibrated: the widening is what this bench fits
    p = calibrated_batch(df, load_default_calibration(), widen=False).reset_index(drop=True)
    meas = [measured_tokens_per_s_per_gpu(r)[0] for r in df.to_dict("records")]
    return pd.DataFrame(
        {
            "id": df["id"].astype(str),
            "group": df["group"],
            "set": name,
            "meas": meas,
            "pred": pd.to_numeric(p["pred_tokens_per_s_per_gpu"], errors="coerce"),
            "lo": pd.to_numeric(p["pred_tokens_per_s_per_gpu_lo"], errors="coerce"),
            "hi": pd.to_numeric(p["pred_tokens_per_s_per_gpu_hi"], errors="coerce"),
            "steps": _steps(df, exclude_own=False),
        }
    )


def _steps(df: pd.DataFrame, exclude_own: bool) -> list[float]:
    """Novelty of each row against the published runs (of other sources when exclude_own)."""
    from autopar.calibration.ingest.tables import read_run_records
    from autopar.data import published_runs_path

    pub = read_run_records(published_runs_path()).fillna("").to_dict("records")
    refs = [(group_of(r), p) for r in pub for p in novelty.record_points([r])]
    out = []
    for row in df.to_dict("records"):
        pts = novelty.record_points([row])
        if not pts:
            out.append(math.nan)
            continue
        own = group_of(row)
        pool = [p for g, p in refs if not (exclude_own and g == own)]
        out.append(novelty.evidence(pts[0], pool).steps)
    return out


def collect() -> pd.DataFrame:
    """Per run: set, group, measured, predicted, band and novelty (every source predicted unseen)."""
    df = load([], published=True)
    ev = predictions(df)
    pub = pd.DataFrame(
        {
            "id": ev["id"],
            "group": ev["group"],
            "set": "public",
            "meas": ev["meas_tps"],
            "pred": ev["tps_loso"],
            "lo": ev["lo_loso"],
            "hi": ev["hi_loso"],
            "steps": _steps(df, exclude_own=True),
        }
    )
    return pd.concat([pub, *(_unseen_rows(n, p) for n, p in UNSEEN.items())], ignore_index=True)


def misses(ev: pd.DataFrame) -> np.ndarray:
    """How far (log) each measurement lies outside its band; 0 inside."""
    r = np.log(ev.meas / ev.pred)
    lo, hi = np.log(ev.lo / ev.pred), np.log(ev.hi / ev.pred)
    return np.maximum(np.maximum(r - hi, lo - r), 0.0).to_numpy()


def fit(ev: pd.DataFrame) -> tuple[float, float]:
    """(knee, slope) minimising the source-weighted pinball loss at COVERAGE of miss - widening."""
    e, d = misses(ev), ev.steps.to_numpy()
    w = group_weights(list(ev.group))
    best = (math.inf, 0.0, 0.0)
    for knee in KNEES:
        hinge = np.maximum(d - knee, 0.0)
        for slope in SLOPES:
            u = e - slope * hinge
            loss = float(np.sum(w * u * (COVERAGE - (u < 0))))
            # ties: the least widening (smallest slope, then the largest knee)
            key = (round(loss, 12), slope, -knee)
            if key < (round(best[0], 12), best[2], -best[1]):
                best = (loss, float(knee), float(slope))
    return best[1], best[2]


def _score(g: pd.DataFrame, knee: float, slope: float) -> tuple[float, float]:
    wid = slope * np.maximum(g.steps.to_numpy() - knee, 0.0)
    inside = misses(g) <= wid + 1e-12
    width = (g.hi.to_numpy() * np.exp(wid) - g.lo.to_numpy() * np.exp(-wid)) / g.pred.to_numpy()
    return 100 * float(inside.mean()), 100 * float(width.mean())


def table(ev: pd.DataFrame) -> pd.DataFrame:
    """Per source: coverage and mean width before, after (pair fitted without the source)."""
    rows = []
    for (s, grp), g in ev.groupby(["set", "group"], sort=True):
        knee, slope = fit(ev[ev.group != grp])
        c0, w0 = _score(g, 0.0, 0.0)
        c1, w1 = _score(g, knee, slope)
        rows.append((s, grp, len(g), float(g.steps.median()), c0, w0, c1, w1, knee, slope))
    cols = ["set", "source", "n", "median steps", "cover before", "width before", "cover after"]
    return pd.DataFrame(rows, columns=[*cols, "width after", "knee", "slope"])


def summary(ev: pd.DataFrame, per: pd.DataFrame) -> pd.DataFrame:
    """Per set: runs, source-weighted coverage and width before/after (left-out pairs)."""
    out = []
    for s, g in per.groupby("set", sort=True):
        n = g.n.to_numpy()
        out.append((s, int(n.sum()), *(float(np.average(g[c], weights=n)) for c in per.columns[4:8])))
    return pd.DataFrame(
        out, columns=["set", "n", "cover before", "width before", "cover after", "width after"]
    )


def _steps_all(ev: pd.DataFrame) -> list[float]:
    """Every run's novelty under the current CATEGORY_STEPS (public runs against other sources)."""
    frames = {
        "public": load([], published=True),
        **{k: load([p], published=False) for k, p in UNSEEN.items()},
    }
    ids = pd.concat([f.assign(set=k) for k, f in frames.items()], ignore_index=True)
    assert list(ids["id"].astype(str)) == list(ev["id"].astype(str)), "cache rows out of order"
    return [s for k, f in frames.items() for s in _steps(f, exclude_own=k == "public")]


def left_out_loss(ev: pd.DataFrame) -> float:
    """Sum over sources of the mean pinball loss on the source under a (knee, slope) fitted without it."""
    total = 0.0
    for g in sorted(ev.group.unique()):
        knee, slope = fit(ev[ev.group != g])
        sub = ev[ev.group == g]
        u = misses(sub) - slope * np.maximum(sub.steps.to_numpy() - knee, 0.0)
        total += float(np.mean(u * (COVERAGE - (u < 0))))
    return total


# Category step costs scored by --categories, each grid with the other costs as shipped.
CATEGORY_GRIDS: tuple[dict[str, tuple[float, ...]], ...] = (
    {"family": (2.0, 3.0, 4.0), "cp_variant": (0.0, 1.0)},
    {"sharding": (0.0, 1.0, 2.0), "recompute": (0.0, 1.0, 2.0)},
)


def categories(ev: pd.DataFrame) -> None:
    """The left-out loss over each CATEGORY_GRIDS grid of category step costs (the rest as shipped)."""
    import itertools

    keep = dict(novelty.CATEGORY_STEPS)
    try:
        for grid in CATEGORY_GRIDS:
            for values in itertools.product(*grid.values()):
                novelty.CATEGORY_STEPS.update(dict(zip(grid, values, strict=True)))
                e2 = ev.assign(steps=_steps_all(ev)).dropna(subset=["meas", "pred", "lo", "hi", "steps"])
                what = ", ".join(f"{k} {v:g}" for k, v in zip(grid, values, strict=True))
                print(f"{what}: left-out loss {left_out_loss(e2):.3f}")
            novelty.CATEGORY_STEPS.update(keep)
    finally:
        novelty.CATEGORY_STEPS.update(keep)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, help="per-run predictions CSV (written if absent, else read)")
    ap.add_argument("--categories", action="store_true", help="score the category step costs and stop")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.cache and args.cache.exists():
        ev = pd.read_csv(args.cache, dtype={"group": str, "id": str})
    else:
        ev = collect()
        if args.cache:
            ev.to_csv(args.cache, index=False)
    if args.categories:
        categories(ev)
        return 0
    ev = ev.dropna(subset=["meas", "pred", "lo", "hi", "steps"]).reset_index(drop=True)
    knee, slope = fit(ev)
    print(f"fit on all {len(ev)} runs: KNEE_STEPS = {knee:g}, SLOPE_PER_STEP = {slope:g}")
    print(f"(shipped: KNEE_STEPS = {novelty.KNEE_STEPS:g}, SLOPE_PER_STEP = {novelty.SLOPE_PER_STEP:g})")
    pd.set_option("display.width", 200)
    per = table(ev)
    print(per.to_string(index=False, float_format=lambda v: f"{v:.2f}" if abs(v) < 1 else f"{v:.0f}"))
    print(summary(ev, per).to_string(index=False, float_format=lambda v: f"{v:.0f}"))
    print(f"{len(ev)} runs in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
