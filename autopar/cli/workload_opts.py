"""`--fp8-recipe`, `--moe-imbalance`, `--moe-capacity-factor`: FP8 and MoE routing workload options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from autopar.errors import SpecError

FP8RecipeOpt = Annotated[
    str | None,
    typer.Option(
        "--fp8-recipe",
        help="FP8 scaling recipe with --precision fp8: delayed (Transformer Engine default), current, "
        "rowwise (torchao) or mxfp8 (Blackwell) \\[default: delayed].",
    ),
]
MoEImbalanceOpt = Annotated[
    float | None,
    typer.Option(
        "--moe-imbalance",
        min=1.0,
        help="Routed tokens on the busiest EP rank / the mean (MoE models) \\[default: 1.1; 1.0 = "
        "force-balanced routing].",
    ),
]
MoECapacityOpt = Annotated[
    float | None,
    typer.Option(
        "--moe-capacity-factor",
        min=0.01,
        help="Expert capacity factor: tokens beyond it are dropped (MoE models) \\[default: dropless].",
    ),
]

MoEDispatcherOpt = Annotated[
    str | None,
    typer.Option(
        "--moe-dispatcher",
        help="MoE token dispatcher: alltoall (one copy per routed expert) or flex (DeepEP/HybridEP: "
        "one copy per destination rank, hierarchical across NVLink domains) \\[default: alltoall].",
    ),
]
MoEOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--moe-ep-overlap",
        help="Dispatch/combine overlap another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm).",
    ),
]
CudaGraphsOpt = Annotated[
    bool,
    typer.Option(
        "--cuda-graphs", help="Layers run as CUDA graphs (no CPU launch floor; Megatron --cuda-graph-impl)."
    ),
]


def workload_extras(model: Any, precisions: list[str], flags: Mapping[str, Any]) -> dict[str, Any]:
    """Workload fields from the FP8/MoE/CUDA-graph options above, read by parameter name from `flags` (a
    command's locals(): every command declares them as fp8_recipe, moe_imbalance, ...); a flag that cannot
    take effect is an error."""
    fp8_recipe, moe_imbalance = flags.get("fp8_recipe"), flags.get("moe_imbalance")
    moe_capacity_factor, moe_dispatcher = flags.get("moe_capacity_factor"), flags.get("moe_dispatcher")
    moe_ep_overlap, cuda_graphs = flags.get("moe_ep_overlap", False), flags.get("cuda_graphs", False)
    out: dict[str, Any] = {"cuda_graphs": cuda_graphs} if cuda_graphs else {}
    if fp8_recipe is not None:
        if "fp8" not in precisions:
            raise SpecError(f"--fp8-recipe {fp8_recipe} needs --precision fp8 (got {','.join(precisions)})")
        out["fp8_recipe"] = fp8_recipe
    for flag, value, field in (
        ("--moe-imbalance", moe_imbalance, "moe_imbalance"),
        ("--moe-capacity-factor", moe_capacity_factor, "moe_capacity_factor"),
        ("--moe-dispatcher", moe_dispatcher, "moe_dispatcher"),
        ("--moe-ep-overlap", moe_ep_overlap or None, "moe_ep_overlap"),
    ):
        if value is None:
            continue
        if not model.is_moe:
            raise SpecError(f"{flag} applies to MoE models; {model.name} is dense")
        out[field] = value
    return out
