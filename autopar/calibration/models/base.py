"""The one base of the fitted calibration models: prediction with its band, and the fitted numbers as JSON
parameters and back.

FittedCorrector (models/predictor.py: the global ridge and group offsets) and FittedAdapter
(models/adapter.py: per-cluster offsets and slopes) are FittedModels; the scikit-learn estimators that fit
them (models/corrector.py ThroughputCorrector, models/hierarchy.py HierarchicalAdapter) inherit prediction
and parameters from them. A model file must not run code when loaded (models/modelfile.py), so every fitted
number is a plain float written by `to_params` and read back by `from_params`, checked number by number
(`param_number`, `param_vector`) and against MAX_LOG_CORRECTION.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

# A corrector multiplies the analytical prediction by exp(log correction). The shipped model's terms are
# below 0.3; a term beyond log(100) (a factor of 100 either way) is not a correction of a model that is
# within 2x of measurements, it is a damaged or hostile file (intercept 700 gives infinite tokens/s).
MAX_LOG_CORRECTION = math.log(100.0)


class FittedModel(ABC):
    """A fitted model of the log correction log(measured / predicted): what a calibration applies and saves."""

    @abstractmethod
    def predict(self, X: np.ndarray, groups: Sequence[Any] | None = None) -> np.ndarray:
        """The log correction of each row of features X (the part of the row's group included)."""

    @abstractmethod
    def predict_interval(
        self, X: np.ndarray, groups: Sequence[Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(centre, low, high) of the log correction of each row."""

    @abstractmethod
    def to_params(self) -> dict[str, Any]:
        """Every fitted number as JSON-ready lists and floats."""

    @classmethod
    @abstractmethod
    def from_params(cls, p: dict[str, Any], n_features: int) -> Self:
        """Rebuild a fitted model from `to_params` output (ValueError on anything malformed or out of bounds)."""


def param_number(d: dict[str, Any], key: str) -> float:
    """The finite number at `key` of a parameter object (ValueError naming the key otherwise)."""
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
        raise ValueError(f"'{key}' must be a finite number, got {v!r}"[:120])
    return float(v)


def param_vector(d: dict[str, Any], key: str, n: int) -> np.ndarray:
    """The list of `n` finite numbers at `key` of a parameter object, as an array (ValueError otherwise)."""
    v = d.get(key)
    if not isinstance(v, list) or len(v) != n:
        raise ValueError(f"'{key}' must be a list of {n} numbers")
    return np.array([param_number({key: x}, key) for x in v], dtype=float)
