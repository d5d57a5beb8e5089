"""autopar tune's belief, acquisition and stop rule against hand derivations and invariants (issue 42)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.tune import belief as bf
from autopar.tune import decide


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def test_expected_improvement_matches_a_numerical_integral():
    # E[max(0, exp(m + s Z) - b)] integrated on a fine grid of Z, independent of the closed form
    m, s, b = math.log(100.0), 0.1, 100.0
    z = np.linspace(-10, 10, 200_001)
    dens = np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi)
    integral = float(np.sum(np.maximum(0.0, np.exp(m + s * z) - b) * dens) * (z[1] - z[0]))
    got = decide.expected_improvement(np.array([m]), np.array([s]), b)[0]
    assert got == pytest.approx(integral, rel=1e-6)
    # by hand: 100 e^{0.005} Phi(0.1) - 100 Phi(0) = 4.2533
    assert got == pytest.approx(100 * math.exp(0.005) * _phi(0.1) - 50, rel=1e-9)


def test_hypervolume_of_two_points_by_hand():
    # (T, E) = (4, 1) and (2, 3) above the origin: 4*1 + 2*(3-1) = 8; a dominated point adds nothing
    assert decide.hypervolume2(np.array([[4.0, 1.0], [2.0, 3.0]])) == pytest.approx(8.0)
    assert decide.hypervolume2(np.array([[4.0, 1.0], [2.0, 3.0], [1.0, 1.0]])) == pytest.approx(8.0)


def test_win_probability_with_one_cluster_is_the_normal_tail_over_best_plus_noise():
    b = decide.Beliefs(
        np.log([1000.0, 900.0]), np.array([0.1, 0.2]), np.array([1.0, 0.5]), np.full(2, 64.0), np.full(2, 3.0)
    )
    m = decide.as_measured([950.0], [64], [3.0])
    p = decide.win_probability(b, m, 0.01)
    t = math.log(950 * 1.01)
    assert p[0] == pytest.approx(_phi((math.log(1000) - t) / 0.1))
    assert p[1] == pytest.approx(0.5 * _phi((math.log(900) - t) / 0.2))


def test_threshold_with_several_clusters_by_hand():
    # measured: 64 GPUs at 1000 tokens/s/GPU, $2/GPU-h -> T = 64000, E = 500. A 128-GPU candidate at $2 is
    # dominated while 128 x <= 64000 and x / 2 <= 500, i.e. x <= min(500, 1000) = 500: it beats the front by 1%
    # above 505. A 32-GPU candidate at $1: x <= min(2000, 500) = 500 -> 505 too; at $4: min(2000, 2000) -> 2020.
    b = decide.Beliefs(
        np.zeros(3), np.ones(3), np.ones(3), np.array([128.0, 32.0, 32.0]), np.array([2.0, 1.0, 4.0])
    )
    m = decide.as_measured([1000.0], [64], [2.0])
    assert decide.thresholds(b, m, 0.01) == pytest.approx([505.0, 505.0, 2020.0])


def test_gp_posterior_by_hand():
    # one run: y = -0.2 at z = 0. With only the offset and layout kernels, at the run's own point the mean is
    # y (o^2 + c^2) / (o^2 + c^2 + n^2); far away (RBF ~ 0) it is y o^2 / (o^2 + c^2 + n^2).
    p = bf.Prior(offset_sd=0.1, config_sd=0.15, length=2.0, noise_sd=0.012)
    z = np.array([[0.0], [100.0]])
    mean, sd = bf.throughput_posterior(p, z, [0], [-0.2])
    tot = 0.1**2 + 0.15**2 + 0.012**2
    assert mean[0] == pytest.approx(-0.2 * (0.1**2 + 0.15**2) / tot, rel=1e-6)
    assert mean[1] == pytest.approx(-0.2 * 0.1**2 / tot, rel=1e-6)
    var_far = 0.1**2 + 0.15**2 - 0.1**4 / tot
    assert sd[1] == pytest.approx(math.sqrt(var_far), rel=1e-6)


def _one_run_by_hand(o: float, c: float, n: float, y: float, far: bool) -> tuple[float, float, float]:
    """(log marginal likelihood of one run y, posterior mean, posterior variance) at the run's point or far away."""
    v = o**2 + c**2 + n**2
    k = o**2 if far else o**2 + c**2
    return -0.5 * y**2 / v - 0.5 * math.log(2 * math.pi * v), k * y / v, o**2 + c**2 - k**2 / v


