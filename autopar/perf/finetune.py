"""Parameter-efficient fine-tuning (LoRA): what freezing the base weights removes from a training step.

LoRA (Hu et al. 2021, arXiv 2106.09685 §4) trains rank-r adapters A (in×r), B (r×out) beside frozen linear
layers. Megatron-Bridge's LoRA wraps linear_qkv, linear_proj, linear_fc1 and linear_fc2 of every layer
(NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/peft/lora.py, commit 067f987). For the frozen base weights
there are no gradients, no optimizer states, no data-parallel gradient reduction and no weight-gradient
GEMMs: the backward pass of a frozen linear is its dgrad only (one GEMM instead of two).

QLoRA (Dettmers et al. 2023, arXiv 2305.14314 §3) stores the frozen linear weights of the transformer blocks as
4-bit NormalFloat with double-quantised block scales: 4 bits a weight plus 8-bit scales per 64 weights plus
fp32 scales per 256 of those, 4 + 8/64 + 32/(64*256) = 4.127 bits (the paper's "0.127 bits per parameter").
torchtune's QLoRA (`quantize_base=True`: torchao `NF4Tensor`, block 64, scaler block 256) quantises every
linear of the blocks (LoRA-wrapped or not: `FrozenNF4Linear`) and keeps the embedding, the output layer and the
norms in bf16. Each GEMM dequantises its weight to bf16 first (torchao `linear_nf4`: forward, and again for
the backward's dgrad), a memory-bound pass reading the NF4 weight and writing a bf16 copy that lives for the
GEMM; FSDP2 all-gathers the NF4 data (`NF4Tensor.fsdp_pre_all_gather`).
"""

from __future__ import annotations

from autopar.perf.params import ParamCounts
from autopar.specs import LORA_TARGETS, ModelSpec, Workload

NF4_BITS_PER_WEIGHT = (
    4 + 8 / 64 + 32 / (64 * 256)
)  # QLoRA §3 double quantisation: 4.127 bits (module docstring)
BASE_BYTES_PER_WEIGHT = {"bf16": 2.0, "nf4": NF4_BITS_PER_WEIGHT / 8}
NF4_STACKS = ("fsdp",)  # torchtune's QLoRA and Hugging Face PEFT + bitsandbytes, both on PyTorch FSDP


def adapter_params_per_layer(model: ModelSpec, rank: int, targets: tuple[str, ...] = LORA_TARGETS) -> float:
    """Adapter parameters of one layer: rank·(in + out) for each wrapped linear among `targets` (attention and
    the dense or shared-expert MLP; routed experts share one adapter per EP rank by default and are not
    counted)."""
    h, dh = model.hidden, model.dh
    n_mat = 3 if model.activation == "swiglu" else 2
    f = model.ffn_hidden if not model.is_moe else model.shared_ffn * model.shared_experts
    in_out = {
        "linear_qkv": h + (model.heads + 2 * model.kv) * dh,
        "linear_proj": model.heads * dh + h,
        "linear_fc1": (h + (n_mat - 1) * f) if f else 0.0,
        "linear_fc2": (f + h) if f else 0.0,
    }
    return rank * sum(in_out[t] for t in targets)


def trainable_fraction(model: ModelSpec, w: Workload, pc: ParamCounts) -> float:
    """Share of the parameters that get gradients and optimizer states (1.0 unless finetune=lora)."""
    if w.finetune != "lora":
        return 1.0
    return min(1.0, model.layers * adapter_params_per_layer(model, w.lora_dim, w.lora_targets) / pc.total)


def base_weight_bytes(w: Workload) -> float:
    """Bytes a frozen linear weight of the blocks takes (2: bf16, as every weight outside QLoRA)."""
    return BASE_BYTES_PER_WEIGHT[w.lora_base] if w.finetune == "lora" else 2.0


def dequantise_time(weights: float, w: Workload, hbm_bytes_per_s: float) -> float:
    """Seconds to dequantise `weights` frozen NF4 weights to bf16 once (read NF4, write bf16); 0 outside QLoRA."""
    if w.finetune != "lora" or w.lora_base == "bf16":
        return 0.0
    return weights * (BASE_BYTES_PER_WEIGHT[w.lora_base] + 2.0) / hbm_bytes_per_s


def weight_grad_gemms(w: Workload) -> int:
    """GEMMs per base-weight GEMM in the backward pass: dgrad + wgrad (2), dgrad only when frozen (1)."""
    return 1 if w.finetune == "lora" else 2
