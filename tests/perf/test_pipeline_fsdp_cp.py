"""Golden and property tests of pipeline schedules, ZeRO-3/FSDP exposure, CP variants, completion, offload."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.errors import InvalidStrategyError
from autopar.perf import estimate
from autopar.perf.fsdp import Zero3Unit, zero3_round, zero3_time
from autopar.perf.pipeline import (
    SCHEDULE_NAMES,
    SCHEDULES,
    bubble_fraction,
    inflight_microbatches,
    schedule_violations,
    stage_layers,
)
from autopar.specs import COMPLETABLE_KNOBS, ClusterSpec, Strategy, Workload

GiB = 2**30


# ---- schedules: golden bubbles, hand-derived -------------------------------------------------------------
def test_bubble_fractions_golden():
    # 1F1B (Narayanan 2021 §2.2.1): (p-1)/m = 7/32.
    assert bubble_fraction("1f1b", 8, 32) == pytest.approx(7 / 32)
    # Interleaved (ibid. §2.2.2): (p-1)/(v·m) = 7/(4·32).
    assert bubble_fraction("interleaved", 8, 32, 4) == pytest.approx(7 / 128)
    # ZB-H1 (Qi et al. 2023 §2.1): (p-1)(T_F+T_B-T_W) with T_F=T_B=T_W=1 over m(T_F+T_B+T_W) = 7/(3·32).
    assert bubble_fraction("zb-h1", 8, 32) == pytest.approx(7 / 96)
    # DualPipe (DeepSeek-V3 Table 2): (p/2-1)(F&B + B - 3W) with F=1, B=2, W=1, F&B=F+B: 3·2 = 6 over 3·32.
    assert bubble_fraction("dualpipe", 8, 32) == pytest.approx(6 / 96)
    assert bubble_fraction("1f1b", 1, 32) == 0.0


def test_zero_bubble_schedules_golden():
    # ZB-2p and ZB-V at T_F = T_B = T_W (w = 1/2 of t_b = 2): no bubble (Qi et al. ICLR 2024 §3; arXiv 2401.10241
    # §6 and 2405.15362: V-ZB bubble 0).
    assert bubble_fraction("zb-2p", 8, 32) == 0.0
    assert bubble_fraction("zb-v", 8, 32, 2) == 0.0
    # w = 1/4: T_F = 1, T_B = 1.5, T_W = 0.5. ZB-H2's form (p-1)(T_F+T_B-2T_W) = 7·1.5 = 10.5 over m(T_F+T_B+T_W)
    # = 32·3 = 96; ZB-V's half-stage chunks: 5.25/96. ZB-H1 (p-1)(T_F+T_B-T_W) = 7·2 = 14 over 96 is above both.
    assert bubble_fraction("zb-2p", 8, 32, 1, 0.25) == pytest.approx(10.5 / 96)
    assert bubble_fraction("zb-v", 8, 32, 2, 0.25) == pytest.approx(5.25 / 96)
    assert bubble_fraction("zb-h1", 8, 32, 1, 0.25) == pytest.approx(14 / 96)
    # no weight-gradient split (w = 0): T_B = 2, nothing to fill with; ZB-2p keeps 1F1B's 3·7/96 = 7/32
    assert bubble_fraction("zb-2p", 8, 32, 1, 0.0) == pytest.approx(7 / 32)
    # activations: ZB-2p budgets 2p micro-batches (2x 1F1B), ZB-V p (as 1F1B), both capped by m
    assert inflight_microbatches("zb-2p", 8, 32) == 16
    assert inflight_microbatches("zb-2p", 8, 12) == 12
    assert inflight_microbatches("zb-v", 8, 32, 2) == 8
    assert inflight_microbatches("zb-v", 8, 4, 2) == 4
    # ZB-V runs exactly two chunks per rank (torch ScheduleZBVZeroBubble: "exactly 2 stages per rank")
    assert schedule_violations("zb-v", 4, 2, 8) == []
    assert any("2 model chunks" in x for x in schedule_violations("zb-v", 4, 1, 8))
    assert any("one model chunk" in x for x in schedule_violations("zb-2p", 4, 2, 8))


def test_zero_bubble_schedules_only_where_a_stack_ships_them():
    from autopar.layouts import STACKS, schedules_for

    assert "zb-v" in schedules_for("torchtitan") and "zb-v" in schedules_for("fsdp")
    assert STACKS["torchtitan"].schedules["zb-v"] == "ZBVZeroBubble"  # torch get_schedule_class's name
    for fw in ("megatron", "megatron-legacy", "deepspeed"):
        assert "zb-v" not in schedules_for(fw)
    assert not any("zb-2p" in schedules_for(fw) for fw in STACKS)


def test_zb_v_estimate_beats_1f1b_with_the_same_activation_memory():
    m, cl = get_model("Llama-3.1-8B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    w = Workload(seq_len=4096, global_batch=64, framework="torchtitan")
    one = estimate(m, cl, w, Strategy(pp=8, micro_batch=1))
    zbv = estimate(m, cl, w, Strategy(pp=8, vpp=2, pp_schedule="zb-v", micro_batch=1))
    assert zbv.time.bubble < one.time.bubble / 2
    assert zbv.memory.activations == pytest.approx(one.memory.activations, rel=0.05)
    zb2 = estimate(m, cl, w, Strategy(pp=8, pp_schedule="zb-2p", micro_batch=1))
    assert zb2.memory.activations > 1.5 * one.memory.activations


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 64),
    st.integers(1, 512),
    st.integers(1, 8),
    st.sampled_from(SCHEDULE_NAMES),
    st.floats(0.0, 0.5),
)
def test_no_schedule_bubbles_more_than_1f1b(p, m, v, name, w):
    assert 0.0 <= bubble_fraction(name, p, m, v, w) <= bubble_fraction("1f1b", p, m) + 1e-12


def test_inflight_microbatches():
    assert inflight_microbatches("1f1b", 8, 32) == 8  # min(p, m) (Korthikanti 2022 §4.2.3)
    assert inflight_microbatches("1f1b", 8, 4) == 4
    assert inflight_microbatches("interleaved", 8, 32, 4) == pytest.approx(8 * (1 + 7 / 32))
    assert inflight_microbatches("zb-h1", 8, 32) == 8  # ZB-H1 keeps 1F1B's memory
    assert inflight_microbatches("dualpipe", 8, 32) == 9  # p + 1 (DeepSeek-V3 Table 2)


def test_schedule_rules():
    assert set(SCHEDULES) == {"1f1b", "interleaved", "zb-h1", "dualpipe", "zb-2p", "zb-v"}
    assert schedule_violations("dualpipe", 6, 1, 12) == []
    assert any("even pp" in x for x in schedule_violations("dualpipe", 3, 1, 12))
    assert any("even number" in x for x in schedule_violations("dualpipe", 4, 1, 7))
    assert any("divisible by pp" in x for x in schedule_violations("interleaved", 4, 2, 6))
    assert schedule_violations("interleaved", 4, 2, 6, strict=False) == []
    assert any("vpp > 1" in x for x in schedule_violations("interleaved", 4, 1, 8))
    assert any("one model chunk" in x for x in schedule_violations("zb-h1", 4, 2, 8))


def test_uneven_stages_as_megatron_options():
    # Llama 3.1 405B, 126 layers on PP16 with embedding and loss counted as layers: 128 units, 8 per stage.
    lay = stage_layers(126, 16, account_embedding=True, account_loss=True)
    assert (lay.first, lay.middle, lay.last) == (7, 8, 7)
    lay = stage_layers(126, 16, first=7, last=7)  # --decoder-first/last-pipeline-num-layers 7
    assert (lay.first, lay.middle, lay.last) == (7, 8, 7)
    lay = stage_layers(126, 8)  # plain split: 16 on the first seven stages, the remainder 14 on the last
    assert (lay.first, lay.middle, lay.last) == (16, 16, 14)


def _405b(**kw):
    """Llama 3.1 405B on PP16 (126 layers: uneven stages, so estimates use strict=False as for logged runs)."""
    m = get_model("Llama-3.1-405B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=2048)
    w = Workload(seq_len=8192, global_batch=2048)
    return m, cl, w, Strategy(tp=8, pp=16, sp=True, zero=1, **kw)


def test_schedules_end_to_end():
    m, cl, w, base = _405b(micro_batch=1, recompute="full", vpp=1)
    one = estimate(m, cl, w, base.model_copy(update={"pp_schedule": "1f1b"}), strict=False)
    zb = estimate(m, cl, w, base.model_copy(update={"pp_schedule": "zb-h1"}), strict=False)
    dual = estimate(m, cl, w, base.model_copy(update={"pp_schedule": "dualpipe"}), strict=False)
    assert zb.time.bubble == pytest.approx(one.time.bubble / 3, rel=1e-6)  # (p-1)/(3m) vs (p-1)/m
    assert zb.memory.activations == pytest.approx(one.memory.activations)
    # 2x parameters (DeepSeek-V3 Table 2); rank 0 also holds the mirrored last stage's output layer
    assert 2 * one.memory.weights <= dual.memory.weights <= 2.2 * one.memory.weights
    with pytest.raises(InvalidStrategyError, match="even pp"):
        estimate(
            m,
            cl.model_copy(update={"num_gpus": 1408}),
            w,
            base.model_copy(update={"pp": 11, "pp_schedule": "dualpipe"}),
        )


# ---- completion ----------------------------------------------------------------------------------------------
def test_405b_pp16_completion_fits_and_avoids_the_big_bubble():
    # Issue 11 item 4: given without vpp / micro-batch / recompute, 1F1B mb1 no-recompute is OOM with a 47%
    # bubble; the completion must pick a fitting configuration.
    m, cl, w, s = _405b(vpp=None, micro_batch=None, recompute=None, pp_schedule=None)
    e = estimate(m, cl, w, s, strict=False)
    assert e.fits
    assert e.time.bubble / e.step_time_s < 0.2
    names = {a.split("=")[0] for a in e.assumed}
    assert names == {"vpp", "micro_batch", "recompute", "pp_schedule"}
    assert e.strategy is not None and e.strategy.zero == 1 and e.strategy.tp == 8


@settings(max_examples=25, deadline=None)
@given(st.sets(st.sampled_from(["vpp", "micro_batch", "recompute", "pp_schedule", "zero"])))
def test_completion_never_changes_an_explicit_value(unset):
    m, cl, w, s = _405b(vpp=2, micro_batch=1, recompute="selective", pp_schedule="interleaved")
    s = s.model_copy(update={k: None for k in unset})
    e = estimate(m, cl, w, s, strict=False)
    for k in COMPLETABLE_KNOBS:
        if getattr(s, k) is not None:
            assert getattr(e.strategy, k) == getattr(s, k)
    assert {a.split("=")[0] for a in e.assumed} == set(unset)


def test_moe_etp_completes_to_a_valid_value_not_tp():
    m = get_model("Mixtral-8x7B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=4096, global_batch=256)
    e = estimate(m, cl, w, Strategy(tp=4, ep=8, sp=True))
    assert e.strategy.etp in (1, 2, 4)
    assert any(a.startswith("etp=") for a in e.assumed)
    explicit = estimate(m, cl, w, Strategy(tp=4, ep=8, sp=True, etp=4))
    assert explicit.assumed == () and explicit.strategy.etp == 4


# ---- ZeRO-3 / FSDP --------------------------------------------------------------------------------------------
def test_zero3_round_hand_derived():
    # 4 units, gather 2 s, reduce-scatter 1 s, forward 1 s and backward 2 s per unit; root 0.5 s gather, 0 rs.
    u, root = Zero3Unit(2.0, 1.0, 0.0), Zero3Unit(0.5, 0.0, 0.0)
    r = zero3_round(u, root, 4, 1.0, 2.0, 1.0, True, True, True)
    # forward: root 0.5 + first 2 + 3·(2-1) = 5.5; backward: 3·max(0, 2+1-2) + last rs 1 = 4
    assert r.exposed == pytest.approx(9.5)
    assert r.overlapped == pytest.approx((0.5 + 8) + 3 * 3 + 1 - 9.5)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 1),
    st.floats(0, 1),
    st.floats(0, 0.2),
    st.floats(0, 1),
    st.integers(1, 128),
    st.floats(0, 2),
    st.floats(0, 4),
    st.floats(0, 1),
    st.integers(1, 16),
    st.booleans(),
)
def test_fsdp_exposed_time_is_bounded(ag, rs, ar, root_ag, n, cf, cb, hide, m, pipelined):
    u, root = Zero3Unit(ag, rs, ar), Zero3Unit(root_ag, rs, ar)
    t = zero3_time(u, root, n, cf, cb, hide, m, pipelined)
    # every collective of the step, none hidden: forward gathers, backward re-gathers, reduce-scatters
    gathers = root_ag + n * ag
    reduces = n * (rs + ar) + rs + ar
    unoverlapped = gathers + reduces if pipelined else m * (gathers + n * ag + reduces)
    assert t.exposed >= 0 and t.overlapped >= 0
    assert t.exposed <= unoverlapped + 1e-9


def test_hsdp_shards_states_inside_the_group_and_pays_the_replica_all_reduce():
    m = get_model("Llama-3.1-8B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=8192, global_batch=128, framework="torchtitan")
    full = estimate(m, cl, w, Strategy(zero=3, micro_batch=2, recompute="selective"))
    hsdp = estimate(m, cl, w, Strategy(zero=3, micro_batch=2, recompute="selective", dp_shard=8))
    # 16 B/param over 64 ranks vs over the 8-rank shard group
    assert hsdp.memory.optimizer == pytest.approx(8 * full.memory.optimizer, rel=1e-6)
    assert hsdp.time.dp_comm != full.time.dp_comm
    with pytest.raises(InvalidStrategyError, match="HSDP"):
        estimate(m, cl, w, Strategy(zero=1, dp_shard=8))


# ---- context parallelism -------------------------------------------------------------------------------------
def test_cp8_at_8k_does_not_win_for_8b_on_16_gpus():
    # Issue 11: at 8K the search proposed CP8 for an 8B model on 16 GPUs; per-chunk costs must stop that.
    m = get_model("Llama-3.1-8B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    w = Workload(seq_len=8192, global_batch=512)

    def best(cp):
        outs = [
            estimate(m, cl, w, Strategy(cp=cp, zero=z, micro_batch=1, recompute=r))
            for z in (1, 3)
            for r in ("none", "selective")
        ]
        return max(e.tokens_per_s for e in outs if e.fits)

    assert best(8) < 0.9 * max(best(1), best(2))


def test_cp_variants_and_rules():
    m = get_model("Llama-3.1-8B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    w = Workload(seq_len=131072, global_batch=2)
    base = Strategy(cp=4, zero=3, micro_batch=1, recompute="full")
    ests = {
        v: estimate(m, cl, w, base.model_copy(update={"cp_comm": v})) for v in ("p2p", "a2a", "allgather")
    }
    assert all(e.tokens_per_s > 0 for e in ests.values())
    assert ests["a2a"].time.cp_comm > 0  # Ulysses all-to-alls are not overlapped
    with pytest.raises(InvalidStrategyError, match="Ulysses"):
        estimate(
            m,
            cl.model_copy(update={"num_gpus": 24}),
            w.model_copy(update={"global_batch": 1}),
            Strategy(cp=24, zero=3, micro_batch=1, recompute="full", cp_comm="a2a"),
            strict=False,
        )


# ---- offload and optimizer-state precision -------------------------------------------------------------------
def test_optimizer_offload_and_state_precision_trade_memory_for_time():
    m = get_model("Llama-3.1-70B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=8192, global_batch=128)
    s = Strategy(tp=8, pp=2, sp=True, zero=1, micro_batch=1, recompute="selective")
    base = estimate(m, cl, w, s)
    off = estimate(m, cl, w, s.model_copy(update={"optimizer_offload": 1.0}))
    assert off.memory.optimizer == 0.0 and off.time.optimizer > base.time.optimizer
    bf16 = estimate(m, cl, w, s.model_copy(update={"optimizer_states": "bf16"}))
    q8 = estimate(m, cl, w, s.model_copy(update={"optimizer_states": "8bit"}))
    # 12 -> 8 -> 6 bytes per parameter (ZeRO §3.1; Megatron precision-aware optimizer; Dettmers 2022)
    assert bf16.memory.optimizer == pytest.approx(base.memory.optimizer * 8 / 12)
    assert q8.memory.optimizer == pytest.approx(base.memory.optimizer * 6 / 12)
    assert q8.time.optimizer < base.time.optimizer


def test_memory_savers_are_offered_only_when_allowed():
    from autopar.perf.memory import saver_choices

    assert saver_choices(()) == {"optimizer_offload": (0.0,), "optimizer_states": (None,)}
    both = saver_choices(("offload", "bf16_states", "8bit_states"))
    assert both == {"optimizer_offload": (0.0, 1.0), "optimizer_states": (None, "bf16", "8bit")}


def test_flat_ring_follows_nccl_ring_latency_model():
    # NVIDIA/nccl src/graph/tuning.cc @01afd20: base + (n - k)·intra + (k - 1)·inter, µs.
    from autopar.perf.comm import Links
    from autopar.perf.fsdp import flat_ring

    links = Links(8, 300e9, 40e9, 3e-6, 8e-6)
    # 16 ranks on 2 nodes, LL (small message): 3.6 + 14·(0.47·1.8) + 1·2.7 µs
    assert flat_ring(0.0, 16, 1, links, "LL") == pytest.approx((3.6 + 14 * 0.846 + 2.7) * 1e-6)
    # 1 GB, Simple: 8.4 + 14·3.4 + 9.6 µs + 15/16 · 1e9 / 40e9 s at the NIC rate
    assert flat_ring(1e9, 16, 1, links, "Simple") == pytest.approx(
        (8.4 + 47.6 + 9.6) * 1e-6 + 15 / 16 * 1e9 / 40e9
    )
    # inside one node: NVLink rate, no network hop
    assert flat_ring(1e9, 8, 1, links, "Simple") == pytest.approx(
        (8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * 1e9 / 300e9
    )


def test_uneven_split_options_pass_strict_validation_when_they_add_up():
    m = get_model("Llama-3.1-405B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=2048)
    w = Workload(seq_len=8192, global_batch=2048)
    base = Strategy(tp=8, pp=16, sp=True, zero=1, micro_batch=1, recompute="full")
    with pytest.raises(InvalidStrategyError, match="not divisible by pp=16"):
        estimate(m, cl, w, base)  # 126 layers on 16 stages, no options
    acc = estimate(m, cl, w, base.model_copy(update={"pp_account_embedding": True, "pp_account_loss": True}))
    explicit = estimate(m, cl, w, base.model_copy(update={"pp_first_layers": 7, "pp_last_layers": 7}))
    assert acc.step_time_s == pytest.approx(explicit.step_time_s)  # the same 7/8/7 split
    with pytest.raises(InvalidStrategyError, match="139 layers, not 126"):
        estimate(m, cl, w, base.model_copy(update={"pp_first_layers": 6, "pp_last_layers": 7}))


def test_zero3_with_pp_keeps_the_stage_gathered_with_fp32_accumulated_grads():
    # FSDP2 under PP: bf16 params of the stage stay gathered and unsharded grads accumulate in the reduce dtype
    # (fp32 in torchtitan): 1e9 stage params, 1e8 biggest layer, 8-way shard, Adam fp32 states.
    from autopar.perf.memory import Sharding, StageParams, model_states

    sp = StageParams(non_expert=1e9, expert=0.0, biggest_layer=1e8)
    sh = Sharding(3, 8, 1, 12.0, 0.0, False, 2.0, 1.0, True, accum_grad_bytes=4.0)
    wts, grd, opt, buf = model_states(sp, sh)
    assert (wts, grd, opt) == pytest.approx((2e9 / 8, 2e9 / 8, 12e9 / 8))
    assert buf == pytest.approx(1e9 * (2 + 4) + 1e8 * 4)
    # without PP: two gathered units (prefetch depth 1) + a bf16 grad unit + an fp32 reduce buffer
    flat = Sharding(3, 8, 1, 12.0, 0.0, False, 2.0, 1.0, False)
    assert model_states(sp, flat)[3] == pytest.approx(1e8 * (2 * 2 + 2 + 4))


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(["Llama-3.1-8B", "Llama-3.1-70B", "Mixtral-8x7B"]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(SCHEDULE_NAMES),
    st.sampled_from(["p2p", "a2a", "allgather", "a2a+p2p"]),
    st.sampled_from([None, 2]),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from([None, "bf16", "8bit"]),
    st.sampled_from([0, 1, 3]),
)
def test_every_knob_combination_gives_finite_nonnegative_breakdowns(
    name, tp, pp, cp, sched, cp_comm, dp_shard, offload, states, zero
):
    m = get_model(name)
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=16384, global_batch=128, framework="torchtitan")
    s = Strategy(
        tp=tp,
        pp=pp,
        cp=cp,
        sp=tp > 1,
        pp_schedule=sched,
        vpp=1 if SCHEDULES[sched].takes_vpp(1) else 2,  # the chunks per rank the schedule runs
        cp_comm=cp_comm,
        dp_shard=dp_shard if zero == 3 else None,
        optimizer_offload=offload,
        optimizer_states=states,
        zero=zero,
        micro_batch=1,
        recompute="full",
        etp=1 if m.is_moe else None,
    )
    try:
        e = estimate(m, cl, w, s, strict=False)
    except InvalidStrategyError:
        return
    parts = [*e.time.as_dict().values(), *e.memory.as_dict().values()]
    assert all(v >= 0 and v == v and v != float("inf") for v in parts)
    assert e.step_time_s == pytest.approx(e.time.total) and e.tokens_per_s > 0
