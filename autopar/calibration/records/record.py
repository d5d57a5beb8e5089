"""The run record: one measured training run as read from a file (`RunRecord`: types and ranges of
every schema column), as a plain dict (`normalize_record`), and its fingerprint, the store's dedup key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from autopar.calibration.records.cells import as_number, blank_to_none
from autopar.calibration.records.columns import RECORD_COLUMNS
from autopar.knobs import Recompute

# Labels that name a record but are not part of what was run or measured (left out of the fingerprint).
LABEL_COLUMNS = frozenset({"id", "source", "source_ref", "notes"})


class RunRecord(BaseModel):
    """One run record as read from a file: types and ranges of every schema column."""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=True, allow_inf_nan=False)

    id: str | None = None
    source: str | None = None
    source_ref: str | None = None
    model: str | None = None
    arch: str | None = None
    params_b: float | None = Field(default=None, gt=0)
    active_params_b: float | None = Field(default=None, gt=0)
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    ffn_hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    seq_len: int = Field(gt=0)
    experts: int | None = Field(default=None, ge=0)
    topk: int | None = Field(default=None, ge=0)
    shared_experts: int | None = Field(default=None, ge=0)
    moe_ffn_hidden: int | None = Field(default=None, gt=0)
    gpu: str
    num_gpus: int = Field(gt=0)
    gpus_per_node: int | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, gt=0)
    pp: int | None = Field(default=None, gt=0)
    dp: int | None = Field(default=None, gt=0)
    cp: int | None = Field(default=None, gt=0)
    ep: int | None = Field(default=None, gt=0)
    etp: int | None = Field(default=None, gt=0)
    vpp: int | None = Field(default=None, gt=0)
    sp: bool | None = None
    zero: int | None = Field(default=None, ge=0, le=3)
    recompute: Recompute | None = None
    micro_batch: int | None = Field(default=None, gt=0)
    global_batch: int = Field(gt=0)
    precision: Literal["bf16", "fp16", "fp8", "fp32"] | None = None
    framework: str | None = None
    measured_tflops_per_gpu: float | None = Field(default=None, gt=0)
    measured_mfu: float | None = Field(default=None, gt=0, le=1, description="a fraction: 0.44 = 44%")
    measured_tokens_per_s_per_gpu: float | None = Field(default=None, gt=0)
    measured_step_s: float | None = Field(default=None, gt=0)
    measured_mem_gb_per_gpu: float | None = Field(default=None, gt=0)
    notes: str | None = None
    tflops_definition: Literal["megatron_hfu", "megatron_mfu", "6n", "palm"] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _clean(cls, v: Any, info: ValidationInfo) -> Any:
        """Blank cells to None, numeric text to numbers, enum text to lower case."""
        name = info.field_name
        if name == "recompute" and isinstance(v, str) and v.strip().lower() == "none":
            return "none"  # a recompute mode (no recomputation), not a blank cell
        v = blank_to_none(v)
        if name in _LOWER_FIELDS:
            return v.lower() if isinstance(v, str) else v
        if name not in _TEXT_FIELDS:
            return as_number(v)
        return v


_TEXT_FIELDS = frozenset(
    {
        "id",
        "source",
        "source_ref",
        "model",
        "arch",
        "gpu",
        "framework",
        "notes",
        "recompute",
        "precision",
        "tflops_definition",
    }
)


_LOWER_FIELDS = frozenset({"recompute", "precision", "arch", "tflops_definition"})


def normalize_record(r: RunRecord) -> dict[str, Any]:
    """A validated row as a plain dict: every schema column (None where empty) then the extras."""
    d = r.model_dump()
    out: dict[str, Any] = {c: d.get(c) for c in RECORD_COLUMNS}
    if d.get("sp") is not None:
        out["sp"] = int(d["sp"])
    for k, v in d.items():
        if k not in out:
            v = as_number(blank_to_none(v))
            if v is not None:
                out[k] = v
    return out


# ------------------------------------------------------------------------------------ fingerprint
def _canon(v: Any) -> Any:
    """A value in canonical form: integral floats as ints, other floats to 9 significant digits."""
    v = as_number(v)
    if isinstance(v, float):
        return float(f"{v:.9g}")
    return v


def fingerprint(record: Mapping[str, Any]) -> str:
    """sha256 of the canonical config + measurement (labels id/source/notes left out): the dedup key."""
    body = {
        k: _canon(v) for k, v in record.items() if k not in LABEL_COLUMNS and blank_to_none(v) is not None
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
