"""Hierarchical adaptation: a per-cluster offset and per-cluster slopes on a few physical features,
with priors learned from the spread between sources, and a band calibrated on left-out sources.

Model (on top of a global correction `base`, e.g. ThroughputCorrector with its group offsets off):

    y = base(x) + u_g . z(x) + e,   z(x) = (1, slope features in their physical units),
    u_g ~ N(0, diag(v)),   e ~ N(0, s2w)

- **Priors from the data**: (v, s2w) maximise the marginal likelihood of the training groups' residuals
  (type-II maximum likelihood, Gelman & Hill 2007 ch. 13; Bishop 2006 sec. 3.5). v measures how far
  clusters differ from each other (offset, slopes), s2w how far runs of one cluster scatter. A cluster
  with k runs gets the posterior mean of u_g: k runs move it as far as they justify, no further; a
  slope whose feature does not vary between sources keeps a near-zero prior variance and never moves.
- **Clusters**: a source's runs on one GPU type (`cluster_key`, `adapter_clusters`): one source's
  runs on H100 and on GB200 differ by more than its runs on one GPU do. Measured in bench/adapt.py
  (README "Adapting to a team's own cluster"): mean median APE at k = 3 own runs 6.4% vs 6.9% by source.
- **Robust**: a cluster's own runs enter with a Student-t likelihood (STUDENT_NU degrees of freedom,
  fitted by reweighting: Lange, Little & Taylor 1989), so one odd run cannot drag its cluster.
- **Band**: normalised split-conformal by source. Each training source is left out in turn with all
  its clusters (`band_groups`; priors refitted without it), its runs predicted with k = 0 and scored as residual / predictive sd; those
  scores carry the between-source component. The band is centre +/- quantiles of the scores (every
  source weighted equally) times the predictive sd at the point, so it is wide
  for a cluster never seen and narrows as its own runs shrink the posterior.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from autopar.errors import CALIBRATE_EXTRA, MissingExtraError

try:
    from scipy.optimize import minimize
    from sklearn.base import BaseEstimator, RegressorMixin
except ModuleNotFoundError as err:
    raise MissingExtraError("scikit-learn", CALIBRATE_EXTRA, "fitting a calibration model") from err

from autopar.calibration.models.adapter import AdaptedCorrector, FittedAdapter, corrector_from_params
from autopar.calibration.models.corrector import group_weights, weighted_quantile
from autopar.calibration.models.predictor import FittedCorrector

SLOPE_FEATURES: tuple[str, ...] = ("share_comm", "log2_domains_spanned", "log2_expert_dilution")
STUDENT_NU = 4.0  # degrees of freedom of the robust (Student-t) likelihood of a cluster's own runs
MIN_CLUSTERS = (
    3  # clusters (besides the one adapted) to learn priors from: fewer give no between-cluster spread
)
BAND_K = 3  # runs of a left-out source seen when scoring the band of a cluster with its own runs
NOISE_PRIOR_RUNS = 5.0  # the pooled within-cluster variance counts as this many runs of a new cluster
ROBUST_ITER = 8  # reweighting steps (EM for the t likelihood as a scale mixture of normals)
LOG_VAR_BOUNDS = (np.log(1e-8), np.log(4.0))  # variances of log ratios: 1e-8 (none) to (x7.4)^2


def cluster_key(group: str, gpu: str) -> str:
    """The cluster a run adapts: its group (the record's `cluster` id, else its source) on one GPU type.
    One source's runs on H100 and on GB200 differ by more than its runs on one GPU do (Megatron-Bridge:
    mean log residual -0.27 to -0.02 by GPU), so each (group, GPU) is a cluster of its own."""
    return f"{group}@{gpu}"


def _stats(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """Each group's sufficient statistics: Z'Z, Z'r, r'r and its run count (stacked over groups)."""
    ztz = np.stack([Z.T @ Z for Z, _ in parts])
    ztr = np.stack([Z.T @ r for Z, r in parts])
    rr = np.array([r @ r for _, r in parts])
    n = np.array([len(r) for _, r in parts], dtype=float)
    return ztz, ztr, rr, n


def _nll(theta: np.ndarray, ztz: np.ndarray, ztr: np.ndarray, rr: np.ndarray, n: np.ndarray) -> float:
    """Negative log marginal likelihood (constant dropped) of every group's residuals r ~ N(0, C),
    C = Z diag(v) Z' + s2w I, with (log v, log s2w) = theta; by the Woodbury identity with
    M = s2w diag(1/v) + Z'Z: r'C^-1 r = (r'r - b'M^-1 b) / s2w (b = Z'r) and
    log det C = (n - q) log s2w + sum log v + log det M (q = len(v))."""
    v, s2w = np.exp(theta[:-1]), float(np.exp(theta[-1]))
    M = ztz + np.diag(s2w / v)
    _, logdet_m = np.linalg.slogdet(M)
    quad = (rr - np.einsum("gi,gi->g", ztr, np.linalg.solve(M, ztr[..., None])[..., 0])) / s2w
    logdet = (n - len(v)) * np.log(s2w) + np.sum(np.log(v)) + logdet_m
    return float(0.5 * np.sum(logdet + quad))


def fit_priors(
    parts: list[tuple[np.ndarray, np.ndarray]], p: int, start: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """(v, s2w): prior variances of (offset, slopes) and the within-cluster variance, by type-II ML
    (from `start`, a previous solution's (v, s2w), where given: the left-out-source refits)."""
    pooled = np.concatenate([r for _, r in parts])
    s0 = max(float(np.var(pooled)), 1e-4)
    theta0 = np.log(np.r_[[s0 / 2], np.full(p, s0 / 20), [s0 / 2]] if start is None else start)
    res = minimize(_nll, theta0, args=_stats(parts), method="L-BFGS-B", bounds=[LOG_VAR_BOUNDS] * (p + 2))
    return np.exp(res.x[:-1]), float(np.exp(res.x[-1]))


def posterior(
    Z: np.ndarray, r: np.ndarray, v: np.ndarray, s2w: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior mean and covariance of a cluster's u_g, and its own run variance, from its runs.

    The run variance starts at the pooled s2w (a prior worth NOISE_PRIOR_RUNS runs) and moves toward
    the cluster's own scatter as its runs arrive (conjugate scaled-inverse-chi-square update), so a
    noisy cluster trusts each of its runs less and gets a wider band (every run counts in it: heavy
    tails are scatter a band must carry); runs enter the mean with Student-t weights (EM), so one odd
    run cannot drag its cluster."""
    w, s2 = np.ones(len(r)), s2w
    for _ in range(ROBUST_ITER):
        cov = np.linalg.inv(np.diag(1.0 / v) + (Z.T * w) @ Z / s2)
        mean = cov @ (Z.T * w) @ r / s2
        e2 = (r - Z @ mean) ** 2
        w = (STUDENT_NU + 1) / (STUDENT_NU + e2 / s2)
        s2 = (NOISE_PRIOR_RUNS * s2w + float(e2.sum())) / (NOISE_PRIOR_RUNS + len(r))
    return mean, cov, s2


class HierarchicalAdapter(RegressorMixin, BaseEstimator, FittedAdapter):
    """Per-cluster offset + slopes with learned shrinkage on top of a global log correction.

    scikit-learn contract: `fit(X, y, groups)`, `predict(X, groups)`, `predict_interval(X, groups)`;
    `slope_idx` are the columns of X that get per-cluster slopes; `coverage` the band's nominal level.
    Prediction and the JSON parameters are FittedAdapter's (autopar.calibration.models.adapter, numpy only).
    """

    def __init__(self, slope_idx: Sequence[int] = (), coverage: float = 0.8, calibrate_band: bool = True):
        self.slope_idx = slope_idx
        self.coverage = coverage
        self.calibrate_band = calibrate_band

    # ------------------------------------------------------------------------------------ fit
    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        groups: Sequence[Any],
        base: np.ndarray | None = None,
        band_groups: Sequence[Any] | None = None,
    ) -> HierarchicalAdapter:
        """Learn priors from the groups' residuals y - base, then every group's posterior; the band is
        calibrated by leaving out each of `band_groups` in turn (default: the groups; pass the runs'
        sources when groups are finer, e.g. (source, GPU) clusters, so that a left-out source takes
        all its clusters with it and the scores carry the whole between-source spread)."""
        X, y = np.asarray(X, float), np.asarray(y, float)
        g = np.array([str(v) for v in groups])
        r = y - (np.zeros(len(y)) if base is None else np.asarray(base, float))
        Z = self._zs(X)
        names = sorted(set(g))
        parts = [(Z[g == n], r[g == n]) for n in names]
        self.v_, self.s2w_ = fit_priors(parts, len(self.slope_idx))
        self.posterior_ = {n: self._posterior(Zg, rg) for n, (Zg, rg) in zip(names, parts, strict=True)}
        if self.calibrate_band:
            bg = g if band_groups is None else np.array([str(v) for v in band_groups])
            self._loso_band(Z, r, g, bg)
        else:
            self.band_ = self.band_seen_ = self._gauss_band()
        return self

    def _posterior(self, Z: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        return posterior(Z, r, self.v_, self.s2w_)

    def _gauss_band(self) -> tuple[float, float]:
        from scipy.stats import norm

        q = float(norm.ppf((1 + self.coverage) / 2))
        return (-q, q)

    def _loso_band(self, Z: np.ndarray, r: np.ndarray, g: np.ndarray, bg: np.ndarray) -> None:
        """Band quantiles from left-out sources `bg` (priors refitted without each, every source
        weighted equally): `band_` from scores residual / prior-predictive sd (a cluster never seen),
        `band_seen_` from each of its clusters after BAND_K of its runs (seeded pick), scored on its
        other runs against the posterior predictive sd."""
        sources = sorted(set(bg))
        if len(sources) < 3:
            self.band_ = self.band_seen_ = self._gauss_band()
            return
        rng = np.random.default_rng(0)
        unseen: list[np.ndarray] = []
        seen: list[np.ndarray] = []
        g0: list[str] = []
        g1: list[str] = []
        for src in sources:
            out = bg == src
            parts = [(Z[g == m], r[g == m]) for m in sorted(set(g[~out]))]
            v, s2w = fit_priors(parts, len(self.slope_idx), np.r_[self.v_, self.s2w_])
            unseen.append(r[out] / np.sqrt(np.einsum("ij,j,ij->i", Z[out], v, Z[out]) + s2w))
            g0 += [src] * int(out.sum())
            for n in sorted(set(g[out])):
                idx = np.flatnonzero(out & (g == n))
                if len(idx) < 2 * BAND_K:
                    continue
                pick = rng.choice(len(idx), BAND_K, replace=False)
                rest = np.delete(idx, pick)
                mean, cov, s2 = posterior(Z[idx[pick]], r[idx[pick]], v, s2w)
                sd = np.sqrt(np.einsum("ij,jk,ik->i", Z[rest], cov, Z[rest]) + s2)
                seen.append((r[rest] - Z[rest] @ mean) / sd)
                g1 += [src] * len(rest)
        self.band_ = self._quantiles(np.concatenate(unseen), g0)
        self.band_seen_ = self._quantiles(np.concatenate(seen), g1) if len(set(g1)) >= 3 else self.band_

    def _quantiles(self, scores: np.ndarray, groups: list[str]) -> tuple[float, float]:
        w, c = group_weights(groups), self.coverage
        return (weighted_quantile(scores, w, (1 - c) / 2), weighted_quantile(scores, w, (1 + c) / 2))


CURVE_NS = (0, 1, 3, 5, 10, 20, 40)  # own runs ingested, for a cluster's learning curve
CURVE_DRAWS = 3  # seeded draws of those runs per n
CURVE_MIN_REST = 3  # held-out runs a point of the curve needs


def learning_curve(
    adapter: HierarchicalAdapter,
    X: np.ndarray,
    r: np.ndarray,
    tau: float,
    ns: Sequence[int] = CURVE_NS,
    draws: int = CURVE_DRAWS,
) -> list[dict[str, float]]:
    """One cluster's learning curve: n of its runs (X, residuals r of the global part) ingested, its
    other runs scored. `adapter` is fitted on the *other* clusters (its priors and band); `tau` is the
    empirical-Bayes prior strength of the offsets (ThroughputCorrector.tau_) for the offsets column.
    Per n (mean over seeded draws): median APE of the analytical-plus-global prediction, of today's
    shrunken median offset, of the adapter, and the adapter's 80% band coverage."""
    rows = []
    for n in ns:
        if len(r) - n < CURVE_MIN_REST:
            break
        rng = np.random.default_rng(3000 + n)
        acc = np.zeros(4)
        for _ in range(draws if n else 1):
            pick = rng.choice(len(r), n, replace=False)
            rest = np.setdiff1d(np.arange(len(r)), pick)
            off = n / (n + tau) * float(np.median(r[pick])) if n else 0.0
            a = _with_cluster(adapter, "_own", X[pick], r[pick]) if n else adapter
            c, lo, hi = a.predict_interval(X[rest], ["_own"] * len(rest))
            acc += [
                np.median(np.abs(np.expm1(-r[rest]))),
                np.median(np.abs(np.expm1(off - r[rest]))),
                np.median(np.abs(np.expm1(c - r[rest]))),
                np.mean((r[rest] >= lo) & (r[rest] <= hi)),
            ]
        acc /= draws if n else 1
        keys = ("ape_global", "ape_offsets", "ape_adapter", "coverage")
        rows.append({"n": n, "held_out": len(r) - n, **dict(zip(keys, map(float, acc), strict=True))})
    return rows


def _with_cluster(
    adapter: HierarchicalAdapter, name: str, X: np.ndarray, r: np.ndarray
) -> HierarchicalAdapter:
    """A copy of a fitted adapter that also knows cluster `name` from its runs (X, residuals r)."""
    out = copy.copy(adapter)
    out.posterior_ = {**adapter.posterior_, name: adapter._posterior(adapter._zs(X), r)}
    return out


def adapter_clusters(groups: Sequence[Any], gpus: Sequence[Any], keep: str | None) -> list[str]:
    """Each run's cluster for the adapter: (group, GPU) by cluster_key, except the group `keep` (the
    team's own, named by `calibrate fit --group`), which stays one cluster under its own name so that
    every prediction made for it finds its posterior."""
    return [
        g if g == keep else cluster_key(g, gpu)
        for g, gpu in zip(map(str, groups), map(str, gpus), strict=True)
    ]


def slope_columns(names: Sequence[str]) -> tuple[int, ...]:
    """Columns of SLOPE_FEATURES in a feature table with these column names."""
    return tuple(list(names).index(f) for f in SLOPE_FEATURES)


def adapt_corrector(
    corrector: FittedCorrector,
    X: np.ndarray,
    y: np.ndarray,
    clusters: Sequence[Any],
    sources: Sequence[Any],
    slope_idx: Sequence[int],
    groups: Sequence[Any] | None = None,
) -> AdaptedCorrector:
    """The fitted corrector with its group offsets replaced by a hierarchical adapter fitted on what its
    global part leaves (priors from `clusters`, the band calibrated on left-out `sources`): known
    clusters get their posterior, others the prior. `groups` (the names predictions are made with,
    e.g. a source whose clusters are split by GPU) each get a posterior from all their runs too."""
    r = np.asarray(y, float) - corrector.predict(X)  # no groups: what the global part leaves
    h = HierarchicalAdapter(slope_idx, corrector.coverage).fit(X, r, clusters, band_groups=sources)
    names = np.array([str(v) for v in (clusters if groups is None else groups)])
    Z = h._zs(X)
    for name in sorted(set(names.tolist()) - set(h.posterior_)):
        h.posterior_[name] = h._posterior(Z[names == name], r[names == name])
    params = {**corrector.to_params(), "adapter": h.to_params()}
    out = corrector_from_params(params, X.shape[1])
    assert isinstance(out, AdaptedCorrector)
    return out


def group_curve(
    corrector: FittedCorrector,
    X: np.ndarray,
    y: np.ndarray,
    groups: Sequence[Any],
    sources: Sequence[Any],
    group: str,
    slope_idx: Sequence[int],
) -> list[dict[str, float]]:
    """learning_curve of `group`: the adapter's priors and band from the other groups only."""
    g, src = np.array([str(v) for v in groups]), np.array([str(v) for v in sources])
    r = np.asarray(y, float) - corrector.predict(X)
    mine = g == group
    h = HierarchicalAdapter(slope_idx, corrector.coverage)
    h.fit(X[~mine], r[~mine], g[~mine], band_groups=src[~mine])
    return learning_curve(h, X[mine], r[mine], corrector.tau_)
