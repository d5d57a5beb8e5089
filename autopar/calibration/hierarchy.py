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
from scipy.optimize import minimize

from autopar.calibration.corrector import group_weights, weighted_quantile

SLOPE_FEATURES: tuple[str, ...] = ("share_comm", "log2_domains_spanned", "log2_expert_dilution")
STUDENT_NU = 4.0  # degrees of freedom of the robust (Student-t) likelihood of a cluster's own runs
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


def fit_priors(parts: list[tuple[np.ndarray, np.ndarray]], p: int) -> tuple[np.ndarray, float]:
    """(v, s2w): prior variances of (offset, slopes) and the within-cluster variance, by type-II ML."""
    pooled = np.concatenate([r for _, r in parts])
    s0 = max(float(np.var(pooled)), 1e-4)
    theta0 = np.log(np.r_[[s0 / 2], np.full(p, s0 / 20), [s0 / 2]])
    res = minimize(_nll, theta0, args=_stats(parts), method="L-BFGS-B", bounds=[LOG_VAR_BOUNDS] * (p + 2))
    return np.exp(res.x[:-1]), float(np.exp(res.x[-1]))


class HierarchicalAdapter:
    """Per-cluster offset + slopes with learned shrinkage on top of a global log correction.

    scikit-learn contract: `fit(X, y, groups)`, `predict(X, groups)`, `predict_interval(X, groups)`;
    `slope_idx` are the columns of X that get per-cluster slopes; `coverage` the band's nominal level.
    """

    def __init__(self, slope_idx: Sequence[int] = (), coverage: float = 0.8, calibrate_band: bool = True):
        self.slope_idx = slope_idx
        self.coverage = coverage
        self.calibrate_band = calibrate_band

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"slope_idx": self.slope_idx, "coverage": self.coverage, "calibrate_band": self.calibrate_band}

    def set_params(self, **params: Any) -> HierarchicalAdapter:
        for k, v in params.items():
            setattr(self, k, v)
        return self

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
        self.band_ = self._loso_band(Z, r, g, names) if self.calibrate_band else self._gauss_band()
        return self

    def _posterior(self, Z: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and covariance of u_g from a group's runs (residuals clipped, see ROBUST_Z)."""
        w = np.ones(len(r))
        for _ in range(ROBUST_ITER):
            cov = np.linalg.inv(np.diag(1.0 / self.v_) + (Z.T * w) @ Z / self.s2w_)
            mean = cov @ (Z.T * w) @ r / self.s2w_
            w = (STUDENT_NU + 1) / (STUDENT_NU + (r - Z @ mean) ** 2 / self.s2w_)
        return mean, cov

    def _gauss_band(self) -> tuple[float, float]:
        from scipy.stats import norm

        q = float(norm.ppf((1 + self.coverage) / 2))
        return (-q, q)

    def _loso_band(
        self, Z: np.ndarray, r: np.ndarray, g: np.ndarray, names: list[str]
    ) -> tuple[float, float]:
        """Quantiles of left-out-source scores residual / prior-predictive sd (priors refitted without it)."""
        if len(names) < 3:
            return self._gauss_band()
        scores, grp = [], []
        for n in names:
            test = g == n
            parts = [(Z[g == m], r[g == m]) for m in names if m != n]
            v, s2w = fit_priors(parts, len(self.slope_idx))
            sd = np.sqrt(np.einsum("ij,j,ij->i", Z[test], v, Z[test]) + s2w)
            scores.append(r[test] / sd)
            grp += [n] * int(test.sum())
        s = np.concatenate(scores)
        w = group_weights(grp)
        c = self.coverage
        return (weighted_quantile(s, w, (1 - c) / 2), weighted_quantile(s, w, (1 + c) / 2))

    # -------------------------------------------------------------------------------- predict
    def _moments(self, X: np.ndarray, groups: Sequence[Any] | None) -> tuple[np.ndarray, np.ndarray]:
        Z = self._zs(X)
        mean, var = np.zeros(len(Z)), np.einsum("ij,j,ij->i", Z, self.v_, Z)
        for i, grp in enumerate(groups if groups is not None else [None] * len(Z)):
            post = self.posterior_.get(str(grp)) if grp is not None else None
            if post is not None:
                mean[i] = Z[i] @ post[0]
                var[i] = Z[i] @ post[1] @ Z[i]
        return mean, np.sqrt(var + self.s2w_)

    def predict(self, X: np.ndarray, groups: Sequence[Any] | None = None) -> np.ndarray:
        """The cluster part of the log correction (0 for a cluster never seen)."""
        return self._moments(X, groups)[0]

    def predict_interval(
        self, X: np.ndarray, groups: Sequence[Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(centre, low, high) of the cluster part of the log correction."""
        m, sd = self._moments(X, groups)
        return m, m + self.band_[0] * sd, m + self.band_[1] * sd
