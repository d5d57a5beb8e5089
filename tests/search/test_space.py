"""The strategy space: hand-counted size, equality with the rule-valid set, encoding, repair, hardware."""

from __future__ import annotations

import functools
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.layouts import candidate_layers, schedules_for
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
    # tp in {1,2,4} (heads=4, kv_heads=2: Megatron-Core replicates the 2 KV heads at tp=4, layouts._kv_rule);
    # pp | 4 layers and | 4/tp; cp in {1,2} (2048 % 2cp == 0, >= 1024 tokens/rank).
    # Layouts (tp,pp,cp) -> dp, (mb,vpp) pairs [mb | 8/dp; vpp>1 needs pp>1, 4 % (pp*vpp) == 0, m % pp == 0]:
    #  (1,1,1) dp4 mb{1,2}: 2       (1,1,2) dp2 mb{1,2,4}: 3
    #  (1,2,1) dp2 mb1 v{1,2}, mb2 v{1,2}, mb4 v1: 5
    #  (1,2,2) dp1 mb1,2,4 v{1,2}, mb8 v1: 7      (1,4,1) dp1 mb{1,2,4,8} (4/4 layers: no vpp): 4
    #  (2,1,1) dp2: 3   (2,1,2) dp1: 4   (2,2,1) dp1: 7   (4,1,1) dp1 mb{1,2,4,8}: 4
    # tp=1: 21 pairs x 1 sp; tp=2: 14, tp=4: 4 pairs x 2 sp; x 4 zero x 3 recompute -> (21 + 28 + 8) x 12 = 684.
    # Schedules: Megatron (the default framework) ships 1F1B and interleaved only (layouts.STACKS), so no
    # ZB-H1/DualPipe. CP variants with cp=2: tp=1 p2p, a2a (4 and 2 heads divide by 2), allgather; tp=2 p2p,
    # allgather (1 KV head per rank: no a2a); hierarchical needs two NVLink domains.
    # No HSDP: tp*cp*dp = 4 fits the NVLink domain. Megatron ships ZeRO 0-3 (Megatron-FSDP for 2 and 3).
    # tp=1: 2 + 3x3 + 5 + 7x3 + 4 = 41; tp=2: (3 + 4x2 + 7) x 2 sp = 36; tp=4 (no CP: tp*cp = 8 > 4 GPUs):
    # 4 x 2 sp = 8 -> 85 x 12 = 1020.
    space = tiny_space()
    assert len(space.layouts) == 9
    assert space.size == 1020
    assert len(list(space)) == 1020


def test_space_equals_rule_valid_set():
    """Brute force over a superset of knob values: the space is exactly what validate_strategy accepts."""
    space = tiny_space()
    # The knobs offered since (schedules, CP variants) are checked against the rules in test_layouts' oracles.
    got = {pt.strategy for pt in space if pt.strategy.pp_schedule in ("1f1b", "interleaved")}
    got = {s for s in got if s.cp_comm == "p2p"}
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


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_decoded_and_neighbour_points_pass_every_rule(data):
    """Whatever knob choices NSGA-II draws, decode gives a point that passes validate_strategy (or says
    why not), and so does every neighbour: the search evaluator relies on it to skip re-validation
    (Evaluator(space_points=True), issue 15)."""
    model, cluster, wl, space = _mixtral_on_64()
    params = {k: data.draw(st.sampled_from(v), label=k) for k, v in space.distributions().items()}
    pt = space.decode(params)
    if isinstance(pt, str):
        return
    for q in [pt, *space.neighbors(pt)]:
        assert validate_strategy(model, cluster, wl, q.strategy) == [], q.strategy.label()


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


def _label_spaces():
    """Spaces that together offer every knob Megatron ships: its schedules, CP variants incl. hierarchical,
    HSDP, uneven pipeline splits, memory savers and activation offload (ZB-H1/DualPipe labels: test_launch)."""
    h100 = get_gpu("H100-SXM")
    savers = ("offload", "bf16_states", "act_offload")
    moe = get_model("Mixtral-8x7B")
    odd = get_model("Llama-3.1-8B").model_copy(update={"name": "odd", "layers": 61})
    return [
        build_space(moe, ClusterSpec(gpu=h100, num_gpus=64), Workload(seq_len=16384, global_batch=64)),
        build_space(
            odd,
            ClusterSpec(gpu=h100, num_gpus=32),
            Workload(seq_len=8192, global_batch=64, memory_savers=savers),
        ),
    ]


LABEL_SPACES = _label_spaces()


