"""FP8 training as the frameworks implement it: which GEMMs run in FP8, what quantising costs, by recipe.

What runs in FP8 (Transformer Engine `fp8_autocast`, torchao `Float8Linear`): the linear layers only —
QKV/output projections, dense MLP and expert (grouped) GEMMs. Attention (softmax(QK^T)V), norms, the
router and the output/logits layer stay in BF16 (TE docs "Using FP8 with Transformer Engine";
Megatron-Core keeps the router in FP32/BF16 and the first/last layers in BF16 by default).

Quantising is memory-bound work around every FP8 GEMM, per micro-batch:
- forward: the GEMM input X (bf16) is read and written as FP8 twice — row-wise for the forward GEMM and
  column-wise (the transpose) for the weight-gradient GEMM (TE `cast_transpose`, one fused kernel);
- backward: the output gradient dY likewise (row-wise for dgrad, column-wise for wgrad).
Per element that is 2 B read + 2 x 1 B written = 4 B for tensor-wise scaling with a delayed (amax history)
scale. Current (just-in-time) scaling needs the tensor's amax before casting: one more 2 B read. Row-wise
scaling (torchao float8 rowwise) cannot transpose a row-scaled tensor, so it quantises each orientation
from the bf16 source separately with its own amax pass: 2 x (2 + 2 + 1) = 10 B. MXFP8 (Blackwell:
one E8M0 scale per 32 elements, TE `MXFP8BlockScaling`) computes block scales inline but, like row-wise,
quantises the two orientations separately in one read: 2 + 2 x (1 + 1/32) B.

Sources: Transformer Engine user guide (FP8 recipes: DelayedScaling, Float8CurrentScaling,
MXFP8BlockScaling; cast_transpose kernels); torchao float8 README (tensorwise vs rowwise recipes);
NVIDIA MXFP8 spec (OCP Microscaling Formats v1.0: 32-element blocks, E8M0 scales).
"""

from __future__ import annotations

from typing import Literal

from autopar.specs import DEFAULT_FP8_RECIPE

__all__ = [
    "BF16_K_DEPTH",
    "DEFAULT_FP8_RECIPE",
    "FP8_K_DEPTH",
    "FP8_RECIPES",
    "cast_bytes_per_element",
    "check_recipe",
    "quantise_time",
]

FP8Recipe = Literal["delayed", "current", "rowwise", "mxfp8"]
FP8_RECIPES: tuple[str, ...] = ("delayed", "current", "rowwise", "mxfp8")
# The default recipe lives with Workload.fp8_recipe: specs.DEFAULT_FP8_RECIPE (cited there).

# Bytes of HBM traffic per element quantised (both orientations), per recipe (module docstring).
_CAST_BYTES: dict[str, float] = {
    "delayed": 2.0 + 2 * 1.0,
    "current": 2.0 + 2.0 + 2 * 1.0,
    "rowwise": 2 * (2.0 + 2.0 + 1.0),
    "mxfp8": 2.0 + 2 * (1.0 + 1.0 / 32),
}
# FP8 tensor-core GEMMs consume K in steps twice as deep as BF16 (same bytes per pipeline stage: CUTLASS
# SM90 FP8 tiles are 128x128x128 vs 128x128x64 for BF16), so a short K fills the pipeline less.
FP8_K_DEPTH = 128.0
BF16_K_DEPTH = 64.0


def cast_bytes_per_element(recipe: str) -> float:
    """HBM bytes moved to quantise one bf16 element into the FP8 operands a training GEMM needs."""
    return _CAST_BYTES[recipe]


def check_recipe(recipe: str, family: str) -> None:
    """MXFP8 needs Blackwell's block-scaled tensor cores; ValueError otherwise (one line)."""
    if recipe not in _CAST_BYTES:
        raise ValueError(f"fp8_recipe={recipe!r}: expected one of {', '.join(FP8_RECIPES)}")
    if recipe == "mxfp8" and family.lower() != "blackwell":
        raise ValueError(f"fp8_recipe='mxfp8' needs a Blackwell GPU (block-scaled FP8), not {family}")


def quantise_time(elements: float, recipe: str, hbm_bytes_per_s: float) -> float:
    """Seconds to quantise `elements` GEMM operand elements (one orientation pair) at achievable HBM bw."""
    if elements <= 0:
        return 0.0
    return elements * _CAST_BYTES[recipe] / hbm_bytes_per_s
