"""Kernel and link efficiency as data, per GPU family (Calculon's model/system/efficiency split).

Each number is a physical property of a GPU generation and its software stack, anchored to a
published measurement (formulas.md §6 and §4.1); none is fitted to one source or one run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from autopar.perf.fp8 import BF16_K_DEPTH, FP8_K_DEPTH


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achievable fractions of peak for one GPU family."""

    gemm_max: float  # best-shape BF16 GEMM / dense peak (MAMF)
    gemm_max_fp8: float  # best-shape FP8 GEMM / FP8 dense peak
    attn_fwd: float  # FlashAttention-2-class forward / BF16 peak at long sequences
    attn_bwd: float  # FlashAttention-2-class backward / BF16 peak
    attn_fwd_fused: float  # vendor-fused attention (cuDNN / FA3-class on Hopper+) forward
    attn_bwd_fused: float
    hbm: float  # achievable / nominal HBM bandwidth for memory-bound kernels
    scaleup: float  # NCCL bus bandwidth / NVLink per-direction rate
    scaleout: float  # NCCL bus bandwidth / NIC rate
    scaleup_latency_s: float  # per ring/tree step (NCCL simple protocol)
    scaleout_latency_s: float
    kernel_overhead_s: float  # launch + tail per GEMM-sized kernel
    tile: int  # GEMM tile edge for wave-quantisation
    sms: int  # streaming multiprocessors (wave size in tiles)
    source: str


# Anchors:
# - gemm_max: Maximum Achievable Matmul FLOPS, stas00/ml-engineering compute/accelerator (A100 271/312 = 87%,
#   H100 795/989 = 80%, B200 1745/2250 = 78%, MI300X 668/1307 = 51%); FP8 GH200 1535/1979 = 78%, B200 76%.
#   Training stacks reach less than the best single shape: ~0.92 of MAMF for A100 bf16; H100 bf16 kernels
#   in training sustain ~650 TF (0.83 of MAMF: power/clock throttling under full load); fp8 ~0.8 of the
#   best case (scaling, amax bookkeeping, TE kernel choices).
# - attention: FA2 50-73% of A100 peak (Dao 2023); FA2 only ~35-40% of H100 peak, FA3 / cuDNN fused
#   attention 55-75% forward (Shah et al. 2024). Training sees less than the forward-only best case.
# - links: Calculon NVLink 0.65-0.75 / IB 0.9; nccl-tests busbw on 8xH100 ~360 of 450 GB/s.
_FAMILIES: dict[str, Efficiency] = {
    "ampere": Efficiency(
        0.80,
        0.80,
        0.62,
        0.52,
        0.62,
        0.52,
        0.80,
        0.78,
        0.85,
        3e-6,
        8e-6,
        6e-6,
        128,
        108,
        "MAMF A100 87%; FA2 on A100 (Dao 2023)",
    ),
    "hopper": Efficiency(
        0.66,
        0.62,
        0.40,
        0.33,
        0.55,
        0.45,
        0.80,
        0.78,
        0.85,
        3e-6,
        8e-6,
        5e-6,
        128,
        132,
        "MAMF H100 80%; FA2 ~35-40% of H100 peak, FA3/cuDNN higher (Shah et al. 2024)",
    ),
    "blackwell": Efficiency(
        0.65,
        0.60,
        0.40,
        0.33,
        0.55,
        0.45,
        0.80,
        0.78,
        0.85,
        3e-6,
        8e-6,
        5e-6,
        128,
        148,
        "MAMF B200 78%, fp8 76%; sustained bf16 taken at 0.83 of MAMF as for H100; "
        "attention assumed as Hopper",
    ),
    "cdna3": Efficiency(
        0.48, 0.40, 0.35, 0.30, 0.35, 0.30, 0.75, 0.65, 0.80, 4e-6, 8e-6, 8e-6, 128, 304, "MAMF MI300X 51%"
    ),
}
# Families with no published achievable-fraction measurement of their own inherit a measured family's
# fractions; only hardware facts (the wave size) are their own. Never fitted to a training run.
# - cdna4 (MI350X/MI355X): AMD publishes max-achievable FLOPS for MI300X/MI325X only ("Measuring
#   Max-Achievable FLOPs - Part 2", ROCm blogs); same ROCm stack (hipBLASLt, CK attention, RCCL) and the
#   same 8-GPU xGMI full mesh -> cdna3's fractions. Wave: 256 CUs (ROCm GPU specifications table, gfx950).
# - davinci (Ascend 910B/910C, Da Vinci cube cores, CANN): no published MAMF, attention or HCCL bus-bandwidth
#   fractions -> the default (Hopper) fractions. Wave: 24 cube cores per 910B2/910C die (CANN migration guide
#   / platform config; 910B3 has 20). Sanity check, not a fit: Pangu Ultra (arXiv 2504.07866) reports over
#   50% MFU for a 135B dense model on 8,192 Ascend NPUs, in line with Hopper-class fractions.
_FAMILIES["cdna4"] = replace(_FAMILIES["cdna3"], sms=256, source="cdna3 fractions (no MI355X MAMF); 256 CUs")
_FAMILIES["davinci"] = replace(
    _FAMILIES["hopper"], sms=24, source="Hopper fractions (no Ascend MAMF published); 24 cube cores"
)
_DEFAULT = "hopper"


