"""The corrector (issue 12): scikit-learn contract, conformal coverage with known noise, the no-worse
gate against an adversarial group, cluster offsets that adapt, JSON parameters round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_fixtures import synthetic_training_set as _ts

from autopar.calibration.evaluation.validation import (
    COVERAGE,
    adaptation,
    held_out,
    passes_gate,
    select_params,
)
from autopar.calibration.models.corrector import (
    ThroughputCorrector,
    conformal_band,
    eb_offsets,
    weighted_quantile,
)
from autopar.calibration.models.features import FEATURE_NAMES


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_sklearn_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    failed = [r for r in check_estimator(ThroughputCorrector(), on_fail=None) if r["status"] == "failed"]
    assert failed == []


def test_fit_returns_self_and_learned_attributes_end_in_underscore():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    m = ThroughputCorrector()
    assert m.fit(X, y) is m
    learned = set(vars(m)) - set(m.get_params())
    assert learned and all(k.endswith("_") for k in learned)


def test_bad_parameters_are_value_errors():
    X, y = np.zeros((10, 2)), np.zeros(10)
    with pytest.raises(ValueError, match="shrink="):
        ThroughputCorrector(shrink=1.5).fit(X, y)
    with pytest.raises(ValueError, match="coverage="):
        ThroughputCorrector(coverage=1.5).fit(X, y)


def test_recovers_a_linear_log_factor():
    # y = 0.2 * x0 exactly: the ridge with a tiny penalty recovers the slope (on standardised x)
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(200, 2))
    y = 0.2 * X[:, 0]
    m = ThroughputCorrector(alpha=1e-6).fit(X, y)
    assert m.predict(np.array([[0.5, 0.0]]))[0] == pytest.approx(0.1, abs=1e-3)
    assert m.predict(np.array([[5.0, 0.0]]))[0] == pytest.approx(0.2, abs=0.01)  # clipped to the range


def test_weighted_quantile_and_group_weights():
    assert weighted_quantile(np.array([1.0, 2.0, 3.0]), np.ones(3), 0.5) == 2.0
    # one group of 9 runs at 0 and one of 1 run at 10: each group counts half
    lo, hi = conformal_band(np.r_[np.zeros(9), 10.0], ["a"] * 9 + ["b"], 0.8)
    assert lo == 0.0 and hi > 5.0


def test_conformal_band_covers_nominal_share_of_new_groups():
    """Known noise: y = 0.1 * x + group effect N(0, 0.05²) + run noise N(0, 0.1²); 40 groups of 8.
    Leave-one-group-out bands must cover 80% of held-out runs within 5 points."""
    rng = np.random.default_rng(7)
    G, n = 40, 8
    groups = [f"g{i}" for i in range(G) for _ in range(n)]
    X = rng.normal(size=(G * n, 2))
    effect = np.repeat(rng.normal(0, 0.05, G), n)
    y = 0.1 * X[:, 0] + effect + rng.normal(0, 0.1, G * n)
    res = held_out(_ts(X, y, groups), alpha=1.0, shrink=1.0)
    coverage = float(np.mean((y >= res.low) & (y <= res.high)))
    assert abs(coverage - COVERAGE) <= 0.05, coverage


def test_gate_shrinks_toward_one_when_a_group_is_adversarial():
    """Four groups share y = 0.3 * x; a fifth has the opposite slope. The full correction makes the fifth
    worse when it is left out, so the gate must shrink (here to 0) and the result passes the gate."""
    rng = np.random.default_rng(3)
    groups = [g for g in "abcde" for _ in range(20)]
    X = rng.uniform(-1, 1, size=(100, 1))
    y = np.where(np.array(groups) == "e", -0.3, 0.3) * X[:, 0]
    g = np.array(groups)
    choice = select_params(X, y, groups)
    assert not choice.unshrunk_passes and choice.shrink < 1.0
    from autopar.calibration.evaluation.validation import loso_raw

    assert passes_gate(y, choice.shrink * loso_raw(X, y, g, choice.alpha), g)
    # without the adversary the full correction passes and is kept
    keep = g != "e"
    assert select_params(X[keep], y[keep], list(g[keep])).shrink == 1.0


def _refit_without_each_group(X: np.ndarray, y: np.ndarray, g: np.ndarray, cap: float) -> np.ndarray:
    """What a new source gets: the whole selection redone without it (under `cap`), fitted, applied."""
    center = np.zeros(len(y))
    for grp in np.unique(g):
        te = g == grp
        ch = select_params(X[~te], y[~te], list(g[~te]), cap=cap)
        m = ThroughputCorrector(alpha=ch.alpha, shrink=ch.shrink).fit(X[~te], y[~te], groups=g[~te])
        center[te] = m.predict(X[te])
    return center


def test_nested_gate_validates_the_selection_redone_without_each_group():
    """Four groups share y = 0.3 x; a small fifth has its own slope (seeded). The one-level gate (cap 1)
    picks shrink 0.8, and redoing that selection without each group makes some left-out group worse;
    the nested gate caps the shrink lower (0.6 here) and the refits under that cap pass on every group,
    with the per-group choices recorded in `folds`."""
    rng = np.random.default_rng(8)
    groups = [k for k, n in zip("abcde", (12, 12, 12, 12, 4), strict=True) for _ in range(n)]
    g = np.array(groups)
    X = rng.uniform(-1, 1, size=(len(g), 1))
    slope = np.where(g == "e", rng.uniform(-0.3, 0.3), 0.3)
    y = slope * X[:, 0] + rng.normal(0, 0.03, len(g))
    one_level = select_params(X, y, groups, cap=1.0)
    choice = select_params(X, y, groups)
    assert choice.shrink <= choice.cap < one_level.shrink
    assert not passes_gate(y, _refit_without_each_group(X, y, g, 1.0), g)
    assert passes_gate(y, _refit_without_each_group(X, y, g, choice.cap), g)
    for grp in "abcde":
        te = g == grp
        again = select_params(X[~te], y[~te], list(g[~te]), cap=choice.cap)
        assert choice.folds[grp] == (again.alpha, again.shrink)


def test_group_offsets_partially_pool():
    r = np.r_[np.full(10, 0.2), np.full(10, -0.2), np.full(2, 0.5)] + np.tile([0.01, -0.01], 11)
    off, tau = eb_offsets(r, ["a"] * 10 + ["b"] * 10 + ["c"] * 2)
    assert 0 < tau < 1e6
    assert off["a"] == pytest.approx(10 / (10 + tau) * 0.2)
    assert abs(off["c"]) < 0.5  # two runs move it less than all the way


def test_k_runs_of_a_new_cluster_move_its_other_predictions():
    """Each group has its own level; the model starts at 0 for a held-out group (k=0) and, after k=5 of
    its runs, predicts its remaining runs better."""
    rng = np.random.default_rng(5)
    levels = rng.normal(0, 0.15, 6)
    groups = [f"g{i}" for i in range(6) for _ in range(15)]
    X = rng.normal(size=(90, 1))
    y = np.repeat(levels, 15) + rng.normal(0, 0.02, 90)
    curve = adaptation(_ts(X, y, groups), alpha=10.0, shrink=0.0, prior_scale=1.0, ks=(0, 5), draws=3)
    mean = curve.groupby("k").median_ape_after.mean()
    assert mean[5] < 0.5 * mean[0]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=len(FEATURE_NAMES), max_size=len(FEATURE_NAMES)))
def test_band_contains_the_center_and_params_round_trip(x):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, len(FEATURE_NAMES)))
    y = 0.1 * X[:, 0] + rng.normal(0, 0.05, 30)
    m = ThroughputCorrector().fit(X, y, groups=["a", "b", "c"] * 10)
    c, lo, hi = m.predict_interval(np.array([x]))
    assert lo[0] <= c[0] <= hi[0]
    back = ThroughputCorrector.from_params(m.to_params(), len(FEATURE_NAMES))
    assert back.predict_interval(np.array([x]), ["a"])[0] == pytest.approx(
        m.predict_interval(np.array([x]), ["a"])[0]
    )


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)),
        min_size=1,
        max_size=40,
    )
)
def test_group_medians_equal_numpy_median_per_group(rows):
    """The one-sort group medians are np.median(values[groups == k]) bit for bit (even and odd sizes, ties)."""
    from autopar.calibration.models.corrector import group_medians

    names, inv = np.unique(np.array([g for g, _ in rows]), return_inverse=True)
    v = np.array([x for _, x in rows])
    want = [np.median(v[inv == i]) for i in range(len(names))]
    assert group_medians(v, inv, len(names)).tolist() == want
