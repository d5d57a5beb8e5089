"""Golden tests of the analytical model against published figures (citation + tolerance on each)."""

from __future__ import annotations

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.perf import count_params, estimate, model_flops_per_step
from autopar.perf.estimate import activation_bytes_per_layer
from autopar.perf.flops import hardware_flops_per_step, megatron_closed_form
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

GiB = 2**30


def gpt(h: int, L: int, a: int, V: int = 51200, dropout: bool = True) -> ModelSpec:
    """A Megatron GPT: MHA, GeLU MLP with f = 4h, no biases counted, LayerNorm."""
    return ModelSpec(
        name=f"gpt-{h}",
        layers=L,
        hidden=h,
        heads=a,
        ffn_hidden=4 * h,
        vocab=V,
        activation="gelu",
        norm="layernorm",
        tied_embeddings=True,
        dropout=dropout,
    )


def test_llama3_70b_parameter_count():
    # Meta Llama 3 model card: 70B; formulas.md §1 check: 70.55 B with h 8192, L 80, a 64, k 8, f 28672, V 128256.
    m = ModelSpec(name="l70", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256)
    # By hand: per layer 8192*128*(128+16) = 150,994,944 attn + 3*8192*28672 = 704,643,072 MLP + 2*8192 norms;
    # x80 = 68,452,352,000 + 2*128256*8192 embeddings + 8192 final norm = 70,553,706,496.
    assert count_params(m).total == 70_553_706_496
    assert count_params(m).total == pytest.approx(70.55e9, rel=0.005)


def test_deepseek_v3_total_and_active():
    # DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated per token (MTP excluded).
    pc = count_params(get_model("DeepSeek-V3"))
    assert pc.total == pytest.approx(671e9, rel=0.005)
    assert pc.active == pytest.approx(37.6e9, rel=0.01)


def test_megatron_closed_form_equals_flop_count_for_gpt3_175b():
    # Korthikanti et al. 2022 appendix / Narayanan et al. 2021 eq. (3) without recompute:
    # F = 72·B·s·L·h²·(1 + s/6h + V/12hL), full (non-causal) s² attention count.
    m = gpt(12288, 96, 96, dropout=False)
    B, s = 1536, 2048
    ours = model_flops_per_step(m, s, B, causal=False)
    assert ours == pytest.approx(megatron_closed_form(B, s, 96, 12288, 51200), rel=1e-12)
    # and by hand: 72*1536*2048*96*12288^2 = 3.2832e18; x (1 + 0.027778 + 0.003617) = 3.3862e18
    assert ours == pytest.approx(3.3862e18, rel=1e-4)


def test_full_recompute_hardware_flops_match_narayanan_eq3():
    # Narayanan et al. 2021 eq. (3): 96·B·s·L·h²·(1 + s/6h + V/16hL) with full activation recompute.
    m = gpt(12288, 96, 96, dropout=False)
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    expected = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * h * L))
    assert hardware_flops_per_step(m, s, B, "full", causal=False) == pytest.approx(expected, rel=1e-12)


# Korthikanti et al. 2022 (arXiv 2205.05198) Table 2: activation bytes per layer, 16-bit activations,
# with the 5as/h term for the unfused (pre-FlashAttention) softmax and dropout.
S, B_MB, H, A, T = 2048, 1, 12288, 96, 8
K22_CASES = {
    ("none", False, 1): S * B_MB * H * (34 + 5 * A * S / H),
    ("none", False, T): S * B_MB * H * (10 + 24 / T + 5 * A * S / (H * T)),
    ("none", True, T): S * B_MB * H / T * (34 + 5 * A * S / H),
    ("selective", False, T): S * B_MB * H * (10 + 24 / T),
    ("selective", True, T): 34 * S * B_MB * H / T,
    ("full", False, T): 2 * S * B_MB * H,
}


@pytest.mark.parametrize("recompute,sp,tp", list(K22_CASES))
def test_korthikanti_table2_activation_memory(recompute: str, sp: bool, tp: int):
    m = gpt(H, 96, A)
    cluster = ClusterSpec(gpu=get_gpu("A100-80GB"), num_gpus=tp)
    w = Workload(seq_len=S, global_batch=8, framework="megatron-legacy")
    st = Strategy(tp=tp, sp=sp, recompute=recompute, micro_batch=B_MB)
    assert activation_bytes_per_layer(m, cluster, w, st) == pytest.approx(
        K22_CASES[(recompute, sp, tp)], rel=1e-9
    )