@lru_cache(maxsize=64)
def efficiency_for(family: str) -> Efficiency:
    """Efficiency profile of a GPU family (unknown families use the Hopper profile)."""
    return _FAMILIES.get(family.lower(), _FAMILIES[_DEFAULT])


def families() -> list[str]:
    """Known GPU families with an efficiency profile."""
    return sorted(_FAMILIES)


@dataclass(frozen=True, slots=True)
class SoftwareProfile:
    """What a training framework does that changes kernel time: fusion, attention kernel, recompute, ZeRO-3."""

    name: str
    flash_attention: bool  # attention never materialises the s x s scores (False = pre-2023 unfused softmax)
    fused_attention: bool  # cuDNN/TE fused attention (True) or FlashAttention-2 / PyTorch SDPA (False)
    elementwise_passes: float  # memory traffic of norms/activations/residuals relative to fully fused kernels
    selective_gemm_fraction: float  # share of forward GEMMs re-run by "selective" recompute
    zero3_collectives_per_layer: int  # collectives per layer per pass (1 = flat per-block unit)
    zero3_overlap: float  # fraction of ZeRO-3/FSDP collectives that can hide under compute
    loss_bytes_per_logit: float  # peak bytes per logit element in the loss (bf16 + fp32 copies, grads)
    zero3_grad_bytes: float  # bytes per gradient element in the ZeRO-3/FSDP reduce-scatter
    tp_overlap_hidden: float  # with TP comm overlap on: share of the chunked TP collectives (after the first
    # chunk) that can hide under the neighbouring GEMMs (see _SOFTWARE comment)
    description: str
    # Ring CP through PyTorch's context_parallel (perf/cp.py `_torch_ring`) with the K/V heads repeated to
    # the query heads before SDPA (torchtitan models/llama/model.py `repeat_kv`), not Transformer Engine's.
    torch_cp: bool = False


# Megatron-LM before FlashAttention (2021-22 papers, BLOOM) materialised the s x s attention scores, the
# cost selective recompute was invented to avoid (Korthikanti 2022 §5).
# Megatron-Core/NeMo: TE fused kernels and cuDNN attention; selective = core attention only (Korthikanti 2022).
# torchtitan / PyTorch FSDP: SDPA (FA2 backend); torchtitan's "selective" is per-op SAC, which saves every
# other matmul output and recomputes the rest (torchtitan activation_checkpoint.py, `_save_list`).
# DeepSpeed ZeRO-3 gathers parameters tensor by tensor (per-module hooks) with limited prefetch.
# TP comm overlap: Transformer Engine userbuffers (Megatron --tp-comm-overlap) split each SP all-gather /
# reduce-scatter into t chunks pipelined with the GEMM chunks (ring-exchange on copy engines or a few SMs),
# so every chunk but the first can hide (TE docs "Communication-GEMM overlap"; NeMo userbuffers configs);
# torchtitan's async TP (SymmetricMemory micro-pipelining) decomposes only some matmuls and gains ~10%
# (torchtitan docs), taken as half of the chunked collectives.
# Loss memory: Megatron's vocab-parallel cross-entropy works in place on an fp32 copy (~6 B/logit);
# llm-foundry uses a fused cross-entropy; torchtitan upcasts the full logits and keeps fp32 grads (~12 B).
_SOFTWARE: dict[str, SoftwareProfile] = {
    "megatron": SoftwareProfile(
        "megatron",
        True,
        True,
        1.0,
        0.0,
        1,
        1.0,
        6.0,
        4.0,
        1.0,
        "Megatron-LM / Megatron-Core / NeMo (Transformer Engine)",
    ),
    "megatron-legacy": SoftwareProfile(
        "megatron-legacy",
        False,
        False,
        1.0,
        0.0,
        12,
        0.5,
        6.0,
        2.0,
        0.5,
        "Megatron-LM / Megatron-DeepSpeed before FlashAttention (2019-2022); ZeRO-3 there is DeepSpeed's",
    ),
    "torchtitan": SoftwareProfile(
        "torchtitan",
        True,
        False,
        2.0,
        0.5,
        1,
        1.0,
        12.0,
        4.0,
        0.5,
        "torchtitan (FSDP2, DTensor TP, SDPA attention, per-op selective AC)",
        torch_cp=True,
    ),
    "fsdp": SoftwareProfile(
        "fsdp",
        True,
        False,
        2.0,
        0.0,
        1,
        1.0,
        6.0,
        4.0,
        0.5,
        "PyTorch FSDP stacks (llm-foundry/Composer, HF Accelerate) with FlashAttention-2",
    ),
    "deepspeed": SoftwareProfile(
        "deepspeed",
        True,
        False,
        1.5,
        0.0,
        12,
        0.5,
        6.0,
        2.0,
        0.5,
        "DeepSpeed / Megatron-DeepSpeed (ZeRO with per-parameter gathers)",
    ),
}
FRAMEWORKS: tuple[str, ...] = tuple(_SOFTWARE)


