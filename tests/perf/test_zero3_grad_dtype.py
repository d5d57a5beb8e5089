"""Megatron-FSDP reduce-scatters its main-gradient buffer, so the ZeRO-3 gradient bytes follow the workload's
main-gradient dtype (Workload.grad_reduce_dtype; software.yaml zero3_reduces_main_grads). The other ZeRO-3
stacks keep their own reduce dtype (zero3_grad_bytes: torchtitan fp32 mixed_precision_reduce, DeepSpeed bf16).

Source: Megatron-LM 1e057005 megatron/core/distributed/custom_fsdp/param_and_grad_buffer.py
`_init_each_parameter_group_buffers` (main_grad_buffer dtype fp32 only under grad_reduce_in_fp32) and
`GradReducePipeline._mark_bucket_ready` (reduce_scatter_tensor of that buffer's bucket); autopar's own
Megatron-FSDP launch names --megatron-fsdp-main-grads-dtype from the same field (tests/perf/test_grad_reduce_dtype.py).
"""

from __future__ import annotations

import math

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.perf import comm, fsdp
from autopar.perf.context import perf_context
from autopar.perf.estimate import estimate, zero3_grad_bytes
from autopar.perf.software import software_for
from autopar.perf.vector import columns_of, estimate_columns
from autopar.specs import ClusterSpec, Strategy, Workload

# 256 H100 with one 400 Gb/s NIC per GPU at autopar's 0.85 efficiency (42.5 GB/s), NVLink 351 GB/s.
LINKS = comm.Links(node_size=8, scaleup_bw=351e9, scaleout_bw=42.5e9, scaleup_lat=3e-6, scaleout_lat=8e-6)
# The ModelZoo's Qwen3-235B Megatron-FSDP layout (TP2 EP8 ETP1, DP128): the dense group 128 ranks at stride 2,
# the expert-DP group 32 ranks at stride 8, one per node.
MZ_GROUPS = fsdp.DpGroups(n_shard=128, shard_stride=2, n_rep=1, rep_stride=256, n_edp=32, edp_stride=8)
EXPERT_PER_LAYER = 128 * 3 * 4096 * 1536 / 8  # 128 experts of 3·4096·1536 over EP8: 301,989,888 per GPU


def test_only_megatron_reduces_its_main_grads():
    assert software_for("megatron").zero3_reduces_main_grads
    for fw in ("megatron-legacy", "torchtitan", "fsdp", "deepspeed"):
        assert not software_for(fw).zero3_reduces_main_grads


