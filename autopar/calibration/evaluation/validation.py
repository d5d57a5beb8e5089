"""Validation by source: leave-one-group-out errors, the no-worse gate, conformal coverage, adaptation.

A group is a cluster (a record's `cluster` id, else its source). Everything here predicts a group
with a model fitted without it, because a user's cluster is a group the shipped model never saw.

- `select_params`: the ridge penalty and the shrink toward factor 1. Among (alpha, shrink) pairs whose
  leave-one-group-out median and mean APE are no worse than the analytical model's on *every* group,
  the one with the lowest mean-over-groups median APE; shrink = 0 (the analytical model) always passes.
  That gate alone only checks one pair chosen with every group in view. The nested check
  (`nested_cap`) redoes the selection without each group (its gate run on the remaining groups) and
  scores the group it left out; the shrink is capped at the largest value (walking toward 0, the
  analytical model) for which that is no worse on every group. A new source gets exactly this: a
  selection made without it.
- `held_out`: each group's predictions and band from models that never saw it, with the parameters
  selected without it (nested); the band's scores come from the other groups' own out-of-group
  residuals, so coverage is honest.
- `adaptation`: for each group, fit on the others plus k of its runs, score its remaining runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from autopar.errors import CALIBRATE_EXTRA, MissingExtraError

try:
    from scipy.stats import spearmanr
except ModuleNotFoundError as err:
    raise MissingExtraError("scikit-learn", CALIBRATE_EXTRA, "validating a calibration model") from err

from autopar.calibration.models.corrector import (
    ThroughputCorrector,
    ape_of_log_error,
    conformal_band,
    group_medians,
)
from autopar.calibration.models.features import TrainingSet

ALPHAS: tuple[float, ...] = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
SHRINKS: tuple[float, ...] = tuple(round(1.0 - 0.1 * i, 1) for i in range(11))  # 1.0, 0.9, ..., 0.0
COVERAGE = 0.8  # nominal band coverage
GATE_TOLERANCE = 1e-9  # "no worse" is exact: a group's held-out APE may not rise at all
PRIOR_SCALES: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
KS = (0, 3, 5)  # runs of the held-out cluster added in the adaptation benchmark
DRAWS = 10  # random draws of those k runs per group (seeded)


def _fit(
    X: np.ndarray, y: np.ndarray, g: np.ndarray, alpha: float, shrink: float, prior_scale: float = 1.0
) -> ThroughputCorrector:
    return ThroughputCorrector(alpha=alpha, shrink=shrink, coverage=COVERAGE, prior_scale=prior_scale).fit(
        X, y, groups=g
    )


def loso_raw(X: np.ndarray, y: np.ndarray, g: np.ndarray, alpha: float) -> np.ndarray:
    """Unshrunk global correction of each row from a model fitted without its group (offset 0)."""
    out = np.zeros(len(y))
    for grp in np.unique(g):
        test = g == grp
        if test.all():
            continue
        m = _fit(X[~test], y[~test], g[~test], alpha, 1.0)
        out[test] = m.predict(X[test])
    return out


def group_apes(
    y: np.ndarray, center: np.ndarray, g: np.ndarray
) -> dict[str, tuple[float, float, float, float]]:
    """Per group: (median APE analytical, corrected, mean APE analytical, corrected)."""
    before, after = ape_of_log_error(-y), ape_of_log_error(center - y)
    names, inv = np.unique(g, return_inverse=True)
    k = len(names)
    med_b, med_a = group_medians(before, inv, k), group_medians(after, inv, k)
    # each group's rows in their original order (stable sort), so the means are np.mean(x[g == k]) exactly
    order = np.argsort(inv, kind="stable")
    ends = np.cumsum(np.bincount(inv, minlength=k))
    starts = ends - np.bincount(inv, minlength=k)
    b_sorted, a_sorted = before[order], after[order]
    return {
        str(name): (
            float(med_b[i]),
            float(med_a[i]),
            float(np.mean(b_sorted[starts[i] : ends[i]])),
            float(np.mean(a_sorted[starts[i] : ends[i]])),
        )
        for i, name in enumerate(names)
    }


def passes_gate(y: np.ndarray, center: np.ndarray, g: np.ndarray) -> bool:
    """True when no group's held-out median or mean APE is above the analytical model's."""
    return all(
        mb_a <= mb_b + GATE_TOLERANCE and mn_a <= mn_b + GATE_TOLERANCE
        for mb_b, mb_a, mn_b, mn_a in group_apes(y, center, g).values()
    )


def _score(y: np.ndarray, center: np.ndarray, g: np.ndarray) -> float:
    """Mean over groups of the held-out median APE (each group counts once)."""
    return float(np.mean([v[1] for v in group_apes(y, center, g).values()]))


@dataclass(frozen=True)
class Choice:
    """The chosen penalty and shrink, and why; `folds` holds what the selection picked without each group."""

    alpha: float
    shrink: float
    reason: str
    unshrunk_passes: bool  # the full correction (shrink 1, best alpha) already passed the gate
    prior_scale: float = 1.0
    cap: float = 1.0  # the largest shrink the nested check allows
    folds: dict[str, tuple[float, float]] = field(default_factory=dict)  # group -> (alpha, shrink) without it


def _gate_select(
    y: np.ndarray, g: np.ndarray, raws: dict[float, np.ndarray], shrinks: Sequence[float]
) -> tuple[float, float, float]:
    """(score, alpha, shrink): the best held-out error among the pairs passing the gate on these groups."""
    if len(np.unique(g)) < 2:
        return math.nan, _one_group_alpha(list(raws)), 0.0
    best: tuple[float, float, float] | None = None
    for a, raw in raws.items():
        for s in shrinks:
            if passes_gate(y, s * raw, g):
                cand = (_score(y, s * raw, g), -s, a)
                best = cand if best is None or cand < best else best
    assert best is not None  # shrink 0 always passes
    return best[0], best[2], -best[1]


def _one_group_alpha(alphas: Sequence[float]) -> float:
    return alphas[len(alphas) // 2]


@dataclass(frozen=True)
class _OuterFold:
    """One left-out group: the inner held-out corrections of the remaining groups (per alpha), and the
    unshrunk correction of the left-out group's runs from a fit on all the remaining groups."""

    test: np.ndarray  # mask of the left-out group
    inner: dict[float, np.ndarray]
    outer: dict[float, np.ndarray]

    def pick(self, y: np.ndarray, g: np.ndarray, shrinks: Sequence[float]) -> tuple[float, float]:
        """(alpha, shrink) the gate selects without this group, shrinks restricted to `shrinks`."""
        _, a, s = _gate_select(y[~self.test], g[~self.test], self.inner, shrinks)
        return a, s


