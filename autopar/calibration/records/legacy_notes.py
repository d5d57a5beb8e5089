"""Older record files said some stack knobs in their free-text notes; this moves them into their columns.

Run records state knobs in columns (stack_columns.py); the notes are prose and are never read for a knob
when a record is estimated. Files written before issue 44 carried a few memory knobs in the notes ("stage=last",
"dropout 0.1", "--untie-embeddings-and-output-weights", "pp_schedule=zb-2p", "attention unfused"). `upgrade`
fills each empty column from what the notes state (idempotent: a filled column is never touched), and
`notes_only_knobs` names what a row's notes state that its columns do not, so that reading such a file is a
one-line error pointing at `autopar calibrate upgrade` instead of a knob silently lost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# Megatron-LM's own defaults (megatron/training/arguments.py: --hidden-dropout 0.1, --attention-dropout 0.1),
# which GPT-era scripts keep: notes that state a nonzero dropout ("dropout 0.1", "attention_dropout=0.1").
_DROPOUT = re.compile(r"dropout[ =:]+0?\.0*[1-9]")
# Megatron-LM's flag for separate input embedding and output layer weights, quoted in notes.
_UNTIED = re.compile(r"untie[-_ ]embeddings[-_ ]and[-_ ]output[-_ ]weights")
# The pipeline stage a memory figure was logged on ("stage=last").
_STAGE = re.compile(r"\bstage\s*=\s*(first|last)\b")
# A schedule named explicitly ("pp_schedule=zb-2p").
_SCHEDULE = re.compile(r"pp_schedule=([a-z0-9-]+)")
# The unfused attention softmax, named in the framework text or the notes ("attention unfused").
_UNFUSED = re.compile(r"\bunfused attention\b|\battention unfused\b")
# What the memory figure is, where notes quote the allocator statistic.
_ALLOCATED = re.compile(r"allocated_bytes\.all\.peak|max_memory_allocated|allocated vs reserved: allocated")
_RESERVED = re.compile(r"reserved_bytes\.all\.peak|max_memory_reserved|allocated vs reserved: reserved")


def _text(row: Mapping[str, Any], key: str) -> str:
    v = row.get(key)
    return "" if v is None or (isinstance(v, float) and v != v) else str(v).lower()


def _schedule(row: Mapping[str, Any]) -> str | None:
    """pp_schedule=NAME, else (with PP) the words "interleaved" or "1f1b", as the notes were read before."""
    from autopar.knobs import SCHEDULE_NAMES
    from autopar.layouts import Axis

    notes, pp = _text(row, "notes"), _text(row, Axis.PP.value).removesuffix(".0")
    piped = pp.isdigit() and int(pp) > 1
    m = _SCHEDULE.search(notes)
    if piped and m and m.group(1) in SCHEDULE_NAMES:
        return m.group(1)
    vpp = _text(row, Axis.VPP.value).removesuffix(".0")
    if vpp.isdigit() and int(vpp) > 1:  # interleaved by its virtual stages: the words did not count
        return None
    if piped and "interleaved" in notes:
        return "interleaved"
    return "1f1b" if piped and "1f1b" in notes else None


def _metric(row: Mapping[str, Any]) -> str | None:
    notes = _text(row, "notes")
    if _ALLOCATED.search(notes):
        return "max_memory_allocated"
    return "max_memory_reserved" if _RESERVED.search(notes) else None


def _attention(row: Mapping[str, Any]) -> str | None:
    said = _UNFUSED.search(_text(row, "framework")) or _UNFUSED.search(_text(row, "notes"))
    return "unfused" if said else None


def _stage(row: Mapping[str, Any]) -> str | None:
    m = _STAGE.search(_text(row, "notes"))
    return m.group(1) if m else None


# column -> what the notes state for it (None: nothing)
LEGACY_READERS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    "dropout": lambda r: "true" if _DROPOUT.search(_text(r, "notes")) else None,
    "tied_embeddings": lambda r: "false" if _UNTIED.search(_text(r, "notes")) else None,
    "memory_stage": _stage,
    "pp_schedule": _schedule,
    "attention_kernel": _attention,
    "memory_metric": _metric,
}


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and not v.strip())


def notes_only_knobs(row: Mapping[str, Any]) -> dict[str, str]:
    """{column: value} the row's notes state while the column is empty."""
    out: dict[str, str] = {}
    for col, read in LEGACY_READERS.items():
        if _empty(row.get(col)) and (value := read(row)) is not None:
            out[col] = value
    return out


