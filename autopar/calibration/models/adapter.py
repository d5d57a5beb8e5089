"""Applying a fitted hierarchical adapter (models/hierarchy.py) without scikit-learn or scipy.

A calibration fitted for a team's cluster (`calibrate fit --group`) stores, next to the global
correction, each cluster's posterior (offset and slopes, their covariance, its own run variance) and
the band quantiles calibrated on left-out clusters, all as plain JSON floats (models/modelfile.py: no
pickle). `AdaptedCorrector` is a FittedCorrector whose rows of a known cluster get that
cluster's posterior-mean correction and its band; rows of a cluster never seen get the global
correction with the between-cluster band.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from autopar.calibration.models.base import MAX_LOG_CORRECTION, FittedModel, param_number, param_vector
from autopar.calibration.models.predictor import FittedCorrector

# A cluster's posterior: mean and covariance of (offset, slopes), and its own run variance.
Posterior = tuple[np.ndarray, np.ndarray, float]
MAX_VARIANCE = 4.0  # a variance of a log ratio beyond (x7.4)^2 is no calibration (hierarchy.LOG_VAR_BOUNDS)
MAX_BAND_SCORE = 50.0  # band quantiles are in predictive sds; beyond 50 the file is damaged


class FittedAdapter(FittedModel):
    """Prediction half of HierarchicalAdapter: per-cluster offset + slopes, band in predictive sds."""

    slope_idx: Sequence[int]
    v_: np.ndarray
    s2w_: float
    posterior_: dict[str, Posterior]
    band_: tuple[float, float]
    band_seen_: tuple[float, float]

    def _zs(self, X: np.ndarray) -> np.ndarray:
        """(1, slope features) in their physical units, not clipped to the training range: a cluster's
        own runs may vary a feature the training sources never varied (MoE on a dense-only set), and
        its slope is then learned from its own runs under the default prior."""
        S = np.asarray(X, float)[:, list(self.slope_idx)]
        return np.column_stack([np.ones(len(S)), S])

    def _moments(
        self, X: np.ndarray, groups: Sequence[Any] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: posterior-mean cluster correction, predictive sd, and whether its cluster was seen
        (a cluster never seen: 0, with the prior's variance and the pooled run scatter)."""
        Z = self._zs(X)
        mean, var = np.zeros(len(Z)), np.einsum("ij,j,ij->i", Z, self.v_, Z) + self.s2w_
        known = np.zeros(len(Z), dtype=bool)
        keys = np.array(["" if k is None else str(k) for k in groups]) if groups is not None else None
        for name in [] if keys is None else sorted(set(keys.tolist()) & set(self.posterior_)):
            rows = keys == name
            m, cov, s2 = self.posterior_[name]
            mean[rows] = Z[rows] @ m
            var[rows] = np.einsum("ij,jk,ik->i", Z[rows], cov, Z[rows]) + s2
            known[rows] = True
        return mean, np.sqrt(var), known

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

    # ------------------------------------------------------------------------------- parameters
    def to_params(self) -> dict[str, Any]:
        """Every fitted number as JSON-ready lists and floats."""
        return {
            "slope_idx": [int(i) for i in self.slope_idx],
            "v": self.v_.tolist(),
            "s2w": float(self.s2w_),
            "band": list(map(float, self.band_)),
            "band_seen": list(map(float, self.band_seen_)),
            "posteriors": {
                k: {"mean": m.tolist(), "cov": c.tolist(), "s2": float(s2)}
                for k, (m, c, s2) in sorted(self.posterior_.items())
            },
        }

    @classmethod
    def from_params(cls, p: dict[str, Any], n_features: int) -> Self:
        """Rebuild from `to_params` output (ValueError on anything malformed or out of bounds)."""
        a = cls.__new__(cls)
        idx = p.get("slope_idx")
        if not isinstance(idx, list) or not all(type(i) is int and 0 <= i < n_features for i in idx):
            raise ValueError(f"'slope_idx' must be a list of feature indices below {n_features}")
        a.slope_idx, q = tuple(idx), len(idx) + 1
        a.v_ = param_vector(p, "v", q)
        a.s2w_ = param_number(p, "s2w")
        a.band_ = tuple(param_vector(p, "band", 2).tolist())
        a.band_seen_ = tuple(param_vector(p, "band_seen", 2).tolist())
        posts = p.get("posteriors")
        if not isinstance(posts, dict):
            raise ValueError("'posteriors' must be an object of cluster -> posterior")
        a.posterior_ = {str(k): _posterior_from(v, q) for k, v in posts.items()}
        _check_bounds(a)
        return a