def software_for(framework: str) -> SoftwareProfile:
    """Software profile of a training framework (see FRAMEWORKS)."""
    return _SOFTWARE[framework]


def gemm_efficiency(m: float, n: float, k: float, eff: Efficiency, fp8: bool) -> float:
    """Fraction of dense peak a GEMM of shape (m×k)·(k×n) reaches.

    Best-shape efficiency, times the wave-quantisation utilisation of its output tiles, times a
    small-dimension penalty (short k or thin m/n can't fill the tensor-core pipeline).
    """
    top = eff.gemm_max_fp8 if fp8 else eff.gemm_max
    t = eff.tile
    mt, nt = -(-m // t), -(-n // t)
    tiles = mt * nt
    waves = -(-tiles // eff.sms)
    wave_util = tiles / (waves * eff.sms)
    # Stream-K / split-k kernels recover about half of the last wave's idle SMs.
    util = 1.0 - 0.5 * (1.0 - wave_util)
    # Partial-tile waste on the edges (m, n not multiples of the tile).
    edge = (m / (mt * t)) * (n / (nt * t))
    depth = FP8_K_DEPTH if fp8 else BF16_K_DEPTH  # FP8 tiles consume K twice as deep (perf/fp8.py)
    small = (k / (k + depth)) * (m / (m + 32.0)) * (n / (n + 32.0))
    return top * util * edge * small


# ---- host (CPU) issue floor ------------------------------------------------------------------------
# Without CUDA graphs every op is issued from Python: framework dispatch + driver launch cost the CPU
# microseconds per op, so a layer cannot run faster than its ops can be issued; it matters when a layer's
# GPU work is short (small micro-batches, small or fine-grained models, fast GPUs). PyTorch "Accelerating
# PyTorch with CUDA Graphs" (2021) and the Megatron-Bridge CUDA-graph guide describe this launch-bound
# regime; Transformer Engine PR #1016 measures ~10-20 us of CPU per small PyTorch op launch and states
# that "FP8 training is frequently bottlenecked by CPU overheads" (TE issue #761: an FP8 te.Linear takes
# over 2x the CPU time of a BF16 one). Magnitudes (estimates, not fitted): 10 us of CPU per op;
# a Megatron-Core transformer layer issues ~30 ops forward (norm+QKV, RoPE, attention, projection,
# bias-dropout-add x2, norm+FC1, activation, FC2, FP8 casts); an MoE block adds ~40 (router, top-k and
# aux loss, permutation, token counts, all-to-alls, unpermute) plus ~3 per local expert (FC1, activation,
# FC2 launches); backward issues about twice the forward's.
HOST_OP_S = 10e-6
DENSE_LAYER_OPS = 30
MOE_BLOCK_OPS = 40
OPS_PER_LOCAL_EXPERT = 3
BACKWARD_OPS_FACTOR = 2.0


def host_issue_time(moe: bool, local_experts: float) -> tuple[float, float]:
    """(forward, backward) CPU seconds to issue one layer's ops for one micro-batch."""
    ops = DENSE_LAYER_OPS + (MOE_BLOCK_OPS + OPS_PER_LOCAL_EXPERT * local_experts if moe else 0)
    return ops * HOST_OP_S, BACKWARD_OPS_FACTOR * ops * HOST_OP_S
