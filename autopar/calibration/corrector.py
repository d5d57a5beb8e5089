"""The throughput corrector: a scikit-learn regressor of y = log(measured / predicted tokens/s).

It chooses between a regularised linear model (RidgeCV) and a small gradient-boosted tree model by
cross-validation (leave-one-group-out when groups, e.g. sources, are given), shrinks its correction
toward zero (= trust the analytical model) far from the training data, and gives a prediction band
from out-of-fold residuals that widens to the uncorrected model's typical error far from the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold, LeaveOneGroupOut
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import ThreadpoolController

MODEL_CHOICES = ("auto", "ridge", "hgb")
_controller: ThreadpoolController | None = None


def _one_openmp_thread() -> Any:
    """Context limiting OpenMP to one thread: tiny tree models run 10-30x slower with a thread pool."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="openmp")


def ape_of_log_error(err: np.ndarray) -> np.ndarray:
    """Absolute percentage error of a prediction whose log error (log pred - log true) is `err`."""
    return np.abs(np.expm1(err))


class ThroughputCorrector(RegressorMixin, BaseEstimator):
    """Learns the log throughput ratio measured/predicted; shrinks to 0 away from the training data.

    Parameters
    ----------
    model : "auto" | "ridge" | "hgb"
        "auto" picks the candidate with the lower cross-validated median absolute percentage error.
    ridge_alphas : regularisation strengths searched by RidgeCV (on standardized features).
    hgb_max_iter, hgb_learning_rate, hgb_max_depth, hgb_min_samples_leaf, hgb_l2 : the tree model.
    monotonic_cst : optional per-feature monotonic constraints for the tree model (-1, 0, 1).
    n_neighbors : neighbours used for the distance to the training data.
    shrink_scale : how many typical neighbour distances d0 beyond d0 the correction has halved.
    min_feature_scale : floor of a feature's scale in the distance (an unseen category counts as far).
    trust_quantile : d0 = this quantile of the training points' own neighbour distances; full trust
        within d0.
    coverage : nominal coverage of the prediction band (0.8 = 10th to 90th percentile).
    random_state : seed of the shuffled K-fold used when no groups are given.
    """

    def __init__(
        self,
        model: str = "auto",
        ridge_alphas: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0),
        hgb_max_iter: int = 120,
        hgb_learning_rate: float = 0.05,
        hgb_max_depth: int = 3,
        hgb_min_samples_leaf: int = 6,
        hgb_l2: float = 1.0,
        monotonic_cst: list[int] | None = None,
        n_neighbors: int = 5,
        shrink_scale: float = 1.0,
        min_feature_scale: float = 0.1,
        trust_quantile: float = 0.75,
        coverage: float = 0.8,
        random_state: int = 0,
    ):
        self.model = model
        self.ridge_alphas = ridge_alphas
        self.hgb_max_iter = hgb_max_iter
        self.hgb_learning_rate = hgb_learning_rate
        self.hgb_max_depth = hgb_max_depth
        self.hgb_min_samples_leaf = hgb_min_samples_leaf
        self.hgb_l2 = hgb_l2
        self.monotonic_cst = monotonic_cst
        self.n_neighbors = n_neighbors
        self.shrink_scale = shrink_scale
        self.min_feature_scale = min_feature_scale
        self.trust_quantile = trust_quantile
        self.coverage = coverage
        self.random_state = random_state

    # ------------------------------------------------------------------------------ candidates
    def _candidate(self, name: str) -> BaseEstimator:
        """An unfitted candidate model (works on standardized features)."""
        if name == "ridge":
            return RidgeCV(alphas=self.ridge_alphas)
        return HistGradientBoostingRegressor(
            max_iter=self.hgb_max_iter,
            learning_rate=self.hgb_learning_rate,
            max_depth=self.hgb_max_depth,
            min_samples_leaf=self.hgb_min_samples_leaf,
            l2_regularization=self.hgb_l2,
            monotonic_cst=self.monotonic_cst,
            early_stopping=False,
            random_state=0,
        )

    def _splits(self, n: int, groups: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Cross-validation splits: leave-one-group-out with 3+ groups, else shuffled K-fold."""
        if groups is not None and len(np.unique(groups)) >= 3:
            return list(LeaveOneGroupOut().split(np.zeros(n), groups=groups))
        if n < 6:
            return []
        k = min(5, n // 2)
        return list(KFold(n_splits=k, shuffle=True, random_state=self.random_state).split(np.zeros(n)))

    def _oof(
        self, name: str, X: np.ndarray, y: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]]
    ) -> np.ndarray:
        """Out-of-fold predictions of the whole pipeline (candidate + shrinkage) for one candidate."""
        pred = np.zeros_like(y)
        for tr, te in splits:
            fold = clone(self).set_params(model=name)
            fold.n_features_in_ = X.shape[1]
            fold._fit_final(X[tr], y[tr], name)
            pred[te] = fold.predict(X[te])
        return pred

    # -------------------------------------------------------------------------------------- fit
    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> ThroughputCorrector:
        """Fit on features X and log ratios y; `groups` (e.g. source names) drive model selection."""
        X, y = validate_data(self, X, y, y_numeric=True)
        if self.model not in MODEL_CHOICES:
            raise ValueError(f"model={self.model!r} must be one of {MODEL_CHOICES}")
        if not 0 < self.coverage < 1:
            raise ValueError(f"coverage={self.coverage} must be in (0, 1)")
        y = np.asarray(y, dtype=float)
        groups = None if groups is None else np.asarray(groups)
        with _one_openmp_thread():
            splits = self._splits(X.shape[0], groups)
            names = ("ridge", "hgb") if self.model == "auto" else (self.model,)
            self.cv_errors_: dict[str, float] = {}
            oof = {name: self._oof(name, X, y, splits) for name in names} if splits else {}
            for name, p in oof.items():
                self.cv_errors_[name] = float(np.median(ape_of_log_error(p - y)))
            if splits:
                self.cv_errors_["none"] = float(np.median(ape_of_log_error(-y)))
            self.model_name_ = (
                min(names, key=lambda k: self.cv_errors_[k])
                if oof
                else ("ridge" if self.model == "auto" else self.model)
            )
            self._fit_final(X, y, self.model_name_)
            resid = y - (oof[self.model_name_] if oof else self.predict(X))
        lo_q, hi_q = (1 - self.coverage) / 2, (1 + self.coverage) / 2
        self.residual_band_ = (float(np.quantile(resid, lo_q)), float(np.quantile(resid, hi_q)))
        self.prior_halfwidth_ = float(np.quantile(np.abs(y), self.coverage))
        return self

    def _fit_final(self, X: np.ndarray, y: np.ndarray, name: str) -> None:
        """Fit scaler, candidate model and the neighbour index on (X, y), without cross-validation."""
        n = X.shape[0]
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        self.scale_ = np.where(std > 0, std, 1.0)
        self.distance_scale_ = np.maximum(std, self.min_feature_scale)
        self.model_name_ = name
        Z = (X - self.mean_) / self.scale_
        if name == "hgb" and n < 2 * self.hgb_min_samples_leaf:
            name = self.model_name_ = "ridge"  # too few rows for a tree
        self.estimator_ = clone(self._candidate(name)).fit(Z, y)
        self.train_points_ = X / self.distance_scale_
        self.k_ = min(self.n_neighbors, max(n - 1, 1))
        typical = (
            float(np.quantile(self._knn_distance(self.train_points_, exclude_self=True), self.trust_quantile))
            if n > 1
            else 0.0
        )
        self.typical_distance_ = typical if typical > 0 else 1.0

    # -------------------------------------------------------------------------------- distance
    def _knn_distance(self, P: np.ndarray, exclude_self: bool = False) -> np.ndarray:
        """Mean Euclidean distance of each row of P to its k nearest training points (scaled space)."""
        T = self.train_points_
        d2 = (P * P).sum(1)[:, None] + (T * T).sum(1)[None, :] - 2.0 * P @ T.T
        d = np.sqrt(np.maximum(d2, 0.0))
        k = self.k_ + (1 if exclude_self else 0)
        k = min(k, T.shape[0])
        nearest = np.partition(d, k - 1, axis=1)[:, :k] if k < T.shape[0] else d
        if exclude_self:
            nearest = np.sort(nearest, axis=1)[:, 1:] if nearest.shape[1] > 1 else nearest
        return nearest.mean(axis=1)

    def shrink_weight(self, X: np.ndarray) -> np.ndarray:
        """Trust in the correction: 1 within the typical neighbour distance d0 of the training data,
        then 1/(1 + ((d - d0)/(shrink_scale·d0))²), i.e. 1/2 at d = (1 + shrink_scale)·d0, -> 0 far away."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        d = self._knn_distance(X / self.distance_scale_)
        d0 = self.typical_distance_
        excess = np.maximum(d - d0, 0.0) / (self.shrink_scale * d0)
        return 1.0 / (1.0 + excess**2)

    # ----------------------------------------------------------------------------------- predict
    def predict_raw(self, X: np.ndarray) -> np.ndarray:
        """The fitted model's log correction before shrinkage."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        Z = (X - self.mean_) / self.scale_
        if self.model_name_ == "ridge":
            return self.estimator_.predict(Z)
        with _one_openmp_thread():
            return self.estimator_.predict(Z)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Log correction log(measured/predicted), shrunk toward 0 far from the training data."""
        return self.predict_raw(X) * self.shrink_weight(X)

    def predict_interval(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(center, low, high) of the log correction: out-of-fold residual band near the data,
        the uncorrected model's typical error (±prior_halfwidth_) far from it."""
        raw = self.predict_raw(X)
        w = self.shrink_weight(X)
        center = w * raw
        lo = w * (raw + self.residual_band_[0]) - (1 - w) * self.prior_halfwidth_
        hi = w * (raw + self.residual_band_[1]) + (1 - w) * self.prior_halfwidth_
        return center, np.minimum(lo, center), np.maximum(hi, center)
