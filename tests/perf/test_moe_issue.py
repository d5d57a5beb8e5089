"""MoE host issue with a sync per forward (perf/moe.py) and the DeepEP/HybridEP dispatcher read from a record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.records.specs import row_to_specs
from autopar.catalog import get_gpu, get_model
from autopar.perf import estimate
from autopar.perf.efficiency import HOST_OP_S, host_issue_time
from autopar.perf.moe import MoEIssue, moe_issue_floor, synced_issue_time
from autopar.specs import ClusterSpec, Strategy, Workload

US = 1e-6


def test_synced_issue_time_by_hand():
    # GPU-heavy first group: the GPU starts after the first issue and never waits: 5 + 1 = 6.
    assert synced_issue_time([(1, 5), (4, 1)]) == pytest.approx(6)
    # A slow-to-issue middle group delays the last, GPU-heavy group: k = 3 gives (1 + 4) + 3 = 8, above
    # both sum(CPU) = 6 and sum(GPU) = 5 (the old per-layer floor max(6, 5) = 6).
    assert synced_issue_time([(1, 1), (4, 1), (1, 3)]) == pytest.approx(8)
    # CPU-bound everywhere: the issue time itself.
    assert synced_issue_time([(2, 1), (3, 1)]) == pytest.approx(5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e-2), st.floats(0, 1e-2)), min_size=1, max_size=6))
def test_synced_issue_time_between_max_and_sum(groups):
    c = sum(x for x, _ in groups)
    g = sum(y for _, y in groups)
    t = synced_issue_time(groups)
    assert max(c, g) - 1e-12 <= t <= c + g + 1e-12


def test_moe_issue_floor_by_hand():
    # 16 local experts, forward ops: 30 dense + 40 MoE block + 3 x 16 expert = 118 at 20 us = 2.36 ms;
    # backward 2 x 118 ops = 4.72 ms. With no GPU work both are the issue time.
    assert abs(HOST_OP_S - 20 * US) < 1e-12
    idle = MoEIssue(0.0, 0.0, 0.0, 0.0, 0.0, 16)
    f, b = moe_issue_floor(idle)
    assert f == pytest.approx(118 * HOST_OP_S) and b == pytest.approx(236 * HOST_OP_S)
    # Groups from the sync (CPU us): dispatch side 10 ops = 200, experts 960, combine side 200, dense 600,
    # router side 20 ops = 400; total 2360. 2 ms of expert GEMMs: 200 + 2000 = 2200 < 2360 -> 2.36 ms.
    assert moe_issue_floor(MoEIssue(0.0, 0.0, 2e-3, 0.0, 0.0, 16))[0] == pytest.approx(2.36e-3)
    # 3 ms of expert GEMMs: the GPU starts them after the dispatch side (200 us) and runs them to the end
    # of the CPU's issue of everything after: 200 + 3000 = 3.2 ms.
    assert moe_issue_floor(MoEIssue(0.0, 0.0, 3e-3, 0.0, 0.0, 16))[0] == pytest.approx(3.2e-3)
    # 2 ms of attention block (dense) after the sync: issued after dispatch (200 us), experts (960 us) and
    # combine (200 us): 1360 us + 2 ms = 3.36 ms, where max(CPU, GPU) alone would give 2.36 ms.
    assert moe_issue_floor(MoEIssue(2e-3, 0.0, 0.0, 0.0, 0.0, 16))[0] == pytest.approx(3.36e-3)
    # Backward has no sync: floored by its issue time only.
    assert moe_issue_floor(MoEIssue(0.0, 0.0, 0.0, 0.0, 5e-3, 16))[1] == pytest.approx(5e-3)


def test_sync_slows_small_moe_micro_batches_only_without_graphs():
    m = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("B200"), num_gpus=8)
    s = Strategy(ep=8, micro_batch=1)
    small = Workload(seq_len=512, global_batch=64, precision="fp8")
    eager = estimate(m, cl, small, s, check=False)
    graphed = estimate(m, cl, small.model_copy(update={"cuda_graphs": True}), s, check=False)
    assert eager.step_time_s > graphed.step_time_s


def test_record_naming_deepep_runs_the_flex_dispatcher():
    row = {
        "id": "X",
        "model": "Qwen3-30B-A3B",
        "gpu": "H100-SXM",
        "num_gpus": 8,
        "gpus_per_node": 8,
        "ep": 8,
        "seq_len": 4096,
        "global_batch": 512,
        "micro_batch": 4,
        "precision": "bf16",
        "framework": "NeMo AutoModel (PyTorch FSDP2 + TE + DeepEP)",
        "notes": "Kernel Optimizations=TE + DeepEP",
    }
    spec = row_to_specs(row)
    assert spec.workload.moe_dispatcher == "flex"
    assert any("moe_dispatcher=flex" in a for a in spec.assumed)
    plain = row_to_specs({**row, "framework": "Megatron-Bridge", "notes": ""})
    assert plain.workload.moe_dispatcher == "alltoall"


def test_fp8_expert_casts_add_two_ops_per_local_expert():
    # TE's FP8 grouped linear issues one input cast per expert for FC1 and for FC2 (grouped_linear.py
    # split_quantize): 3 + 2 = 5 ops per local expert. 16 experts: 30 + 40 + 5 x 16 = 150 ops forward
    # (3 ms at 20 us), 300 backward; BF16 keeps 118 / 236.
    f, b = moe_issue_floor(MoEIssue(0.0, 0.0, 0.0, 0.0, 0.0, 16, fp8=True))
    assert f == pytest.approx(150 * HOST_OP_S) and b == pytest.approx(300 * HOST_OP_S)
    assert host_issue_time(True, 16, fp8=True) == pytest.approx((150 * HOST_OP_S, 300 * HOST_OP_S))
    assert host_issue_time(True, 16) == pytest.approx((118 * HOST_OP_S, 236 * HOST_OP_S))
    # A dense layer has no experts: FP8 changes nothing there.
    assert host_issue_time(False, 0, fp8=True) == host_issue_time(False, 0)


def test_fp8_expert_casts_reach_the_estimate(monkeypatch):
    # Wired through layers.py: on an issue-bound FP8 MoE problem (tiny micro-batches, no CUDA graphs) the
    # step is longer with the per-expert casts than with them switched off.
    from autopar.perf import efficiency
    from autopar.perf.context import clear_perf_contexts

    m = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("B200"), num_gpus=8)
    s = Strategy(ep=8, micro_batch=1)
    w = Workload(seq_len=512, global_batch=64, precision="fp8")
    clear_perf_contexts()  # per-layer costs are cached by context
    with_casts = estimate(m, cl, w, s, check=False).time.compute
    monkeypatch.setattr(efficiency, "FP8_OPS_PER_LOCAL_EXPERT", 0)
    clear_perf_contexts()
    without = estimate(m, cl, w, s, check=False).time.compute
    clear_perf_contexts()
    assert with_casts > without * 1.01


def test_alltoall_resorts_received_rows_by_local_expert():
    # Megatron's alltoall dispatcher sorts the received rows into local-expert order after the dispatch and
    # back before the combine (token_dispatcher.py sort_chunks_by_idxs), when a rank holds more than one
    # expert; the flex dispatcher permutes once. Qwen3-30B-A3B (h 2048, top-8, 128 experts), EP8, 4096
    # tokens, balanced routing: the busiest rank receives 4096 x 8 = 32768 rows; 2 sorts x (read + write)
    # x 2 bytes x 2048 x 32768 = 536,870,912 bytes of HBM traffic per forward, the same again backward.
    from autopar.perf.context import perf_context
    from autopar.perf.moe import LOCAL_SORT_PASSES, routed_expert_costs

    m, cl = get_model("Qwen3-30B-A3B"), ClusterSpec(gpu=get_gpu("B200"), num_gpus=8)
    base = Workload(seq_len=4096, global_batch=64, moe_imbalance=1.0)
    a2a = perf_context(m, cl, base)
    flex = perf_context(m, cl, base.model_copy(update={"moe_dispatcher": "flex"}))
    extra = LOCAL_SORT_PASSES * 2 * 2 * 2048 * 4096 * 8
    assert extra == 536_870_912
    one, two = routed_expert_costs(a2a, 4096, 1, 8, 1, 3), routed_expert_costs(flex, 4096, 1, 8, 1, 3)
    assert one.overhead_fwd - two.overhead_fwd == pytest.approx(extra / a2a.hbm)
    assert one.overhead_bwd - two.overhead_bwd == pytest.approx(extra / a2a.hbm)
    # One expert per rank (EP128 of 128 experts): nothing to re-sort.
    big = ClusterSpec(gpu=get_gpu("B200"), num_gpus=128)
    a2a, flex = (
        perf_context(m, big, base),
        perf_context(m, big, base.model_copy(update={"moe_dispatcher": "flex"})),
    )
    one, two = routed_expert_costs(a2a, 4096, 1, 128, 1, 3), routed_expert_costs(flex, 4096, 1, 128, 1, 3)
    assert one.overhead_fwd == pytest.approx(two.overhead_fwd)


def test_recompute_shares_the_dense_issue_floor_by_hand():
    """perf/layers.py _floor: GPU 1 + 2 + 1 (fwd, bwd, recompute) = 4 ms against CPU 2 + 4 + 2 = 8 ms; the
    missing 4 ms go by the CPU's shares 2/8, 4/8, 2/8."""
    from autopar.perf.layers import _floor

    ms = 1e-3
    f, b, r = _floor(1 * ms, 2 * ms, 2 * ms, 4 * ms, 0.0, 1 * ms, 2 * ms)
    assert (f, b, r) == pytest.approx((2 * ms, 4 * ms, 2 * ms))
    # GPU-bound: nothing moves.
    assert _floor(5 * ms, 5 * ms, 2 * ms, 4 * ms, 0.0, 5 * ms, 2 * ms) == pytest.approx(
        (5 * ms, 5 * ms, 5 * ms)
    )


def test_full_recompute_reissues_the_synced_moe_forward():
    """Eager Qwen3-30B-A3B at micro-batch 1 (issue-bound): full recompute re-runs the forward from Python and
    the dispatcher syncs again, so the recompute is stretched exactly as the forward is; with CUDA graphs
    nothing is stretched."""
    from autopar.perf.context import perf_context
    from autopar.perf.layers import layer_costs

    m = get_model("Qwen3-30B-A3B")
    cl = ClusterSpec(gpu=get_gpu("B200"), num_gpus=8)
    wl = Workload(seq_len=512, global_batch=64, precision="bf16")
    eager = layer_costs(perf_context(m, cl, wl), 1, 1, 1, 8, 1, False, "full", False)
    graphed_ctx = perf_context(m, cl, wl.model_copy(update={"cuda_graphs": True}))
    graphed = layer_costs(graphed_ctx, 1, 1, 1, 8, 1, False, "full", False)
    stretch = eager.moe_fwd - graphed.moe_fwd
    assert stretch > 0
    assert eager.moe_re - graphed.moe_re == pytest.approx(stretch)
