"""The run-record schema: its columns in order, the architecture columns, a model as those columns.

A run record is one measured training run (model architecture, cluster, strategy, measured
throughput/memory); these are the columns of the published-runs dataset that `row_to_specs`
(records/specs.py) reads.
"""

from __future__ import annotations

from typing import Any

from autopar.specs import ModelSpec

RECORD_COLUMNS: tuple[str, ...] = (
    "id",
    "source",
    "source_ref",
    "model",
    "arch",
    "params_b",
    "active_params_b",
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "seq_len",
    "experts",
    "topk",
    "shared_experts",
    "moe_ffn_hidden",
    "gpu",
    "num_gpus",
    "gpus_per_node",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "etp",
    "vpp",
    "sp",
    "zero",
    "recompute",
    "micro_batch",
    "global_batch",
    "precision",
    "framework",
    "measured_tflops_per_gpu",
    "measured_mfu",
    "measured_tokens_per_s_per_gpu",
    "measured_step_s",
    "measured_mem_gb_per_gpu",
    "notes",
)


ARCH_COLUMNS = ("layers", "hidden", "ffn_hidden", "heads")


def arch_columns(model: ModelSpec) -> dict[str, Any]:
    """A model's architecture as run-record columns (what `model_from_row` reads back)."""
    return {
        "layers": model.layers,
        "hidden": model.hidden,
        "ffn_hidden": model.ffn_hidden,
        "heads": model.heads,
        "kv_heads": model.kv_heads or model.heads,
        "head_dim": model.head_dim or model.hidden // model.heads,
        "vocab": model.vocab,
        "experts": model.experts or None,
        "topk": model.topk or None,
        "shared_experts": model.shared_experts or None,
        "moe_ffn_hidden": model.moe_ffn_hidden if model.is_moe else None,
    }
