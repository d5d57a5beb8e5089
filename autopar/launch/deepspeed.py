"""DeepSpeed config JSON for a strategy, where DeepSpeed can express it.

Keys: deepspeedai/DeepSpeed deepspeed/runtime/constants.py (top level) and the pydantic sections
(DeepSpeedZeroConfig in runtime/zero/config.py, DeepSpeedBF16Config in runtime/precision_config.py,
TPTrainingConfig in runtime/tensor_parallel/config.py) at the targeted tag; docs/_pages/config-json.md
for train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel
GPUs. Tests check every generated file against the schema extracted from those classes.
"""

from __future__ import annotations

import json

from autopar.launch.optimizer import deepspeed_optimizer_notes
from autopar.layouts import model_code_rules, stack_notes
from autopar.specs import Strategy, Workload


def deepspeed_config(workload: Workload, s: Strategy, microbatches: int) -> tuple[str | None, str, list[str]]:
    """(config JSON or None, reason or caveats, notes)."""
    # the rule the DeepSpeed search reads too (layouts.STACKS model_code): axes no ds_config key sets
    blocked = [v.message for v in model_code_rules("deepspeed", pp=s.pp, cp=s.cp, ep=s.ep)]
    if blocked:
        return None, "not expressible as a DeepSpeed config: " + "; ".join(blocked), []
    notes: list[str] = stack_notes("deepspeed", s)  # the capability table (layouts.STACKS)
    zero: dict[str, object] = {"stage": s.zero}
    if s.zero >= 2:
        zero.update(overlap_comm=True, contiguous_gradients=True)
    if s.optimizer_offload:
        # ZeRO-Offload: DeepSpeedZeroOffloadOptimizerConfig (runtime/zero/offload_config.py), stages 1-3
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if s.optimizer_offload < 1:
            notes.append(f"optimizer_offload={s.optimizer_offload:g}: DeepSpeed offloads the whole optimizer")
        if s.zero == 0:
            notes.append("offload_optimizer needs ZeRO stage >= 1")
    cfg: dict[str, object] = {
        "train_batch_size": workload.global_batch,
        "train_micro_batch_size_per_gpu": s.micro_batch,
        "gradient_accumulation_steps": microbatches,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
    }
    if s.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": s.tp}
        notes.append(
            "DeepSpeed AutoTP (tensor_parallel.autotp_size) shards linear layers of "
            "Hugging Face style models; it has no Megatron-style sequence parallelism"
        )
        notes.append(
            f"train_batch_size counts data-parallel ranks = GPUs / tp = {s.dp}: the training script must pass "
            f"deepspeed.initialize an mpu whose get_data_parallel_world_size() returns {s.dp} "
            "(e.g. the groups of deepspeed.utils.groups with tensor-parallel size "
            f"{s.tp}), or DeepSpeed counts every GPU as data-parallel and rejects the batch"
        )
    if s.recompute != "none":
        notes.append(
            "DeepSpeed activation checkpointing is enabled in the model code "
            "(e.g. gradient_checkpointing_enable()), not in this JSON"
        )
    if workload.precision == "fp8":
        notes.append("FP8 GEMMs need Transformer Engine in the model; the DeepSpeed config keeps bf16")
    notes.append("set the optimizer and LR schedule in the training script or add 'optimizer'/'scheduler'")
    notes += deepspeed_optimizer_notes(workload)
    return json.dumps(cfg, indent=2) + "\n", "; ".join(notes), notes
