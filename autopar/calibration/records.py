"""Run records (the columns of the published-runs dataset): reading, turning into specs, batch estimates.

A run record is one measured training run: model architecture, cluster, strategy, measured
throughput/memory. Empty cells mean "the source is silent"; `row_to_specs` fills architecture and
cluster cells with the framework default and says so in `assumed`; the strategy knobs vpp, micro_batch,
recompute, etp, pp_schedule and zero stay unset and `estimate` completes them (perf/complete.py).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autopar.calibration.legacy_notes import notes_only_knobs
from autopar.calibration.stack_columns import StackKnobs, stack_knobs
from autopar.errors import AutoparError, DataError, close_hint
from autopar.knobs import (
    OPTIMIZERS,
    RECOMPUTE_MODES,
    RECOMPUTE_MODULE_SETS,
    SURROGATE_PROFILE,
    UNPROFILED_MARKERS,
)
from autopar.layouts import ACT_OFFLOAD_FRAMEWORKS, default_cp_comm
from autopar.perf.estimate import estimate, stage_memories
from autopar.perf.memory import as_measured
from autopar.perf.remat import FULL_REMAT_NAMES, REMAT_PREFIX
from autopar.specs import GRAD_REDUCE_DTYPES, ClusterSpec, GPUSpec, ModelSpec, Strategy, Workload
from autopar.text import excerpt
from autopar.units import GiB

if TYPE_CHECKING:
    import pandas as pd

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


def _nemo_tp_overlap(row: Mapping[str, Any]) -> bool:
    """A NeMo / Megatron-Bridge performance run with TP > 1 whose record is silent on TP comm overlap."""
    fw = str(_cell(row, "framework") or "").lower()
    tp = _pos(row, "tp") or 1
    return tp > 1 and ("nemo" in fw or "megatron-bridge" in fw) and _bool(row, "sp") is not False


# The main-gradient dtype of the vendors' performance summaries (Workload.grad_reduce_dtype), as their
# launch configs state it; Megatron's own default is fp32.
# - Megatron-Bridge's performance configs set bf16 for every model family they benchmark too
#   (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/<family>/<family>_llm_pretrain.py
#   `set_<family>_common_configs`: mixed_precision.grad_reduce_in_fp32 = ddp.grad_reduce_in_fp32 = False; tags
#   v0.2.0 717c62d = NeMo 25.11, v0.4.0 0fbfe7d, v0.5.0 fcbb603; from v0.6.0 perf_recipes/_common.py
#   `_benchmark_common`). Applied once the records state their presets' recompute modules (issue 21: with
#   the modules unstated, the memory it freed let completion drop the GPT-OSS presets' recompute).
# - NeMo 2's performance scripts from 25.04 (NVIDIA/NeMo v2.3.0 2b03b74): every pretraining recipe they run
#   sets bf16 in `pretrain_performance_optimizations` (recipes/{gpt3_175b, llama3_8b, llama3_70b,
#   llama31_405b, mixtral_8x7b, mixtral_8x22b, nemotron4_15b, nemotron4_340b, nemotron3_22b}.py:
#   trainer.plugins.grad_reduce_in_fp32 = False) and FP8 runs again in scripts/performance/utils.py
#   `set_primary_perf_configs`.
# - NeMo 24.07 / 24.12 (NeMo-Framework-Launcher tags 24.07 8325688, 24.12 5730fac): only
#   launcher_scripts/conf/training/nemotron/nemotron_340b.yaml sets `optim.grad_sync_dtype: bf16` among the
#   models of those tables; NeMo maps it to Megatron-Core's buffer (NVIDIA/NeMo v2.1.0 megatron_gpt_model.py:
#   `grad_reduce_in_fp32=(optim.grad_sync_dtype == 'fp32')`).
_NEMO_BF16_FROM = (25, 4)
_MBRIDGE_BF16_FROM = (25, 11)
_NEMO_LAUNCHER_BF16: dict[tuple[int, int], tuple[str, ...]] = {
    (24, 7): ("nemotron-340b",),
    (24, 12): ("nemotron-340b",),
}
_NEMO_RELEASE = re.compile(r"nemo (\d\d)\.(\d\d)")


# A run that does not state its main-gradient dtype ran its stack's library default: fp32 (Megatron-LM
# accumulates and reduces bf16 training's gradients in fp32; so do torchtitan's FSDP2, DeepSpeed and FSDP). Stated
# explicitly, so that the megatron search default (defaults.grad_reduce_dtype_default: bf16, as the performance
# recipes run) does not rewrite what a measured run did.
_RECORD_GRAD_DTYPE = "fp32"


def _grad_reduce_dtype(row: Mapping[str, Any], assumed: list[str]) -> dict[str, str]:
    """The record's `grad_reduce_dtype` column (a Megatron log's argument dump fills it: logs.py); else bf16
    where the performance summary's launch config states it (above); else fp32."""
    stated = _cell(row, "grad_reduce_dtype")
    if stated is not None:
        value = str(stated).strip().lower()
        if value not in GRAD_REDUCE_DTYPES:
            hint = close_hint(value, GRAD_REDUCE_DTYPES)
            raise DataError(
                f"column 'grad_reduce_dtype' = {excerpt(str(stated))!r}: expected one of "
                f"{', '.join(GRAD_REDUCE_DTYPES)}{hint}"
            )
        return {"grad_reduce_dtype": value}
    fw = str(_cell(row, "framework") or "").lower()
    if "perf_summary" not in str(_cell(row, "source") or "").lower():
        return {"grad_reduce_dtype": _RECORD_GRAD_DTYPE}
    m = _NEMO_RELEASE.search(fw)
    release = (int(m.group(1)), int(m.group(2))) if m else None
    if "megatron-bridge" in fw and release is not None and release >= _MBRIDGE_BF16_FROM:
        why = "Megatron-Bridge performance configs"
    elif "megatron-bridge" in fw:
        return {"grad_reduce_dtype": _RECORD_GRAD_DTYPE}
    elif release is not None and release >= _NEMO_BF16_FROM:
        why = "NeMo 2 performance recipes"
    elif release is not None and str(_cell(row, "model") or "").lower() in _NEMO_LAUNCHER_BF16.get(
        release, ()
    ):
        why = "NeMo-Framework-Launcher config: optim.grad_sync_dtype bf16"
    else:
        return {"grad_reduce_dtype": _RECORD_GRAD_DTYPE}
    assumed.append(f"grad_reduce_dtype=bf16 ({why})")
    return {"grad_reduce_dtype": "bf16"}


