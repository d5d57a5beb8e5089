"""Adaptation benchmark, as a team uses calibration: a source it never saw, then k of its runs ingested.

For each source with at least MIN_RUNS runs (published runs plus --data files, grouped by source),
fit on every other source plus k random runs of it (DRAWS seeded draws per k; k = 0 is one fit),
and score its remaining runs: median APE of tokens/s per GPU and coverage of the 80% band. Printed per
source and k, then the mean over sources, for each method:

- `offsets`: what `calibrate fit --group` does (ridge x shrink chosen by the nested gate
  on the other sources, empirical-Bayes cluster offset, split-conformal band by group);
- `hier`: the same global part, then the hierarchical adapter (autopar.calibration.models.hierarchy: offset +
  slopes with priors learned from the spread between sources, band calibrated on left-out sources).

Usage: python bench/adapt.py [--data bench/data/frontier_runs.csv] [--draws 3]
       python bench/adapt.py --data bench/data/frontier_runs.csv --curve mbridge_perf_summary
(--curve: the learning curve of one cluster, runs ingested -> error, with and without gradient boosting
on what offsets and slopes leave.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from autopar.calibration.evaluation.validation import COVERAGE, _band_without, select_params
from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.models.corrector import ThroughputCorrector, ape_of_log_error
from autopar.calibration.models.features import FEATURE_NAMES, build_training_set
from autopar.calibration.models.hierarchy import SLOPE_FEATURES, HierarchicalAdapter, adapter_clusters
from autopar.data import published_runs_path

MIN_RUNS = 8  # a source needs this many runs to be scored for k up to 5 with some runs left
KS = (0, 1, 3, 5, 10)
DRAWS = 3  # seeded draws of the k runs per (source, k); the README figures use 3
SLOPE_IDX = tuple(FEATURE_NAMES.index(f) for f in SLOPE_FEATURES)


def load(paths: list[Path]) -> list[dict]:
    frames = [read_run_records(published_runs_path())] + [read_run_records(p) for p in paths]
    df = pd.concat(frames, ignore_index=True).fillna("")
    return df.to_dict("records")


def _global(X: np.ndarray, y: np.ndarray, g: np.ndarray, ch) -> ThroughputCorrector:
    return ThroughputCorrector(
        alpha=ch.alpha, shrink=ch.shrink, coverage=COVERAGE, prior_scale=ch.prior_scale
    ).fit(X, y, groups=g)


def predict_offsets(X, y, g, ch, Xt, gt, c, ct):
    """Today's `calibrate fit --group`: offsets by source (c, ct: clusters, unused)."""
    m = _global(X, y, g, ch)
    if len(set(g)) >= 2:
        m.band_ = _band_without(X, y, g, ch.alpha, ch.shrink)
    return m.predict_interval(Xt, gt)


def predict_hier(X, y, g, ch, Xt, gt, c, ct):
    """The hierarchical adapter on clusters (source, GPU) over the same global part, its band calibrated
    on left-out sources."""
    m = _global(X, y, g, ch)
    base, base_t = m.predict(X), m.predict(Xt)  # no groups: the global part only
    h = HierarchicalAdapter(SLOPE_IDX, COVERAGE).fit(X, y, c, base=base, band_groups=g)
    mid, lo, hi = h.predict_interval(Xt, ct)
    return base_t + mid, base_t + lo, base_t + hi


METHODS = {"offsets": predict_offsets, "hier": predict_hier}


def clusters(ts) -> np.ndarray:
    """A run's cluster: its group (the `cluster` cell, else its source) on one GPU type."""
    return np.array(adapter_clusters(ts.groups, ts.gpus, None))


def run(ts, ks=KS, draws=DRAWS, methods=METHODS, only=None) -> pd.DataFrame:
    g, cl = np.asarray(ts.sources), clusters(ts)
    rows = []
    for src in sorted(set(g) if only is None else only):
        idx, others = np.flatnonzero(g == src), np.flatnonzero(g != src)
        if len(idx) < MIN_RUNS:
            continue
        ch = select_params(ts.X[others], ts.y[others], g[others])  # what the other sources select
        for k in ks:
            if len(idx) - k < 3:
                continue
            rng = np.random.default_rng(1000 + k)
            for d in range(draws if k else 1):
                pick = rng.choice(idx, size=k, replace=False) if k else np.array([], int)
                rest, train = np.setdiff1d(idx, pick), np.concatenate([others, pick])
                y = ts.y[rest]
                for name, fn in methods.items():
                    args = (ts.X[train], ts.y[train], g[train], ch, ts.X[rest], g[rest], cl[train], cl[rest])
                    c, lo, hi = fn(*args)
                    rows.append(
                        {
                            "source": src,
                            "k": k,
                            "draw": d,
                            "method": name,
                            "ape_ana": float(np.median(ape_of_log_error(-y))),
                            "ape": float(np.median(ape_of_log_error(c - y))),
                            "cover": float(((y >= lo) & (y <= hi)).mean()),
                        }
                    )
    return pd.DataFrame(rows)


