"""Training FLOP counts (formulas.md §2): per-token forward FLOPs by part, model and hardware FLOPs.

Conventions: a GEMM (m×k)·(k×n) costs 2mkn FLOPs; training = 3 × forward (forward, dgrad, wgrad).
"Full" counts core attention over the whole s×s score matrix (Megatron papers, PaLM, torchtitan);
"causal" halves it (Megatron-LM's current code, FlashAttention benchmarks).

LoRA (frozen base weights, perf/finetune.py): the weight GEMMs' backward is dgrad only, so they count
2 × forward; core attention has no weights and keeps its 2 × forward backward (dS, dV, dQ, dK); the
adapters' own FLOPs (~0.4% for Llama-3-70B at rank 16) are not counted. This is what Megatron-Bridge
reports as "Model TFLOP/s" for its LoRA rows: frozen terms × 2/3 plus attention × 1 of the 3 × forward
count (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/utils/flop_utils.py, transformer_flops,
the LoRA branch: model_flops_frozen * (2.0 / 3.0) + model_flops_unfrozen).
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.knobs import RECOMPUTE_MODES, recompute_modules
from autopar.perf.finetune import weight_grad_gemms
from autopar.perf.remat import REMAT_PREFIX, recomputed_gemm_shares
from autopar.perf.types import FLOPS_BASIS
from autopar.specs import ModelSpec, Workload

# Backward FLOPs of core attention per forward FLOP: dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q are four
# s×s×d GEMMs against two forward (QKᵀ, PV); the model count, as in the 3 × forward of Narayanan et al. 2021
# (arXiv 2104.04473, App.). FlashAttention's executed 2.5 × adds the QKᵀ it recomputes (perf/layers.py).
ATTN_CORE_BACKWARD_PER_FORWARD = 2.0


@dataclass(frozen=True, slots=True)
class ForwardFlops:
    """Forward FLOPs per token, split by part (the whole model, all layers)."""

    attn_proj: float  # QKV (or MLA) and output projections
    attn_core: float  # QK^T and PV
    mlp: float  # dense MLPs + active experts + shared experts
    router: float
    logits: float

    @property
    def total(self) -> float:
        return self.attn_proj + self.attn_core + self.mlp + self.router + self.logits


def attention_context(model: ModelSpec, seq_len: int, causal: bool) -> float:
    """Mean number of keys each query attends to, averaged over layers (sliding windows included)."""
    full = seq_len / 2 if causal else float(seq_len)
    if not model.sliding_window or model.sliding_window_fraction == 0:
        return full
    w = min(model.sliding_window, seq_len)
    local = w / 2 if causal and w == seq_len else float(w)
    frac = model.sliding_window_fraction
    return frac * local + (1 - frac) * full


def attn_proj_flops_per_layer(m: ModelSpec) -> float:
    """Forward projection FLOPs per token per layer (2 per weight)."""
    from autopar.perf.params import attention_params

    total, _ = attention_params(m)
    return 2.0 * total


def attn_core_flops_per_layer(m: ModelSpec, s_eff: float) -> float:
    """Forward QK^T + PV FLOPs per token per layer for a mean context of s_eff keys."""
    if m.is_mla:
        mla = m.mla
        return 2.0 * m.heads * (mla.qk_nope + mla.qk_rope) * s_eff + 2.0 * m.heads * mla.v * s_eff
    return 4.0 * m.heads * m.dh * s_eff


def forward_flops_per_token(m: ModelSpec, seq_len: int, causal: bool = True) -> ForwardFlops:
    """Forward FLOPs per token of the whole model at a given sequence length."""
    from autopar.perf.params import count_params

    pc = count_params(m)
    s_eff = attention_context(m, seq_len, causal)
    L = m.layers
    n_dense = L - m.moe_layers
    proj = L * attn_proj_flops_per_layer(m)
    core = L * attn_core_flops_per_layer(m, s_eff)
    mlp = 2.0 * (n_dense * pc.dense_mlp + m.moe_layers * (m.topk * pc.expert + pc.shared_expert))
    router = 2.0 * m.moe_layers * pc.router
    logits = 2.0 * m.hidden * m.vocab
    return ForwardFlops(proj, core, mlp, router, logits)


def train_flops_per_token(f: ForwardFlops, wgrad_gemms: int = 2) -> float:
    """Forward + backward FLOPs per token, no recompute. `wgrad_gemms` is finetune.weight_grad_gemms: 2 when
    the weights train (every weight GEMM's backward is dgrad + wgrad: 3 x forward in all), 1 when frozen."""
    weight_gemms = f.total - f.attn_core
    return (1 + wgrad_gemms) * weight_gemms + (1 + ATTN_CORE_BACKWARD_PER_FORWARD) * f.attn_core


def model_flops_per_step(
    m: ModelSpec, seq_len: int, global_batch: int, causal: bool = True, wgrad_gemms: int = 2
) -> float:
    """Model FLOPs of one training step: 3 x forward (LoRA: see train_flops_per_token), no recompute."""
    f = forward_flops_per_token(m, seq_len, causal)
    return global_batch * seq_len * train_flops_per_token(f, wgrad_gemms)


def hardware_flops_per_step(
    m: ModelSpec, seq_len: int, global_batch: int, recompute: str, causal: bool = False, wgrad_gemms: int = 2
) -> float:
    """Executed FLOPs including activation recompute (full: +1 forward of the layers; selective: +core attention)."""
    f = forward_flops_per_token(m, seq_len, causal)
    tokens = global_batch * seq_len
    base = tokens * train_flops_per_token(f, wgrad_gemms)
    if recompute == "full":
        return base + tokens * (f.total - f.logits)
    if recompute == "selective":
        return base + tokens * f.attn_core
    if recompute.startswith(
        REMAT_PREFIX
    ):  # the forward less the projections the policy keeps (perf/remat.py)
        n_mat = 3 if m.activation == "swiglu" else 2
        qkv = (m.heads + 2 * m.kv) / (2 * m.heads + 2 * m.kv)  # QKV's share of the projections (out_proj: a)
        a_re, m_re = recomputed_gemm_shares(recompute, qkv, (n_mat - 1) / n_mat)
        return base + tokens * (f.attn_core + a_re * f.attn_proj + m_re * f.mlp + f.router)
    return base + tokens * module_recompute_flops_per_token(m, f, recompute_modules(recompute))


def module_recompute_flops_per_token(m: ModelSpec, f: ForwardFlops, mods: frozenset[str]) -> float:
    """Forward FLOPs per token (all layers) Megatron's selective recompute modules re-run (perf/layers.py
    _module_recompute): core attention, the MLA up-projections, the dense layers' MLPs, the MoE layers (routed
    and shared experts, router); layernorm and moe_act re-run elementwise work only."""
    from autopar.perf.params import count_params

    pc = count_params(m)
    out = f.attn_core if "core_attn" in mods else 0.0
    if "mla_up_proj" in mods and m.is_mla:
        rq, rkv, dn, dr, dv = m.mla
        out += 2.0 * m.layers * m.heads * ((dn + dr) * (rq or m.hidden) + (dn + dv) * rkv)
    if "mlp" in mods:
        out += 2.0 * (m.layers - m.moe_layers) * pc.dense_mlp
    if "moe" in mods and m.is_moe:
        out += 2.0 * m.moe_layers * (m.topk * pc.expert + pc.shared_expert + pc.router)
    return out


@dataclass(frozen=True, slots=True)
class StepFlops:
    """The FLOP counts of one training step that an Estimate reports, and what they count."""

    model_causal: float  # model FLOPs, causal-halved core attention
    model_full: float  # model FLOPs, full s² core attention
    hardware: dict[str, float]  # executed FLOPs (full attention count) by recompute mode
    basis: str  # FLOPS_BASIS entry


def step_flops(m: ModelSpec, w: Workload) -> StepFlops:
    """Model and hardware FLOPs of one step of this workload (LoRA: frozen weight GEMMs skip wgrad)."""
    g = weight_grad_gemms(w)
    return StepFlops(
        model_causal=model_flops_per_step(m, w.seq_len, w.global_batch, True, g),
        model_full=model_flops_per_step(m, w.seq_len, w.global_batch, False, g),
        hardware={
            r: hardware_flops_per_step(m, w.seq_len, w.global_batch, r, False, g) for r in RECOMPUTE_MODES
        },
        basis=FLOPS_BASIS[w.finetune],
    )


def megatron_closed_form(B: int, s: int, L: int, h: int, V: int) -> float:
    """Megatron's F = 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L)) (GPT, MHA, f=4h, full s² count) [K22 App.]."""
    return 72.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
