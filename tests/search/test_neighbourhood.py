"""autopar/search/neighbourhood.py: the knob-change distance is a metric (checked against a plain-Python oracle
over whole spaces) and `nearest` returns what a scalar brute force over the same space returns."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.layouts import EVEN_SPLIT, split_of
from autopar.perf.vector_columns import columns_of
from autopar.search.evaluate import Evaluator
from autopar.search.margin import MemoryMargin
from autopar.search.neighbourhood import (
    KNOB_GROUPS,
    MUCH_BETTER,
    changes,
    distance,
    distances,
    make_evaluator,
    nearest,
)
from autopar.search.space import build_space
from autopar.specs import ClusterSpec, Strategy, Workload


def canon(s: Strategy) -> dict[str, object]:
    """The oracle: each knob group's value written out by hand, a knob that cannot act at its off value (so
    that PP1 -> PP2 with no interleaving and an even split is one change)."""
    return {
        "tp": s.tp,
        "sp": s.sp and s.tp > 1,
        "pp": s.pp,
        "vpp": (s.vpp, s.pp_schedule) if s.pp > 1 else (1, "1f1b"),
        "split": split_of(s) if s.pp > 1 else EVEN_SPLIT,
        "cp": (s.cp, s.cp_comm if s.cp > 1 else "p2p"),
        "ep": s.ep,
        "etp": s.etp,
        "zero": (s.zero, s.dp_shard if s.zero == 3 else None),
        "micro_batch": s.micro_batch,
        "recompute": s.recompute,
        "act_offload": s.activation_offload_layers or 0,
        "optimizer_states": s.optimizer_states,
        "optimizer_offload": s.optimizer_offload,
    }


def oracle(a: Strategy, b: Strategy) -> int:
    ca, cb = canon(a), canon(b)
    return sum(ca[k] != cb[k] for k in ca)


@cache
def moe_space():
    """A space with every kind of knob: MoE (ep, etp), pp with vpp and splits, cp variants, ZeRO/HSDP, savers."""
    wl = Workload(seq_len=8192, global_batch=64, memory_savers=("offload", "bf16_states", "act_offload"))
    return build_space(get_model("mixtral-8x7b"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=32), wl)


def test_oracle_has_every_group() -> None:
    assert len(canon(Strategy())) == len(KNOB_GROUPS)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_distance_is_a_metric_on_space_points(data) -> None:
    space = moe_space()
    a, b, c = (space.point(data.draw(st.integers(0, space.size - 1))).strategy for _ in range(3))
    dab = distance(a, b)
    assert dab == oracle(a, b)
    assert (dab == 0) == (a == b)  # space points are canonical: zero iff equal
    assert dab == distance(b, a)
    assert distance(a, c) <= dab + distance(b, c)
    assert len(changes(a, b)) == dab


knobs = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 4]),
        "pp": st.sampled_from([1, 2]),
        "cp": st.sampled_from([1, 2]),
        "vpp": st.sampled_from([1, 2]),
        "sp": st.booleans(),
        "cp_comm": st.sampled_from(["p2p", "a2a"]),
        "zero": st.sampled_from([1, 3]),
        "dp_shard": st.sampled_from([None, 2]),
        "recompute": st.sampled_from(["none", "full"]),
        "micro_batch": st.sampled_from([1, 2]),
    }
)


@settings(max_examples=100, deadline=None)
@given(knobs, knobs)
def test_distance_zero_iff_canonical_forms_equal(ka, kb) -> None:
    """On any strategies (knobs that cannot act included) the distance is the oracle's, zero iff the canonical
    forms are equal, and symmetric."""
    a, b = Strategy(**ka), Strategy(**kb)
    assert distance(a, b) == oracle(a, b) == distance(b, a)
    assert (distance(a, b) == 0) == (canon(a) == canon(b))


def test_distances_on_arrays_match_the_scalar_distance() -> None:
    space = moe_space()
    ref = space.point(space.size // 3).strategy
    for lay in space.layouts[::60]:
        got = distances(lay.columns(), columns_of([ref]))
        want = [oracle(lay.strategy(j), ref) for j in range(lay.size)]
        np.testing.assert_array_equal(got, want)


def _brute_force(space, ev: Evaluator, current: Strategy, max_d: int) -> dict[int, list[tuple[float, str]]]:
    """(tokens/s, label) of the strategies that fit with the headroom, per distance, by the scalar evaluator."""
    points = [p for p in space if oracle(p.strategy, current) <= max_d]
    out: dict[int, list[tuple[float, str]]] = {}
    for p, o in zip(points, ev.evaluate_many(points), strict=True):
        if o.feasible:
            out.setdefault(oracle(p.strategy, current), []).append(
                (o.values["throughput"], p.strategy.label())
            )
    return out


@cache
def llama_space():
    """Llama-3.1-8B at 32k on 16 H100 (20,514 points): small enough for a scalar brute force."""
    wl = Workload(seq_len=32768, global_batch=64, tp_comm_overlap=True, grad_reduce_dtype="fp32")
    return build_space(get_model("llama-3.1-8b"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16), wl)


@pytest.mark.parametrize(
    ("label", "headroom", "want_d"),
    [("TP2 DP8/Z0 mb1", 2.0, 1), ("TP1 DP16/Z0 mb2", 2.0, 2), ("TP1 PP2 DP8/Z1 mb2", 50.0, 3)],
)
def test_nearest_matches_a_scalar_brute_force(label: str, headroom: float, want_d: int) -> None:
    """The distance, the best answers, the count meeting the goal and the one-further answer are those a
    scalar evaluation of every point within three changes (the oracle's distance) gives."""
    from autopar.launch.labels import parse_strategy_label

    space, current = llama_space(), parse_strategy_label(label)
    ev = make_evaluator(space, MemoryMargin(extra_gib=headroom), None)
    nb = nearest(space, ev, current, "bf16", 3, top=3)
    truth = _brute_force(space, ev, current, 3)
    assert nb.distance == min(truth) == want_d
    want = sorted(truth[want_d], reverse=True)[:3]
    assert [c.tokens_per_s for c in nb.best] == pytest.approx([t for t, _ in want], rel=1e-9)
    assert nb.met == {d: len(v) for d, v in truth.items()}
    for c in nb.best:
        assert distance(c.strategy, current) == want_d and c.headroom_gib >= headroom
    one_more = sorted(truth.get(want_d + 1, []), reverse=True)[:1]
    much = bool(one_more) and one_more[0][0] >= want[0][0] * (1 + MUCH_BETTER)
    assert (nb.further is not None) == much
    if much:
        assert nb.further.tokens_per_s == pytest.approx(one_more[0][0], rel=1e-9)


def test_faster_goal_keeps_only_faster_strategies() -> None:
    """With a throughput floor, only strategies above it count, at every distance; the current strategy is
    not above its own throughput."""
    space = llama_space()
    ev = make_evaluator(space, MemoryMargin(extra_gib=2.0), None)
    current = next(p.strategy for p in space if p.strategy.label() == "TP1 CP8-a2a DP2/Z1 mb1")
    here = nearest(space, ev, current, "bf16", 0)
    assert here.distance == 0 and here.best[0].strategy == current
    assert nearest(space, ev, current, "bf16", 0, min_tokens_per_s=here.best[0].tokens_per_s).distance is None
    floor = here.best[0].tokens_per_s * 0.97
    nb = nearest(space, ev, current, "bf16", 2, min_tokens_per_s=floor, top=10_000)
    truth = _brute_force(space, ev, current, 2)
    faster = {d: [t for t, _ in v if t > floor] for d, v in truth.items()}
    assert nb.met == {d: len(v) for d, v in faster.items() if v}
    assert nb.distance == 0 and all(c.tokens_per_s > floor for c in nb.best)


def test_changes_name_the_groups_with_label_values() -> None:
    a = Strategy(tp=2, sp=True, cp=1, zero=1)
    b = Strategy(tp=2, sp=True, cp=2, cp_comm="a2a", zero=3, dp_shard=8)
    assert [c.text() for c in changes(a, b)] == ["cp 1→2-a2a", "zero 1→3/HSDP8"]
    assert [c.text() for c in changes(a, a, ("bf16", "fp8"))] == ["precision bf16→fp8"]
