"""The default search (search/hybrid.py): exact sweep on small spaces, NSGA-II over layouts with exact
inner solves on large ones. Oracles: the exhaustive sweep (itself equal to the scalar exhaustive loop,
tests/search/test_sweep.py) and brute-force scalar evaluation of a layout's every strategy."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.objectives import parse_objectives
from autopar.search import build_space, hybrid, optimize, sweep
from autopar.search.evaluate import Evaluator, resolve_price
from autopar.specs import ClusterSpec, Workload

OBJECTIVES = ("throughput", "headroom", "cost")
# Two GPU types x two counts: the outer search has hardware to choose as well as degrees.
DENSE_HW = (
    get_model("Llama-3.1-8B"),
    [ClusterSpec(gpu=get_gpu(g), num_gpus=n) for g in ("H100-SXM", "H200") for n in (8, 16)],
    Workload(seq_len=8192, global_batch=128),
)
MOE = (get_model("Qwen3-30B-A3B"), [ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)], Workload(seq_len=4096, global_batch=32))  # fmt: skip

PROBLEMS = {"dense": DENSE_HW, "moe": MOE}


def _front(r):
    return sorted(
        (t.gpu, t.num_gpus, t.strategy.label(), tuple(sorted(t.values.items())))
        for t in r.trials
        if not t.dominated and t.feasible
    )


@functools.cache
def _exhaustive(name):
    model, clusters, wl = PROBLEMS[name]
    old, sweep.KEEP_ALL_LIMIT = sweep.KEEP_ALL_LIMIT, 0  # on arrays, whatever the size
    try:
        return optimize(model, clusters, wl, sampler="exhaustive", objectives=OBJECTIVES)
    finally:
        sweep.KEEP_ALL_LIMIT = old


@pytest.mark.parametrize("name", ["dense", "moe"])
def test_auto_is_the_exact_front_on_small_spaces(name):
    r = optimize(*PROBLEMS[name], objectives=OBJECTIVES)  # default sampler
    assert r.space_size <= hybrid.EXACT_LIMIT and r.sampler == "exhaustive" and r.inputs["sampler"] == "auto"
    assert _front(r) and _front(r) == _front(_exhaustive(name))


@pytest.mark.parametrize("budget", [20, 10_000])
def test_hybrid_finds_the_exhaustive_front(budget):
    """Covering every layout (budget 10,000) or 20 NSGA-II layouts plus the exact neighbourhood pass."""
    r = optimize(*DENSE_HW, objectives=OBJECTIVES, sampler="hybrid", budget=budget, seed=1)
    assert r.sampler == "hybrid" and r.stats["sweep"]["evaluated"] <= r.space_size
    assert _front(r) == _front(_exhaustive("dense"))
    assert any(n.startswith("hybrid search: NSGA-II over") for n in r.notes)


def test_hybrid_same_seed_same_result(monkeypatch):
    monkeypatch.setattr(hybrid, "NEIGHBOUR_POINT_CAP", 3000)  # stop early: the result hangs on NSGA-II
    runs = [
        optimize(*DENSE_HW, objectives=OBJECTIVES, sampler="hybrid", budget=40, seed=s) for s in (5, 5, 6)
    ]
    same = [[(t.number, t.gpu, t.num_gpus, t.strategy, t.values) for t in r.trials] for r in runs]
    assert same[0] == same[1] and _front(runs[0]) == _front(runs[1])
    assert runs[0].stats["sweep"] == runs[1].stats["sweep"]


def test_auto_switches_to_hybrid_above_the_exact_limit(monkeypatch):
    monkeypatch.setattr(hybrid, "EXACT_LIMIT", 1000)
    r = optimize(*MOE, objectives=OBJECTIVES, budget=40)
    assert r.sampler == "hybrid" and r.stats["sweep"]["layouts"][0] <= r.stats["sweep"]["layouts"][1]


@functools.cache
def _problem_space(name):
    model, clusters, wl = PROBLEMS[name]
    space = build_space(model, clusters, wl)
    prices = [resolve_price(h.cluster, None, "on_demand")[0] for h in space.hardware]
    ev = Evaluator(model, space.hardware, prices=prices, min_headroom_gib=2.0, space_points=True)
    return space, ev


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(["dense", "moe"]), pick=st.integers(0, 10**6), cap=st.sampled_from([None, 1.0, 3.0])
)
def test_inner_solve_is_the_brute_force_best(name, pick, cap):
    """Per objective, the layout's best feasible value (and the point holding it) equals what evaluating
    every strategy of the layout with the scalar evaluator gives; with none feasible, no best."""
    space, ev = _problem_space(name)
    ev.max_cost = cap
    k = pick % len(space.layouts)
    lay, start = space.layouts[k], hybrid.layout_starts(space)[k]
    objs = parse_objectives(list(OBJECTIVES))
    sol = hybrid.solve_layouts(space, ev, [k], hybrid.layout_starts(space), objs)[k][0]
    outs = [ev(space.point(start + j)) for j in range(lay.size)]
    feas = [o for o in outs if o.feasible]
    assert sol.n_feasible == len(feas)
    if not feas:
        assert sol.best == {} and any(v > 0 for v in sol.constraints.values())
        return
    for o, value in zip(objs, sol.values, strict=True):
        want = max(f.values[o.name] * (1 if o.maximize else -1) for f in feas) * (1 if o.maximize else -1)
        assert value == pytest.approx(want, rel=1e-9)
        assert outs[sol.best[o.name] - start].values[o.name] == pytest.approx(want, rel=1e-9)
    assert all(v <= 0 for v in sol.constraints.values())


def test_hybrid_with_nothing_feasible_says_why():
    r = optimize(*MOE, objectives=OBJECTIVES, sampler="hybrid", budget=40, min_headroom_gib=10_000)
    assert not r.pareto_rows and r.stats["sweep"]["feasible"] == 0 and r.trials
    assert all(not t.feasible for t in r.trials)
