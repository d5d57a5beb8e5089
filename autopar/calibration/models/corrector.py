"""The corrector: y = log(measured / predicted) as a ridge model on a few physical features, plus a
shrunken per-cluster log-offset, with a conformal band. Every learned number is a plain float, so a
model is stored as JSON and loading one can never run code (see models/modelfile.py).

Three parts, each with its reason:
- **Global ridge** on standardised features clipped to the training range (a linear model does not
  extrapolate wildly from a feature it never saw vary), times `shrink` in [0, 1]: the validation gate
  (evaluation/validation.py) lowers `shrink` toward 0 (= factor 1, the analytical model)
  until the correction is no worse than the analytical model on every left-out source.
- **Per-group offsets** (group = a cluster: the record's `cluster` id, else its source), estimated
  empirical-Bayes style: a group with n runs and median residual m gets offset n / (n + tau) * m, where
  tau = within-group variance / between-group variance (method of moments). A new cluster starts at
  0 and moves toward its own level as its runs are ingested (Gelman & Hill 2007, ch. 12 "partial
  pooling"), with the median and MAD as robust location and spread. Ridge and offsets are fitted by
  alternating (backfitting).
- **Band**: split-conformal by group. Scores are out-of-group residuals (each group predicted by a
  model fitted without it); every group gets the same total weight, so a source with 32 runs does
  not dominate one with 5 (the exchangeable unit is the cluster, not the run). A point whose
  features fall outside the training range gets the union of this band and the analytical model's
  own error band (`prior_band_`). Why not MAPIE (1.6 installs here): its CV+/jackknife+ with a
  LeaveOneGroupOut splitter weighs every run equally (a 32-run source would dominate a 1-run one) and
  calls `fit(X, y)` without the groups the offsets need; the group-weighted scores are a few lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autopar.errors import CALIBRATE_EXTRA, MissingExtraError

try:
    from sklearn.base import BaseEstimator, RegressorMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except (
    ModuleNotFoundError
) as err:  # fitting only: a fitted model is applied by models/predictor.py without it
    raise MissingExtraError("scikit-learn", CALIBRATE_EXTRA, "fitting a calibration model") from err

from autopar.calibration.models.predictor import FittedCorrector

MAX_TAU = 1e6  # runs-equivalent prior strength when groups do not differ at all
MAD_TO_SIGMA = 1.4826  # median absolute deviation -> standard deviation for normal data
MEDIAN_VARIANCE = np.pi / 2  # var(sample median) = (pi/2) sigma^2 / n for normal data (asymptotic)


def ape_of_log_error(err: np.ndarray) -> np.ndarray:
    """Absolute percentage error of a prediction whose log error (log pred - log true) is `err`."""
    return np.abs(np.expm1(err))


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-quantile of values under weights (inverse of the weighted empirical CDF, midpoint rule)."""
    order = np.argsort(values, kind="stable")
    v, w = np.asarray(values, float)[order], np.asarray(weights, float)[order]
    cdf = (np.cumsum(w) - 0.5 * w) / w.sum()
    return float(np.interp(q, cdf, v))


def group_weights(groups: Sequence[Any]) -> np.ndarray:
    """Weight 1/n_g per row: every group counts once."""
    g = np.asarray(groups)
    _, inv, counts = np.unique(g, return_inverse=True, return_counts=True)
    return 1.0 / counts[inv]


def conformal_band(resid: np.ndarray, groups: Sequence[Any], coverage: float) -> tuple[float, float]:
    """(low, high) quantiles of out-of-group residuals, every group weighted equally."""
    if len(resid) == 0:
        return (0.0, 0.0)
    w = group_weights(groups)
    return (
        weighted_quantile(resid, w, (1 - coverage) / 2),
        weighted_quantile(resid, w, (1 + coverage) / 2),
    )