def _routing_and_recipe(row: Mapping[str, Any], prec: str, assumed: list[str]) -> dict[str, Any]:
    """Workload fields a record's columns state: FP8 recipe (fp8 rows only), MoE routing balance
    (moe_imbalance = 1.0: force-balanced), dispatcher (flex: DeepEP/HybridEP), DeepSpeed's BF16 optimizer,
    torchtitan's compiled loss, the stack preset's MoE all-to-all overlap and CUDA-graph mode
    (stated_moe_options), LoRA fine-tuning. Older files stated them in their notes: legacy_notes.py moves them
    into these columns."""
    out: dict[str, Any] = {}
    for col, kind in _WORKLOAD_COLUMNS.items():
        v = _cell(row, col)
        if v is None or col == "fp8_recipe" and prec != "fp8":
            continue
        out[col] = _typed(col, v, kind)
    return out


# Workload fields a record may state in a column of the same name: their type, or their allowed values.
_WORKLOAD_COLUMNS: dict[str, Any] = {
    "fp8_recipe": ("delayed", "current", "rowwise", "mxfp8"),
    "moe_imbalance": float,
    "moe_dispatcher": ("alltoall", "flex"),
    "bf16_optimizer": bool,
    "compiled_loss": bool,
    "moe_ep_overlap": bool,
    "cuda_graphs": bool,
    "finetune": ("full", "lora"),
}


def _typed(col: str, v: Any, kind: Any) -> Any:
    """A workload column's cell as its type (a value outside a vocabulary: a one-line error)."""
    if kind is bool:
        return _bool({col: v}, col)
    if kind is float:
        return _float({col: v}, col)
    value = str(v).strip().lower()
    if value not in kind:
        raise DataError(
            f"column '{col}' = {excerpt(str(v))!r}: expected one of {', '.join(kind)}{close_hint(value, kind)}"
        )
    return value


def stated_moe_options(row: Mapping[str, Any]) -> dict[str, bool]:
    """Workload.moe_ep_overlap / cuda_graphs as a record's columns state them (absent when not stated; an
    older file's notes count, legacy_notes.py)."""
    row = {**row, **notes_only_knobs(row)}
    return {k: bool(_bool(row, k)) for k in ("moe_ep_overlap", "cuda_graphs") if _cell(row, k) is not None}


# The dataset README: torchtitan's H100 rows ran on Meta's Grand Teton H100 (96 GB HBM2e, 500 W).
_GRAND_TETON_MARKERS = ("96gb hbm2e", "grand teton")


# Activation CPU offload a record states: optional column `cpu_offloading_num_layers` (Megatron-Core's
# TransformerConfig field).


def _act_offload(
    row: Mapping[str, Any], framework: str, pp: int, rec: str | None, assumed: list[str]
) -> tuple[int | None, tuple[str, ...]]:
    """(Strategy.activation_offload_layers, Workload.memory_savers) of a record: the stated count; else
    unset (completed, "act_offload" allowed) where the stack has it and the record does not rule it out
    (PP or recompute: layouts.offload_rules); else off."""
    n = _int(row, "cpu_offloading_num_layers")
    if n is not None:
        if n < 0:
            raise DataError(f"column 'cpu_offloading_num_layers' = {n} must be >= 0")
        return n, ()
    if framework in ACT_OFFLOAD_FRAMEWORKS and pp == 1 and rec in (None, "none"):
        return None, ("act_offload",)
    return 0, ()


