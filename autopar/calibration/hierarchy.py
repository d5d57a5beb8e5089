"""Hierarchical adaptation: a per-cluster offset and per-cluster slopes on a few physical features,
with priors learned from the spread between sources, and a band calibrated on left-out sources.

Model (on top of a global correction `base`, e.g. ThroughputCorrector with its group offsets off):

    y = base(x) + u_g . z(x) + e,   z(x) = (1, standardised slope features),
    u_g ~ N(0, diag(v)),   e ~ N(0, s2w)

- **Priors from the data**: (v, s2w) maximise the marginal likelihood of the training groups' residuals
  (type-II maximum likelihood, Gelman & Hill 2007 ch. 13; Bishop 2006 sec. 3.5). v measures how far
  clusters differ from each other (offset, slopes), s2w how far runs of one cluster scatter. A cluster
  with k runs gets the posterior mean of u_g: k runs move it as far as they justify, no further; a
  slope whose feature does not vary between sources keeps a near-zero prior variance and never moves.
- **Robust**: a cluster's own runs enter with a Student-t likelihood (STUDENT_NU degrees of freedom,
  fitted by reweighting: Lange, Little & Taylor 1989), so one odd run cannot drag its cluster.
- **Band**: normalised split-conformal by source. Each training source is left out in turn (priors
  refitted without it), its runs predicted with k = 0 and scored as residual / predictive sd; those
  scores carry the between-source component. The band is centre +/- quantiles of the scores (every
  source weighted equally) times the predictive sd at the point, so it is wide
  for a cluster never seen and narrows as its own runs shrink the posterior.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autopar.errors import CALIBRATE_EXTRA, MissingExtraError

try:
    from scipy.optimize import minimize
    from sklearn.base import BaseEstimator, RegressorMixin
except ModuleNotFoundError as err:
    raise MissingExtraError("scikit-learn", CALIBRATE_EXTRA, "fitting a calibration model") from err

from autopar.calibration.corrector import group_weights, weighted_quantile

SLOPE_FEATURES: tuple[str, ...] = ("share_comm", "log2_domains_spanned", "log2_expert_dilution")
STUDENT_NU = 4.0  # degrees of freedom of the robust (Student-t) likelihood of a cluster's own runs
BAND_K = 3  # runs of a left-out source seen when scoring the band of a cluster with its own runs
NOISE_PRIOR_RUNS = 5.0  # the pooled within-cluster variance counts as this many runs of a new cluster
ROBUST_ITER = 8  # reweighting steps (EM for the t likelihood as a scale mixture of normals)
LOG_VAR_BOUNDS = (np.log(1e-8), np.log(4.0))  # variances of log ratios: 1e-8 (none) to (x7.4)^2


def _design(Xs: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones(len(Xs)), Xs])


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


class HierarchicalAdapter(RegressorMixin, BaseEstimator):
    """Per-cluster offset + slopes with learned shrinkage on top of a global log correction.

    scikit-learn contract: `fit(X, y, groups)`, `predict(X, groups)`, `predict_interval(X, groups)`;
    `slope_idx` are the columns of X that get per-cluster slopes; `coverage` the band's nominal level.
    """

    def __init__(self, slope_idx: Sequence[int] = (), coverage: float = 0.8, calibrate_band: bool = True):
        self.slope_idx = slope_idx
        self.coverage = coverage
        self.calibrate_band = calibrate_band

    # ------------------------------------------------------------------------------------ fit
    def _zs(self, X: np.ndarray) -> np.ndarray:
        """(1, slope features) in their physical units, not clipped to the training range: a cluster's
        own runs may vary a feature the training sources never varied (MoE on a dense-only set), and
        its slope is then learned from its own runs under the default prior."""
        return _design(np.asarray(X, float)[:, list(self.slope_idx)])

    def fit(
        self, X: np.ndarray, y: np.ndarray, groups: Sequence[Any], base: np.ndarray | None = None
    ) -> HierarchicalAdapter:
        """Learn priors from the groups' residuals y - base, then every group's posterior."""
        X, y = np.asarray(X, float), np.asarray(y, float)
        g = np.array([str(v) for v in groups])
        r = y - (np.zeros(len(y)) if base is None else np.asarray(base, float))
        Z = self._zs(X)
        names = sorted(set(g))
        parts = [(Z[g == n], r[g == n]) for n in names]
        self.v_, self.s2w_ = fit_priors(parts, len(self.slope_idx))
        self.posterior_ = {n: self._posterior(Zg, rg) for n, (Zg, rg) in zip(names, parts, strict=True)}
        if self.calibrate_band:
            self._loso_band(Z, r, g, names)
        else:
            self.band_ = self.band_seen_ = self._gauss_band()
        return self

    def _posterior(self, Z: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        return posterior(Z, r, self.v_, self.s2w_)

    def _gauss_band(self) -> tuple[float, float]:
        from scipy.stats import norm

        q = float(norm.ppf((1 + self.coverage) / 2))
        return (-q, q)

    def _loso_band(self, Z: np.ndarray, r: np.ndarray, g: np.ndarray, names: list[str]) -> None:
        """Band quantiles from left-out sources (priors refitted without each): `band_` from scores
        residual / prior-predictive sd (a cluster never seen), `band_seen_` from the same source after
        BAND_K of its runs (seeded pick), scored on its other runs against the posterior predictive sd."""
        if len(names) < 3:
            self.band_ = self.band_seen_ = self._gauss_band()
            return
        rng = np.random.default_rng(0)
        unseen: list[np.ndarray] = []
        seen: list[np.ndarray] = []
        g0: list[str] = []
        g1: list[str] = []
        for n in names:
            idx = np.flatnonzero(g == n)
            parts = [(Z[g == m], r[g == m]) for m in names if m != n]
            v, s2w = fit_priors(parts, len(self.slope_idx), np.r_[self.v_, self.s2w_])
            unseen.append(r[idx] / np.sqrt(np.einsum("ij,j,ij->i", Z[idx], v, Z[idx]) + s2w))
            g0 += [n] * len(idx)
            if len(idx) >= 2 * BAND_K:
                pick = rng.choice(len(idx), BAND_K, replace=False)
                rest = np.delete(idx, pick)
                mean, cov, s2 = posterior(Z[idx[pick]], r[idx[pick]], v, s2w)
                sd = np.sqrt(np.einsum("ij,jk,ik->i", Z[rest], cov, Z[rest]) + s2)
                seen.append((r[rest] - Z[rest] @ mean) / sd)
                g1 += [n] * len(rest)
        self.band_ = self._quantiles(np.concatenate(unseen), g0)
        self.band_seen_ = self._quantiles(np.concatenate(seen), g1) if len(set(g1)) >= 3 else self.band_

    def _quantiles(self, scores: np.ndarray, groups: list[str]) -> tuple[float, float]:
        w, c = group_weights(groups), self.coverage
        return (weighted_quantile(scores, w, (1 - c) / 2), weighted_quantile(scores, w, (1 + c) / 2))

    # -------------------------------------------------------------------------------- predict
    def _moments(
        self, X: np.ndarray, groups: Sequence[Any] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: posterior-mean cluster correction, predictive sd, and whether its cluster was seen."""
        Z = self._zs(X)
        known = np.zeros(len(Z), dtype=bool)
        mean, var = np.zeros(len(Z)), np.einsum("ij,j,ij->i", Z, self.v_, Z)
        noise = np.full(len(Z), self.s2w_)
        for i, grp in enumerate(groups if groups is not None else [None] * len(Z)):
            post = self.posterior_.get(str(grp)) if grp is not None else None
            if post is not None:
                mean[i] = Z[i] @ post[0]
                var[i] = Z[i] @ post[1] @ Z[i]
                noise[i] = post[2]
                known[i] = True
        return mean, np.sqrt(var + noise), known

    def predict(self, X: np.ndarray, groups: Sequence[Any] | None = None) -> np.ndarray:
        """The cluster part of the log correction (0 for a cluster never seen)."""
        return self._moments(X, groups)[0]

    def predict_interval(
        self, X: np.ndarray, groups: Sequence[Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(centre, low, high) of the cluster part of the log correction."""
        m, sd, known = self._moments(X, groups)
        # a seen cluster: the wider of the two calibrations (the seen one rests on fewer, tighter sources)
        lo = np.where(known, min(self.band_seen_[0], self.band_[0]), self.band_[0])
        hi = np.where(known, max(self.band_seen_[1], self.band_[1]), self.band_[1])
        return m, m + lo * sd, m + hi * sd
