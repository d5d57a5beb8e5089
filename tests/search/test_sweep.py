"""The exhaustive sweep on arrays (search/sweep.py, issue 15) finds what the classic exhaustive loop finds.

The classic loop (loops.run_exhaustive) evaluates every point with the scalar evaluator and keeps every
record; the sweep estimates on arrays and keeps the front and a sample. Same problem, same front (the
same strategies with the same values: the sweep's records come from the scalar evaluator), the same
hypervolume and the same totals; memory holds the front and the sample, not the space.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.apply import load_default_calibration
from autopar.calibration.models.features import (
    features,
    features_columns,
    memory_features,
    memory_features_columns,
)
from autopar.catalog import get_gpu, get_model
from autopar.perf import estimate
from autopar.perf.vector import estimate_columns
from autopar.search import build_space, optimize, sweep
from autopar.specs import ClusterSpec, Workload
from autopar.units import usd_per_mtoken

DENSE = (
    get_model("Llama-3.1-8B"),
    ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
    Workload(seq_len=8192, global_batch=128),
)
MOE = (get_model("Qwen3-30B-A3B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8), Workload(seq_len=4096, global_batch=32))  # fmt: skip


def _moved_memory_calibration():
    """The default model with a memory correction that moves every estimate (x1.1) and a throughput one."""
    cal = copy.deepcopy(load_default_calibration())
    cal.meta.group = "mine"
    cal.memory_corrector.offsets_ = {**cal.memory_corrector.offsets_, "mine": float(np.log(1.1))}
    assert cal.memory_moves()
    return cal


def _both(problem, monkeypatch, **kw):
    """(sweep result, classic result) of one exhaustive search."""
    model, cluster, wl = problem
    monkeypatch.setattr(sweep, "KEEP_ALL_LIMIT", 0)
    swept = optimize(model, cluster, wl, sampler="exhaustive", **kw)
    monkeypatch.setattr(sweep, "KEEP_ALL_LIMIT", 10**9)
    classic = optimize(model, cluster, wl, sampler="exhaustive", **kw)
    return swept, classic


def _front(r):
    return sorted(
        (t.strategy.label(), t.num_gpus, tuple(sorted(t.values.items()))) for t in r.trials if not t.dominated
    )


def _ties(r):
    return sorted((row["label"], row["num_gpus"]) for row in r.pareto_rows if row["near_tie"])


@pytest.mark.parametrize(
    "problem, kw",
    [
        (DENSE, {"calibration": "default"}),
        (DENSE, {"calibration": "memory", "min_headroom_gib": 12.0, "max_cost": 2.5}),
        (DENSE, {}),
    ],
)
def test_sweep_finds_the_classic_front(problem, kw, monkeypatch):
    kw = dict(kw)
    if kw.get("calibration") == "default":
        kw["calibration"] = load_default_calibration()
    elif kw.get("calibration") == "memory":
        kw["calibration"] = _moved_memory_calibration()
    swept, classic = _both(problem, monkeypatch, **kw)
    assert swept.stats["sweep"] and "sweep" not in classic.stats
    assert _front(swept) and _front(swept) == _front(classic)
    assert _ties(swept) == _ties(classic)  # the near-ties kept on arrays are those of every record
    assert swept.stats["hypervolume"] == pytest.approx(classic.stats["hypervolume"], rel=1e-12)
    n = classic.space_size
    assert swept.stats["sweep"]["evaluated"] == swept.stats["evaluated"] == n == len(classic.trials)
    assert swept.stats["sweep"]["feasible"] == classic.n_feasible
    # records kept: the front, its running near-ties and an even sample, bounded whatever the space's size
    assert len(swept.trials) <= len(_front(swept)) + sweep.NEAR_KEPT + sweep.SAMPLE_KEPT + 1 < n


def test_sweep_over_several_hardware_options(monkeypatch):
    """GPU count and type searched: one block per hardware option, each with its own price."""
    model, _, wl = DENSE
    clusters = [ClusterSpec(gpu=get_gpu(g), num_gpus=8) for g in ("H100-SXM", "H200")]
    monkeypatch.setattr(sweep, "KEEP_ALL_LIMIT", 0)
    swept = optimize(model, clusters, wl, sampler="exhaustive")
    monkeypatch.setattr(sweep, "KEEP_ALL_LIMIT", 10**9)
    classic = optimize(model, clusters, wl, sampler="exhaustive")
    assert {t.gpu for t in swept.trials if not t.dominated} == {"H100-SXM", "H200"}
    assert _front(swept) == _front(classic) and swept.n_feasible == classic.n_feasible


def test_evaluator_trusts_only_space_points_under_the_default_rules():
    """Evaluator(space_points=True) skips the rule re-check only with the default rules, and the search
    then counts every point of the space as valid (exactly)."""
    import random

    from autopar.search.evaluate import Evaluator
    from autopar.search.study import count_valid

    model, cluster, wl = DENSE
    space = build_space(model, cluster, wl)
    trusted = Evaluator(model, space.hardware, prices=[2.0], space_points=True)
    custom = Evaluator(model, space.hardware, prices=[2.0], space_points=True, validate_fn=lambda *a: ["no"])
    assert trusted.trusts_space and not custom.trusts_space
    assert count_valid(space, trusted, random.Random(0)) == (space.size, True)
    assert count_valid(space, custom, random.Random(0)) == (0, False)
    pt = space.point(0)
    assert trusted(pt).evaluated and custom(pt).reason == "rule: no"


def test_sweep_counts_reach_the_cli_summary(monkeypatch):
    from autopar.reports.counts import search_counts

    swept, classic = _both(DENSE, monkeypatch)
    a, b = search_counts(swept), search_counts(classic)
    assert a == b and a["total"] == classic.space_size
    assert any(n.startswith("exhaustive: ") for n in swept.notes)


@functools.cache
def _block(which: str):
    model, cluster, wl = DENSE if which == "dense" else MOE
    space = build_space(model, cluster, wl)
    block = next(iter(space.column_blocks(4096)))
    return model, cluster, wl, space, block, estimate_columns(model, cluster, wl, block.columns)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["dense", "moe"]), st.integers(0, 4095))
def test_feature_matrices_equal_the_scalar_features(which, row):
    """features_columns / memory_features_columns row i == features / memory_features of point i."""
    model, cluster, wl, space, block, vest = _block(which)
    row %= len(block.columns)
    s = space.point(block.start + row).strategy
    e = estimate(model, cluster, wl, s, check=False)
    got = features_columns(model, cluster, wl, block.columns, vest)[row]
    np.testing.assert_allclose(got, features(model, cluster, wl, s, e), rtol=1e-12, atol=1e-15)
    got = memory_features_columns(model, cluster, wl, block.columns, vest)[row]
    np.testing.assert_allclose(got, memory_features(model, cluster, wl, s, e), rtol=1e-12, atol=1e-15)


@given(st.lists(st.floats(0.0, 1e9), min_size=1, max_size=20), st.integers(1, 4096), st.floats(0.1, 20))
def test_cost_on_arrays_is_the_scalar_cost(tps, gpus, price):
    """usd_per_mtoken on an array equals it element by element (inf at zero throughput)."""
    arr = usd_per_mtoken(np.array(tps), gpus, price)
    assert list(arr) == [usd_per_mtoken(x, gpus, price) for x in tps]


def test_cost_on_arrays_by_hand():
    """1,024 GPUs at $2/GPU-h cost $2,048/h = $0.5689/s; at 1e6 tokens/s that is $0.5689 per Mtoken;
    at 2e6 tokens/s half of it; no throughput: infinite."""
    got = usd_per_mtoken(np.array([1e6, 2e6, 0.0]), 1024, 2.0)
    assert got[0] == pytest.approx(2048 / 3600) and got[1] == pytest.approx(1024 / 3600)
    assert got[2] == np.inf


@settings(max_examples=15, deadline=None)
@given(
    st.sampled_from(["dense", "moe"]), st.sampled_from(["none", "default", "memory"]), st.integers(0, 10**6)
)
def test_block_outcomes_equal_the_evaluator(which, calibration, seed):
    """A block's objective values and feasibility on arrays == the scalar Evaluator's, point by point
    (MoE included: the classic loop is too slow on an MoE space for the suite)."""
    import random

    from autopar.search.evaluate import Evaluator

    model, cluster, wl, space, block, _ = _block(which)
    cal = {"none": None, "default": load_default_calibration(), "memory": _moved_memory_calibration()}[
        calibration
    ]
    ev = Evaluator(
        model, space.hardware, prices=[2.5], calibration=cal, space_points=True, min_headroom_gib=4.0
    )
    values, feasible = sweep.block_outcomes(space, ev, block)
    rows = random.Random(seed).sample(range(len(block.columns)), 40)
    outs = ev.evaluate_many([space.point(block.start + i) for i in rows])
    for i, out in zip(rows, outs, strict=True):
        assert bool(feasible[i]) == out.feasible
        for name, v in out.values.items():
            assert values[name][i] == pytest.approx(v, rel=1e-9), name
