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
    from autopar.calibration.stack_columns import STACK_COLUMNS

    out = df.copy()
    for col in STACK_COLUMNS:
        out[col] = out[col].astype(object) if col in out.columns else ""
    filled = 0
    for i, row in enumerate(out.to_dict("records")):
        for col, value in notes_only_knobs({str(k): v for k, v in row.items()}).items():
            out.at[out.index[i], col] = value
            filled += 1
    return out, filled