@dataclass
class RecordSpecs:
    """The specs a run record describes, plus the defaults that were filled in."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    strategy: Strategy
    assumed: list[str] = field(default_factory=list)
    knobs: StackKnobs = field(default_factory=StackKnobs)


def _cell(row: Mapping[str, Any], key: str) -> Any:
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, str):
        v = v.strip()
        if v == "" or v.lower() in ("nan", "none", "null"):
            return None
    return v


# The largest whole number a record cell may hold: beyond 2**53 a float no longer counts in ones, and no layout
# degree, dimension or batch comes near it (a fuzzed head_dim of 1e299 overflowed the model's float arithmetic).
MAX_WHOLE_CELL = float(2**53)


def _int(row: Mapping[str, Any], key: str) -> int | None:
    v = _cell(row, key)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError) as e:
        raise DataError(f"column '{key}' = {v!r} is not a number") from e
    if not math.isfinite(f) or f != int(f):
        raise DataError(f"column '{key}' = {v!r} is not a whole number")
    if abs(f) > MAX_WHOLE_CELL:
        raise DataError(f"column '{key}' = {v!r} is out of range (at most {MAX_WHOLE_CELL:.0f})")
    return int(f)


def _pos(row: Mapping[str, Any], key: str) -> int | None:
    """A positive whole number, or None when the cell is empty."""
    v = _int(row, key)
    if v is not None and v <= 0:
        raise DataError(f"column '{key}' = {v} must be a positive whole number")
    return v


def _float(row: Mapping[str, Any], key: str) -> float | None:
    v = _cell(row, key)
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError) as e:
        raise DataError(f"column '{key}' = {v!r} is not a number") from e


def _bool(row: Mapping[str, Any], key: str) -> bool | None:
    v = _cell(row, key)
    if v is None:
        return None
    s = str(v).lower()
    if s in ("1", "true", "yes", "y", "t", "1.0"):
        return True
    if s in ("0", "false", "no", "n", "f", "0.0"):
        return False
    raise DataError(f"column '{key}' = {v!r} is not a boolean (use 0/1 or true/false)")


# The cells _build_model reads: rows agreeing on them describe the same model.
_MODEL_CELLS = (
    "model",
    *ARCH_COLUMNS,
    "kv_heads",
    "experts",
    "vocab",
    "head_dim",
    "topk",
    "shared_experts",
    "moe_ffn_hidden",
    "dropout_stated",  # the `dropout` stack column, validated (StackKnobs.dropout): None when silent
    "tied_stated",  # the `tied_embeddings` stack column, likewise
)


def _model_from_row(row: Mapping[str, Any], knobs: StackKnobs, assumed: list[str]) -> ModelSpec:
    """The row's model; built once per distinct model cells (a batch repeats them row after row)."""
    said = {"dropout_stated": knobs.dropout, "tied_stated": knobs.tied_embeddings}
    cells = tuple(said[c] if c in said else _cell(row, c) for c in _MODEL_CELLS)
    try:
        hash(cells)
    except TypeError:  # an unhashable cell (a list from JSONL): build it uncached, it errors as before
        return _build_model({**row, **said}, assumed)
    model, notes = _model_from_cells(cells)
    assumed.extend(notes)
    return model


@functools.lru_cache(maxsize=256)
def _model_from_cells(cells: tuple[Any, ...]) -> tuple[ModelSpec, tuple[str, ...]]:
    assumed: list[str] = []
    model = _build_model(dict(zip(_MODEL_CELLS, cells, strict=True)), assumed)
    return model, tuple(assumed)


def _catalog_model(name: str) -> ModelSpec | None:
    """The catalog entry of that name, if any (the catalog is optional here)."""
    try:
        from autopar.catalog import get_model

        return get_model(name)
    except (AutoparError, ImportError):
        return None


def _build_model(row: Mapping[str, Any], assumed: list[str]) -> ModelSpec:
    name = str(_cell(row, "model") or "unnamed")
    have_arch = all(_cell(row, c) is not None for c in ARCH_COLUMNS)
    catalog_model = _catalog_model(name)
    if not have_arch:
        if catalog_model is None:
            missing = [c for c in ARCH_COLUMNS if _cell(row, c) is None]
            raise DataError(
                f"model '{name}' is not in the catalog and columns {', '.join(missing)} are empty"
            )
        assumed.append(f"architecture from catalog entry '{catalog_model.name}'")
        return catalog_model
    layers, hidden, ffn, heads = (_int(row, c) for c in ARCH_COLUMNS)
    vocab = _int(row, "vocab")
    if vocab is None:
        vocab = catalog_model.vocab if catalog_model else 51200
        assumed.append(f"vocab={vocab}")
    activation, tied, norm, dropout = _block_style(catalog_model, ffn, hidden, assumed)
    stated_dropout, stated_tied = row.get("dropout_stated"), row.get("tied_stated")
    if stated_dropout is not None and stated_dropout != dropout:
        dropout = bool(stated_dropout)
        assumed.append(f"dropout={str(dropout).lower()} (column 'dropout')")
    if stated_tied is not None and stated_tied != tied:
        tied = bool(stated_tied)
        assumed.append(f"tied_embeddings={str(tied).lower()} (column 'tied_embeddings')")
    fields: dict[str, Any] = dict(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=_int(row, "kv_heads"),
        head_dim=_int(row, "head_dim"),
        ffn_hidden=ffn,
        vocab=vocab,
        activation=activation,
        tied_embeddings=tied,
        norm=norm,
        dropout=dropout,
    )
    return ModelSpec(**fields, **_moe_fields(row, ffn, catalog_model))