CURVE_NS = (5, 10, 20, 40, 60)  # runs of one cluster ingested, for the learning curve


def _regressors() -> dict:
    """scikit-learn models fitted on what offsets and slopes leave in a cluster's n runs."""
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import SplineTransformer

    return {
        # small and slow-learning: tens of runs of one cluster, a handful of physical features
        "+ boosting": GradientBoostingRegressor(
            n_estimators=150, max_depth=2, learning_rate=0.05, subsample=0.8, random_state=0
        ),
        # additive (GAM-like): a cubic spline per feature, ridge penalty chosen by leave-one-out on the n runs
        "+ GAM": make_pipeline(
            SplineTransformer(n_knots=4, degree=3, extrapolation="constant"),
            RidgeCV(alphas=np.logspace(-2, 4, 13)),
        ),
    }


def learning_curve(ts, source: str, ns=CURVE_NS, draws: int = DRAWS) -> pd.DataFrame:
    """Median APE on a source's held-out runs after n of its runs: offsets+slopes (the hierarchical
    adapter on (source, GPU) clusters) alone, and with each regressor fitted on what it leaves in those
    n runs."""
    g, cl = np.asarray(ts.sources), clusters(ts)
    idx, others = np.flatnonzero(g == source), np.flatnonzero(g != source)
    ch = select_params(ts.X[others], ts.y[others], g[others])
    rows = []
    for n in ns:
        if len(idx) - n < 10:
            continue
        rng = np.random.default_rng(2000 + n)
        for d in range(draws):
            pick = rng.choice(idx, size=n, replace=False)
            rest, train = np.setdiff1d(idx, pick), np.concatenate([others, pick])
            m = _global(ts.X[train], ts.y[train], g[train], ch)
            h = HierarchicalAdapter(SLOPE_IDX, COVERAGE, calibrate_band=False).fit(
                ts.X[train], ts.y[train], cl[train], base=m.predict(ts.X[train])
            )
            hier_pick = m.predict(ts.X[pick]) + h.predict(ts.X[pick], cl[pick])
            hier_rest = m.predict(ts.X[rest]) + h.predict(ts.X[rest], cl[rest])
            preds = {"offsets+slopes": hier_rest}
            for name, reg in _regressors().items():
                preds[name] = hier_rest + reg.fit(ts.X[pick], ts.y[pick] - hier_pick).predict(ts.X[rest])
            for name, c in preds.items():
                ape = float(np.median(ape_of_log_error(c - ts.y[rest])))
                rows.append({"n": n, "draw": d, "method": name, "ape": ape})
    out = pd.DataFrame(rows).groupby(["n", "method"])["ape"].mean().unstack()
    return out.reset_index()


def tables(raw: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    per = raw.groupby(["source", "method", "k"])[["ape_ana", "ape", "cover"]].mean().reset_index()
    wide = per.pivot_table(index=["source", "k"], columns="method", values=["ape", "cover"])
    wide.columns = [f"{a}_{b}" for a, b in wide.columns]
    wide = wide.join(per[per.method == per.method.iloc[0]].set_index(["source", "k"])["ape_ana"])
    mean = wide.groupby("k").mean()
    return wide.reset_index(), mean.reset_index()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", type=Path, default=[])
    ap.add_argument("--draws", type=int, default=DRAWS)
    ap.add_argument(
        "--curve", metavar="SOURCE", help="only the learning curve (runs ingested -> error) of SOURCE"
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    ts = build_training_set(load(args.data))
    if args.curve:
        print(f"learning curve of {args.curve}: median APE % on its held-out runs after n of its runs")
        print(
            learning_curve(ts, args.curve, draws=args.draws).to_string(
                index=False, float_format=lambda v: f"{100 * v:.1f}"
            )
        )
        return 0
    wide, mean = tables(run(ts, draws=args.draws))
    pd.set_option("display.width", 200)
    fmt = {"float_format": lambda v: f"{100 * v:.1f}"}
    print("median APE % and 80% band coverage % on a source's remaining runs, k of its runs ingested")
    print(wide.to_string(index=False, **fmt))
    print("\nmean over sources")
    print(mean.to_string(index=False, **fmt))
    print(f"\n{len(ts)} runs in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