def _outer_fold(X: np.ndarray, y: np.ndarray, g: np.ndarray, grp: str, alphas: Sequence[float]) -> _OuterFold:
    test = g == grp
    Xr, yr, gr = X[~test], y[~test], g[~test]
    inner = {a: loso_raw(Xr, yr, gr, a) for a in alphas}
    outer = {a: _fit(Xr, yr, gr, a, 1.0).predict(X[test]) for a in alphas}
    return _OuterFold(test, inner, outer)


def nested_cap(
    X: np.ndarray, y: np.ndarray, g: np.ndarray, alphas: Sequence[float], shrinks: Sequence[float]
) -> tuple[float, dict[str, tuple[float, float]], np.ndarray]:
    """The largest shrink cap under which the selection, redone without each group (its own gate on the
    remaining groups), is no worse on that group: walk the cap down toward 0 (the analytical model,
    which always passes) until it holds. Returns the cap, each group's (alpha, shrink) and the held-out
    log corrections it passed with."""
    folds = {str(grp): _outer_fold(X, y, g, grp, alphas) for grp in np.unique(g)}
    for cap in sorted(set(shrinks), reverse=True):
        allowed = [s for s in shrinks if s <= cap]
        picks = {k: f.pick(y, g, allowed) for k, f in folds.items()}
        center = np.zeros(len(y))
        for k, f in folds.items():
            a, s = picks[k]
            center[f.test] = s * f.outer[a]
        if passes_gate(y, center, g):
            return cap, picks, center
    raise AssertionError("shrink 0 always passes the nested check")  # pragma: no cover


