"""The stack knobs a run record states in columns (issue 44): vocabularies, reading, contradictions.

A record's memory depends on what its stack did: the attention kernel (FlashAttention/cuDNN keep no s x s
scores, the unfused softmax does), torch.compile, whether FSDP re-shards after the forward, how recompute is
spread over the layers, what was offloaded, and what the source measured (the caching allocator's peak
allocated bytes, its peak reserved bytes, or nvidia-smi's whole-process figure). Each is a column with a
closed vocabulary; an empty cell means the source is silent, and the stack's default applies (said in
`assumed`). Free-text notes are never read for knobs (`legacy_notes.py` moves what older files said in their
notes into these columns: `autopar calibrate upgrade`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autopar.errors import DataError, close_hint
from autopar.knobs import SCHEDULE_NAMES
from autopar.perf.remat import FULL_REMAT_NAMES, REMAT_POLICIES
from autopar.text import excerpt

# What the source's memory figure is (torch.cuda.max_memory_allocated: live tensors; max_memory_reserved: the
# caching allocator's segments, allocated + its free blocks; nvidia_smi: the process as the driver sees it,
# reserved + CUDA context, cuBLAS workspaces and NCCL's own buffers).
MEMORY_METRICS: tuple[str, ...] = ("max_memory_allocated", "max_memory_reserved", "nvidia_smi")
_METRIC_ALIASES = {
    "allocated": "max_memory_allocated",
    "max_allocated": "max_memory_allocated",
    "reserved": "max_memory_reserved",
    "max_reserved": "max_memory_reserved",
    "nvidia-smi": "nvidia_smi",
    "nvml": "nvidia_smi",
}
# Attention kernel: FlashAttention (Dao et al.; PyTorch SDPA's flash backend), cuDNN fused attention
# (Transformer Engine, SDPA's cuDNN backend) or the unfused softmax that materialises the s x s scores
# (Megatron-LM before --use-flash-attn, Korthikanti et al. 2022 §4).
ATTENTION_KERNELS: tuple[str, ...] = ("flash", "cudnn", "unfused")
# What was kept in CPU memory: nothing, the optimizer states (DeepSpeed offload_optimizer, Megatron
# --optimizer-cpu-offload), parameters with their gradients and states (FSDP2 CPUOffloadPolicy, DeepSpeed
# offload_param), or activations (Megatron --cpu-offloading, DeepSpeed cpu_checkpointing).
CPU_OFFLOADS: tuple[str, ...] = ("none", "optimizer", "params", "activations")
# The GPU the memory figure is from: the peak over all GPUs, or the first / last pipeline stage (Megatron-LM
# logs the last global rank: megatron/training/global_vars.py `_set_tensorboard_writer`).
MEMORY_STAGES: tuple[str, ...] = ("peak", "first", "last")
# How full recompute is spread over a stage's layers (perf/remat.py): Megatron --recompute-method uniform
# (checkpoint groups of N layers) or block (the first N layers of each stage), torchtitan's per-layer selective
# AC (selective_ac_option = N: every N-th block wrapped in a full checkpoint).
RECOMPUTE_METHODS: tuple[str, ...] = ("uniform", "block", "every_nth")

# MaxText's `remat_policy` config values (perf/remat.py); 'full' and 'none' keep only the layer input.
REMAT_POLICY_NAMES: tuple[str, ...] = (*REMAT_POLICIES, *FULL_REMAT_NAMES)

_CHOICES: dict[str, tuple[str, ...]] = {
    "remat_policy": REMAT_POLICY_NAMES,
    "attention_kernel": ATTENTION_KERNELS,
    "memory_metric": MEMORY_METRICS,
    "cpu_offload": CPU_OFFLOADS,
    "memory_stage": MEMORY_STAGES,
    "pp_schedule": SCHEDULE_NAMES,
    "recompute_method": RECOMPUTE_METHODS,
}
_BOOLS = (
    "fused_kernels",
    "torch_compile",
    "reshard_after_forward",
    "dropout",
    "tied_embeddings",
    "measured_oom",
)
# Every stack-knob column, in the order a record file lists them after `notes`.
STACK_COLUMNS: tuple[str, ...] = (
    "attention_kernel",
    "fused_kernels",
    "torch_compile",
    "reshard_after_forward",
    "memory_metric",
    "cpu_offload",
    "memory_stage",
    "dropout",
    "tied_embeddings",
    "pp_schedule",
    "recompute_method",
    "recompute_num_layers",
    "remat_policy",
    "measured_mem_reserved_gb_per_gpu",
    "measured_oom",
)


@dataclass(frozen=True, slots=True)
class StackKnobs:
    """A record's stack-knob cells, validated (None: the source is silent)."""

    attention_kernel: str | None = None
    fused_kernels: bool | None = None
    torch_compile: bool | None = None
    reshard_after_forward: bool | None = None
    memory_metric: str | None = None
    cpu_offload: str | None = None
    memory_stage: str | None = None
    dropout: bool | None = None
    tied_embeddings: bool | None = None
    pp_schedule: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    remat_policy: str | None = None
    measured_reserved_gib: float | None = None
    measured_oom: bool | None = None  # the run ran out of GPU memory (tune, dryrun, a log): its peak > usable


def _blank(v: Any) -> bool:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True
    return isinstance(v, str) and v.strip().lower() in ("", "nan", "null")