def upgrade(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the table with every notes-only knob moved into its column, the number of cells filled); the stack
    columns are added after `notes` where missing. Idempotent."""
    from autopar.calibration.records.stack_columns import STACK_COLUMNS

    out = df.copy()
    for col in dict.fromkeys([*STACK_COLUMNS, *LEGACY_READERS]):
        out[col] = out[col].astype(object) if col in out.columns else ""
    filled = 0
    for i, row in enumerate(out.to_dict("records")):
        for col, value in notes_only_knobs({str(k): v for k, v in row.items()}).items():
            out.at[out.index[i], col] = value
            filled += 1
    return out, filled


# ------------------------------------------------------------------ throughput-side knobs older notes stated
def _squeezed(row: Mapping[str, Any], key: str) -> str:
    """A cell lower-cased without spaces, '-' and '_' (how the markers below are compared)."""
    return _text(row, key).replace(" ", "").replace("-", "").replace("_", "")


# Notes that say the run overlapped TP communication; what may follow or precede a marker to say the option
# was off or is unknown ("TP comm overlap not stated", "tp_comm_overlap=False", "no async TP").
_TP_OVERLAP_MARKERS = ("asynctp", "tpcommoverlap")
_NEGATED_AFTER = re.compile(r"(notstated|unstated|unknown|=false|=0|off(?!load)|disabled|\(no\)|:no)")
_STATED_OFF_AFTER = re.compile(r"(=false|=0|off(?!load)|disabled|\(no\)|:no)")
_NEGATED_BEFORE = ("no", "without", "notusing", "disabled")


def _mentions(notes: str, markers: tuple[str, ...], after_rx: re.Pattern[str], want_off: bool) -> bool:
    for k in markers:
        for m in re.finditer(re.escape(k), notes):
            after, before = notes[m.end() : m.end() + 12], notes[max(0, m.start() - 9) : m.start()]
            negated = bool(after_rx.match(after)) or before.endswith(_NEGATED_BEFORE)
            if negated == want_off:
                return True
    return False


def mentions_on(notes: str, markers: tuple[str, ...]) -> bool:
    """Whether squeezed notes name one of `markers` as used (a negated mention does not count)."""
    return _mentions(notes, markers, _NEGATED_AFTER, want_off=False)


def mentions_off(notes: str, markers: tuple[str, ...]) -> bool:
    """Whether squeezed notes state one of `markers` as off ("not stated" and "unknown" do not count)."""
    return _mentions(notes, markers, _STATED_OFF_AFTER, want_off=True)


def _tp_overlap(row: Mapping[str, Any]) -> str | None:
    notes = _squeezed(row, "notes")
    if mentions_on(notes, _TP_OVERLAP_MARKERS):
        return "true"
    return "false" if mentions_off(notes, _TP_OVERLAP_MARKERS) else None


# FP8 recipe, forced routing balance, a deduplicating EP dispatcher (DeepEP / HybridEP: Megatron's flex path),
# DeepSpeed's BF16 optimizer, torchtitan's compiled loss, LoRA (perf/fp8.py, perf/moe.py, perf/estimate.py,
# perf/finetune.py), where a record's notes (or framework / source cells) named them.
_RECIPE_MARKERS = (("mxfp8", "mxfp8"), ("fp8mx", "mxfp8"), ("rowwise", "rowwise"), ("fp8cs", "current"))
_BALANCE_MARKERS = ("forcebalance", "forcedbalance", "forceloadbalancing")
_FLEX_MARKERS = ("deepep", "hybridep", "flexdispatcher")
_BF16_OPTIMIZER_MARKERS = ("bf16optimizer",)
_COMPILED_LOSS_MARKERS = ("losscompiled", "compiledloss")
_LORA_MARKERS = ("loraperformance", "lorafinetun", "finetuning(lora)", "peft=lora")


def _fp8_recipe(row: Mapping[str, Any]) -> str | None:
    if not _text(row, "precision").strip().startswith("fp8"):
        return None
    notes = _squeezed(row, "notes")
    return next((r for k, r in _RECIPE_MARKERS if k in notes), None)


def _dispatcher(row: Mapping[str, Any]) -> str | None:
    flex = mentions_on(_squeezed(row, "notes"), _FLEX_MARKERS)
    return "flex" if flex or any(k in _squeezed(row, "framework") for k in _FLEX_MARKERS) else None


def _bf16_optimizer(row: Mapping[str, Any]) -> str | None:
    where = _squeezed(row, "notes") + _squeezed(row, "framework")
    bf16 = _text(row, "precision").strip() == "bf16"  # an fp16 row never ran it, whatever its notes say
    return "true" if bf16 and any(k in where for k in _BF16_OPTIMIZER_MARKERS) else None


def _compiled_loss(row: Mapping[str, Any]) -> str | None:
    said = any(k in _squeezed(row, "notes") for k in _COMPILED_LOSS_MARKERS)
    return "true" if said and "torchtitan" in _squeezed(row, "framework") else None


def _lora(row: Mapping[str, Any]) -> str | None:
    where = _squeezed(row, "notes") + _text(row, "source_ref").replace(" ", "")
    return "lora" if any(k in where for k in _LORA_MARKERS) else None


# Options quoted from a Megatron-Bridge preset (scripts/performance/utils set_workload_base_configs):
# `moe_a2a_overlap=True|False` and `cuda_graph_impl=...` (only `full_iteration` captures the whole step).
_EP_OVERLAP_NOTE = re.compile(r"moea2aoverlap=(true|false)")
_CUDA_GRAPH_NOTE = re.compile(r"cudagraphimpl=([a-z]+)")


def _ep_overlap(row: Mapping[str, Any]) -> str | None:
    m = _EP_OVERLAP_NOTE.search(_squeezed(row, "notes"))
    return m.group(1) if m else None


def _cuda_graphs(row: Mapping[str, Any]) -> str | None:
    m = _CUDA_GRAPH_NOTE.search(_squeezed(row, "notes"))
    return None if m is None else str(m.group(1) == "fulliteration").lower()


# Megatron's selective recompute modules a preset states ("selective recompute_modules mla_up_proj+mlp").
_RECOMPUTE_MODULES_NOTE = re.compile(r"selective\s+recompute_modules\s+([a-z_]+(?:\+[a-z_]+)*)")


def _recompute(row: Mapping[str, Any]) -> str | None:
    """The recompute mode of the modules the notes name (None: none named, or a set autopar does not model)."""
    from autopar.knobs import recompute_of_modules

    m = _RECOMPUTE_MODULES_NOTE.search(_text(row, "notes"))
    if not m or m.group(1) == "none":
        return None
    try:
        return recompute_of_modules(m.group(1).split("+"))
    except ValueError:
        return None


_ACT_OFFLOAD_NOTE = re.compile(r"cpu[_-]?offloading[_-]?num[_-]?layers\s*[=:]\s*(\d+)")
_TRANSPORT_NOTE = re.compile(r"\btransport\s*[=:]\s*([a-z]+)")


def _regex_reader(rx: re.Pattern[str]) -> Callable[[Mapping[str, Any]], str | None]:
    def read(row: Mapping[str, Any]) -> str | None:
        m = rx.search(_text(row, "notes"))
        return m.group(1) if m else None

    return read


LEGACY_READERS.update(
    {
        "tp_comm_overlap": _tp_overlap,
        "fp8_recipe": _fp8_recipe,
        "moe_imbalance": lambda r: "1.0" if mentions_on(_squeezed(r, "notes"), _BALANCE_MARKERS) else None,
        "moe_dispatcher": _dispatcher,
        "bf16_optimizer": _bf16_optimizer,
        "compiled_loss": _compiled_loss,
        "moe_ep_overlap": _ep_overlap,
        "cuda_graphs": _cuda_graphs,
        "recompute": _recompute,
        "finetune": _lora,
        "cpu_offloading_num_layers": _regex_reader(_ACT_OFFLOAD_NOTE),
        "transport": _regex_reader(_TRANSPORT_NOTE),
    }
)
