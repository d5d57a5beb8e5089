"""Applying a fitted corrector (models/corrector.py) without scikit-learn.

Loading a calibration model and correcting an estimate is pure numpy on the JSON's floats; importing
scikit-learn (about 1-2 s here) is only needed to fit. So `Calibration.load` builds a
FittedCorrector, and ThroughputCorrector (the scikit-learn estimator that fits) inherits every
prediction method from it: one implementation of the formula.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from autopar.calibration.models.base import MAX_LOG_CORRECTION, FittedModel, param_number, param_vector

RANGE_TOLERANCE = 0.05  # a feature this fraction of its training range outside it counts as extrapolation


class FittedCorrector(FittedModel):
    """Prediction half of ThroughputCorrector: ridge x shrink + group offset, band, extrapolation."""

    # Fitted attributes (scikit-learn's trailing-underscore convention): declared for the type checker
    # only, never assigned here, so `hasattr(self, "coef_")` still tells a fitted model from a fresh one.
    lo_: np.ndarray
    hi_: np.ndarray
    mean_: np.ndarray
    scale_: np.ndarray
    coef_: np.ndarray
    intercept_: float
    offsets_: dict[str, float]
    tau_: float
    band_: tuple[float, float]
    prior_band_: tuple[float, float]
    n_features_in_: int

    def __init__(
        self,
        alpha: float = 10.0,
        shrink: float = 1.0,
        coverage: float = 0.8,
        backfit_iter: int = 4,
        prior_scale: float = 1.0,
    ):
        self.alpha = alpha
        self.shrink = shrink
        self.coverage = coverage
        self.backfit_iter = backfit_iter
        self.prior_scale = prior_scale

    def _z(self, X: np.ndarray) -> np.ndarray:
        """Features clipped to the training range, standardised."""
        return (np.clip(X, self.lo_, self.hi_) - self.mean_) / self.scale_

    # ----------------------------------------------------------------------------------- predict
    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet")

    def _check(self, X: np.ndarray) -> np.ndarray:
        """X as a 2-D float array of this model's width with finite values (what sklearn's check
        does, without importing scikit-learn)."""
        self._check_fitted()
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has shape {X.shape}, expected (n, {self.n_features_in_})")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinity")
        return X

    def offset(self, groups: Sequence[Any] | None, n: int) -> np.ndarray:
        """The learned log-offset of each row's group (0 for a group never seen)."""
        if groups is None:
            return np.zeros(n)
        return np.array([self.offsets_.get(str(k), 0.0) for k in groups])

    def predict(self, X: np.ndarray, groups: Sequence[Any] | None = None) -> np.ndarray:
        """Log correction log(measured/predicted) of each row (its group's offset included)."""
        return self._predict(self._check(X), groups)

    def _predict(self, X: np.ndarray, groups: Sequence[Any] | None) -> np.ndarray:
        return self._global(X) + self.offset(groups, len(X))

    def _global(self, X: np.ndarray) -> np.ndarray:
        """The global part of the log correction: the ridge on standardised features x shrink."""
        return self.shrink * (self._z(X) @ self.coef_ + self.intercept_)

    def extrapolating(self, X: np.ndarray) -> np.ndarray:
        """Rows with a feature outside the training range (by more than RANGE_TOLERANCE of it)."""
        return self._extrapolating(self._check(X))

    def _extrapolating(self, X: np.ndarray) -> np.ndarray:
        tol = RANGE_TOLERANCE * (self.hi_ - self.lo_) + 1e-9
        return np.any((self.lo_ - tol > X) | (self.hi_ + tol < X), axis=1)

    def predict_interval(
        self, X: np.ndarray, groups: Sequence[Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(center, low, high) of the log correction; the analytical band is added where extrapolating."""
        X = self._check(X)  # once: the search predicts one row at a time for its local moves
        c = self._predict(X, groups)
        return self._with_prior_band(X, c, c + self.band_[0], c + self.band_[1])

    def _with_prior_band(
        self, X: np.ndarray, c: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(c, lo, hi) with the analytical band added where a row extrapolates; the band always holds c."""
        far = self._extrapolating(X)
        lo = np.where(far, np.minimum(lo, self.prior_band_[0]), lo)
        hi = np.where(far, np.maximum(hi, self.prior_band_[1]), hi)
        return c, np.minimum(lo, c), np.maximum(hi, c)

    @property
    def prior_halfwidth_(self) -> float:
        """Half the analytical model's own band width (log), for rows with no usable features."""
        return 0.5 * (self.prior_band_[1] - self.prior_band_[0])

    # ------------------------------------------------------------------------------- parameters
    def to_params(self) -> dict[str, Any]:
        """Every fitted number as JSON-ready lists and floats."""
        self._check_fitted()
        return {
            "alpha": float(self.alpha),
            "shrink": float(self.shrink),
            "coverage": float(self.coverage),
            "backfit_iter": int(self.backfit_iter),
            "prior_scale": float(self.prior_scale),
            "lo": self.lo_.tolist(),
            "hi": self.hi_.tolist(),
            "mean": self.mean_.tolist(),
            "scale": self.scale_.tolist(),
            "coef": self.coef_.tolist(),
            "intercept": float(self.intercept_),
            "offsets": dict(sorted(self.offsets_.items())),
            "tau": float(self.tau_),
            "band": list(self.band_),
            "prior_band": list(self.prior_band_),
        }

    @classmethod
    def from_params(cls, p: dict[str, Any], n_features: int) -> Self:
        """Rebuild a fitted corrector from `to_params` output (ValueError on anything malformed)."""
        m = cls(
            alpha=param_number(p, "alpha"),
            shrink=param_number(p, "shrink"),
            coverage=param_number(p, "coverage"),
        )
        m.backfit_iter = int(param_number(p, "backfit_iter"))
        m.prior_scale = param_number(p, "prior_scale")
        for key in ("lo", "hi", "mean", "scale", "coef"):
            setattr(m, key + "_", param_vector(p, key, n_features))
        m.intercept_ = param_number(p, "intercept")
        m.tau_ = param_number(p, "tau")
        offs = p.get("offsets")
        if not isinstance(offs, dict):
            raise ValueError("'offsets' must be an object of group -> number")
        m.offsets_ = {str(k): param_number(offs, k) for k in offs}
        m.band_ = tuple(param_vector(p, "band", 2).tolist())
        m.prior_band_ = tuple(param_vector(p, "prior_band", 2).tolist())
        if not (0 <= m.shrink <= 1 and 0 < m.coverage < 1 and np.all(m.scale_ > 0)):
            raise ValueError("shrink, coverage or scale out of range")
        if not (m.alpha > 0 and m.tau_ >= 0 and 0 <= m.backfit_iter <= MAX_BACKFIT_ITER):
            raise ValueError(f"alpha={m.alpha}, tau={m.tau_} or backfit_iter={m.backfit_iter} out of range")
        _check_log_terms(m)
        m.n_features_in_ = n_features
        return m


# Backfitting rounds recorded by a fit (4 in the shipped model).
MAX_BACKFIT_ITER = 1000


def _check_log_terms(m: Any) -> None:
    """Every additive log-correction term (intercept, per-SD coefficients, offsets, bands) within bounds."""
    terms = {
        "intercept": [m.intercept_],
        "coef": list(m.coef_),
        "band": list(m.band_),
        "prior_band": list(m.prior_band_),
        **{f"offsets.{k}": [v] for k, v in m.offsets_.items()},
    }
    for key, values in terms.items():
        bad = next((v for v in values if abs(v) > MAX_LOG_CORRECTION), None)
        if bad is not None:
            raise ValueError(
                f"{key}={bad:g}: a log correction term must be within +-{MAX_LOG_CORRECTION:.2f} "
                "(a factor of 100)"
            )