def _states_per_param(zero: int, n: int, grads: str = "fp32") -> float:
    """(weights + grads + optimizer) bytes per parameter for a model with no TP/PP split."""
    m = get_model("Llama-3.1-8B")
    cluster = ClusterSpec(gpu=get_gpu("H200"), num_gpus=n)
    st = Strategy(zero=zero, micro_batch=1).with_dp(n)
    e = estimate(m, cluster, Workload(seq_len=1024, global_batch=n, grad_reduce_dtype=grads), st)
    return (e.memory.weights + e.memory.grads + e.memory.optimizer) / count_params(m).total


def test_megatron_optimizer_state_bytes():
    # Megatron-LM docs/user-guide/features/dist_optimizer.md: bf16 params + fp32 main grads + Adam:
    # 2 + 4 + 12 = 18 bytes per parameter without, and 6 + 12/d with the distributed optimizer.
    assert _states_per_param(0, 8) == pytest.approx(18.0, rel=1e-12)
    assert _states_per_param(1, 8) == pytest.approx(6 + 12 / 8, rel=1e-12)
    assert _states_per_param(1, 64) == pytest.approx(6 + 12 / 64, rel=1e-12)
    # ZeRO paper §5: stage 3 keeps 16/n bytes per parameter (2 + 2 + 12 spread over n ranks); Megatron-FSDP's
    # sharded main-gradient buffer is fp32 here, beside the bf16 and fp32 weight shards: 2 + 4 + 12 = 18/n
    # (16/n with bf16 main gradients, below)
    assert _states_per_param(3, 8) == pytest.approx(18 / 8, rel=1e-12)
    assert _states_per_param(3, 8, "bf16") == pytest.approx(16 / 8, rel=1e-12)
    # --grad-reduce-in-bf16 (megatron's default here, as Megatron-Bridge's performance configs run): the main-
    # gradient buffer is bf16, 2 + 2 + 12 = 16 B, and 4 + 12/d with the distributed optimizer
    assert _states_per_param(0, 8, "bf16") == pytest.approx(16.0, rel=1e-12)
    assert _states_per_param(1, 8, "bf16") == pytest.approx(4 + 12 / 8, rel=1e-12)


def test_h100_exposes_79_2_gib():
    # formulas.md §3.5 / ml-engineering: an "80 GB" H100 reports 79.2 GiB to torch.
    e = estimate(
        get_model("Llama-3.1-8B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
        Workload(seq_len=4096, global_batch=8),
        Strategy(micro_batch=1),
    )
    assert e.capacity_bytes / GiB == pytest.approx(79.2, rel=1e-9)


def test_mfu_uses_model_flops_and_dense_peak():
    # MFU = model FLOPs (3x forward, full s² count, no recompute) / (step * GPUs * dense peak).
    m = get_model("Llama-3.1-8B")
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    w = Workload(seq_len=4096, global_batch=64)
    e = estimate(m, cluster, w, Strategy(micro_batch=1, recompute="full"))
    assert e.mfu == pytest.approx(e.model_flops_per_step_full_attn / e.step_time_s / 8 / 989e12, rel=1e-12)
    assert e.hfu > e.mfu  # recompute adds executed FLOPs
    assert e.hfu / e.mfu == pytest.approx(e.hw_flops_per_step / e.model_flops_per_step_full_attn, rel=1e-12)


def test_deepseek_v3_pretraining_throughput_on_h800():
    # DeepSeek-V3 technical report (arXiv 2412.19437), Table 1 and §3.1-3.2: pre-training took 2,664K H800
    # GPU-hours for 14.8T tokens on 2048 H800s with PP16, EP64 (ZeRO-1 DP), FP8, seq 4096, batch 15360:
    # 14.8e12 / (2.664e6 * 3600) = 1543 tokens/s per GPU, with DualPipe (§3.2.1) hiding the expert
    # all-to-all under compute. Their partial recompute is not modelled; with full recompute the model must
    # still land within 20%. (With 1F1B the middle stages, all MoE layers, expose the all-to-all.)
    # Dispatch is hierarchical (§3.2.2: each token crosses IB once per target node, at most 4 nodes, and is
    # forwarded over NVLink inside it), which is the `flex` dispatcher (one NIC copy per remote domain).
    m = get_model("DeepSeek-V3")
    cluster = ClusterSpec(gpu=get_gpu("H800"), num_gpus=2048)
    w = Workload(seq_len=4096, global_batch=15360, precision="fp8", moe_dispatcher="flex")
    e = estimate(
        m, cluster, w, Strategy(pp=16, ep=64, zero=1, recompute="full", pp_schedule="dualpipe"), strict=False
    )
    published = 14.8e12 / (2.664e6 * 3600)
    assert published == pytest.approx(1543, abs=1)
    assert e.tokens_per_s_per_gpu == pytest.approx(published, rel=0.20)
    assert e.fits