def _block_style(
    catalog_model: ModelSpec | None, ffn: int | None, hidden: int | None, assumed: list[str]
) -> tuple[str, bool, str, bool]:
    """(activation, tied embeddings, norm, dropout): the catalog entry's, else guessed from the FFN
    ratio (4*hidden: GPT-style GeLU, tied, LayerNorm; otherwise SwiGLU, RMSNorm), noted as assumed."""
    if catalog_model is not None:
        m = catalog_model
        return m.activation, m.tied_embeddings, m.norm, m.dropout
    gelu = ffn == 4 * hidden
    activation = "gelu" if gelu else "swiglu"
    assumed.append(f"activation={activation}, tied_embeddings={gelu} (ffn {'=' if gelu else '!='} 4*hidden)")
    return activation, gelu, ("layernorm" if gelu else "rmsnorm"), False


def _moe_fields(row: Mapping[str, Any], ffn: int | None, catalog_model: ModelSpec | None) -> dict[str, Any]:
    """The MoE fields of a row with experts (and the catalog's MLA/dense-layer fields for an MoE entry)."""
    experts = _int(row, "experts") or 0
    if not experts:
        return {}
    fields: dict[str, Any] = dict(
        experts=experts,
        topk=_int(row, "topk") or 2,
        shared_experts=_int(row, "shared_experts") or 0,
        moe_ffn_hidden=_int(row, "moe_ffn_hidden") or ffn,
    )
    if catalog_model is not None and catalog_model.is_moe:
        m = catalog_model
        fields.update(
            dense_layers=m.dense_layers,
            q_lora_rank=m.q_lora_rank,
            kv_lora_rank=m.kv_lora_rank,
            qk_nope_head_dim=m.qk_nope_head_dim,
            qk_rope_head_dim=m.qk_rope_head_dim,
            v_head_dim=m.v_head_dim,
        )
    return fields


def _gpu_from_row(row: Mapping[str, Any], assumed: list[str]) -> GPUSpec:
    from autopar.catalog import get_gpu

    name = _cell(row, "gpu")
    if name is None:
        raise DataError("column 'gpu' is empty")
    notes = str(_cell(row, "notes") or "").lower()
    if str(name).lower().startswith("h100") and any(mk in notes for mk in _GRAND_TETON_MARKERS):
        assumed.append("gpu=H100-SXM-96GB-500W (notes: Grand Teton 96 GB HBM2e, 500 W)")
        return get_gpu("H100-SXM-96GB-500W")
    return get_gpu(str(name))


def unprofiled_stack(text: Any) -> str:
    """The unprofiled stack (knobs.UNPROFILED_STACKS) a free-text framework name names: '' when it names a
    profiled one (`_profiled`), 'other' when it names nothing autopar knows or is empty."""
    t = str(text or "").lower()
    for name, words in UNPROFILED_MARKERS.items():
        if any(w in t for w in words):
            return name
    return "" if _profiled(t) else "other"


_FSDP_WORDS = ("fsdp", "composer", "llm-foundry", "foundry", "accelerate")


def stack_of(text: Any, assumed: list[str]) -> dict[str, str]:
    """Workload `framework` (and `stack` when unprofiled: the surrogate profile, the prior named in
    `assumed`) of a record's framework cell."""
    stack = unprofiled_stack(text)
    if not stack:
        return {"framework": framework_from_text(text, assumed)}
    said = excerpt(str(text)) if str(text or "").strip() else "not stated"
    assumed.append(
        f"stack={stack} (framework {said!r}: no kernel profile; estimated as {SURROGATE_PROFILE} with the "
        "unprofiled-stack prior)"
    )
    return {"framework": SURROGATE_PROFILE, "stack": stack}


def _profiled(t: str) -> str | None:
    """The software profile a lower-case framework name names; None when it names none (the one place the
    profiled stacks' words are recognised)."""
    years = [int(y) for y in re.findall(r"\b(20[12]\d)\b", t)]
    # a Megatron run from before FlashAttention (2022 and earlier) is the pre-FlashAttention profile; a later
    # one that ran the unfused softmax says so in its `attention_kernel` column
    legacy = bool(years) and max(years) <= 2022 or "examples/pretrain_gpt3_175b" in t
    if legacy and any(k in t for k in ("megatron", "deepspeed", "nemo")):
        return "megatron-legacy"
    if "torchtitan" in t:
        return "torchtitan"
    if "deepspeed" in t or "zero-3" in t and "megatron" not in t:
        return "deepspeed"
    if any(k in t for k in _FSDP_WORDS):
        return "fsdp"
    if any(k in t for k in ("megatron", "nemo")):
        return "megatron"
    return None


def framework_from_text(text: Any, assumed: list[str] | None = None) -> str:
    """Map a free-text framework name (e.g. 'NeMo 24.07 (Megatron-Core)') to a software profile (an
    unprofiled or unrecognised name: the surrogate, see `stack_of`)."""
    found = _profiled(str(text or "").lower())
    if found is None and assumed is not None:
        assumed.append(f"framework={SURROGATE_PROFILE} (framework '{text or ''}' not recognised)")
    return found or SURROGATE_PROFILE


