"""Applying a fitted corrector (autopar.calibration.corrector) without scikit-learn.

Loading a calibration model and correcting an estimate is pure numpy on the JSON's floats; importing
scikit-learn (about 1-2 s here) is only needed to fit. So `Calibration.load` builds a
FittedCorrector, and ThroughputCorrector (the scikit-learn estimator that fits) inherits every
prediction method from it: one implementation of the formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

RANGE_TOLERANCE = 0.05  # a feature this fraction of its training range outside it counts as extrapolation


class FittedCorrector:
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
        return self.shrink * (self._z(X) @ self.coef_ + self.intercept_) + self.offset(groups, len(X))

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
        lo, hi = c + self.band_[0], c + self.band_[1]
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
    def from_params(cls, p: dict[str, Any], n_features: int) -> Any:
        """Rebuild a fitted corrector from `to_params` output (ValueError on anything malformed)."""
        m = cls(alpha=_num(p, "alpha"), shrink=_num(p, "shrink"), coverage=_num(p, "coverage"))
        m.backfit_iter = int(_num(p, "backfit_iter"))
        m.prior_scale = _num(p, "prior_scale")
        for key in ("lo", "hi", "mean", "scale", "coef"):
            setattr(m, key + "_", _vector(p, key, n_features))
        m.intercept_ = _num(p, "intercept")
        m.tau_ = _num(p, "tau")
        offs = p.get("offsets")
        if not isinstance(offs, dict):
            raise ValueError("'offsets' must be an object of group -> number")
        m.offsets_ = {str(k): _num(offs, k) for k in offs}
        m.band_ = tuple(_vector(p, "band", 2).tolist())
        m.prior_band_ = tuple(_vector(p, "prior_band", 2).tolist())
        if not (0 <= m.shrink <= 1 and 0 < m.coverage < 1 and np.all(m.scale_ > 0)):
            raise ValueError("shrink, coverage or scale out of range")
        if not (m.alpha > 0 and m.tau_ >= 0 and 0 <= m.backfit_iter <= MAX_BACKFIT_ITER):
            raise ValueError(f"alpha={m.alpha}, tau={m.tau_} or backfit_iter={m.backfit_iter} out of range")
        _check_log_terms(m)
        m.n_features_in_ = n_features
        return m


# A corrector multiplies the analytical prediction by exp(log correction). The shipped model's terms are
# below 0.3; a term beyond log(100) (a factor of 100 either way) is not a correction of a model that is
# within 2x of measurements, it is a damaged or hostile file (intercept 700 gives infinite tokens/s).
MAX_LOG_CORRECTION = math.log(100.0)
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


def _num(d: dict[str, Any], key: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
        raise ValueError(f"'{key}' must be a finite number, got {v!r}"[:120])
    return float(v)


def _vector(d: dict[str, Any], key: str, n: int) -> np.ndarray:
    v = d.get(key)
    if not isinstance(v, list) or len(v) != n:
        raise ValueError(f"'{key}' must be a list of {n} numbers")
    return np.array([_num({key: x}, key) for x in v], dtype=float)