def test_uncertain_layout_spread_is_averaged_by_hand():
    # config_sd uncertain (log sd 0.5): the posterior is the mixture of the GPs on the grid c_k = 0.15 e^(0.5 k),
    # k = -2..2 in 9 steps, weights N(k; 0, 1) x the run's marginal likelihood; moments mixed by hand.
    o, n, y = 0.1, 0.012, -0.2
    p = bf.Prior(offset_sd=o, config_sd=0.15, length=2.0, noise_sd=n, config_log_sd=0.5)
    mean, sd = bf.throughput_posterior(p, np.array([[0.0], [100.0]]), [0], [y])
    ks = np.linspace(-2.0, 2.0, 9)
    for i, far in enumerate((False, True)):
        parts = [_one_run_by_hand(o, max(0.15 * math.exp(0.5 * k), n), n, y, far) for k in ks]
        logw = np.array([-0.5 * k**2 + ml for k, (ml, _, _) in zip(ks, parts, strict=True)])
        w = np.exp(logw - logw.max()) / np.exp(logw - logw.max()).sum()
        m = sum(wi * mi for wi, (_, mi, _) in zip(w, parts, strict=True))
        second = sum(wi * (vi + mi**2) for wi, (_, mi, vi) in zip(w, parts, strict=True))
        assert mean[i] == pytest.approx(m, rel=1e-6)
        assert sd[i] == pytest.approx(math.sqrt(second - m**2), rel=1e-6)


def test_runs_on_the_model_shrink_the_layout_spread():
    # Four runs that sit exactly on one common offset make the small layout spreads likelier: an unmeasured
    # layout's sd falls below the fixed-kernel GP's; four runs that scatter raise it.
    p = bf.Prior(offset_sd=0.1, config_sd=0.15, config_log_sd=0.5)
    fixed = bf.Prior(offset_sd=0.1, config_sd=0.15)
    z = np.array([[0.0], [3.0], [6.0], [9.0], [4.5]])
    on = [-0.1, -0.1, -0.1, -0.1]
    off = [-0.4, 0.2, -0.3, 0.25]
    sd_fixed = bf.throughput_posterior(fixed, z, [0, 1, 2, 3], on)[1][4]
    assert bf.throughput_posterior(p, z, [0, 1, 2, 3], on)[1][4] < sd_fixed
    sd_fixed_off = bf.throughput_posterior(fixed, z, [0, 1, 2, 3], off)[1][4]
    assert bf.throughput_posterior(p, z, [0, 1, 2, 3], off)[1][4] > sd_fixed_off


def test_the_spread_of_layout_spreads_is_measured():
    # autopar/data/tune_prior.json by_source within-problem sds: sd of their logs (ddof 1)
    import json

    from autopar.data import data_path

    doc = json.loads(data_path(bf.TUNE_PRIOR_FILE).read_text(encoding="utf-8"))
    logs = [math.log(v["within_problem_sd"]) for v in doc["by_source"].values()]
    mu = sum(logs) / len(logs)
    assert bf.between_sources_log_sd() == pytest.approx(
        math.sqrt(sum((x - mu) ** 2 for x in logs) / (len(logs) - 1))
    )
    assert bf.prior_from_bands([0.1], [0.1]).config_log_sd == bf.between_sources_log_sd()


def test_memory_fit_without_evidence_is_the_normal_cdf_of_the_room():
    p = bf.Prior(offset_sd=0.1, config_sd=0.1, memory_sd=0.1)
    rooms = np.array([-0.1, 0.0, 0.05, 0.2])
    got = bf.fit_probability(p, [], rooms)
    assert got == pytest.approx([_phi(r / 0.1) for r in rooms], abs=2e-3)


@settings(max_examples=40, deadline=None)
@given(
    rooms=st.lists(st.floats(-0.5, 0.5), min_size=2, max_size=6),
    oom_room=st.floats(-0.3, 0.3),
)
def test_an_oom_never_raises_and_a_run_that_fit_never_lowers_a_fit_probability(rooms, oom_room):
    p = bf.Prior(offset_sd=0.1, config_sd=0.1, memory_sd=0.12)
    r = np.array(sorted(rooms))
    base = bf.fit_probability(p, [], r)
    after_oom = bf.fit_probability(p, [bf.MemoryEvidence(oom_room, "oom")], r)
    after_fit = bf.fit_probability(p, [bf.MemoryEvidence(oom_room, "fit")], r)
    assert np.all(after_oom <= base + 1e-12)
    assert np.all(after_fit >= base - 1e-12)
    assert np.all(np.diff(base) >= -1e-12)  # more room, likelier to fit


@settings(max_examples=40, deadline=None)
@given(
    means=st.lists(st.floats(5.0, 8.0), min_size=1, max_size=6),
    best=st.floats(100.0, 3000.0),
)
def test_stop_rule_invariants(means, best):
    n = len(means)
    b = decide.Beliefs(np.array(means), np.full(n, 0.1), np.ones(n), np.full(n, 8.0), np.full(n, 2.0))
    m = decide.as_measured([best], [8], [2.0])
    p = decide.win_probability(b, m, 0.01)
    assert np.all((p >= 0) & (p <= 1))
    # a candidate that cannot fit never keeps the tune going
    b0 = decide.Beliefs(b.mean, b.sd, np.zeros(n), b.gpus, b.price)
    assert decide.confident(b0, m, 0.05, 0.01)
    # nothing measured yet: never confident
    assert not decide.confident(b, decide.as_measured([], [], []), 0.05, 0.01)
