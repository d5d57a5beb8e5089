"""The layouts spine: axes and meshes, rule levels, and the oracle that the search offers exactly the valid set.

The oracle enumerates a superset of every knob for small dense, MoE and CP problems and checks that
`build_space` yields exactly the strategies `autopar.layouts.check` accepts at SEARCH level (and that each
passes `validate_strategy`): the generators cannot drift from the rules.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.layouts import (
    MIN_TOKENS_PER_CP_RANK,
    STACKS,
    Axis,
    Level,
    ParallelDims,
    Split,
    check,
    dims_of,
    explain,
    grid_problems,
    mesh_problems,
    recompute_values,
    split_of,
)
from autopar.perf import validate_strategy
from autopar.search.space import build_space
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

H100 = get_gpu("H100-SXM")
DENSE = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
MOE = ModelSpec(
    name="tiny-moe",
    layers=4,
    hidden=512,
    heads=4,
    kv_heads=2,
    ffn_hidden=1024,
    vocab=32000,
    experts=4,
    topk=2,
    moe_ffn_hidden=512,
)
ZR = list(itertools.product([0, 1, 2, 3], ["none", "selective", "full"]))


def _strategy(tp, pp, cp, ep, etp, vpp, mb, sp, zero=1, rc="none"):
    return Strategy(
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=vpp,
        micro_batch=mb,
        sp=sp,
        zero=zero,
        recompute=rc,
        pp_schedule="interleaved" if vpp > 1 else "1f1b",
    )


def _oracle(model, cluster, wl, tps, pps, cps, eps, etps, vpps, mbs, zero_rc=((1, "none"),)):
    """Strategies (dp left to derive) that pass every rule at SEARCH level, over a superset of knob values."""
    ok = set()
    for tp, pp, cp, ep, etp, vpp, mb, sp, (z, rc) in itertools.product(
        tps, pps, cps, eps, etps, vpps, mbs, (False, True), zero_rc
    ):
        s = _strategy(tp, pp, cp, ep, etp, vpp, mb, sp, z, rc)
        if cp > 1:  # the stack's first CP variant (DeepSpeed ships Ulysses alone)
            s = s.model_copy(update={"cp_comm": (STACKS[wl.framework].cp_comm or ("p2p",))[0]})
        if not check(model, cluster, wl, s, level=Level.SEARCH):
            ok.add(s.with_dp(cluster.num_gpus))
    return ok


SCHEDS = ("1f1b", "interleaved", "zb-h1", "dualpipe")
CP_COMMS = ("p2p", "a2a", "allgather", "a2a+p2p")
NO_SAVER = ((None, 0.0),)


def _extended(model, cluster, wl, cores, shards=(None, 1, 2, 4, 8), savers=NO_SAVER, aos=(0,)):
    """Every core strategy crossed with a superset of the schedule, CP-variant, HSDP and memory-saver values,
    kept when it passes every rule at SEARCH level. These knobs only add rules (1F1B/interleaved, p2p, no
    HSDP and no saver are what `_oracle` checked), so a strategy whose core is invalid cannot become valid."""
    ok = set()
    for core in cores:
        for sched, cpc, ds, (states, off), ao in itertools.product(SCHEDS, CP_COMMS, shards, savers, aos):
            upd = {"pp_schedule": sched, "cp_comm": cpc, "dp_shard": ds, "activation_offload_layers": ao}
            s = core.model_copy(update={**upd, "optimizer_states": states, "optimizer_offload": off})
            if not check(model, cluster, wl, s, level=Level.SEARCH):
                ok.add(s)
    return ok


def _old_knobs(s):
    """True for points whose new knobs keep their pre-existing values (1F1B/interleaved, ring CP, no HSDP)."""
    return s.pp_schedule in ("1f1b", "interleaved") and s.cp_comm == "p2p" and s.dp_shard is None


def _space(model, cluster, wl, project=False):
    got = {pt.strategy for pt in build_space(model, cluster, wl)}
    if project:  # ZeRO stage and recompute are free knobs: every layout offers every combination (with
        # Megatron's recompute module sets that apply: layernorm+moe_act on an MoE model)
        zr = set(itertools.product([0, 1, 2, 3], recompute_values(model, wl)))
        assert {(s.zero, s.recompute) for s in got} == zr
        return {s for s in got if (s.zero, s.recompute) == (1, "none")}
    return got


def test_oracle_dense_space_including_zero_and_recompute():
    cl = ClusterSpec(gpu=H100, num_gpus=4, gpus_per_node=4)
    wl = Workload(seq_len=2048, global_batch=8)
    want = _oracle(
        DENSE, cl, wl, [1, 2, 3, 4], [1, 2, 3, 4], [1, 2], [1], [None], [1, 2, 3, 4], range(1, 9), ZR
    )
    got = _space(DENSE, cl, wl)
    assert got == _extended(DENSE, cl, wl, want)
    # hand count in test_search_space.test_tiny_space_size_by_hand (684 before the schedule/CP-variant knobs)
    assert len({s for s in got if _old_knobs(s)}) == 684 and len(got) == 1020
    assert all(validate_strategy(DENSE, cl, wl, s) == [] for s in got)
    assert {s.pp_schedule for s in got} == {"1f1b", "interleaved"}  # what Megatron ships (layouts.STACKS)
    assert {s.cp_comm for s in got} == {"p2p", "a2a", "allgather"}  # hierarchical needs two NVLink domains


def test_oracle_moe_space_with_parallel_folding():
    # 8 GPUs in NVLink domains of 4: tp and etp must stay inside a domain; the expert mesh folds over tp*cp*dp.
    cl = ClusterSpec(gpu=H100, num_gpus=8, gpus_per_node=4)
    wl = Workload(seq_len=2048, global_batch=8)
    etps = [1, 2, 3, 4, 8]  # search points always set etp (None = unset is for user strategies only)
    want = _oracle(
        MOE, cl, wl, [1, 2, 3, 4, 8], [1, 2, 4], [1, 2], [1, 2, 3, 4, 8], etps, [1, 2, 4], [1, 2, 4, 8]
    )
    got = _space(MOE, cl, wl, project=True)
    assert got == _extended(MOE, cl, wl, want)
    assert all(validate_strategy(MOE, cl, wl, s) == [] for s in got)
    assert {s.pp_schedule for s in got} == {"1f1b", "interleaved"}  # Megatron ships no DualPipe/ZB-H1
    got = {s for s in got if _old_knobs(s)}
    pairs = {(s.tp, s.cp, s.dp, s.ep, s.etp) for s in got}
    # folding: ep*etp may exceed tp (here tp=2, dp=4, ep=4, etp=2: expert mesh 2*4*1 = 8 GPUs = tp*cp*dp)
    assert (2, 1, 4, 4, 2) in pairs and (1, 1, 8, 4, 1) in pairs
    assert all((tp * cp * dp) % (ep * etp) == 0 and etp <= 4 for tp, cp, dp, ep, etp in pairs)
    assert {s.etp for s in got} == {1, 2, 4}


def test_oracle_context_parallel_space():
    # seq 4096 on 8 GPUs: cp=8 leaves 512 < MIN_TOKENS_PER_CP_RANK tokens per rank and is not offered.
    cl = ClusterSpec(gpu=H100, num_gpus=8, gpus_per_node=8)
    wl = Workload(seq_len=4096, global_batch=4)
    want = _oracle(DENSE, cl, wl, [1, 2, 4, 8], [1, 2, 4], [1, 2, 3, 4, 8], [1], [None], [1, 2], [1, 2, 4])
    got = _space(DENSE, cl, wl, project=True)
    assert got == _extended(DENSE, cl, wl, want)
    assert {s.cp for s in got} == {1, 2, 4} and MIN_TOKENS_PER_CP_RANK > 4096 // 8
    assert all(s.cp > 1 for s in got if s.cp_comm != "p2p")


def test_oracle_hierarchical_cp_and_hsdp_across_nvlink_domains():
    # 16 GPUs in domains of 4: a2a only inside a domain, a2a+p2p when tp*cp spans domains, HSDP filling one.
    mha = DENSE.model_copy(update={"name": "mha", "heads": 8, "kv_heads": 8})  # Ulysses splits 8 heads
    cl = ClusterSpec(gpu=H100, num_gpus=16, gpus_per_node=4)
    wl = Workload(seq_len=8192, global_batch=16)
    zr = [(1, "none"), (3, "none")]
    cores = _oracle(mha, cl, wl, [1, 2], [1], [1, 2, 4, 8], [1], [None], [1], [1, 2], zr)
    got = {pt.strategy for pt in build_space(mha, cl, wl)}
    got = {s for s in got if s.recompute == "none" and s.zero in (1, 3) and s.pp == 1 and s.micro_batch <= 2}
    got = {s for s in got if s.tp <= 2}
    assert got == _extended(mha, cl, wl, cores, shards=(None, 1, 2, 4, 8, 16))
    hier = {(s.tp, s.cp) for s in got if s.cp_comm == "a2a+p2p"}
    assert hier and all(tp * cp > 4 for tp, cp in hier)
    assert all(s.tp * s.cp <= 4 for s in got if s.cp_comm == "a2a")
    hsdp = {(s.tp, s.cp, s.dp, s.dp_shard) for s in got if s.dp_shard}
    assert (1, 1, 16, 4) in hsdp and all(
        tp * cp * ds == 4 and s3 == 3 for tp, cp, _, ds in hsdp for s3 in [3]
    )


def test_oracle_memory_savers_only_when_allowed():
    cl = ClusterSpec(gpu=H100, num_gpus=4, gpus_per_node=4)
    savers = [(st, off) for st in (None, "fp32", "bf16", "8bit") for off in (0.0, 0.5, 1.0)]
    for allowed in ((), ("offload", "8bit_states")):
        wl = Workload(seq_len=2048, global_batch=8, memory_savers=allowed)
        cores = _oracle(DENSE, cl, wl, [1, 2, 4], [1, 2], [1], [1], [None], [1], [1, 2])
        got = _space(DENSE, cl, wl, project=True)
        got = {s for s in got if s.cp == 1 and s.pp <= 2 and s.vpp == 1 and s.micro_batch <= 2}
        assert got == _extended(DENSE, cl, wl, cores, shards=(None,), savers=savers)
        # Megatron (the default stack) has no 8-bit optimizer states (layouts.STACKS)
        want = {(None, 0.0)} | ({(None, 1.0)} if allowed else set())
        assert {(s.optimizer_states, s.optimizer_offload) for s in got} == want


@pytest.mark.parametrize("framework", list(STACKS))
def test_oracle_per_stack_capabilities(framework):
    """Each stack's space holds exactly the rule-valid strategies built from what it ships (layouts.STACKS):
    schedules, ZeRO stages, CP (variants), HSDP, optimizer savers and activation offload (recompute none)."""
    mha = DENSE.model_copy(update={"name": "mha", "heads": 8, "kv_heads": 8})
    cl = ClusterSpec(gpu=H100, num_gpus=8, gpus_per_node=4)
    every = ("offload", "bf16_states", "8bit_states", "act_offload")
    wl = Workload(seq_len=4096, global_batch=8, framework=framework, memory_savers=every)
    zr = list(itertools.product([0, 1, 2, 3], ["none", "full"]))
    cores = _oracle(mha, cl, wl, [1, 2], [1, 2], [1, 4], [1], [None], [1], [1], zr)
    got = {pt.strategy for pt in build_space(mha, cl, wl)}
    got = {s for s in got if s.tp <= 2 and s.pp <= 2 and s.cp != 2 and s.vpp == 1 and s.micro_batch == 1}
    got = {s for s in got if s.recompute in ("none", "full")}
    savers = [(None, 0.0), (None, 1.0), ("bf16", 0.0), ("8bit", 0.0)]
    want = _extended(mha, cl, wl, cores, shards=(None, 1, 2, 4), savers=savers, aos=(0, 1, 2, 3))
    got = {s for s in got if s.optimizer_states is None or not s.optimizer_offload}
    assert got == {s for s in want if s.optimizer_states is None or not s.optimizer_offload}
    stack = STACKS[framework]
    assert {s.zero for s in got} == set(stack.zero)
    # 1F1B everywhere (no ZB-H1 in any stack), none where pipelines are model code (DeepSpeed)
    pipes = {s.pp_schedule for s in got if s.pp > 1}
    assert pipes == (set() if "pp" in stack.model_code else {"1f1b"})
    cps = {s.cp_comm for s in got if s.cp > 1}
    assert cps <= set(stack.cp_comm) and bool(cps) == (bool(stack.cp_comm) and "cp" not in stack.model_code)
    assert bool({s.dp_shard for s in got} - {None}) == stack.hsdp
    assert {s.optimizer_states for s in got} == {None, *stack.optimizer_states}
    assert {s.optimizer_offload for s in got} == ({0.0, 1.0} if stack.optimizer_offload else {0.0})
    assert all(s.activation_offload_layers in (0, 1, 2, 3) for s in got)  # candidate_layers(4) = [3, 2, 1]
    offloaded = {(s.pp, s.recompute, s.activation_offload_layers) for s in got if s.activation_offload_layers}
    assert offloaded == ({(1, "none", n) for n in (1, 2, 3)} if stack.act_offload else set())


def test_oracle_uneven_pipeline_splits():
    """7 layers: no pp > 1 divides them; the space offers exactly the balanced splits (every split checked)."""
    odd = DENSE.model_copy(update={"name": "odd", "layers": 7})
    cl = ClusterSpec(gpu=H100, num_gpus=8, gpus_per_node=8)
    wl = Workload(seq_len=2048, global_batch=8)
    sizes = (None, *range(8))
    splits = [Split(f, la) for f in sizes for la in sizes] + [
        Split(None, None, e, lo) for e in (0, 1) for lo in (0, 1)
    ]
    want = set()
    for pp, split, vpp, mb in itertools.product([1, 2, 4, 8], set(splits), [1, 2], [1, 2, 4, 8]):
        s = Strategy(
            pp=pp, vpp=vpp, micro_batch=mb, zero=1, pp_schedule="interleaved" if vpp > 1 else "1f1b",
            pp_first_layers=split.first, pp_last_layers=split.last,
            pp_account_embedding=split.account_embedding, pp_account_loss=split.account_loss,
        )  # fmt: skip
        if not check(odd, cl, wl, s, level=Level.SEARCH):
            want.add(s.with_dp(8))
    got = {s for s in _space(odd, cl, wl, project=True) if s.tp == 1 and s.cp == 1 and _old_knobs(s)}
    assert got == want
    # pp=2: 4+3 either way round; pp=4: ceil(7/4) = 2 per stage, first+last = 7 - 2*2 = 3 (1+2 or 2+1)
    stages = [(s.pp, split_of(s).stages(7, s.pp)) for s in got]
    layouts = {(p, (lay.first, lay.middle, lay.last)) for p, lay in stages}
    assert {(lay[0], lay[2]) for p, lay in layouts if p == 2} == {(4, 3), (3, 4)}
    assert (
        len({(s.pp_first_layers, s.pp_account_loss) for s in got if s.pp == 2}) == 2
    )  # one split per layout
    assert {lay for p, lay in layouts if p == 4} == {(1, 2, 2), (2, 2, 1)}
    assert {s.pp for s in got} == {1, 2, 4} and all(s.vpp == 1 for s in got)


def test_parallel_dims_derive_dp_and_edp():
    mix = get_model("Mixtral-8x7B")
    cl = ClusterSpec(gpu=H100, num_gpus=64)
    d = dims_of(cl, Strategy(tp=2, pp=2, cp=2, ep=4, etp=1, sp=True))
    # dp = 64 / (2*2*2) = 8; edp = tp*cp*dp / (ep*etp) = 2*2*8 / 4 = 8
    assert (d.dp, d.edp, d.model_parallel, d.dense_group) == (8, 8, 8, 32)
    assert d.degrees()[Axis.EDP] == 8 and set(d.degrees()) == set(Axis)
    assert dims_of(cl, Strategy(tp=4)).etp == 4  # unset etp is checked as Megatron's default etp = tp
    assert (
        check(
            mix,
            cl,
            Workload(seq_len=4096, global_batch=256),
            Strategy(tp=2, pp=2, cp=2, ep=4, etp=1, sp=True),
        )
        == []
    )
    assert ParallelDims(world=8, tp=8, etp=8).edp == 1 and ParallelDims(world=8, tp=8).edp == 8


def test_rule_levels_and_axes():
    l70 = get_model("Llama-3.1-70B")
    cl = ClusterSpec(gpu=H100, num_gpus=64)
    wl = Workload(seq_len=8192, global_batch=6)
    s = Strategy(tp=16, pp=2, vpp=2, pp_schedule="interleaved", sp=True)
    v = check(l70, cl, wl, s)
    assert {x.level for x in v} == {Level.STRICT} and {x.axis for x in v} == {Axis.TP, Axis.VPP}
    assert check(l70, cl, wl, s, level=Level.HARD) == []
    assert "NVLink domain" in explain(v) and "; " in explain(v)


def test_rules_that_were_wrong_before():
    cl = ClusterSpec(gpu=H100, num_gpus=48, gpus_per_node=8)
    gpt = ModelSpec(name="g", layers=12, hidden=1536, heads=24, ffn_hidden=6144, vocab=50000)
    wl = Workload(seq_len=2048, global_batch=48)
    # tp=6 fits in 8 GPUs but its groups straddle nodes (ranks 6..11 span two): the search never offered it
    assert any(
        "does not divide the NVLink domain of 8" in x for x in validate_strategy(gpt, cl, wl, Strategy(tp=6))
    )
    assert validate_strategy(gpt, cl, wl, Strategy(tp=6), strict=False) == []
    # an interleaved schedule without virtual stages is 1F1B: rejected even when pp=1
    assert validate_strategy(gpt, cl, wl, Strategy(pp_schedule="interleaved")) == [
        "pp_schedule=interleaved needs vpp > 1"
    ]
    # an explicit etp on a dense model is a rule broken, not ignored
    assert "etp=1 needs an MoE model (g is dense)" in validate_strategy(gpt, cl, wl, Strategy(tp=2, etp=1))


def test_expert_tp_is_a_checked_axis():
    mix = get_model("Mixtral-8x7B")  # moe_ffn_hidden 14336
    cl = ClusterSpec(gpu=H100, num_gpus=64)
    wl = Workload(seq_len=4096, global_batch=256)
    assert validate_strategy(mix, cl, wl, Strategy(tp=1, ep=8, etp=8)) == []  # 1*1*64 % 64 == 0
    assert any(
        "exceeds the NVLink domain" in x for x in validate_strategy(mix, cl, wl, Strategy(ep=4, etp=16))
    )
    assert any(
        "etp=3 does not divide moe_ffn_hidden" in x for x in validate_strategy(mix, cl, wl, Strategy(etp=3))
    )


def test_grid_and_mesh_explanations():
    cl = ClusterSpec(gpu=H100, num_gpus=4, gpus_per_node=4)
    wl = Workload(seq_len=2048, global_batch=8)
    assert grid_problems(DENSE, cl, wl, 2, 2, 1) == []
    assert explain(grid_problems(DENSE, cl, wl, 2, 4, 1)) == "tp*pp*cp = 2*4*1 = 8 does not divide num_gpus=4"
    assert mesh_problems(cl, Workload(seq_len=2048, global_batch=6), Strategy(tp=1, vpp=2)) == [
        "global_batch=6 is not divisible by micro_batch*dp = 1*4 = 4",
        "vpp=2 needs pp > 1",
    ]


@pytest.mark.parametrize("axis", list(Axis))
def test_axis_names_match_strategy_fields(axis):
    assert axis.value in Strategy.model_fields or axis is Axis.EDP


@settings(max_examples=25, deadline=None)
@given(
    heads=st.sampled_from([4, 6, 8, 12]),
    kv_div=st.sampled_from([1, 2]),
    layers=st.sampled_from([2, 3, 4, 6]),
    experts=st.sampled_from([0, 4, 6, 8]),
    n_node=st.sampled_from([(4, 4), (8, 4), (12, 4), (6, 2), (16, 8), (2, 8)]),
    seq=st.sampled_from([1024, 2048, 3072, 4096]),
    gb=st.sampled_from([4, 6, 8, 12]),
)
def test_offered_grids_are_exactly_those_without_problems(heads, kv_div, layers, experts, n_node, seq, gb):
    """Random small problems: a grid is offered iff grid_problems() has nothing to say (two paths, one rule set)."""
    moe = {"experts": experts, "topk": 2, "moe_ffn_hidden": 96 * heads} if experts else {}
    model = ModelSpec(
        name="p",
        layers=layers,
        hidden=64 * heads,
        heads=heads,
        kv_heads=heads // kv_div,
        ffn_hidden=192 * heads,
        vocab=1000,
        **moe,
    )
    n, node = n_node
    cl = ClusterSpec(gpu=H100, num_gpus=n, gpus_per_node=node)
    wl = Workload(seq_len=seq, global_batch=gb)
    try:
        space = build_space(model, cl, wl)
    except Exception as e:  # noqa: BLE001 - report which input broke the builder
        raise AssertionError(f"build_space raised {e!r}") from e
    offered = {(x.tp, x.pp, x.cp, x.ep, x.etp) for x in space.layouts}
    grids = itertools.product(
        range(1, n + 1), range(1, layers + 1), range(1, n + 1), [1, 2, 3, 4, 6, 8], [None, 1, 2, 3, 4, 8]
    )
    want = set()
    for tp, pp, cp, ep, etp in grids:
        if n % (tp * pp * cp) or (model.is_moe) != (etp is not None):
            continue
        if not grid_problems(model, cl, wl, tp, pp, cp, ep, etp):
            want.add((tp, pp, cp, ep, etp))
    assert offered == want
    for pt in itertools.islice(space, 0, None, max(1, space.size // 40)):
        assert check(model, cl, wl, pt.strategy, level=Level.SEARCH) == []


def test_knobs_of_a_complete_strategy_and_the_unset_ones_named():
    """Strategy.knobs(): what the rules and the model read, typed without None; an unset knob (left for
    `estimate` to complete) is named in a ValueError instead of failing later as a TypeError."""
    s = Strategy(tp=2, pp=4, vpp=2, micro_batch=2, recompute="full", pp_schedule="interleaved", zero=3)
    assert tuple(s.knobs()) == (2, 2, "full", "interleaved", 3)
    with pytest.raises(ValueError, match=r"unset knobs: vpp, recompute$"):
        Strategy(vpp=None, recompute=None).knobs()
    cl, wl = ClusterSpec(gpu=get_gpu("h100-sxm"), num_gpus=8), Workload(seq_len=2048, global_batch=8)
    with pytest.raises(ValueError, match="micro_batch"):
        mesh_problems(cl, wl, Strategy(micro_batch=None))


def test_mla_dims_are_the_spec_fields_and_refused_on_a_dense_model():
    mla = get_model("deepseek-v3").mla
    m = get_model("deepseek-v3")
    assert mla == (m.q_lora_rank or 0, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim)
    with pytest.raises(ValueError, match="not an MLA model"):
        _ = get_model("llama3-8b").mla