def select_params(
    X: np.ndarray,
    y: np.ndarray,
    groups: Sequence[str],
    alphas: Sequence[float] = ALPHAS,
    shrinks: Sequence[float] = SHRINKS,
    cap: float | None = None,
) -> Choice:
    """The (alpha, shrink) with the best held-out error among those passing the no-worse gate, its shrink
    capped by the nested check (`nested_cap`), so that what is claimed is what a new source gets: the
    selection itself, redone without a source, is no worse on that source (median and mean APE).

    `cap` given: use it instead of running the nested check (no `folds`). The accuracy benchmark passes
    the default model's cap when it refits without a source, so its leave-one-source-out column is the
    nested check's own folds."""
    g = np.asarray(groups)
    if len(np.unique(g)) < 2:
        return Choice(
            _one_group_alpha(alphas), 0.0, "one group: nothing to validate on, no correction", False
        )
    raws = {a: loso_raw(X, y, g, a) for a in alphas}
    full_passes = any(passes_gate(y, r, g) for r in raws.values())
    folds: dict[str, tuple[float, float]] = {}
    if cap is None:
        cap, folds, _ = nested_cap(X, y, g, alphas, shrinks)
        how = "the largest under which the selection redone without each source is no worse on it"
    else:
        how = "given"
    score, a, s = _gate_select(y, g, raws, [v for v in shrinks if v <= cap + GATE_TOLERANCE])
    ps = select_prior_scale(X, y, g, a, s)
    why = "full correction" if s == 1.0 else f"shrunk to {s:.1f} x the correction"
    if s == 0.0:
        why = "no correction passes the gate: analytical model + cluster offsets"
    why += (
        f" (held-out median APE {100 * score:.1f}% mean over groups; shrink cap {cap:.1f}: {how}); "
        f"cluster-offset prior x{ps:g}"
    )
    return Choice(a, s, why, full_passes, ps, cap, folds)


def select_prior_scale(
    X: np.ndarray, y: np.ndarray, g: np.ndarray, alpha: float, shrink: float, k: int = 3, draws: int = 5
) -> float:
    """The offset prior strength with the lowest error on each group's other runs after learning from k
    of them (mean over groups); ties go to the stronger prior (more pooling)."""
    best = None
    for ps in PRIOR_SCALES:
        errs = []
        rng = np.random.default_rng(0)
        for grp in np.unique(g):
            idx, others = np.flatnonzero(g == grp), np.flatnonzero(g != grp)
            if len(idx) <= k + 1:
                continue
            errs += [
                _adapt_once(X, y, g, others, idx, k, (alpha, shrink, ps), (0.0, 0.0), rng)[1]
                for _ in range(draws)
            ]
        score = float(np.mean(errs)) if errs else 0.0
        if best is None or (score, -ps) < best:
            best = (score, -ps)
    return -best[1] if best else 1.0


# ------------------------------------------------------------------------------- held-out predictions
@dataclass
class HeldOut:
    """Each row predicted (center, band; log corrections) by a model that never saw its group."""

    ts: TrainingSet
    center: np.ndarray
    low: np.ndarray
    high: np.ndarray
    scheme: str  # "leave-one-source-out" or "leave-one-run-out (one source)"

    def frame(self) -> pd.DataFrame:
        """One row per run: ids, groups, measured, analytical, corrected, band and APEs."""
        ts = self.ts
        return pd.DataFrame(
            {
                "id": ts.ids,
                "source": ts.groups,
                "cohort": ts.cohorts,
                "gpu": ts.gpus,
                "family": ts.families,
                "measured": ts.measured,
                "predicted": ts.predicted,
                "calibrated": ts.predicted * np.exp(self.center),
                "low": ts.predicted * np.exp(self.low),
                "high": ts.predicted * np.exp(self.high),
                "ape_before": ape_of_log_error(-ts.y),
                "ape_after": ape_of_log_error(self.center - ts.y),
                "measurement": ts.how,
            }
        )


def _band_without(X: np.ndarray, y: np.ndarray, g: np.ndarray, alpha: float, shrink: float) -> tuple:
    """Conformal band from the out-of-group residuals of these groups (each left out in turn)."""
    raw = loso_raw(X, y, g, alpha)
    return conformal_band(y - shrink * raw, g, COVERAGE)


def held_out(
    ts: TrainingSet, alpha: float, shrink: float, folds: dict[str, tuple[float, float]] | None = None
) -> HeldOut:
    """Leave-one-group-out predictions with a nested conformal band (one group: leave-one-run-out).

    `folds` (Choice.folds) gives the (alpha, shrink) selected without each group, so the table shows what
    the nested gate checked; a group missing from it gets (alpha, shrink)."""
    g = np.asarray(ts.groups)
    scheme = "leave-one-source-out"
    if len(np.unique(g)) < 2:
        g, scheme = np.array([f"run{i}" for i in range(len(ts))]), "leave-one-run-out (one source)"
    n = len(ts)
    c, lo, hi = np.zeros(n), np.zeros(n), np.zeros(n)
    for grp in np.unique(g):
        test = g == grp
        a, s = (folds or {}).get(str(grp), (alpha, shrink))
        m = _fit(ts.X[~test], ts.y[~test], g[~test], a, s)
        m.band_ = _band_without(ts.X[~test], ts.y[~test], g[~test], a, s)
        c[test], lo[test], hi[test] = m.predict_interval(ts.X[test])
    return HeldOut(ts, c, lo, hi, scheme)


