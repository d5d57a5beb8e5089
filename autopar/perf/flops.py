"""Training FLOP counts (formulas.md §2): per-token forward FLOPs by part, model and hardware FLOPs.

Conventions: a GEMM (m×k)·(k×n) costs 2mkn FLOPs; training = 3 × forward (forward, dgrad, wgrad).
"Full" counts core attention over the whole s×s score matrix (Megatron papers, PaLM, torchtitan);
"causal" halves it (Megatron-LM's current code, FlashAttention benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.specs import ModelSpec


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
        return (
            2.0 * m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) * s_eff
            + 2.0 * m.heads * m.v_head_dim * s_eff
        )
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


def model_flops_per_step(m: ModelSpec, seq_len: int, global_batch: int, causal: bool = True) -> float:
    """Model FLOPs of one training step: 3 x forward, no recompute."""
    return 3.0 * global_batch * seq_len * forward_flops_per_token(m, seq_len, causal).total


def hardware_flops_per_step(
    m: ModelSpec, seq_len: int, global_batch: int, recompute: str, causal: bool = False
) -> float:
    """Executed FLOPs including activation recompute (full: +1 forward of the layers; selective: +core attention)."""
    f = forward_flops_per_token(m, seq_len, causal)
    tokens = global_batch * seq_len
    base = 3.0 * tokens * f.total
    if recompute == "full":
        return base + tokens * (f.total - f.logits)
    if recompute == "selective":
        return base + tokens * f.attn_core
    return base


def megatron_closed_form(B: int, s: int, L: int, h: int, V: int) -> float:
    """Megatron's F = 72·B·s·L·h²·(1 + s/(6h) + V/(12·h·L)) (GPT, MHA, f=4h, full s² count) [K22 App.]."""
    return 72.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