def row_to_specs(row: Mapping[str, Any]) -> RecordSpecs:
    """Turn one run record into specs, filling silent cells with framework defaults (listed in `assumed`)."""
    assumed: list[str] = []
    row = _with_legacy_knobs(row, assumed)
    knobs = stack_knobs(row)
    _check_offload(knobs)
    model = _model_from_row(row, knobs, assumed)
    gpu = _gpu_from_row(row, assumed)
    num_gpus = _pos(row, "num_gpus")
    if not num_gpus:
        raise DataError("column 'num_gpus' is empty")
    cluster = ClusterSpec(
        gpu=gpu, num_gpus=num_gpus, gpus_per_node=_pos(row, "gpus_per_node"), **_fabric(row, assumed)
    )
    workload = _workload(row, knobs, assumed)
    strategy, workload = _strategy(row, model, cluster, workload, knobs, assumed)
    return RecordSpecs(model, cluster, workload, strategy, assumed, knobs)


def _check_offload(knobs: StackKnobs) -> None:
    """CPU offload the model estimates: none, or the optimizer states (Strategy.optimizer_offload = 1). Parameters
    (FSDP2 CPUOffloadPolicy) and whole-model activation offload are refused rather than estimated as resident."""
    if knobs.cpu_offload in ("params", "activations"):
        raise DataError(
            f"column 'cpu_offload' = {knobs.cpu_offload}: not modelled for run records (optimizer offload is; "
            "Megatron's per-layer activation offload is the 'cpu_offloading_num_layers' column)"
        )


def _with_legacy_knobs(row: Mapping[str, Any], assumed: list[str]) -> Mapping[str, Any]:
    """The row with the stack knobs a file from before issue 44 states only in its notes moved into their
    empty columns (legacy_notes.py, the one place notes are read; `autopar calibrate upgrade` writes them
    into the file), each said in `assumed`."""
    said = notes_only_knobs(row)
    if not said:
        return row
    assumed.extend(
        f"{k}={v} (from the notes of a file without the column: calibrate upgrade)" for k, v in said.items()
    )
    return {**row, **said}


# The scale-out transport a record states (ClusterSpec.transport): optional column `transport`. Unstated:
# InfiniBand (the DGX systems most records ran on).