def _choice(rid: str, key: str, v: Any) -> str:
    s = str(v).strip().lower()
    s = _METRIC_ALIASES.get(s, s) if key == "memory_metric" else s
    allowed = _CHOICES[key]
    if s not in allowed:
        hint = (
            close_hint(s, (*allowed, *_METRIC_ALIASES)) if key == "memory_metric" else close_hint(s, allowed)
        )
        raise DataError(
            f"row {rid!r}: column '{key}' = {excerpt(str(v))!r}: expected one of {', '.join(allowed)}{hint}"
        )
    return s


# How a stack column says true / false (the one place: record readers ask `stated_true`).
TRUE_WORDS = ("1", "true", "yes", "t", "1.0")


def stated_true(v: Any) -> bool:
    """Whether a cell states true (a blank or any other text: not)."""
    return str(v if v is not None else "").strip().lower() in TRUE_WORDS


def _flag(rid: str, key: str, v: Any) -> bool:
    s = str(v).strip().lower()
    if s in TRUE_WORDS:
        return True
    if s in ("0", "false", "no", "f", "0.0"):
        return False
    raise DataError(f"row {rid!r}: column '{key}' = {excerpt(str(v))!r}: expected true or false")


def _number(rid: str, key: str, v: Any, whole: bool) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = math.nan
    if not math.isfinite(f) or f <= 0 or (whole and f != int(f)) or f > 2**40:
        what = "a positive whole number" if whole else "a positive number"
        raise DataError(f"row {rid!r}: column '{key}' = {excerpt(str(v))!r}: expected {what}")
    return f


def _read(rid: str, key: str, v: Any) -> Any:
    if key in _CHOICES:
        return _choice(rid, key, v)
    if key in _BOOLS:
        return _flag(rid, key, v)
    if key == "recompute_num_layers":
        return int(_number(rid, key, v, whole=True))
    return _number(rid, key, v, whole=False)


_FIELD_OF = {"measured_mem_reserved_gb_per_gpu": "measured_reserved_gib"}


def stack_knobs(row: Mapping[str, Any]) -> StackKnobs:
    """The record's stack-knob columns, validated one by one and then against each other (`contradictions`):
    a value outside a column's vocabulary, or two columns that cannot both hold, is a one-line DataError
    naming the row and the columns."""
    rid = str(row.get("id") or "").strip() or "?"
    cells = {_FIELD_OF.get(k, k): _read(rid, k, row[k]) for k in STACK_COLUMNS if not _blank(row.get(k))}
    knobs = StackKnobs(**cells)
    contradiction = contradictions(knobs, row)
    if contradiction:
        raise DataError(f"row {rid!r}: {contradiction}")
    return knobs


def _cell_text(row: Mapping[str, Any], key: str) -> str:
    v = row.get(key)
    return "" if _blank(v) else str(v).strip().lower()


def contradictions(k: StackKnobs, row: Mapping[str, Any]) -> str:
    """The first pair of cells that cannot both hold ('' when none)."""
    allocated = _positive(row.get("measured_mem_gb_per_gpu"))
    reserved = k.measured_reserved_gib
    if reserved is not None and allocated is not None and reserved < allocated:
        return (
            f"columns 'measured_mem_reserved_gb_per_gpu' = {reserved:g} and 'measured_mem_gb_per_gpu' = "
            f"{allocated:g} (max_memory_allocated): reserved memory holds the allocated bytes and cannot be smaller"
        )
    if k.measured_reserved_gib is not None and k.memory_metric in MEMORY_METRICS[1:]:
        return (
            f"columns 'measured_mem_reserved_gb_per_gpu' and 'memory_metric' = {k.memory_metric}: the reserved "
            "column is the second figure of a max_memory_allocated record"
        )
    if k.measured_oom and (allocated is not None or k.memory_metric or k.memory_stage in ("first", "last")):
        return (
            "columns 'measured_oom' = true and a measured peak ('measured_mem_gb_per_gpu', 'memory_metric' or "
            "'memory_stage'): a run that ran out of memory has no peak to describe; its evidence is the OOM"
        )
    zero = _cell_text(row, "zero")
    if k.reshard_after_forward is not None and zero not in ("", "3", "3.0"):
        return (
            f"columns 'reshard_after_forward' = {str(k.reshard_after_forward).lower()} and 'zero' = {zero}: "
            "re-sharding after the forward exists only for fully sharded parameters (ZeRO-3 / FSDP)"
        )
    return _recompute_contradiction(k, row)


def _recompute_contradiction(k: StackKnobs, row: Mapping[str, Any]) -> str:
    rec = _cell_text(row, "recompute")
    spread = k.recompute_method is not None or k.recompute_num_layers is not None
    if spread and rec not in ("", "full"):
        named = "recompute_method" if k.recompute_method is not None else "recompute_num_layers"
        return (
            f"columns '{named}' and 'recompute' = {rec}: the method and layer count spread full recompute "
            "over the layers (torchtitan's per-layer AC: recompute full, recompute_method every_nth)"
        )
    if k.remat_policy is not None and rec not in ("", "full" if k.remat_policy in FULL_REMAT_NAMES else "-"):
        return (
            f"columns 'remat_policy' = {k.remat_policy} and 'recompute' = {rec}: a MaxText remat policy is the "
            "run's recompute (leave 'recompute' empty)"
        )
    if k.recompute_method is not None and k.recompute_num_layers is None:
        return f"column 'recompute_method' = {k.recompute_method} needs 'recompute_num_layers'"
    if k.attention_kernel == "unfused" and "flash" in _cell_text(row, "framework").replace("-", ""):
        return (
            f"columns 'attention_kernel' = unfused and 'framework' = {excerpt(_cell_text(row, 'framework'))!r}: "
            "the framework names a FlashAttention kernel"
        )
    return ""


def _positive(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None