@pytest.mark.parametrize(
    ("framework", "fp32", "bf16"),
    [("megatron", 4.0, 2.0), ("torchtitan", 4.0, 4.0), ("fsdp", 4.0, 4.0), ("deepspeed", 2.0, 2.0)],
)
def test_zero3_grad_bytes_by_stack_and_dtype(framework: str, fp32: float, bf16: float):
    m, c = get_model("Llama-3.1-8B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    for dtype, want in (("fp32", fp32), ("bf16", bf16)):
        w = Workload(seq_len=4096, global_batch=64, framework=framework, grad_reduce_dtype=dtype)
        assert zero3_grad_bytes(perf_context(m, c, w)) == want


def test_expert_unit_reduce_scatter_by_hand():
    # One Qwen3-235B MoE block's expert shard, 301,989,888 parameters over the 32-rank expert-DP ring, one GPU
    # a node: 31 network hops of 8 µs plus 31/32 of the buffer at 42.5 GB/s.
    # fp32: 0.248 ms + 0.96875 · 1,207,959,552 B / 42.5e9 = 27.783 ms; bf16 (and the bf16 gather): 14.016 ms.
    lat = 31 * 8e-6
    fp32 = fsdp.zero3_unit(0.0, EXPERT_PER_LAYER, MZ_GROUPS, LINKS, 4.0, 1)
    bf16 = fsdp.zero3_unit(0.0, EXPERT_PER_LAYER, MZ_GROUPS, LINKS, 2.0, 1)
    assert fp32.rs == pytest.approx(lat + 31 / 32 * 4 * EXPERT_PER_LAYER / 42.5e9)
    assert fp32.rs == pytest.approx(27.783e-3, abs=1e-6)
    assert bf16.rs == pytest.approx(14.016e-3, abs=1e-6)
    assert bf16.ag == fp32.ag == pytest.approx(bf16.rs)
    assert fp32.ar == bf16.ar == 0.0


def _fsdp_case(framework: str, dtype: str) -> tuple:
    m, c = get_model("Llama-3.1-8B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=16)
    w = Workload(seq_len=4096, global_batch=64, framework=framework, grad_reduce_dtype=dtype)
    s = Strategy(tp=1, pp=1, zero=3, micro_batch=1, recompute="none")
    return m, c, w, s


def test_megatron_fsdp_exposed_tail_shrinks_with_bf16_main_grads():
    # Two nodes of 8: the last block's and the embedding's reduce-scatters end the backward exposed
    # (fsdp.zero3_round), so bf16 main grads shorten the exposed FSDP time, and the hidden share's slowdown of
    # the compute (perf/estimate.py OVERLAP_SLOWDOWN) shrinks with it. The other stacks do not move.
    a = estimate(*_fsdp_case("megatron", "fp32"), check=False)
    b = estimate(*_fsdp_case("megatron", "bf16"), check=False)
    assert b.time.compute < a.time.compute
    assert 0.0 < b.time.dp_comm < a.time.dp_comm
    for fw in ("torchtitan", "deepspeed"):
        x = estimate(*_fsdp_case(fw, "fp32"), check=False)
        y = estimate(*_fsdp_case(fw, "bf16"), check=False)
        assert x.time.dp_comm == y.time.dp_comm


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_block_path_prices_the_same_bytes(dtype: str):
    m, c, w, s = _fsdp_case("megatron", dtype)
    strategies = [s, s.model_copy(update={"micro_batch": 2}), s.model_copy(update={"recompute": "full"})]
    v = estimate_columns(m, c, w, columns_of(strategies))
    for i, x in enumerate(strategies):
        e = estimate(m, c, w, x, check=False)
        assert math.isclose(float(v.time["dp_comm"][i]), e.time.dp_comm, rel_tol=0.0, abs_tol=0.0)
        assert float(v.step_time_s[i]) == e.step_time_s


def test_modelzoo_fsdp_row_expert_traffic_floor():
    # MZSW-Q235-02 (ModelZoo Qwen3-235B, TP2 EP8 DP128 Megatron-FSDP, mb4 GA4, full recompute, 17.6 s a step)
    # at its documented launch (31c5686 run_235b.sh: no --grad-reduce-in-bf16, so fp32 main grads). Per
    # micro-batch each of the 94 blocks gathers its expert shard twice (forward; recompute and backward share
    # one gather) and reduce-scatters it once, all on the 32-rank expert-DP ring, one GPU (and one 50 GB/s
    # NIC) per node. At the NIC's full line rate and no latency: gather 31/32 · 603,979,776 B / 50e9 =
    # 11.70 ms, fp32 reduce-scatter 23.40 ms; 376 block-passes · 46.81 ms = 17.60 s of wire time alone, the
    # whole measured step. bf16 main grads would make it 13.20 s.
    line = comm.Links(node_size=8, scaleup_bw=900e9, scaleout_bw=50e9, scaleup_lat=0.0, scaleout_lat=0.0)
    passes = 94 * 4
    fp32 = fsdp.zero3_unit(0.0, EXPERT_PER_LAYER, MZ_GROUPS, line, 4.0, 1)
    bf16 = fsdp.zero3_unit(0.0, EXPERT_PER_LAYER, MZ_GROUPS, line, 2.0, 1)
    assert fp32.ag == pytest.approx(11.702e-3, abs=1e-6) and fp32.rs == pytest.approx(23.404e-3, abs=1e-6)
    assert passes * (2 * fp32.ag + fp32.rs) == pytest.approx(17.60, abs=0.005)
    assert passes * (2 * bf16.ag + bf16.rs) == pytest.approx(13.20, abs=0.005)