def _fabric(row: Mapping[str, Any], assumed: list[str]) -> dict[str, Any]:
    """ClusterSpec.transport as the record states it (absent when not stated)."""
    from autopar.specs import TRANSPORTS

    out: dict[str, Any] = {}
    transport = _cell(row, "transport")
    if transport is not None:
        if str(transport).lower() not in TRANSPORTS:
            raise DataError(f"transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
        out["transport"] = str(transport).lower()
    out.update(_internode_bw(row, assumed))
    return out


def _internode_bw(row: Mapping[str, Any], assumed: list[str]) -> dict[str, float]:
    """ClusterSpec.internode_bw (bytes/s per GPU per direction): the record's `internode_gbps` column (GB/s),
    else what its source's hardware description states (calibration/fabrics.py), else absent (the GPU's
    catalog default)."""
    from autopar.calibration.fabrics import parse_internode_gbps, source_fabrics

    stated = _cell(row, "internode_gbps")
    if stated is not None:
        return {"internode_bw": parse_internode_gbps("column 'internode_gbps'", stated) * 1e9}
    known = source_fabrics().get(str(_cell(row, "source") or ""))
    if known is None:
        return {}
    assumed.append(f"internode_gbps={known.internode_gbps:g} (the source's hardware: {SOURCE_FABRICS_NOTE})")
    return {"internode_bw": known.internode_gbps * 1e9}


SOURCE_FABRICS_NOTE = "autopar/data/source_fabrics.yaml"


def _precision(row: Mapping[str, Any], assumed: list[str]) -> str:
    """bf16 (fp16, mixed and amp computed as bf16: same tensor-core peak) or fp8."""
    prec = str(_cell(row, "precision") or "bf16").lower()
    if prec in ("fp16", "bf16", "mixed", "amp"):
        if prec != "bf16":
            assumed.append(f"precision {prec} computed as bf16 (same tensor-core peak)")
        return "bf16"
    if prec.startswith("fp8"):
        return "fp8"
    raise DataError(f"column 'precision' = {prec!r}: expected bf16, fp16 or fp8")


def _tp_overlap(row: Mapping[str, Any], assumed: list[str]) -> bool:
    """The `tp_comm_overlap` cell, else NeMo's recipes' default."""
    overlap = _bool(row, "tp_comm_overlap")
    if overlap is not None:
        return overlap
    if _nemo_tp_overlap(row):  # moe engineer (issue 11 item 6)
        assumed.append("tp_comm_overlap=true (NeMo performance recipes enable it when TP > 1)")
        return True
    return False


def _workload(row: Mapping[str, Any], knobs: StackKnobs, assumed: list[str]) -> Workload:
    seq = _pos(row, "seq_len")
    gbs = _pos(row, "global_batch")
    if not seq or not gbs:
        raise DataError("columns 'seq_len' and 'global_batch' are required")
    prec = _precision(row, assumed)
    return Workload(
        seq_len=seq,
        global_batch=gbs,
        precision=prec,
        tp_comm_overlap=_tp_overlap(row, assumed),
        **stack_of(_cell(row, "framework"), assumed),
        **_routing_and_recipe(row, prec, assumed),  # moe engineer (issue 11): stated FP8 recipe / balance
        **_grad_reduce_dtype(row, assumed),
        **_stack_knob_fields(knobs, row),
    )


def _stack_knob_fields(knobs: StackKnobs, row: Mapping[str, Any]) -> dict[str, Any]:
    """Workload fields of the record's stack columns (absent when the source is silent: the stack's default),
    and its `optimizer` column (knobs.OPTIMIZERS)."""
    out: dict[str, Any] = {}
    opt = _cell(row, "optimizer")
    if opt is not None:
        name = str(opt).strip().lower()
        if name not in OPTIMIZERS:
            raise DataError(
                f"column 'optimizer' = {excerpt(str(opt))!r}: expected one of {', '.join(OPTIMIZERS)}"
                f"{close_hint(name, OPTIMIZERS)}"
            )
        out["optimizer"] = name
    if knobs.attention_kernel is not None:
        out["attention_kernel"] = knobs.attention_kernel
    if knobs.torch_compile is not None:
        out["torch_compile"] = knobs.torch_compile
    if knobs.reshard_after_forward is not None:
        out["reshard_after_forward"] = knobs.reshard_after_forward
    if knobs.recompute_method is not None or knobs.recompute_num_layers is not None:
        out["recompute_method"] = knobs.recompute_method or "uniform"
        out["recompute_num_layers"] = knobs.recompute_num_layers or 1
    return out


def _tp_pp(
    row: Mapping[str, Any], cluster: ClusterSpec, cp: int, dp: int | None, assumed: list[str]
) -> tuple[int, int]:
    """TP and PP: the cells, else split from the model-parallel size num_gpus/(dp*cp) (TP within a node
    first), else 1."""
    tp, pp, n = _pos(row, "tp"), _pos(row, "pp"), cluster.num_gpus
    if tp is None and pp is None and dp is not None and n % (dp * cp) == 0:
        mp = n // (dp * cp)
        tp = min(mp, cluster.node_size)
        while mp % tp:
            tp //= 2
        pp = mp // tp
        assumed.append(f"tp={tp}, pp={pp} (only the model-parallel size {mp} is known)")
    if tp is None:
        assumed.append("tp=1")
    if pp is None:
        assumed.append("pp=1")
    return tp or 1, pp or 1


def _sp_recompute(
    row: Mapping[str, Any], tp: int, knobs: StackKnobs, assumed: list[str]
) -> tuple[bool, str | None]:
    """Sequence parallelism (the cell, else on with TP > 1) and the recompute mode: the `recompute` cell, else
    the `remat_policy` cell (MaxText's, perf/remat.py)."""
    sp = _bool(row, "sp")
    if sp is None:
        sp = tp > 1
        if tp > 1:
            assumed.append("sp=true (Megatron-Core/NeMo default with tp>1)")
    raw = row.get("recompute")
    # 'none' is a recompute mode (no recomputation), not a blank cell: a record that states it is not completed
    rec = "none" if isinstance(raw, str) and raw.strip().lower() == "none" else _cell(row, "recompute")
    if rec is not None:
        rec = str(rec).lower()
        if rec not in RECOMPUTE_MODES:
            raise DataError(f"column 'recompute' = {rec!r}: expected one of {', '.join(RECOMPUTE_MODES)}")
    if rec is None and knobs.remat_policy is not None:  # MaxText: the policy is the recompute mode
        rec = "full" if knobs.remat_policy in FULL_REMAT_NAMES else REMAT_PREFIX + knobs.remat_policy
    if rec is None and (knobs.recompute_method is not None or knobs.recompute_num_layers is not None):
        rec = "full"  # a spread is of full recompute (stack_columns: the method needs full or empty)
    return sp, rec


def _strategy(
    row: Mapping[str, Any],
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    knobs: StackKnobs,
    assumed: list[str],
) -> tuple[Strategy, Workload]:
    """The run's layout (and the workload with the activation-offload memory savers it implies)."""
    cp = _pos(row, "cp") or 1
    dp = _pos(row, "dp")
    tp, pp = _tp_pp(row, cluster, cp, dp, assumed)
    vpp = _pos(row, "vpp")  # empty cells stay None: estimate completes them (perf/complete.py)
    sp, rec = _sp_recompute(row, tp, knobs, assumed)
    mb, gbs, n = _pos(row, "micro_batch"), workload.global_batch, cluster.num_gpus
    dp_derived = n // (tp * pp * cp) if n % (tp * pp * cp) == 0 else 0
    if dp is not None and dp_derived and dp != dp_derived:
        assumed.append(f"dp={dp_derived} = num_gpus/(tp*pp*cp) (column dp={dp} ignored)")
    if dp_derived and mb and gbs % (mb * dp_derived):
        raise DataError(f"global_batch={gbs} is not divisible by micro_batch*dp = {mb}*{dp_derived}")
    offload_layers, savers = _act_offload(row, workload.framework, pp, rec, assumed)
    if rec in RECOMPUTE_MODULE_SETS and rec != "selective":  # the preset's modules: its user lets the search
        savers = (*savers, "recompute_modules")  # choose among them too (layouts.recompute_values)
    if savers:
        workload = workload.model_copy(update={"memory_savers": savers})
    strategy = Strategy(
        optimizer_offload=1.0 if knobs.cpu_offload == "optimizer" else 0.0,
        activation_offload_layers=offload_layers,
        tp=tp,
        pp=pp,
        cp=cp,
        cp_comm=default_cp_comm(workload.framework, model),  # records state no variant: the stack's default
        ep=_pos(row, "ep") or 1,
        etp=_pos(row, "etp"),
        vpp=vpp,
        sp=sp,
        zero=_int(row, "zero"),
        micro_batch=mb,
        recompute=rec,
        pp_schedule=_schedule(vpp, pp, knobs.pp_schedule),
        dp=dp_derived,
        dp_shard=_hsdp_shard(row, dp_derived),
        **_account_options(model.layers, pp, vpp, assumed, workload.framework),
    )
    return strategy, workload


def _hsdp_shard(row: Mapping[str, Any], dp: int) -> int | None:
    """Strategy.dp_shard from the record's `dp_shard` column: HSDP (FSDP2 sharding over dp_shard ranks,
    replicated over dp / dp_shard; torchtitan data_parallel_shard_degree / its mesh's dp_shard), None when the
    states are sharded over all of dp. A shard group that does not divide dp, or HSDP without ZeRO-3, is an
    error naming the columns."""
    shard = _pos(row, "dp_shard")
    if shard is None or not dp or shard == dp:
        return None
    if dp % shard:
        raise DataError(f"columns 'dp_shard' = {shard} and dp = {dp}: the shard group must divide dp")
    zero = _int(row, "zero")
    if zero is not None and zero != 3:
        raise DataError(
            f"columns 'dp_shard' = {shard} and 'zero' = {zero}: HSDP shards with ZeRO-3 / FSDP only"
        )
    return shard


def _account_options(
    layers: int, pp: int, vpp: int | None, assumed: list[str], framework: str = "megatron"
) -> dict[str, bool]:
    """Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, implied
    when the layers alone do not split over the pp·vpp virtual stages but layers + 1 (embedding) or + 2
    (embedding and loss) do: Megatron-Core rejects any other uneven split without explicit first/last-stage
    layer counts (megatron/core/transformer/transformer_config.py), and Megatron-Bridge's Llama-3.1-405B
    recipe sets both (recipes/llama/llama3.py `llama31_405b_pretrain_config`): 126 + 2 = 128 layers over
    PP16·VP8 (1 per virtual stage) or PP16·VP4 (2 per virtual stage). Other stacks split their own way."""
    n = pp * (vpp or 1)
    if pp <= 1 or framework not in ("megatron", "megatron-legacy") or layers % n == 0:
        return {}
    extra = next((x for x in (1, 2) if (layers + x) % n == 0), 0)
    if not extra:
        return {}
    opts = {"pp_account_embedding": True, "pp_account_loss": extra == 2}
    named = " and ".join(k for k, v in opts.items() if v)
    assumed.append(f"{named} (layers {layers} + {extra} = {layers + extra} divisible by pp*vpp = {n})")
    return opts


def _schedule(vpp: int | None, pp: int, stated: str | None) -> str | None:
    """The pipeline schedule a record states (its `pp_schedule` column, e.g. the Zero Bubble paper's zb-2p in
    bench/data/memory_runs.csv), else interleaved for vpp > 1; None = unset (completed)."""
    if pp > 1 and stated is not None:
        return stated
    if vpp is not None and vpp > 1:
        return "interleaved"
    return "1f1b" if pp == 1 or vpp == 1 else None


def arch_columns(model: ModelSpec) -> dict[str, Any]:
    """A model's architecture as run-record columns (what `_model_from_row` reads back)."""
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


def measured_tokens_per_s_per_gpu(row: Mapping[str, Any]) -> tuple[float | None, str]:
    """Measured tokens/s/GPU of a record and how it was obtained (as measured, from step time, from TFLOP/s
    under the source's FLOP convention); one implementation, shared with ingestion."""
    from autopar.calibration.throughput import measured_tokens_per_s_per_gpu as derive

    return derive(row)


PRED_COLUMNS = (
    "id",
    "status",
    "pred_tokens_per_s_per_gpu",
    "pred_step_s",
    "pred_tflops_per_gpu",
    "pred_hw_tflops_per_gpu",
    "pred_mfu",
    "pred_mem_gib_per_gpu",
    "pred_fits",
)


def estimate_row(row: Mapping[str, Any], strict: bool = False, keep: list | None = None) -> dict[str, Any]:
    """Evaluate one run record; status is 'ok' or the reason it can't be evaluated (never raises).
    `keep` (optional) gets (specs, estimate) appended, or None when the row cannot be evaluated."""
    rid = str(_cell(row, "id") or "")
    if keep is not None:
        keep.append(None)
    try:
        specs = row_to_specs(row)
        est = estimate(specs.model, specs.cluster, specs.workload, specs.strategy, strict=strict)
        if keep is not None:
            keep[-1] = (specs, est)
    except AutoparError as e:
        return {"id": rid, "status": f"error: {e}"}
    except (ValueError, TypeError) as e:  # pydantic validation of a spec built from the row
        msg = str(e).splitlines()
        return {"id": rid, "status": "error: " + "; ".join(x.strip() for x in msg[:3])}
    except Exception as e:  # noqa: BLE001 - one odd row must not stop a batch; say what happened
        return {"id": rid, "status": f"error: could not evaluate ({type(e).__name__}: {e})"}
    mem = measured_stage_memory(row, specs, est)
    out: dict[str, Any] = {
        "id": rid,
        "status": "ok",
        "pred_tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "pred_step_s": est.step_time_s,
        "pred_tflops_per_gpu": est.model_tflops_per_gpu,
        "pred_hw_tflops_per_gpu": est.hw_tflops_per_gpu,
        "pred_mfu": est.mfu,
        "pred_mem_gib_per_gpu": mem.total / GiB,
        "pred_fits": est.fits,
        "pred_headroom_gib": est.headroom_gib,
        # the whole peak of the most loaded GPU (what must fit) and the usable memory it must fit in; the
        # figure above is the one to compare with the measurement (its stage, counted as the source measured)
        "pred_peak_gib_per_gpu": est.memory.total / GiB,
        "usable_gib": est.headroom_gib + est.memory.total / GiB,
        "bottleneck": est.bottleneck,
    }
    for k, v in mem.as_dict().items():
        out[f"mem_{k}_gib"] = v / GiB
    for k, v in est.time.as_dict().items():
        out[f"time_{k}_s"] = v
    out["assumed"] = "; ".join([*specs.assumed, *est.assumed])
    out["strategy"] = (est.strategy or specs.strategy).label()
    return out


def measured_stage_memory(row: Mapping[str, Any], specs: RecordSpecs, est: Any) -> Any:
    """The memory breakdown to compare with the record's measured peak: the stage its `memory_stage` column
    names (first or last pipeline stage: Megatron-LM logs torch.cuda.memory_stats() on its tensorboard rank, the
    last global rank, on the last stage: megatron/training/global_vars.py `_set_tensorboard_writer`), else the
    estimate's peak over the stages; counted as the source measured it (`memory_metric`: perf/memory.py
    `as_measured`)."""
    stage = specs.knobs.memory_stage
    mem = est.memory
    if stage in ("first", "last") and specs.strategy.pp > 1:
        per_stage = stage_memories(specs.model, specs.cluster, specs.workload, est.strategy or specs.strategy)
        mem = per_stage[0] if stage == "first" else per_stage[-1]
    return as_measured(mem, specs.knobs.memory_metric)


def stage_estimate(row: Mapping[str, Any], specs: RecordSpecs, est: Any) -> Any:
    """`est` with its memory replaced by the stage the record's peak was measured on (measured_stage_memory),
    so that a memory calibration learns and predicts like for like; `est` itself when no stage is stated."""
    import dataclasses

    mem = measured_stage_memory(row, specs, est)
    return est if mem is est.memory else dataclasses.replace(est, memory=mem)


def row_ids(df: pd.DataFrame) -> list[str]:
    """Each row's id as estimate_row reports it ('' when missing)."""
    if "id" not in df.columns:
        return [""] * len(df)
    return [str(_cell({"id": v}, "id") or "") for v in df["id"]]


def unique_rows(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, index of the first row of each code): rows equal in every column but `id` share
    a code. A record's prediction depends on its cells and not its id, so a batch evaluates each distinct
    configuration once (a sweep file repeats model/GPU/cluster cells; exact equality, NaN equal to NaN)."""
    cols = [c for c in df.columns if c != "id"]
    if not cols or len(df) == 0:
        return np.arange(len(df)), np.arange(len(df))
    try:
        codes = df.groupby(cols, dropna=False, sort=False).ngroup().to_numpy()
    except TypeError:  # an unhashable cell (a list from JSONL): evaluate every row
        return np.arange(len(df)), np.arange(len(df))
    _, first = np.unique(codes, return_index=True)
    return codes, first


def distinct_records(df: pd.DataFrame) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """(each row's configuration code, the distinct configurations as records), in unique_rows' order."""
    codes, first = unique_rows(df)
    return codes, df.iloc[first].to_dict(orient="records")


def batch_estimate(
    df: pd.DataFrame, strict: bool = False, keep: list | None = None, distinct: tuple | None = None
) -> pd.DataFrame:
    """Evaluate every row of a run-record table; bad rows get status='error: ...' and the rest still run.
    Rows repeating a configuration (all cells but the id equal) are evaluated once; `keep` (optional)
    gets each distinct configuration's (specs, estimate) or None, in the order of unique_rows;
    `distinct` = (codes, distinct records) when the caller has them already (distinct_records)."""
    import pandas as pd

    from autopar.perf.complete import shared_candidates

    codes, uniq = distinct if distinct is not None else distinct_records(df)
    with shared_candidates():  # rows repeating a run with other knobs share their completions' candidates
        rows = [estimate_row(r, strict=strict, keep=keep) for r in uniq]
    out = pd.DataFrame(rows)
    for col in PRED_COLUMNS:
        if col not in out.columns:
            out[col] = None
    first_cols = list(PRED_COLUMNS)
    out = out[first_cols + [c for c in out.columns if c not in first_cols]]
    out = out.iloc[codes].reset_index(drop=True)
    out["id"] = row_ids(df)
    return out
