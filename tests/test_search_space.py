"""The strategy space: hand-counted size, equality with the rule-valid set, encoding, repair, hardware."""

from __future__ import annotations

import functools
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.perf import validate_strategy
from autopar.search.space import Point, build_space, divisors
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

TINY = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
TINY_CLUSTER = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=4, gpus_per_node=4)
TINY_WL = Workload(seq_len=2048, global_batch=8)


def tiny_space():
    return build_space(TINY, TINY_CLUSTER, TINY_WL)


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(64) == [1, 2, 4, 8, 16, 32, 64]


def test_tiny_space_size_by_hand():
    # tp in {1,2} (kv_heads=2); pp | 4 layers and | 4/tp; cp in {1,2} (2048 % 2cp == 0, >= 1024 tokens/rank).
    # Layouts (tp,pp,cp) -> dp, (mb,vpp) pairs [mb | 8/dp; vpp>1 needs pp>1, 4 % (pp*vpp) == 0, m % pp == 0]:
    #  (1,1,1) dp4 mb{1,2}: 2       (1,1,2) dp2 mb{1,2,4}: 3
    #  (1,2,1) dp2 mb1 v{1,2}, mb2 v{1,2}, mb4 v1: 5
    #  (1,2,2) dp1 mb1,2,4 v{1,2}, mb8 v1: 7      (1,4,1) dp1 mb{1,2,4,8} (4/4 layers: no vpp): 4
    #  (2,1,1) dp2: 3   (2,1,2) dp1: 4   (2,2,1) dp1: 7
    # tp=1: 21 pairs x 1 sp; tp=2: 14 pairs x 2 sp; x 4 zero x 3 recompute -> (21 + 28) x 12 = 588.
    space = tiny_space()
    assert len(space.layouts) == 8
    assert space.size == 588
    assert len(list(space)) == 588


def test_space_equals_rule_valid_set():
    """Brute force over a superset of knob values: the space is exactly what validate_strategy accepts."""
    space = tiny_space()
    got = {pt.strategy for pt in space}
    want = set()
    for tp, pp, cp, vpp, mb, sp, zero, rc in itertools.product(
        [1, 2, 3, 4],
        [1, 2, 3, 4],
        [1, 2],
        [1, 2, 3, 4],
        [1, 2, 3, 4, 5, 6, 7, 8],
        [False, True],
        [0, 1, 2, 3],
        ["none", "selective", "full"],
    ):
        if 4 % (tp * pp * cp) or (sp and tp == 1):
            continue
        s = Strategy(
            tp=tp,
            pp=pp,
            cp=cp,
            dp=4 // (tp * pp * cp),
            vpp=vpp,
            sp=sp,
            zero=zero,
            micro_batch=mb,
            recompute=rc,
            pp_schedule="interleaved" if vpp > 1 else "1f1b",
        )
        if not validate_strategy(TINY, TINY_CLUSTER, TINY_WL, s):
            want.add(s)
    assert got == want


def test_unrank_matches_iteration_and_encode_roundtrips():
    space = tiny_space()
    for i, pt in enumerate(space):
        assert space.point(i) == pt
        assert space.decode(space.encode(pt)) == pt
        assert space.point_of_key(pt.key) == pt
    with pytest.raises(IndexError):
        space.point(space.size)


def test_decode_repairs_dependent_knobs():
    space = tiny_space()
    base = {"tp": 1, "pp": 1, "cp": 1, "vpp": 2, "sp": True, "zero": 1, "micro_batch": 8, "recompute": "none"}
    pt = space.decode(base)
    assert isinstance(pt, Point)
    s = pt.strategy
    assert (s.vpp, s.sp, s.pp_schedule) == (1, False, "1f1b")  # no vpp without pp, no SP without TP
    assert s.micro_batch == 2 and s.dp == 4  # 8/dp = 2 sequences per rank: mb 8 repaired to 2
    bad = space.decode({**base, "tp": 2, "pp": 4})
    assert isinstance(bad, str) and "tp*pp*cp = 2*4*1 = 8 does not divide num_gpus=4" in bad


def test_neighbors_change_one_knob_and_stay_in_space():
    space = tiny_space()
    keys = {pt.key for pt in space}
    pt = space.point(100)
    for adjacent in (False, True):
        nbs = space.neighbors(pt, adjacent=adjacent)
        assert nbs and all(q.key in keys and q.key != pt.key for q in nbs)
    assert len(space.neighbors(pt, adjacent=True)) <= len(space.neighbors(pt))


@functools.cache
def _mixtral_on_64():
    """A real problem and its space, built once (0.2 s) for every example below."""
    model = get_model("Mixtral-8x7B")
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    wl = Workload(seq_len=4096, global_batch=256)
    return model, cluster, wl, build_space(model, cluster, wl)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10**6))
def test_sampled_points_are_valid(seed):
    """Any sampled point of a real problem's space passes every rule."""
    model, cluster, wl, space = _mixtral_on_64()
    pt = space.sample(random.Random(seed))
    assert validate_strategy(model, cluster, wl, pt.strategy) == []
    assert pt.strategy.dp * pt.strategy.tp * pt.strategy.pp * pt.strategy.cp == 64


def test_moe_and_dense_expert_parallel():
    dense = build_space(
        get_model("Llama-3.1-8B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16),
        Workload(seq_len=4096, global_batch=64),
    )
    assert {lay.ep for lay in dense.layouts} == {1}
    moe = build_space(
        get_model("Mixtral-8x7B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16),
        Workload(seq_len=4096, global_batch=64),
    )
    assert {lay.ep for lay in moe.layouts} == {1, 2, 4, 8}  # divisors of 8 experts
    assert {lay.etp for lay in moe.layouts} == {
        1,
        2,
        4,
        8,
    }  # divide moe_ffn_hidden=14336, in one NVLink domain
    assert {lay.etp for lay in dense.layouts} == {None}  # dense models leave etp unset
    for lay in moe.layouts:
        # parallel folding: the expert mesh etp*ep*edp covers the dense tp*cp*dp GPUs
        assert 8 % lay.ep == 0 and (lay.tp * lay.dp * lay.cp) % (lay.ep * lay.etp) == 0
        if lay.tp > 1 and lay.ep > 1:
            assert lay.sp == (True,)  # Megatron needs SP for MoE with TP and EP
        if lay.tp == 1:
            assert lay.sp == (False,)


def test_hardware_dimensions_and_fp8_skip():
    clusters = [ClusterSpec(gpu=get_gpu(g), num_gpus=n) for g in ("H100-SXM", "A100-80GB") for n in (8, 16)]
    space = build_space(
        get_model("Llama-3.1-8B"),
        clusters,
        Workload(seq_len=4096, global_batch=64),
        precisions=["bf16", "fp8"],
    )
    labels = {h.label() for h in space.hardware}
    # A100 has no FP8: 2 GPUs x 2 counts x 2 precisions - 2 skipped = 6 options.
    assert len(space.hardware) == 6
    assert "8x A100-80GB fp8" not in labels and "16x H100-SXM fp8" in labels
    assert any("A100-80GB has no FP8" in s for s in space.skipped)
    d = space.distributions()
    assert d["gpu"] == ["H100-SXM", "A100-80GB"] and d["num_gpus"] == [8, 16]
    assert d["precision"] == ["bf16", "fp8"]
    assert (
        space.decode({k: v[0] for k, v in d.items()} | {"gpu": "A100-80GB", "precision": "fp8"})
        == "8x A100-80GB in fp8 is not a usable hardware option"
    )
