"""Software-stack profiles as named, cited data: what each training framework does that changes kernel time.

The numbers and their citations live in autopar/data/software.yaml (one entry per stack of
autopar.knobs.FRAMEWORKS), read once and validated into `SoftwareProfile`, as the GPU families' efficiency
table is (autopar/perf/efficiency.py, autopar/data/efficiency.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from autopar.errors import DataError
from autopar.knobs import FRAMEWORKS as FRAMEWORKS


@dataclass(frozen=True, slots=True)
class SoftwareProfile:
    """What a training framework does that changes kernel time: fusion, attention kernel, recompute, ZeRO-3
    (the fields are described in autopar/data/software.yaml)."""

    name: str
    flash_attention: bool
    fused_attention: bool
    elementwise_passes: float
    selective_gemm_fraction: float
    zero3_collectives_per_layer: int
    zero3_overlap: float
    loss_bytes_per_logit: float
    zero3_grad_bytes: float
    tp_overlap_hidden: float
    grad_accum_bytes: float
    description: str
    torch_cp: bool = False
    torch_cp_repeats_kv: bool = False
    pp_defers_grad_sync: bool = False
    sp_saves_gathered_inputs: bool = False
    moe_eager_clamp_bias: bool = False
    moe_router_bytes_per_expert: float = 4.0
    zero3_reduces_main_grads: bool = False
    pp_syncs_after_flush: bool = False
    source: str = ""


SOFTWARE_FILE = Path(__file__).resolve().parent.parent / "data" / "software.yaml"
_FIELDS = {f.name: f.type for f in fields(SoftwareProfile) if f.name != "name"}
_FRACTIONS = frozenset({"selective_gemm_fraction", "zero3_overlap", "tp_overlap_hidden"})
_NON_NEGATIVE = frozenset({"grad_accum_bytes"})  # 0 is a value: no pass (fused accumulation)


def _field_value(where: str, key: str, v: object) -> object:
    """One field's value, checked by its type: text non-empty, flags true/false, the collective count a
    positive integer, shares in [0, 1], byte counts that may be zero non-negative, the other numbers positive."""
    kind = _FIELDS[key]
    if kind == "str":
        if isinstance(v, str) and v.strip():
            return v
        raise DataError(f"{where}: field '{key}' must be a non-empty string, got {v!r}")
    if kind == "bool":
        if isinstance(v, bool):
            return v
        raise DataError(f"{where}: field '{key}' must be true or false, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise DataError(f"{where}: field '{key}' must be a number, got {v!r}")
    if kind == "int":
        if not isinstance(v, int) or v < 1:
            raise DataError(f"{where}: field '{key}' must be a positive integer, got {v!r}")
        return v
    if key in _FRACTIONS:
        if not 0 <= v <= 1:
            raise DataError(f"{where}: field '{key}' must be a share in [0, 1], got {v!r}")
    elif key in _NON_NEGATIVE:
        if v < 0:
            raise DataError(f"{where}: field '{key}' must be zero or positive, got {v!r}")
    elif v <= 0:
        raise DataError(f"{where}: field '{key}' must be positive, got {v!r}")
    return float(v)


def _profile(where: str, name: str, raw: object) -> SoftwareProfile:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a mapping of fields, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        raise DataError(f"{where}: unknown field '{unknown[0]}' (allowed: {', '.join(_FIELDS)})")
    missing = [k for k in _FIELDS if k not in raw]
    if missing:
        raise DataError(f"{where}: missing field '{missing[0]}' (every field is required)")
    values: dict[str, Any] = {str(k): _field_value(where, str(k), v) for k, v in raw.items()}
    return SoftwareProfile(name, **values)


def parse_software(doc: object, name: str) -> dict[str, SoftwareProfile]:
    """framework -> SoftwareProfile from a parsed software.yaml document (`name` prefixes every error); the
    stacks are exactly knobs.FRAMEWORKS."""
    raw = doc.get("stacks") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(raw, dict) or not raw:
        raise DataError(f"{name}: expected a top-level 'stacks:' mapping")
    extra = sorted(str(k) for k in doc if k != "stacks")
    if extra:
        raise DataError(f"{name}: unknown top-level key '{extra[0]}' (allowed: stacks)")
    unknown = [str(k) for k in raw if k not in FRAMEWORKS]
    if unknown:
        raise DataError(f"{name}: unknown stack '{unknown[0]}' (the stacks are {', '.join(FRAMEWORKS)})")
    lacking = [fw for fw in FRAMEWORKS if fw not in raw]
    if lacking:
        raise DataError(f"{name}: missing stack '{lacking[0]}' (every stack of {', '.join(FRAMEWORKS)})")
    return {fw: _profile(f"{name}: stack '{fw}'", fw, raw[fw]) for fw in FRAMEWORKS}


@cache
def _profiles() -> dict[str, SoftwareProfile]:
    """The built-in stack profiles, read and validated once per process (libyaml's loader, as the catalog)."""
    import yaml

    from autopar.catalog.loader import SAFE_LOADER

    try:
        doc = yaml.load(SOFTWARE_FILE.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise DataError(f"{SOFTWARE_FILE.name}: not valid YAML ({e})") from None
    return parse_software(doc, SOFTWARE_FILE.name)


def software_for(framework: str) -> SoftwareProfile:
    """Software profile of a training framework (one of FRAMEWORKS)."""
    return _profiles()[framework]


@cache
def stack_profile(framework: str, attention_kernel: str = "") -> SoftwareProfile:
    """The stack's profile with what a workload states about it: an attention kernel other than the stack's
    (Workload.attention_kernel: unfused keeps the s x s scores, cudnn is the fused kernel, flash
    FlashAttention). torch.compile (Workload.torch_compile) changes what a layer keeps (perf/layers.py
    EAGER_GLU_KEEPS_ACTIVATION), not the profile: the stacks' elementwise_passes were fitted on runs that mostly
    compiled (torchtitan's benchmarks), and fusing them to one pass made those runs' predictions x1.16 fast."""
    import dataclasses

    sw = software_for(framework)
    if attention_kernel:
        sw = dataclasses.replace(
            sw, flash_attention=attention_kernel != "unfused", fused_attention=attention_kernel == "cudnn"
        )
    return sw