def test_label_spaces_offer_every_new_knob():
    lays = [lay for sp in LABEL_SPACES for lay in sp.layouts]
    assert {x for lay in lays for _, _, x in lay.pipe} == {"1f1b", "interleaved"}  # Megatron's (STACKS)
    assert {x for lay in lays for x in lay.cp_comm} == {"p2p", "a2a", "allgather", "a2a+p2p"}
    splits = {x for lay in lays for x in lay.split}
    assert (
        any(lay.dp_shard for lay in lays)
        and any(x.first for x in splits)
        and any(x.account_loss for x in splits)
    )
    savers = {x for lay in lays for x in lay.savers}
    assert savers == {(None, 0.0), (None, 1.0), ("bf16", 0.0), ("bf16", 1.0)}
    offload = {(lay.pp, x) for lay in lays for x in lay.act_offload}
    assert offload and {p for p, _ in offload} == {1} and {n for _, n in offload} == set(candidate_layers(61))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=1), st.integers(min_value=0, max_value=10**9))
def test_labels_round_trip_and_encode_decode_over_space_points(which, seed):
    """label -> parse_strategy_label -> the same strategy; encode/decode and the cache key carry every knob."""
    from autopar.launch.labels import parse_strategy_label

    space = LABEL_SPACES[which]
    pt = space.point(seed % space.size)
    s = pt.strategy
    back = parse_strategy_label(s.label())
    if back.etp is None and s.etp == s.tp:  # the label omits ETP equal to TP (Megatron's default etp = tp)
        back = back.model_copy(update={"etp": s.tp})
    assert back == s
    assert space.decode(space.encode(pt)) == pt
    assert space.point_of_key(pt.key) == pt


def test_distinct_points_have_distinct_labels():
    """Every point of 60 random layouts per space (their union: labels must differ across layouts too)."""
    rng = random.Random(0)
    for space in LABEL_SPACES:
        lays = rng.sample(space.layouts, min(60, len(space.layouts)))
        labels = [lay.strategy(j).label() for lay in lays for j in range(lay.size)]
        assert len(set(labels)) == len(labels) == sum(lay.size for lay in lays)


def test_why_names_schedule_split_cp_variant_hsdp_and_savers():
    from autopar.search.recommend import explain_layout
    from autopar.search.result import TrialRecord

    s = Strategy(
        pp=16, pp_schedule="dualpipe", pp_first_layers=2, pp_last_layers=3, cp=2, cp_comm="allgather",
        zero=3, dp_shard=4, optimizer_states="bf16", optimizer_offload=1.0,
    )  # fmt: skip
    why = explain_layout(TrialRecord(0, s, 1024, "H100-SXM", "fp8", None, {}, True))
    assert "DualPipe" in why and "megatron does not ship it" in why and "first 2, last 3" in why
    assert "CP2 allgather" in why and "HSDP" in why and "bf16 optimizer states" in why and "100%" in why
    assert "megatron runs it as allgather" in why
    plain = TrialRecord(
        0, Strategy(pp=4, pp_schedule="interleaved", vpp=2), 64, "H100-SXM", "bf16", None, {}, True
    )
    assert "megatron runs it as --num-layers-per-virtual-pipeline-stage" in explain_layout(plain)
    tt = explain_layout(plain, "torchtitan")
    offered = ", ".join(schedules_for("torchtitan"))  # the registry's rows torchtitan ships (knobs.SCHEDULES)
    assert offered.startswith("1f1b, interleaved")
    assert (
        f"torchtitan runs it as Interleaved1F1B (the search offers torchtitan's schedules: {offered})" in tt
    )
    assert "torchtitan does not ship it" in explain_layout(
        TrialRecord(0, s, 1024, "H100-SXM", "fp8", None, {}, True), "torchtitan"
    )
    assert explain_layout(TrialRecord(0, Strategy(), 8, "H100-SXM", "bf16", None, {}, True)) == ""
    # torchtitan's CP variants are PyTorch's ring attention with one of its two rotate methods (perf/cp.py)
    tt_cp = TrialRecord(0, Strategy(cp=2, cp_comm="allgather"), 16, "H100-SXM", "bf16", None, {}, True)
    assert "CP2 allgather: PyTorch's ring attention, K/V all-gathered once" in explain_layout(
        tt_cp, "torchtitan"
    )
    assert "the Llama 3 form" in explain_layout(tt_cp)


def test_neighbors_move_the_new_knobs():
    space = LABEL_SPACES[0]  # Mixtral on 64 H100 at 16K: schedules incl. DualPipe, CP variants, HSDP
    knobs = ("pp_schedule", "cp_comm", "dp_shard")
    assert set(knobs) <= set(space.distributions())
    pt = next(p for p in space if p.strategy.pp == 2 and p.strategy.cp == 2 and p.strategy.zero == 3)
    moved = {
        k
        for q in space.neighbors(pt)
        for k in knobs
        if getattr(q.strategy, k) != getattr(pt.strategy, k)
        and q.strategy.model_copy(update={k: getattr(pt.strategy, k)}) == pt.strategy
    }
    # Megatron's one-chunk schedule is 1F1B alone, so pp_schedule moves only together with vpp (interleaved)
    assert {"cp_comm", "dp_shard"} <= moved


