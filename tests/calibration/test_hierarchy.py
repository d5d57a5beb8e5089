"""The hierarchical adapter (autopar.calibration.models.hierarchy) on synthetic clusters with known truth."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.models.hierarchy import HierarchicalAdapter, _nll, _stats

SD_OFFSET, SD_SLOPE, SD_RUN = 0.15, 0.05, 0.03  # between-cluster offset/slope sds, within-cluster sd


def _clusters(rng: np.random.Generator, n_groups: int, n_runs: int, slope: bool = True) -> tuple:
    """Runs of clusters drawn from the model: y = b_g + c_g * x + e, x in [0, 4] (one slope feature)."""
    X, y, g = [], [], []
    for i in range(n_groups):
        b, c = rng.normal(0, SD_OFFSET), rng.normal(0, SD_SLOPE) if slope else 0.0
        x = rng.uniform(0, 4, n_runs)
        X.append(x)
        y.append(b + c * x + rng.normal(0, SD_RUN, n_runs))
        g += [f"c{i}"] * n_runs
    return np.concatenate(X)[:, None], np.concatenate(y), np.array(g)


def test_woodbury_likelihood_matches_dense_formula():
    rng = np.random.default_rng(0)
    parts = []
    for n in (1, 3, 7):
        Z = np.column_stack([np.ones(n), rng.normal(size=(n, 2))])
        parts.append((Z, rng.normal(size=n)))
    v, s2w = np.array([0.3, 0.1, 0.2]), 0.5
    dense = sum(
        0.5
        * (
            np.linalg.slogdet((Z * v) @ Z.T + s2w * np.eye(len(r)))[1]
            + r @ np.linalg.solve((Z * v) @ Z.T + s2w * np.eye(len(r)), r)
        )
        for Z, r in parts
    )
    assert np.isclose(_nll(np.log(np.r_[v, s2w]), *_stats(parts)), dense)


def test_known_offset_and_slope_recovered_from_k_runs():
    rng = np.random.default_rng(1)
    X, y, g = _clusters(rng, 30, 10)
    x_new = np.linspace(0, 4, 10)
    y_new = 0.20 + 0.08 * x_new  # the new cluster: offset 0.20, slope 0.08, noise-free runs
    m = HierarchicalAdapter(slope_idx=(0,), calibrate_band=False)
    m.fit(np.r_[X, x_new[:, None]], np.r_[y, y_new], np.r_[g, ["new"] * 10])
    b, c = m.posterior_["new"][0]
    # priors learned from 30 clusters: sd_offset ~ 0.15, sd_run ~ 0.03, so 10 exact runs dominate them
    assert abs(b - 0.20) < 0.02 and abs(c - 0.08) < 0.01
    assert np.sqrt(m.v_[0]) == pytest.approx(SD_OFFSET, rel=0.5)
    assert np.sqrt(m.s2w_) == pytest.approx(SD_RUN, rel=0.2)


def test_band_covers_unseen_clusters_near_nominal():
    """Band calibrated on left-out clusters (between-cluster noise included) covers unseen clusters'
    runs at 80% +/- 5 points, averaged over training sets (the marginal guarantee of conformal)."""
    covers = []
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        X, y, g = _clusters(rng, 25, 6, slope=False)
        m = HierarchicalAdapter(slope_idx=(), coverage=0.8).fit(X, y, g)
        Xt, yt, _ = _clusters(rng, 200, 5, slope=False)
        _, lo, hi = m.predict_interval(Xt)
        covers.append(np.mean((yt >= lo) & (yt <= hi)))
    assert abs(np.mean(covers) - 0.8) <= 0.05


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 6))
def test_k_runs_never_increase_expected_error(seed, k):
    """Over many new clusters drawn from the model, the mean squared error on a cluster's other runs
    after learning from k of its runs is no larger than with none (k = 0: the prior mean)."""
    rng = np.random.default_rng(seed)
    X, y, g = _clusters(rng, 20, 8)
    m = HierarchicalAdapter(slope_idx=(0,), calibrate_band=False).fit(X, y, g)
    Xn, yn, gn = _clusters(rng, 40, k + 5)
    err0, errk = [], []
    for name in np.unique(gn):
        idx = np.flatnonzero(gn == name)
        seen, rest = idx[:k], idx[k:]
        err0.append(np.mean((m.predict(Xn[rest]) - yn[rest]) ** 2))
        fit = HierarchicalAdapter(slope_idx=(0,), calibrate_band=False)
        fit.v_, fit.s2w_ = m.v_, m.s2w_
        fit.posterior_ = {name: fit._posterior(fit._zs(Xn[seen]), yn[seen])}
        errk.append(np.mean((fit.predict(Xn[rest], [name] * len(rest)) - yn[rest]) ** 2))
    assert np.mean(errk) <= np.mean(err0)


def test_band_narrows_as_own_runs_arrive():
    rng = np.random.default_rng(3)
    X, y, g = _clusters(rng, 20, 8, slope=False)
    x_new = rng.uniform(0, 4, 10)[:, None]
    m0 = HierarchicalAdapter().fit(X, y, g)
    m5 = HierarchicalAdapter().fit(np.r_[X, x_new[:5]], np.r_[y, np.full(5, 0.1)], np.r_[g, ["new"] * 5])
    _, lo0, hi0 = m0.predict_interval(x_new[5:], ["new"] * 5)
    _, lo5, hi5 = m5.predict_interval(x_new[5:], ["new"] * 5)
    assert np.all(hi5 - lo5 < 0.6 * (hi0 - lo0))


def test_scikit_learn_contract():
    from sklearn.base import clone

    m = HierarchicalAdapter(slope_idx=(0,), coverage=0.9)
    assert clone(m).get_params() == {"slope_idx": (0,), "coverage": 0.9, "calibrate_band": True}
    X, y, g = _clusters(np.random.default_rng(5), 6, 4)
    assert m.fit(X, y, g) is m and m.predict(X).shape == (len(y),)


def _adapted(seed: int = 7):
    """A ridge corrector (4 features, slopes on feature 0) adapted by the hierarchical adapter."""
    from autopar.calibration.models.corrector import ThroughputCorrector
    from autopar.calibration.models.hierarchy import adapt_corrector

    rng = np.random.default_rng(seed)
    X1, y, g = _clusters(rng, 12, 6)
    X = np.column_stack([X1, rng.normal(size=(len(y), 3))])
    base = ThroughputCorrector(alpha=10.0, shrink=0.0).fit(X, y, groups=g)
    return adapt_corrector(base, X, y, g, g, (0,)), X, y, g


def test_adapted_corrector_round_trips_through_json_params():
    """What `calibrate fit --group` saves is what loading predicts: the per-cluster posteriors survive
    the JSON parameters exactly, a known cluster gets its posterior, an unknown one the prior band."""
    import json

    from autopar.calibration.models.adapter import corrector_from_params

    m, X, _, g = _adapted()
    back = corrector_from_params(json.loads(json.dumps(m.to_params())), X.shape[1])
    for groups in (list(g), ["never-seen"] * len(g)):
        for a, b in zip(m.predict_interval(X, groups), back.predict_interval(X, groups), strict=True):
            assert np.array_equal(a, b)
    c_unseen, lo_u, hi_u = back.predict_interval(X[:5], ["never-seen"] * 5)
    c_seen, lo_s, hi_s = back.predict_interval(X[:5], list(g[:5]))
    assert np.all(c_unseen == 0.0)  # shrink 0: no cluster, no correction
    assert np.all(hi_s - lo_s < hi_u - lo_u)  # six own runs narrow the band


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        (("adapter", "v", 0), 1e9, "variances"),
        (("adapter", "band", 1), 1e6, "band quantiles"),
        (("adapter", "slope_idx", 0), 99, "slope_idx"),
        (("adapter", "posteriors", "c0", "mean", 0), 50.0, "out of bounds"),
        (("adapter", "posteriors", "c0", "cov", 0, 1), 3.0, "out of bounds"),  # not a covariance
    ],
)
def test_damaged_adapter_parameters_are_refused(path, value, why):
    from autopar.calibration.models.adapter import corrector_from_params

    m, X, _, _ = _adapted()
    p = m.to_params()
    node = p
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValueError, match=why):
        corrector_from_params(p, X.shape[1])


def test_learning_curve_of_a_shifted_cluster():
    """A new cluster 25% slower than the analytical model on every run (log ratio -0.288, run noise
    0.03): with no run of it the error is its whole shift; ten of its runs take the adapter (and the
    plain offset, tau = 0) to within the noise; the held-out counts and draws are as documented."""
    from autopar.calibration.models.hierarchy import learning_curve

    rng = np.random.default_rng(11)
    X, y, g = _clusters(rng, 20, 6, slope=False)
    h = HierarchicalAdapter(slope_idx=(0,)).fit(X, y, g)
    xs = rng.uniform(0, 4, 30)[:, None]
    r = np.log(0.75) + rng.normal(0, SD_RUN, 30)
    curve = {row["n"]: row for row in learning_curve(h, xs, r, tau=0.0, ns=(0, 10, 28), draws=2)}
    assert sorted(curve) == [0, 10]  # n = 28 leaves 2 < CURVE_MIN_REST held-out runs
    assert curve[0]["held_out"] == 30 and curve[10]["held_out"] == 20
    assert curve[0]["ape_adapter"] == pytest.approx(1 / 0.75 - 1, abs=0.03)  # 0.333: the whole shift
    assert curve[0]["ape_global"] == curve[0]["ape_offsets"] == curve[0]["ape_adapter"]
    assert curve[10]["ape_adapter"] < 0.05 and curve[10]["ape_offsets"] < 0.05
    assert all(0 <= row["coverage"] <= 1 for row in curve.values())


def test_adapter_clusters_split_by_gpu_except_the_named_group():
    from autopar.calibration.models.hierarchy import adapter_clusters

    keys = adapter_clusters(["mine", "mine", "pub", "pub"], ["H100", "GB200", "H100", "GB200"], "mine")
    assert keys == ["mine", "mine", "pub@H100", "pub@GB200"]
