"""Measured tokens/s per GPU of a run record: as measured, from step time, or from TFLOP/s.

TFLOP/s figures are converted under the source's FLOP-counting convention (`tflops_definition`),
with the model's layers/hidden/vocab/params taken from the row or from the catalog model it names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from autopar.calibration.records.cells import as_number, blank_to_none, catalog_lookup
from autopar.perf.params import count_params

TFLOPS_DEFINITIONS = ("megatron_hfu", "megatron_mfu", "6n", "palm")


def tflops_definition(record: Mapping[str, Any]) -> str | None:
    """The FLOP convention of measured_tflops_per_gpu: the column, or 'flops_def=eq.3' in notes."""
    d = blank_to_none(record.get("tflops_definition"))
    if d:
        return str(d).lower()
    notes = str(record.get("notes") or "")
    if re.search(r"flops_def\s*=\s*eq\.?\s*3\b", notes):
        return "megatron_hfu"  # Narayanan et al. 2021 eq. 3, recompute forward included
    return None


def _arch(record: Mapping[str, Any]) -> tuple[float, float, float, float] | None:
    """(layers, hidden, vocab, params) from the row, or from the catalog model it names."""
    vals = [as_number(blank_to_none(record.get(c))) for c in ("layers", "hidden", "vocab")]
    params = as_number(blank_to_none(record.get("params_b")))
    if all(isinstance(v, int | float) for v in vals):
        n = float(params) * 1e9 if isinstance(params, int | float) else math.nan
        return float(vals[0]), float(vals[1]), float(vals[2]), n
    if record.get("model"):
        spec, _ = catalog_lookup("model", str(record["model"]))
        if spec is not None:
            return float(spec.layers), float(spec.hidden), float(spec.vocab), float(count_params(spec).total)
    return None


def flops_per_token(record: Mapping[str, Any], definition: str) -> float | None:
    """FLOPs counted per trained token under a source's convention (for TFLOP/s -> tokens/s).

    megatron_hfu: Narayanan et al. 2021 eq. 3, 96·l·h²·(1 + s/6h + V/16lh) (recompute included);
    megatron_mfu: Korthikanti et al. 2022, 72·l·h²·(1 + s/6h + V/12lh) (no recompute);
    6n: 6·N; palm: 6·N + 12·l·h·s (PaLM appendix B). N = params_b·1e9.
    """
    a = _arch(record)
    s = float(record.get("seq_len") or 0)
    if a is None or s <= 0:
        return None
    nl, h, v, n = a
    if definition == "megatron_hfu":
        return 96 * nl * h * h * (1 + s / (6 * h) + v / (16 * nl * h))
    if definition == "megatron_mfu":
        return 72 * nl * h * h * (1 + s / (6 * h) + v / (12 * nl * h))
    if math.isnan(n):
        return None
    if definition == "6n":
        return 6 * n
    if definition == "palm":
        return 6 * n + 12 * nl * h * s
    return None


def measured_tokens_per_s_per_gpu(record: Mapping[str, Any]) -> tuple[float | None, str]:
    """Measured tokens/s per GPU and how it was obtained: as measured, from step time, or from TFLOP/s."""
    tps = as_number(blank_to_none(record.get("measured_tokens_per_s_per_gpu")))
    if isinstance(tps, int | float) and tps > 0:
        return float(tps), "measured"
    step = as_number(blank_to_none(record.get("measured_step_s")))
    gb, s, n = (as_number(blank_to_none(record.get(k))) for k in ("global_batch", "seq_len", "num_gpus"))
    if isinstance(step, int | float) and step > 0 and all(isinstance(x, int | float) for x in (gb, s, n)):
        return float(gb) * float(s) / float(step) / float(n), "step time"
    tf = as_number(blank_to_none(record.get("measured_tflops_per_gpu")))
    d = tflops_definition(record)
    if isinstance(tf, int | float) and tf > 0 and d:
        fpt = flops_per_token(record, d)
        if fpt:
            return float(tf) * 1e12 / fpt, f"TFLOP/s ({d})"
    return None, "none"
