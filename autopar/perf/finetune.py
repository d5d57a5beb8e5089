"""Parameter-efficient fine-tuning (LoRA): what freezing the base weights removes from a training step.

LoRA (Hu et al. 2021, arXiv 2106.09685 §4) trains rank-r adapters A (in×r), B (r×out) beside frozen linear
layers. Megatron-Bridge's LoRA wraps linear_qkv, linear_proj, linear_fc1 and linear_fc2 of every layer
(NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/peft/lora.py, commit 067f987). For the frozen base weights
there are no gradients, no optimizer states, no data-parallel gradient reduction and no weight-gradient
GEMMs: the backward pass of a frozen linear is its dgrad only (one GEMM instead of two).
"""

from __future__ import annotations

from autopar.perf.params import ParamCounts
from autopar.specs import ModelSpec, Workload


def adapter_params_per_layer(model: ModelSpec, rank: int) -> float:
    """Adapter parameters of one layer: rank·(in + out) for each wrapped linear (attention and the dense or
    shared-expert MLP; routed experts share one adapter per EP rank by default and are not counted)."""
    h, dh = model.hidden, model.dh
    qkv_out = (model.heads + 2 * model.kv) * dh
    n_mat = 3 if model.activation == "swiglu" else 2
    f = model.ffn_hidden if not model.is_moe else model.shared_ffn * model.shared_experts
    attn = (h + qkv_out) + (model.heads * dh + h)
    mlp = ((h + (n_mat - 1) * f) + (f + h)) if f else 0.0
    return rank * (attn + mlp)


def trainable_fraction(model: ModelSpec, w: Workload, pc: ParamCounts) -> float:
    """Share of the parameters that get gradients and optimizer states (1.0 unless finetune=lora)."""
    if w.finetune != "lora":
        return 1.0
    return min(1.0, model.layers * adapter_params_per_layer(model, w.lora_dim) / pc.total)


def weight_grad_gemms(w: Workload) -> int:
    """GEMMs per base-weight GEMM in the backward pass: dgrad + wgrad (2), dgrad only when frozen (1)."""
    return 1 if w.finetune == "lora" else 2
