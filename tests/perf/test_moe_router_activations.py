"""What an MoE layer keeps for backward beside its routed experts, by hand (perf/layers.py `_moe_activations`,
`_ActivationTerms.router_in_tok`; software.yaml moe_router_bytes_per_expert): the router's bf16 input (the
MLP-norm output, which FP8 would otherwise keep only as a 1-byte copy), its fp32 scores and routing map, and
the shared experts' FC1 input (the same norm output in bf16)."""

from __future__ import annotations

import dataclasses

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.perf.context import PerfContext
from autopar.perf.layers import layer_costs
from autopar.perf.moe import routed_load
from autopar.perf.software import software_for
from autopar.specs import ClusterSpec, Workload

# h 2048, 32 heads x 128, 128 experts, top-8, expert FFN 768, no shared expert
QWEN = get_model("Qwen3-30B-A3B")
CL = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
SEQ = 4096


def _ctx(model=QWEN, precision="bf16", router_bytes=None, recipe=None):
    # uncached (perf_context caches contexts): this one's software profile may be changed
    extra = {"fp8_recipe": recipe} if recipe else {}
    ctx = PerfContext(model, CL, Workload(seq_len=SEQ, global_batch=64, precision=precision, **extra))
    if router_bytes is not None:
        ctx.sw = dataclasses.replace(ctx.sw, moe_router_bytes_per_expert=router_bytes)
    return ctx


def _act(ctx, rec="none"):
    lc = layer_costs(ctx, 1, 1, 1, 8, 1, False, rec, False)  # TP1, CP1, micro-batch 1, EP8, ETP1, no SP
    return lc.act_moe, lc.act_dense


def test_megatron_keeps_two_fp32_score_tensors_and_the_routing_map():
    assert software_for("megatron").moe_router_bytes_per_expert == 9.0  # 4 + 1 + 4
    assert all(
        software_for(f).moe_router_bytes_per_expert == 4.0 for f in ("torchtitan", "fsdp", "deepspeed")
    )
    nine, four = _act(_ctx()), _act(_ctx(router_bytes=4.0))
    # 4096 tokens x 128 experts x 5 bytes: the aux-loss scores (fp32) and the routing map (bool)
    assert nine[0] - four[0] == pytest.approx(SEQ * 128 * 5)
    assert nine[1] == four[1]  # dense layers have no router


def test_fp8_keeps_the_routers_bf16_input_beside_the_expert_copies():
    ctx = _ctx()
    load = routed_load(ctx.w.moe_imbalance, ctx.w.moe_capacity_factor)
    bf16, fp8 = _act(ctx)[0], _act(_ctx(precision="fp8"))[0]
    # per token, FP8 keeps 1-byte GEMM inputs: QKV and MLP inputs -2 x 2048, attention output -32 x 128, each
    # routed copy's FC1 and FC2 inputs -(2048 + 768); the router still keeps the bf16 norm output: +2048
    per_tok = -2 * 2048 - 32 * 128 - 8 * load * (2048 + 768) + 2048
    assert fp8 - bf16 == pytest.approx(SEQ * per_tok)


def test_layernorm_recompute_frees_the_routers_input_too():
    for precision in ("bf16", "fp8"):
        ctx = _ctx(precision=precision)
        full, sel = _act(ctx, "sel:moe_act")[0], _act(ctx, "sel:layernorm+moe_act")[0]
        # the two norm outputs: the QKV input (2 or 1 bytes) and the MLP-norm output the router keeps in bf16
        gemm_in = 2 if precision == "bf16" else 1
        assert full - sel == pytest.approx(SEQ * (gemm_in + 2) * 2048)


def test_shared_experts_fc1_input_is_the_norm_output_unless_delayed_scaling():
    shared = QWEN.model_copy(update={"shared_experts": 1, "shared_ffn_hidden": 1024})
    for precision, recipe, fc1_in in (("bf16", None, 0), ("fp8", "delayed", 1), ("fp8", "current", 0)):
        plain = _act(_ctx(precision=precision, recipe=recipe))[0]
        with_shared = _act(_ctx(shared, precision, recipe=recipe))[0]
        gemm_in = 2 if precision == "bf16" else 1
        # FC1 input (a new copy only in FP8), gate/up output 2 x 1024 bf16, FC2 input 1024
        assert with_shared - plain == pytest.approx(SEQ * (fc1_in * 2048 + 2 * 2 * 1024 + gemm_in * 1024))