def test_neighbors_and_decode_move_activation_offload_with_recompute_none_only():
    space = LABEL_SPACES[1]  # 61 layers on 32 H100 with act_offload allowed: offered on pp=1 layouts
    assert "activation_offload_layers" in space.distributions()
    pt = next(p for p in space if p.strategy.pp == 1 and p.strategy.recompute == "none")
    moved = {q.strategy.activation_offload_layers for q in space.neighbors(pt)}
    assert set(candidate_layers(61)) <= moved
    base = space.encode(pt)
    with_full = space.decode({**base, "recompute": "full", "activation_offload_layers": 30})
    assert with_full.strategy.recompute == "full" and with_full.strategy.activation_offload_layers == 0
    offl = space.decode({**base, "activation_offload_layers": 30})
    assert offl.strategy.activation_offload_layers == 30 and space.point_of_key(offl.key) == offl
    assert space.encode(offl)["activation_offload_layers"] == 30


def _validated(s: Strategy) -> Strategy:
    """The same strategy built through pydantic validation."""
    return Strategy(**s.model_dump(exclude_unset=True))


@pytest.mark.parametrize(
    "model, gpus, wl",
    [
        (TINY, TINY_CLUSTER, TINY_WL),
        (
            get_model("Mixtral-8x7B"),
            ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64),
            Workload(seq_len=4096, global_batch=256),
        ),
    ],
)
def test_unvalidated_strategies_equal_validated_ones(model, gpus, wl):
    """Search points skip pydantic validation; they must equal, hash and dump like validated ones."""
    space = build_space(model, gpus, wl)
    for pt in itertools.islice(space, 0, None, max(1, space.size // 3000)):
        v = _validated(pt.strategy)
        assert pt.strategy == v and v == pt.strategy and hash(pt.strategy) == hash(v)
        assert pt.strategy.model_dump() == v.model_dump()
        assert pt.strategy.model_fields_set == v.model_fields_set
        assert Point(pt.hw, v) == pt and Point(pt.hw, v).key == pt.key


def test_decode_and_neighbors_are_memoised_but_fresh_lists():
    space = tiny_space()
    pt = space.point(50)
    params = space.encode(pt)
    assert space.decode(dict(params)) is space.decode(dict(params))  # one decode per distinct choice
    first = space.neighbors(pt, adjacent=True)
    first.clear()  # callers may mutate what they get
    assert space.neighbors(pt, adjacent=True) == space._neighbors(pt, True)
    assert space.decode({**params, "tp": 2, "pp": 4}) == space._decode({**params, "tp": 2, "pp": 4})


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_memoised_decode_matches_a_fresh_decode(data):
    """Any per-knob choice: the memoised decode equals a fresh one, and a point's key names its strategy."""
    space = _mixtral_on_64()[3]  # one space: its memos are what the test checks
    params = {k: data.draw(st.sampled_from(v), label=k) for k, v in space.distributions().items()}
    got = space.decode(params)
    assert got == space._decode(dict(params)) and space.decode(dict(params)) == got
    if isinstance(got, Point):
        s = got.strategy
        assert got.key[:11] == (
            got.hw,
            s.tp,
            s.pp,
            s.cp,
            s.ep,
            s.etp,
            s.vpp,
            s.sp,
            s.zero,
            s.micro_batch,
            s.recompute,
        )
        assert space.point_of_key(got.key) == got
        assert all(q.key != got.key for q in space.neighbors(got))


@pytest.mark.parametrize("framework", ["deepspeed", "megatron", "torchtitan"])
def test_every_layout_offers_what_decoding_picks_from(framework: str) -> None:
    """Each (micro_batch, vpp) pair a layout offers has a schedule the stack runs, and each layout has a CP
    variant: decoding picks from these, and DeepSpeed's pipeline (no interleaving) once left a pair with no
    schedule (`optimize --framework deepspeed --sampler nsga2` ended in an IndexError)."""
    from autopar.search.study import optimize as run_optimize

    model = get_model("llama-3.1-70b")
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    wl = Workload(seq_len=8192, global_batch=512, framework=framework)
    space = build_space(model, [cluster], wl)
    for lay in space.layouts:
        assert lay.cp_comm
        assert {(mb, v) for mb, v, _ in lay.pipe} == set(lay.mb_vpp)
    res = run_optimize(model, [cluster], wl, budget=150, sampler="nsga2", seed=0)
    assert res.stats["evaluated"] == 150
