"""ZeRO-2 keeps the fp32 gradients sharded, so it reduce-scatters every micro-batch's gradients (fsdp.grad_reductions,
fsdp.ddp_time `reductions`), and its memory saving is the same decision (memory.grads_sharded). Only a PP schedule
that defers the sync (torchtitan's) reduces once and keeps the stage's gradients (and ZeRO-3 parameters) whole."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.perf import estimate, fsdp
from autopar.perf.memory import Sharding, StageParams, grads_sharded, model_states
from autopar.perf.software import software_for
from autopar.specs import ClusterSpec, Strategy, Workload

SECONDS_PER_BYTE = 1e-9  # a toy link: 1 GB/s for every collective kind, group size and stride
GROUPS = fsdp.DpGroups(n_shard=8, shard_stride=1, n_rep=1, rep_stride=8, n_edp=4, edp_stride=2)


def _toy(kind: int, nbytes: fsdp.Num, size: fsdp.Num, stride: fsdp.Num) -> fsdp.Num:
    return nbytes * SECONDS_PER_BYTE


def _ddp(zero: int, ne: float, bwd: float, fwd: float, reductions: int = 1) -> fsdp.DpTime:
    args = (zero, ne, 0.0, GROUPS, None, "megatron", bwd, fwd, _toy, reductions)
    return fsdp.ddp_time(*args)  # type: ignore[arg-type]


def test_zero2_reduce_scatters_in_every_micro_batch_backward():
    # 160M dense parameters in Megatron's 40M buckets: fp32 reduce-scatter 0.16 s a bucket, 0.64 s a buffer,
    # bf16 all-gather 0.08 s a bucket, 0.32 s a buffer. Backward window 0.7 s, forward 0.5 s.
    # One micro-batch's reduction: the last bucket binds, max(0.16, 0.64 − 0.7) = 0.16 s exposed, 0.48 s hidden.
    # Gather once (first forward): max(0.08, 0.32 − 0.5) = 0.08 s exposed, 0.24 s hidden.
    z1 = _ddp(1, 160e6, 0.7, 0.5)
    assert z1.exposed == pytest.approx(0.16 + 0.08)
    assert z1.overlapped == pytest.approx(0.48 + 0.24)
    # ZeRO-2 over 4 micro-batches: four reductions, each in its own backward; the gather stays once.
    z2 = _ddp(2, 160e6, 0.7, 0.5, reductions=4)
    assert z2.exposed == pytest.approx(4 * 0.16 + 0.08)
    assert z2.overlapped == pytest.approx(4 * 0.48 + 0.24)
    # A backward shorter than the buffer: max(0.16, 0.64 − 0.3) = 0.34 s exposed each time.
    assert _ddp(2, 160e6, 0.3, 0.5, reductions=4).exposed == pytest.approx(4 * 0.34 + 0.08)


def test_grad_reductions_by_stage_and_stack():
    # ZeRO-2: every micro-batch; DDP and ZeRO-1: once (full buffer); ZeRO-2 under a PP schedule that defers
    # the sync (torch.distributed.pipelining): once.
    assert fsdp.grad_reductions(2, 16, 1, False) == 16
    assert fsdp.grad_reductions(2, 16, 4, False) == 16  # Megatron-FSDP reduces on every backward, PP or not
    assert fsdp.grad_reductions(2, 16, 4, True) == 1
    assert fsdp.grad_reductions(2, 16, 1, True) == 16
    assert fsdp.grad_reductions(1, 16, 1, False) == 1
    assert fsdp.grad_reductions(0, 16, 1, False) == 1
    zero, m, pp = np.array([0, 1, 2, 2]), np.array([8, 8, 8, 8]), np.array([1, 1, 1, 4])
    assert list(fsdp.grad_reductions(zero, m, pp, True)) == [1, 1, 8, 1]
    assert list(fsdp.grad_reductions(zero, m, pp, False)) == [1, 1, 8, 8]


def test_only_torch_pipelining_stacks_defer_the_sync_under_pp():
    assert software_for("torchtitan").pp_defers_grad_sync and software_for("fsdp").pp_defers_grad_sync
    for fw in ("megatron", "megatron-legacy", "deepspeed"):
        assert not software_for(fw).pp_defers_grad_sync


def _sharding(zero, deferred) -> Sharding:  # deferred: PP under a schedule that defers the sync
    return Sharding(zero, 8, 4, 12.0, 0.0, False, 2.0, 1.0, deferred)


def test_grad_memory_follows_the_same_decision():
    # 80M dense + 40M expert parameters: sharded fp32 grads 4·(80M/8 + 40M/4) = 80 MB; unsharded 480 MB.
    sp = StageParams(80e6, 40e6, 10e6)
    assert model_states(sp, _sharding(2, False))[1] == pytest.approx(80e6)
    assert model_states(sp, _sharding(2, True))[1] == pytest.approx(480e6)
    assert model_states(sp, _sharding(1, False))[1] == pytest.approx(480e6)
    assert grads_sharded(_sharding(2, False)) is True
    sh = _sharding(np.array([2, 2, 1]), np.array([False, True, False]))
    assert list(grads_sharded(sh)) == [True, False, False]


def _llama(framework: str, global_batch: int, pp: int, zero: int, mb: int):
    m = get_model("Llama-3.1-8B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=4096, global_batch=global_batch, framework=framework)
    s = Strategy(tp=2, pp=pp, sp=True, zero=zero, micro_batch=mb, recompute="selective")
    return estimate(m, cl, w, s, strict=False)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["megatron", "deepspeed", "torchtitan"]),
    st.sampled_from([64, 128, 512]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2]),
)
def test_zero2_trades_step_time_for_gradient_memory(framework, global_batch, pp, mb):
    """Same layout, ZeRO-1 → ZeRO-2: the step never gets faster and the memory never grows; with one
    micro-batch per step, or where the PP schedule defers the sync, the two steps take the same time."""
    if framework == "deepspeed" and pp > 1:
        pp = 1  # DeepSpeed's pipeline engine runs ZeRO-1 only
    z1, z2 = (_llama(framework, global_batch, pp, z, mb) for z in (1, 2))
    assert z2.step_time_s >= z1.step_time_s * (1 - 1e-12)
    assert z2.memory.total <= z1.memory.total * (1 + 1e-12)
    m = max(1, global_batch // (mb * 64 // (2 * pp)))
    deferred = framework == "torchtitan" and pp > 1
    if m == 1 or deferred:
        assert z2.step_time_s == pytest.approx(z1.step_time_s, rel=1e-12)
    if deferred:
        assert z2.memory.grads == pytest.approx(z1.memory.grads, rel=1e-12)
    else:
        assert z2.memory.grads < z1.memory.grads


def _zero3(framework: str, pp: int, global_batch: int):
    m = get_model("Llama-3.1-8B")
    cl = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=4096, global_batch=global_batch, framework=framework)
    s = Strategy(tp=2, pp=pp, sp=True, zero=3, micro_batch=1, recompute="selective")
    return estimate(m, cl, w, s, strict=False)


def test_zero3_under_pp_gathers_and_reduces_every_micro_batch_unless_the_schedule_defers():
    # TP2 PP2 DP16: 256 sequences → 16 micro-batches, 512 → 32. Megatron-FSDP reshards and reduces every
    # micro-batch under PP as without it, so its DP seconds scale with the micro-batches; torchtitan's PP keeps
    # the stage gathered and reduces once, so its DP seconds do not depend on them, and it holds the stage's
    # bf16 parameters and fp32 accumulated gradients (6 B a parameter, ~2B parameters a GPU) that Megatron-FSDP
    # does not.
    def dp_s(e):
        return e.time.dp_comm  # exposed seconds

    meg16, meg32 = _zero3("megatron", 2, 256), _zero3("megatron", 2, 512)
    tt16, tt32 = _zero3("torchtitan", 2, 256), _zero3("torchtitan", 2, 512)
    assert dp_s(meg32) == pytest.approx(2 * dp_s(meg16), rel=1e-9)
    assert dp_s(tt32) == pytest.approx(dp_s(tt16), rel=1e-9)
    assert tt16.memory.buffers > meg16.memory.buffers + 6 * 1e9