def _posterior_from(d: Any, q: int) -> Posterior:
    if not isinstance(d, dict):
        raise ValueError("a posterior must be an object with 'mean', 'cov' and 's2'")
    rows = d.get("cov")
    if not isinstance(rows, list) or len(rows) != q:
        raise ValueError(f"'cov' must be a {q}x{q} list of lists")
    cov = np.array([param_vector({"cov": r}, "cov", q) for r in rows])
    return param_vector(d, "mean", q), cov, param_number(d, "s2")


def _check_bounds(a: FittedAdapter) -> None:
    """Variances in (0, MAX_VARIANCE], covariances symmetric positive semi-definite, log corrections
    within +-MAX_LOG_CORRECTION, band quantiles within +-MAX_BAND_SCORE."""
    variances = [*a.v_, a.s2w_, *(s2 for _, _, s2 in a.posterior_.values())]
    if not all(0 < v <= MAX_VARIANCE for v in variances):
        raise ValueError(f"adapter variances must be in (0, {MAX_VARIANCE:g}]")
    for k, (m, c, _) in a.posterior_.items():
        if (
            np.any(np.abs(m) > MAX_LOG_CORRECTION)
            or np.any(np.diag(c) > MAX_VARIANCE)
            or not np.allclose(c, c.T, atol=1e-12)
            or np.linalg.eigvalsh(c).min() < -1e-12  # a covariance: predictive variances never negative
        ):
            raise ValueError(f"posterior of cluster {k!r} out of bounds")
    if not all(abs(b) <= MAX_BAND_SCORE for b in (*a.band_, *a.band_seen_)):
        raise ValueError(f"adapter band quantiles must be within +-{MAX_BAND_SCORE:g} sds")


class AdaptedCorrector(FittedCorrector):
    """A fitted corrector whose cluster part comes from a hierarchical adapter: the global ridge x shrink
    plus, for a cluster the adapter knows, its posterior offset and slopes and its band; for any other
    cluster the global part with the adapter's between-cluster band (its group offsets unused)."""

    adapter_: FittedAdapter

    def _predict(self, X: np.ndarray, groups: Sequence[Any] | None) -> np.ndarray:
        return self._global(X) + self.adapter_.predict(X, groups)

    def predict_interval(
        self, X: np.ndarray, groups: Sequence[Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(center, low, high) of the log correction; the analytical band is added where extrapolating."""
        X = self._check(X)
        base = self._global(X)
        c, lo, hi = (base + t for t in self.adapter_.predict_interval(X, groups))
        return self._with_prior_band(X, c, lo, hi)

    def to_params(self) -> dict[str, Any]:
        return {**super().to_params(), "adapter": self.adapter_.to_params()}


def corrector_from_params(p: dict[str, Any], n_features: int) -> FittedCorrector:
    """A FittedCorrector, or an AdaptedCorrector when the parameters carry an 'adapter' object."""
    if p.get("adapter") is None:
        return FittedCorrector.from_params(p, n_features)
    ad = p["adapter"]
    if not isinstance(ad, dict):
        raise ValueError("'adapter' must be an object")
    m = AdaptedCorrector.from_params(p, n_features)
    m.adapter_ = FittedAdapter.from_params(ad, n_features)
    return m
