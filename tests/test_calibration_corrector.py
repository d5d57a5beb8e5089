"""The throughput corrector: scikit-learn contract, a known synthetic factor, shrinkage, bands."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import check_estimator

from autopar.calibration.apply import fit_calibration
from autopar.calibration.corrector import ThroughputCorrector
from autopar.calibration.features import FEATURE_NAMES, features
from autopar.calibration.records import estimate_row, row_to_specs
from autopar.perf import estimate


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_sklearn_estimator_checks_ridge():
    """Every applicable check_estimator check passes (ridge candidate: fast)."""
    failed = [
        r
        for r in check_estimator(ThroughputCorrector(model="ridge"), on_fail=None)
        if r["status"] == "failed"
    ]
    assert failed == []


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_sklearn_estimator_checks_auto():
    failed = [
        r
        for r in check_estimator(ThroughputCorrector(hgb_max_iter=10), on_fail=None)
        if r["status"] == "failed"
    ]
    assert failed == []


def test_fit_returns_self_and_learned_attributes_end_in_underscore():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    m = ThroughputCorrector()
    assert m.fit(X, y) is m
    learned = set(vars(m)) - set(m.get_params())
    assert learned and all(k.endswith("_") for k in learned)
    assert m.model_name_ in ("ridge", "hgb") and set(m.cv_errors_) == {"ridge", "hgb", "none"}


def test_bad_parameters_are_value_errors():
    X, y = np.zeros((10, 2)), np.zeros(10)
    with pytest.raises(ValueError, match="model="):
        ThroughputCorrector(model="forest").fit(X, y)
    with pytest.raises(ValueError, match="coverage="):
        ThroughputCorrector(coverage=1.5).fit(X, y)


# ------------------------------------------------------------------------------------- synthetic
def _synthetic_records() -> list[dict[str, object]]:
    """Llama-3.1 8B/70B on H100 clusters over a grid of TP/PP/micro-batch/seq/recompute."""
    out = []
    grid = itertools.product(
        ["llama-3.1-8b", "llama-3.1-70b"],
        [8, 16, 32, 64],
        [1, 2, 4, 8],
        [1, 2, 4],
        [1, 2],
        [4096, 8192],
        ["selective", "full"],
    )
    for i, (model, n, tp, pp, mb, seq, rc) in enumerate(grid):
        dp = n // (tp * pp)
        if dp < 1 or 256 % (mb * dp):
            continue
        out.append(
            {
                "id": f"S{i}",
                "source": f"src{i % 4}",
                "model": model,
                "gpu": "H100-SXM",
                "num_gpus": n,
                "gpus_per_node": 8,
                "tp": tp,
                "pp": pp,
                "cp": 1,
                "dp": dp,
                "ep": 1,
                "sp": int(tp > 1),
                "zero": 1,
                "recompute": rc,
                "micro_batch": mb,
                "global_batch": 256,
                "seq_len": seq,
                "precision": "bf16",
            }
        )
    return out


def test_synthetic_factor_depending_on_tp_is_recovered_within_2_percent():
    """measured = analytical x (0.8 if tp >= 4 else 1.0): held-out configurations come back within 2%."""
    recs = []
    for r in _synthetic_records():
        pred = estimate_row(r)
        if pred["status"] != "ok":
            continue
        true = 0.8 if int(r["tp"]) >= 4 else 1.0
        recs.append({**r, "measured_tokens_per_s_per_gpu": pred["pred_tokens_per_s_per_gpu"] * true})
    assert len(recs) > 200
    rng = np.random.default_rng(0)
    order = rng.permutation(len(recs))
    cut = int(0.75 * len(recs))
    train, test = [recs[i] for i in order[:cut]], [recs[i] for i in order[cut:]]
    cal = fit_calibration(train, name="synthetic", evaluate=False)
    assert cal.meta.model_name == "hgb"  # a step in tp is what trees represent; CV must find that
    errs = []
    for r in test:
        sp = row_to_specs(r)
        est = estimate(sp.model, sp.cluster, sp.workload, sp.strategy, strict=False)
        f, lo, hi = cal.throughput_factor(sp.model, sp.cluster, sp.workload, sp.strategy, est)
        true = 0.8 if sp.strategy.tp >= 4 else 1.0
        errs.append(abs(f / true - 1))
        assert lo <= f <= hi
    assert max(errs) < 0.02, f"worst held-out error {max(errs):.3%}"


# ------------------------------------------------------------------------------------- shrinkage
def _toy(n: int = 60, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, 4))
    return X, np.full(n, math.log(0.7))  # a constant 30% over-prediction


def test_far_from_data_means_no_correction_and_the_prior_band():
    X, y = _toy()
    m = ThroughputCorrector(model="ridge").fit(X, y)
    near = X[:5] + 0.01
    far = X[:5] + 100.0
    c_near, _, _ = m.predict_interval(near)
    c_far, lo_far, hi_far = m.predict_interval(far)
    assert np.allclose(c_near, math.log(0.7), atol=1e-6)  # full trust next to the data
    assert np.all(np.abs(c_far) < 1e-3)  # ~no correction 100 units away (typical spacing ~0.3)
    # far band -> ±prior half-width = 80th percentile of |y| = |log 0.7|
    assert np.allclose(hi_far, -lo_far, atol=1e-3) and np.allclose(hi_far, -math.log(0.7), atol=1e-3)


def test_shrink_weight_halves_one_scale_beyond_d0():
    # Training points 0, 1, ..., 9 on one axis; with 1 neighbour every point's own nearest distance is
    # one spacing, so d0 = 1 spacing. Weight = 1/(1 + ((d - d0)/d0)^2) beyond d0, 1 within it.
    X = np.arange(10, dtype=float)[:, None]
    m = ThroughputCorrector(model="ridge", n_neighbors=1, shrink_scale=1.0).fit(X, np.full(10, -0.2))
    assert m.typical_distance_ == pytest.approx(1 / X.std())  # one spacing in scaled units
    w = m.shrink_weight(np.array([[4.5], [11.0], [12.0], [19.0]]))
    # 4.5: 0.5 spacing -> 1;  11: 2 spacings -> 1/2;  12: 3 -> 1/(1+4) = 0.2;  19: 10 -> 1/(1+81)
    assert w == pytest.approx([1.0, 0.5, 0.2, 1 / 82])
    assert m.predict(np.array([[11.0]]))[0] == pytest.approx(-0.1)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=4, max_size=4))
def test_band_contains_the_center(x):
    X, y = _toy()
    y = y + np.random.default_rng(2).normal(0, 0.05, size=len(y))
    m = _FITTED.get("m") or _FITTED.setdefault("m", ThroughputCorrector(model="ridge").fit(X, y))
    c, lo, hi = m.predict_interval(np.array([x]))
    assert lo[0] <= c[0] <= hi[0]
    w = m.shrink_weight(np.array([x]))[0]
    assert 0.0 < w <= 1.0


_FITTED: dict[str, ThroughputCorrector] = {}


def test_feature_vector_matches_names():
    rec = _synthetic_records()[0]
    sp = row_to_specs(rec)
    est = estimate(sp.model, sp.cluster, sp.workload, sp.strategy, strict=False)
    x = features(sp.model, sp.cluster, sp.workload, sp.strategy, est)
    assert x.shape == (len(FEATURE_NAMES),) and np.all(np.isfinite(x))
    named = dict(zip(FEATURE_NAMES, x, strict=True))
    # shares of the step add up to one; tp=1 pp=1 dp=8 on 8 GPUs; gemm tokens = mb*seq/cp = 1*4096
    shares = sum(v for k, v in named.items() if k.startswith("share_"))
    assert shares == pytest.approx(1.0)
    assert (named["log2_tp"], named["log2_dp"], named["log2_gemm_tokens"]) == (0.0, 3.0, 12.0)
    assert named["family_hopper"] == 1.0 and named["fp8"] == 0.0 and named["recompute_selective"] == 1.0
