"""Gradient accumulation across micro-batches outside the weight-gradient GEMM (perf/estimate.py grad_accum_time).

Megatron-DeepSpeed has no gradient-accumulation fusion, so autograd's AccumulateGrad adds each micro-batch's
weight gradient into param.grad in place: read the accumulated and the new 2-byte gradient, write the sum (6 B
per parameter), for every micro-batch after the first. Megatron fuses the add into the wgrad GEMM: no pass.
Numbers below are derived by hand from that rule, the parameter count and the GPU's memory bandwidth.
"""

from __future__ import annotations

import pytest

from autopar.calibration.records.specs import row_to_specs
from autopar.catalog import get_gpu, get_model
from autopar.perf.context import perf_context
from autopar.perf.estimate import estimate, grad_accum_time
from autopar.perf.memory import Sharding, StageParams
from autopar.perf.params import count_params
from autopar.specs import ClusterSpec, Strategy, Workload

MODEL = get_model("GPT-3-1.3B")
ONE_GPU = ClusterSpec(gpu=get_gpu("A100-80GB"), num_gpus=1)


def _sharding(zero: int, n_shard: int) -> Sharding:
    return Sharding(zero, n_shard, 1, 12.0, 0.0, False, 1.0, 1.0, False)


@pytest.mark.parametrize(("zero", "grads"), [(1, 1.2e9 + 0.3e9), (2, 1.2e9 / 8 + 0.3e9)])
def test_bytes_per_parameter_over_the_micro_batches_after_the_first(zero, grads):
    ctx = perf_context(MODEL, ONE_GPU, Workload(seq_len=2048, global_batch=8, framework="deepspeed"))
    params = StageParams(1.2e9, 0.3e9, 1e8)
    sh = _sharding(zero, 8)  # ZeRO-2/3 accumulate only their shard (n_shard = 8; the experts' group is 1)
    assert grad_accum_time(ctx, params, sh, 5) == pytest.approx(4 * 6.0 * grads / ctx.hbm, rel=1e-12)
    assert grad_accum_time(ctx, params, sh, 1) == 0.0  # one micro-batch: nothing to add to


def test_fused_accumulation_costs_nothing():
    ctx = perf_context(MODEL, ONE_GPU, Workload(seq_len=2048, global_batch=8, framework="megatron"))
    assert grad_accum_time(ctx, StageParams(1e9, 0.0, 1e8), _sharding(1, 1), 64) == 0.0


def test_estimate_adds_one_pass_per_extra_micro_batch():
    """One GPU, no DP, one stage: compute(2m) - 2 compute(m) leaves exactly one pass over all parameters."""

    def compute(gb: int) -> float:
        w = Workload(seq_len=2048, global_batch=gb, framework="deepspeed")
        s = Strategy(tp=1, pp=1, dp=1, micro_batch=1, recompute="full", zero=1)
        return estimate(MODEL, ONE_GPU, w, s, check=False).time.compute

    ctx = perf_context(MODEL, ONE_GPU, Workload(seq_len=2048, global_batch=8, framework="deepspeed"))
    one_pass = 6.0 * count_params(MODEL).total / ctx.hbm  # the single stage holds every parameter
    assert compute(16) - 2 * compute(8) == pytest.approx(one_pass, rel=1e-9)


def test_deepspeed_bf16_optimizer_adds_fp32_copies_every_micro_batch():
    """BF16_Optimizer: cast (read 2, write 4) + add into fp32 (read 4 + 4, write 4) = 18 B for all m micro-batches;
    the flag means nothing outside DeepSpeed."""
    params, sh = StageParams(1.2e9, 0.0, 1e8), _sharding(1, 8)
    w = Workload(seq_len=2048, global_batch=8, framework="deepspeed", bf16_optimizer=True)
    ctx = perf_context(MODEL, ONE_GPU, w)
    assert grad_accum_time(ctx, params, sh, 5) == pytest.approx(5 * 18.0 * 1.2e9 / ctx.hbm, rel=1e-12)
    mg = perf_context(MODEL, ONE_GPU, w.model_copy(update={"framework": "megatron"}))
    assert grad_accum_time(mg, params, sh, 5) == 0.0


BLOOM_ROW = {
    "id": "X", "model": "BLOOM-176B", "gpu": "A100-80GB", "num_gpus": 384, "gpus_per_node": 8, "tp": 4, "pp": 12,
    "seq_len": 2048, "global_batch": 2048, "micro_batch": 2, "precision": "bf16", "zero": 1,
}  # fmt: skip


@pytest.mark.parametrize(
    ("framework", "notes", "expected"),
    [
        ("Megatron-DeepSpeed (BF16_Optimizer, ZeRO-1)", "", True),
        (
            "Megatron-DeepSpeed (ZeRO-1)",
            "precision: bf16 with the BF16 optimizer (fp32 grad accumulation)",
            True,
        ),
        ("Megatron-DeepSpeed (ZeRO-1)", "precision: fp16", False),
        (
            "Megatron-DeepSpeed (ZeRO-1) fp16",
            "the section says testing switched to the BF16 optimizer",
            False,
        ),
    ],
)
def test_records_name_the_bf16_optimizer(framework, notes, expected):
    prec = "fp16" if framework.endswith("fp16") else "bf16"
    framework = framework.removesuffix(" fp16")
    w = row_to_specs({**BLOOM_ROW, "framework": framework, "notes": notes, "precision": prec}).workload
    assert w.framework == "deepspeed" and w.bf16_optimizer is expected
