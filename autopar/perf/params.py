"""Parameter counts per layer and per model (formulas.md §1), total and active."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from autopar.specs import ModelSpec


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameter counts, split the way memory and FLOPs need them."""

    attention: float  # per layer, all attention weights (incl. norms inside attention, MLA latents)
    attention_tp_replicated: (
        float  # per layer, part of `attention` that TP does not shard (norms, MLA latents)
    )
    dense_mlp: float  # per dense layer
    expert: float  # one routed expert
    shared_expert: float  # all shared experts of one MoE layer
    router: float  # per MoE layer
    norms: float  # per layer (the two block norms)
    embedding: float  # input embedding
    output: float  # untied output layer (0 when tied)
    final_norm: float
    total: float
    active: float

    @property
    def per_dense_layer(self) -> float:
        return self.attention + self.dense_mlp + self.norms

    @property
    def per_moe_layer_nonexpert(self) -> float:
        """Attention, norms, router and shared experts of an MoE layer (not sharded by EP)."""
        return self.attention + self.norms + self.router + self.shared_expert


def attention_params(m: ModelSpec) -> tuple[float, float]:
    """Attention weights per layer and the part replicated across TP (MLA latents, norms, biases)."""
    h = m.hidden
    if m.is_mla:
        a, (rq, rkv, dn, dr, dv) = m.heads, m.mla
        if rq:
            q_down, q_norm, q_up = float(h * rq), float(rq), float(rq * a * (dn + dr))
        else:
            q_down, q_norm, q_up = 0.0, 0.0, h * a * (dn + dr)
        kv_down = h * (rkv + dr)  # latent + shared RoPE key
        kv_up = rkv * a * (dn + dv)
        o = a * dv * h
        total = q_down + q_norm + q_up + kv_down + rkv + kv_up + o
        replicated = q_down + q_norm + kv_down + rkv
        return float(total), float(replicated)
    a, k, d = m.heads, m.kv, m.dh
    total = h * d * (2 * a + 2 * k)
    if m.qkv_bias:
        total += (a + 2 * k) * d
    return float(total), 0.0


def mlp_params(h: int, f: int, activation: str) -> float:
    """Weights of one MLP (SwiGLU has three matrices, GeLU two)."""
    return float((3 if activation == "swiglu" else 2) * h * f)


@lru_cache(maxsize=512)
def count_params(m: ModelSpec) -> ParamCounts:
    """Count parameters of a model; MoE active counts top-k routed plus shared experts.

    Memoised (specs are frozen and hashable): the search and the corrector's features ask per trial."""
    h = m.hidden
    attn, attn_rep = attention_params(m)
    norm_per = (1 if m.norm == "rmsnorm" else 2) * h
    norms = 2.0 * norm_per
    dense_mlp = mlp_params(h, m.ffn_hidden, m.activation)
    expert = mlp_params(h, m.moe_ffn_hidden or 0, m.activation) if m.is_moe else 0.0
    shared = m.shared_experts * mlp_params(h, m.shared_ffn, m.activation) if m.is_moe else 0.0
    router = float(h * m.experts) if m.is_moe else 0.0
    emb = float(m.vocab * h)
    out = 0.0 if m.tied_embeddings else float(m.vocab * h)
    final_norm = float(norm_per)
    n_dense = m.layers - m.moe_layers
    n_moe = m.moe_layers
    common = m.layers * (attn + norms) + emb + out + final_norm
    total = common + n_dense * dense_mlp + n_moe * (m.experts * expert + shared + router)
    active = common + n_dense * dense_mlp + n_moe * (m.topk * expert + shared + router)
    return ParamCounts(
        attn,
        attn_rep,
        dense_mlp,
        expert,
        shared,
        router,
        norms,
        emb,
        out,
        final_norm,
        float(total),
        float(active),
    )