def group_medians(values: np.ndarray, inv: np.ndarray, k: int) -> np.ndarray:
    """np.median of `values` within each of `k` groups (row i in group inv[i]), from one sort: the middle
    element, or the mean of the two middle ones, exactly as np.median computes them (no NaNs here)."""
    v = np.asarray(values, float)[np.lexsort((values, inv))]
    n = np.bincount(inv, minlength=k)
    start = np.cumsum(n) - n
    return (v[start + (n - 1) // 2] + v[start + n // 2]) / 2


def eb_offsets(
    resid: np.ndarray, groups: Sequence[Any], scale: float = 1.0
) -> tuple[dict[str, float], float]:
    """Empirical-Bayes shrunken median residual per group and the prior strength tau (in runs).

    Robust on purpose: a source's few outlier runs should not move its whole cluster. Location is the
    group median; the within-group spread is the pooled MAD (x1.4826 = sigma for normal data) and the
    sampling variance of a median of n runs is (pi/2) sigma^2 / n. tau = (pi/2) sigma_w^2 / sigma_b^2
    (method of moments), times `scale` (chosen by cross-validation across groups).
    """
    names, inv = np.unique(np.asarray([str(x) for x in groups]), return_inverse=True)
    offsets, tau = _eb_offsets_by_index(resid, inv, len(names), scale)
    return {str(k): float(o) for k, o in zip(names, offsets, strict=True)}, tau


def _eb_offsets_by_index(
    resid: np.ndarray, inv: np.ndarray, k: int, scale: float
) -> tuple[np.ndarray, float]:
    """eb_offsets for groups given as indices 0..k-1 (row i in group inv[i]): offsets array and tau."""
    if k < 2:
        return np.zeros(k), MAX_TAU
    n = np.bincount(inv, minlength=k).astype(float)
    m = group_medians(resid, inv, k)
    s2w = (MAD_TO_SIGMA * float(np.median(np.abs(resid - m[inv])))) ** 2 * MEDIAN_VARIANCE
    s2b = float(np.var(m, ddof=1) - np.mean(s2w / n))
    tau = MAX_TAU if s2b <= 1e-12 else min(scale * s2w / s2b, MAX_TAU)
    return n / (n + tau) * m, float(tau)


class ThroughputCorrector(RegressorMixin, BaseEstimator, FittedCorrector):
    """Ridge on clipped standardised features x `shrink`, plus empirical-Bayes per-group offsets.

    Parameters
    ----------
    alpha : ridge penalty on standardised features (the intercept is not penalised).
    shrink : multiplier in [0, 1] of the global correction (0 = analytical model + group offsets).
    coverage : nominal coverage of the band (0.8 = 10th to 90th percentile).
    backfit_iter : alternations between the ridge and the group offsets.
    prior_scale : multiplier of the method-of-moments prior strength of the group offsets (>= 1 pools
        more: a cluster's offset needs more of its own runs before it moves).
    """

    # The parameters above are FittedCorrector.__init__'s (scikit-learn's get_params reads that signature).

    # -------------------------------------------------------------------------------------- fit
    def fit(self, X: np.ndarray, y: np.ndarray, groups: Sequence[Any] | None = None) -> ThroughputCorrector:
        """Fit on features X and log ratios y; `groups` (clusters) get their own shrunken offsets."""
        X, y = validate_data(self, X, y, y_numeric=True)
        if not self.alpha >= 0:
            raise ValueError(f"alpha={self.alpha} must be >= 0")
        if not 0 <= self.shrink <= 1:
            raise ValueError(f"shrink={self.shrink} must be in [0, 1]")
        if not 0 < self.coverage < 1:
            raise ValueError(f"coverage={self.coverage} must be in (0, 1)")
        y = np.asarray(y, dtype=float)
        g = np.array(["all"] * len(y) if groups is None else [str(v) for v in groups])
        self.lo_, self.hi_ = X.min(axis=0), X.max(axis=0)
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        self.scale_ = np.where(std > 1e-12, std, 1.0)
        Z = self._z(X)
        names, inv = np.unique(g, return_inverse=True)  # groups as indices, once for every backfit step
        off = np.zeros(len(y))
        for _ in range(max(self.backfit_iter, 0) + 1):
            self.coef_, self.intercept_ = self._ridge(Z, y - off)
            offsets, _ = _eb_offsets_by_index(y - Z @ self.coef_ - self.intercept_, inv, len(names), 1.0)
            off = offsets[inv]
        resid = y - self.shrink * (Z @ self.coef_ + self.intercept_)
        offsets, self.tau_ = _eb_offsets_by_index(resid, inv, len(names), self.prior_scale)
        self.offsets_ = {str(k): float(o) for k, o in zip(names, offsets, strict=True)}
        in_sample = resid - offsets[inv]
        self.band_ = conformal_band(in_sample, g, self.coverage)  # replaced by out-of-group scores
        self.prior_band_ = conformal_band(y, g, self.coverage)
        return self

    def _ridge(self, Z: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float]:
        """Closed-form ridge with an unpenalised intercept."""
        zm, tm = Z.mean(axis=0), float(t.mean())
        Zc = Z - zm
        A = Zc.T @ Zc + self.alpha * np.eye(Z.shape[1])
        coef = np.linalg.solve(A, Zc.T @ (t - tm)) if Z.shape[1] else np.zeros(0)
        return coef, tm - float(zm @ coef)

    def _check(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self)
        return validate_data(self, X, reset=False)

    def _check_fitted(self) -> None:
        check_is_fitted(self)