def _spearman_within(df: pd.DataFrame, col: str) -> float:
    """Mean Spearman rho of measured vs `col` over cohorts (same model and GPU count) with 2+ runs."""
    rhos = []
    for _, grp in df.groupby("cohort"):
        if len(grp) >= 2 and np.ptp(grp.measured) > 0 and np.ptp(grp[col]) > 0:
            rhos.append(float(spearmanr(grp.measured, grp[col]).statistic))
    return float(np.mean(rhos)) if rhos else math.nan


def error_table(res: HeldOut, by: str = "source") -> pd.DataFrame:
    """Per group (+ 'all'): n, median/mean APE analytical and corrected, Spearman within cohorts,
    band coverage and mean band width (high/low - 1 relative to the corrected figure)."""
    df = res.frame()
    rows = []
    for name, grp in [(str(k), v) for k, v in df.groupby(by, sort=True)] + [("all", df)]:
        rows.append(
            {
                by: name,
                "n": len(grp),
                "median_ape_before": float(grp.ape_before.median()),
                "median_ape_after": float(grp.ape_after.median()),
                "mean_ape_before": float(grp.ape_before.mean()),
                "mean_ape_after": float(grp.ape_after.mean()),
                "spearman_before": _spearman_within(grp, "predicted"),
                "spearman_after": _spearman_within(grp, "calibrated"),
                "band_coverage": float(((grp.measured >= grp.low) & (grp.measured <= grp.high)).mean()),
                "band_width": float(((grp.high - grp.low) / grp.calibrated).mean()),
            }
        )
    return pd.DataFrame(rows)


# -------------------------------------------------------------------------------------- adaptation
def adaptation(
    ts: TrainingSet,
    alpha: float,
    shrink: float,
    prior_scale: float = 1.0,
    ks: Sequence[int] = KS,
    draws: int = DRAWS,
    seed: int = 0,
    folds: dict[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """For each group and k: fit on the others + k of its runs, score its remaining runs.

    Rows: group, k, n_eval (remaining runs), median APE analytical and corrected (mean over draws),
    band coverage. Groups with no more than k + 1 runs are skipped for that k. `folds` (Choice.folds):
    the (alpha, shrink) selected without each group, so k = 0 is the nested leave-one-source-out figure.
    """
    g = np.asarray(ts.groups)
    rng = np.random.default_rng(seed)
    rows = []
    for grp in sorted(set(ts.groups)):
        idx = np.flatnonzero(g == grp)
        others = np.flatnonzero(g != grp)
        if len(others) == 0:
            continue
        a, s = (folds or {}).get(str(grp), (alpha, shrink))
        band = _band_without(ts.X[others], ts.y[others], g[others], a, s)
        for k in ks:
            if len(idx) <= k + 1:
                continue
            params = (a, s, prior_scale)
            stats = [
                _adapt_once(ts.X, ts.y, g, others, idx, k, params, band, rng)
                for _ in range(draws if k else 1)
            ]
            st = np.array(stats)
            rows.append(
                {
                    "source": grp,
                    "k": k,
                    "n_eval": len(idx) - k,
                    "median_ape_before": float(st[:, 0].mean()),
                    "median_ape_after": float(st[:, 1].mean()),
                    "band_coverage": float(st[:, 2].mean()),
                }
            )
    return pd.DataFrame(rows)


def _adapt_once(
    X: np.ndarray,
    y_all: np.ndarray,
    g: np.ndarray,
    others: np.ndarray,
    idx: np.ndarray,
    k: int,
    params: tuple[float, float, float],
    band: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """One draw: train on others + k runs of the group; (median APE before, after, coverage) on the rest."""
    pick = rng.choice(idx, size=k, replace=False) if k else np.array([], dtype=int)
    rest = np.setdiff1d(idx, pick)
    train = np.concatenate([others, pick])
    m = _fit(X[train], y_all[train], g[train], *params)
    m.band_ = band
    c, lo, hi = m.predict_interval(X[rest], g[rest])
    y = y_all[rest]
    cover = float(((y >= lo) & (y <= hi)).mean())
    return float(np.median(ape_of_log_error(-y))), float(np.median(ape_of_log_error(c - y))), cover


def adaptation_summary(curve: pd.DataFrame) -> pd.DataFrame:
    """The adaptation curve over groups: per k, the mean of the per-group medians and coverage."""
    if curve.empty:
        return curve
    return (
        curve.groupby("k")[["median_ape_before", "median_ape_after", "band_coverage"]]
        .mean()
        .reset_index()
        .assign(groups=curve.groupby("k").size().to_numpy())
    )
