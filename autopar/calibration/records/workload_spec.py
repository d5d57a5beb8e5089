"""The workload a run record describes: its stack (profiled framework or unprofiled stack), precision,
main-gradient dtype, TP comm overlap, MoE routing and FP8 recipe, and the stack knobs of its columns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from autopar.calibration.records.cells import bool_cell, cell, float_cell, positive_cell
from autopar.calibration.records.legacy_notes import notes_only_knobs
from autopar.calibration.records.stack_columns import StackKnobs
from autopar.errors import DataError, close_hint
from autopar.knobs import (
    OPTIMIZERS,
    SURROGATE_PROFILE,
    UNPROFILED_MARKERS,
)
from autopar.specs import GRAD_REDUCE_DTYPES, Workload
from autopar.text import excerpt


def _nemo_tp_overlap(row: Mapping[str, Any]) -> bool:
    """A NeMo / Megatron-Bridge performance run with TP > 1 whose record is silent on TP comm overlap."""
    fw = str(cell(row, "framework") or "").lower()
    tp = positive_cell(row, "tp") or 1
    return tp > 1 and ("nemo" in fw or "megatron-bridge" in fw) and bool_cell(row, "sp") is not False


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
    """The record's `grad_reduce_dtype` column (a Megatron log's argument dump fills it: ingest/log_config.py); else bf16
    where the performance summary's launch config states it (above); else fp32."""
    stated = cell(row, "grad_reduce_dtype")
    if stated is not None:
        value = str(stated).strip().lower()
        if value not in GRAD_REDUCE_DTYPES:
            hint = close_hint(value, GRAD_REDUCE_DTYPES)
            raise DataError(
                f"column 'grad_reduce_dtype' = {excerpt(str(stated))!r}: expected one of "
                f"{', '.join(GRAD_REDUCE_DTYPES)}{hint}"
            )
        return {"grad_reduce_dtype": value}
    fw = str(cell(row, "framework") or "").lower()
    if "perf_summary" not in str(cell(row, "source") or "").lower():
        return {"grad_reduce_dtype": _RECORD_GRAD_DTYPE}
    m = _NEMO_RELEASE.search(fw)
    release = (int(m.group(1)), int(m.group(2))) if m else None
    if "megatron-bridge" in fw and release is not None and release >= _MBRIDGE_BF16_FROM:
        why = "Megatron-Bridge performance configs"
    elif "megatron-bridge" in fw:
        return {"grad_reduce_dtype": _RECORD_GRAD_DTYPE}
    elif release is not None and release >= _NEMO_BF16_FROM:
        why = "NeMo 2 performance recipes"
    elif release is not None and str(cell(row, "model") or "").lower() in _NEMO_LAUNCHER_BF16.get(
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
        v = cell(row, col)
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
        return bool_cell({col: v}, col)
    if kind is float:
        return float_cell({col: v}, col)
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
    return {k: bool(bool_cell(row, k)) for k in ("moe_ep_overlap", "cuda_graphs") if cell(row, k) is not None}


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


def _precision(row: Mapping[str, Any], assumed: list[str]) -> str:
    """bf16 (fp16, mixed and amp computed as bf16: same tensor-core peak) or fp8."""
    prec = str(cell(row, "precision") or "bf16").lower()
    if prec in ("fp16", "bf16", "mixed", "amp"):
        if prec != "bf16":
            assumed.append(f"precision {prec} computed as bf16 (same tensor-core peak)")
        return "bf16"
    if prec.startswith("fp8"):
        return "fp8"
    raise DataError(f"column 'precision' = {prec!r}: expected bf16, fp16 or fp8")


def _tp_overlap(row: Mapping[str, Any], assumed: list[str]) -> bool:
    """The `tp_comm_overlap` cell, else NeMo's recipes' default."""
    overlap = bool_cell(row, "tp_comm_overlap")
    if overlap is not None:
        return overlap
    if _nemo_tp_overlap(row):  # moe engineer (issue 11 item 6)
        assumed.append("tp_comm_overlap=true (NeMo performance recipes enable it when TP > 1)")
        return True
    return False


def workload_from_row(row: Mapping[str, Any], knobs: StackKnobs, assumed: list[str]) -> Workload:
    seq = positive_cell(row, "seq_len")
    gbs = positive_cell(row, "global_batch")
    if not seq or not gbs:
        raise DataError("columns 'seq_len' and 'global_batch' are required")
    prec = _precision(row, assumed)
    return Workload(
        seq_len=seq,
        global_batch=gbs,
        precision=prec,
        tp_comm_overlap=_tp_overlap(row, assumed),
        **stack_of(cell(row, "framework"), assumed),
        **_routing_and_recipe(row, prec, assumed),  # moe engineer (issue 11): stated FP8 recipe / balance
        **_grad_reduce_dtype(row, assumed),
        **_stack_knob_fields(knobs, row),
    )


def _stack_knob_fields(knobs: StackKnobs, row: Mapping[str, Any]) -> dict[str, Any]:
    """Workload fields of the record's stack columns (absent when the source is silent: the stack's default),
    and its `optimizer` column (knobs.OPTIMIZERS)."""
    out: dict[str, Any] = {}
    opt = cell(row, "optimizer")
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
