"""Kernel and link efficiency as data, per GPU family (Calculon's model/system/efficiency split).

Each number is a physical property of a GPU generation and its software stack, anchored to a
published measurement (formulas.md §6 and §4.1); none is fitted to one source or one run. The numbers and
their citations live in autopar/data/efficiency.yaml, read once and validated into `Efficiency`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache
from pathlib import Path

from autopar.errors import DataError
from autopar.perf.fp8 import BF16_K_DEPTH, FP8_K_DEPTH


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achievable fractions of peak for one GPU family."""

    gemm_max: float  # best-shape BF16 GEMM / dense peak (MAMF)
    gemm_max_fp8: float  # best-shape FP8 GEMM / FP8 dense peak
    attn_fwd: float  # FlashAttention-2-class forward / BF16 peak at long sequences
    attn_bwd: float  # FlashAttention-2-class backward / BF16 peak
    attn_fwd_fused: float  # vendor-fused attention (cuDNN / FA3-class on Hopper+) forward
    attn_bwd_fused: float
    hbm: float  # achievable / nominal HBM bandwidth for memory-bound kernels
    scaleup: float  # NCCL bus bandwidth / NVLink per-direction rate
    scaleout: float  # NCCL bus bandwidth / NIC rate
    scaleup_latency_s: float  # per ring/tree step (NCCL simple protocol)
    scaleout_latency_s: float
    kernel_overhead_s: float  # launch + tail per GEMM-sized kernel
    tile: int  # GEMM tile edge for wave-quantisation
    sms: int  # streaming multiprocessors (wave size in tiles)
    source: str


# The per-family numbers, their anchors and citations: autopar/data/efficiency.yaml.
EFFICIENCY_FILE = Path(__file__).resolve().parent.parent / "data" / "efficiency.yaml"
_DEFAULT = "hopper"  # the profile of families the file does not name (efficiency_for)
_FIELDS = {f.name: f.type for f in fields(Efficiency)}
_INT_FIELDS = frozenset(k for k, t in _FIELDS.items() if t == "int")


def _field_value(where: str, key: str, v: object) -> float | int | str:
    """One field's value, checked: a string for `source`, an integer for tile/sms, seconds (`*_s`) > 0, and
    fractions of peak in (0, 1] for the rest."""
    if key == "source":
        if isinstance(v, str) and v.strip():
            return v
        raise DataError(f"{where}: field 'source' must be a non-empty string, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DataError(f"{where}: field '{key}' must be a number, got {v!r}")
    if key in _INT_FIELDS:
        if not isinstance(v, int):
            raise DataError(f"{where}: field '{key}' must be an integer, got {v!r}")
        return v
    if key.endswith("_s"):  # seconds
        if not math.isfinite(v) or v <= 0:
            raise DataError(f"{where}: field '{key}' must be a positive number of seconds, got {v!r}")
    elif not 0 < v <= 1:  # a fraction of peak
        raise DataError(f"{where}: field '{key}' must be a fraction of peak in (0, 1], got {v!r}")
    return float(v)


def _family(where: str, raw: object, base: Efficiency | None) -> Efficiency:
    """One family's Efficiency: every field given, or those of `base` (its `inherits:`) overridden."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a mapping of fields, got {raw!r}")
    given = {k: v for k, v in raw.items() if k != "inherits"}
    unknown = sorted(str(k) for k in given if k not in _FIELDS)
    if unknown:
        raise DataError(f"{where}: unknown field '{unknown[0]}' (allowed: {', '.join(_FIELDS)}, inherits)")
    values = {k: _field_value(where, k, v) for k, v in given.items()}
    if base is not None:
        return replace(base, **values)
    missing = [k for k in _FIELDS if k not in values]
    if missing:
        raise DataError(
            f"{where}: missing field '{missing[0]}' (every field is required without `inherits:`)"
        )
    return Efficiency(**values)


def parse_efficiency(doc: object, name: str) -> dict[str, Efficiency]:
    """family -> Efficiency from a parsed efficiency.yaml document (`name` prefixes every error)."""
    raw = doc.get("families") if isinstance(doc, dict) else None
    if not isinstance(raw, dict) or not raw:
        raise DataError(f"{name}: expected a top-level 'families:' mapping")
    extra = sorted(str(k) for k in doc if k != "families")
    if extra:
        raise DataError(f"{name}: unknown top-level key '{extra[0]}' (allowed: families)")
    out: dict[str, Efficiency] = {}
    for fam, entry in raw.items():  # a family inherits from one defined above it
        parent = entry.get("inherits") if isinstance(entry, dict) else None
        if parent is not None and (not isinstance(parent, str) or parent not in out):
            raise DataError(f"{name}: family '{fam}': inherits {parent!r}, not a family defined above it")
        out[str(fam)] = _family(f"{name}: family '{fam}'", entry, out.get(parent) if parent else None)
    if _DEFAULT not in out:
        raise DataError(f"{name}: missing family '{_DEFAULT}' (the profile of unknown families)")
    return out


@cache
def _families() -> dict[str, Efficiency]:
    """The built-in efficiency table, read and validated once per process (libyaml's loader, as the catalog)."""
    import yaml

    from autopar.catalog.loader import SAFE_LOADER

    try:
        doc = yaml.load(EFFICIENCY_FILE.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise DataError(f"{EFFICIENCY_FILE.name}: not valid YAML ({e})") from None
    return parse_efficiency(doc, EFFICIENCY_FILE.name)


@lru_cache(maxsize=64)
def efficiency_for(family: str) -> Efficiency:
    """Efficiency profile of a GPU family (unknown families use the Hopper profile)."""
    table = _families()
    return table.get(family.lower(), table[_DEFAULT])


def families() -> list[str]:
    """Known GPU families with an efficiency profile."""
    return sorted(_families())


# The software-stack profiles are named, cited data too (autopar/data/software.yaml, autopar/perf/software.py).
from autopar.perf.software import FRAMEWORKS as FRAMEWORKS  # noqa: E402
from autopar.perf.software import SoftwareProfile as SoftwareProfile  # noqa: E402
from autopar.perf.software import software_for as software_for  # noqa: E402


def gemm_efficiency(m: float, n: float, k: float, eff: Efficiency, fp8: bool) -> float:
    """Fraction of dense peak a GEMM of shape (m×k)·(k×n) reaches.

    Best-shape efficiency, times the wave-quantisation utilisation of its output tiles, times a
    small-dimension penalty (short k or thin m/n can't fill the tensor-core pipeline).
    """
    top = eff.gemm_max_fp8 if fp8 else eff.gemm_max
    t = eff.tile
    mt, nt = -(-m // t), -(-n // t)
    tiles = mt * nt
    waves = -(-tiles // eff.sms)
    wave_util = tiles / (waves * eff.sms)
    # Stream-K / split-k kernels recover about half of the last wave's idle SMs.
    util = 1.0 - 0.5 * (1.0 - wave_util)
    # Partial-tile waste on the edges (m, n not multiples of the tile).
    edge = (m / (mt * t)) * (n / (nt * t))
    depth = FP8_K_DEPTH if fp8 else BF16_K_DEPTH  # FP8 tiles consume K twice as deep (perf/fp8.py)
    small = (k / (k + depth)) * (m / (m + 32.0)) * (n / (n + 32.0))
    return top * util * edge * small


# ---- host (CPU) issue floor ------------------------------------------------------------------------
# Without CUDA graphs every op is issued from Python: framework dispatch + driver launch cost the CPU
# microseconds per op, so a layer cannot run faster than its ops can be issued; it matters when a layer's
# GPU work is short (small micro-batches, small or fine-grained models, fast GPUs). PyTorch "Accelerating
# PyTorch with CUDA Graphs" (2021) and the Megatron-Bridge CUDA-graph guide describe this launch-bound
# regime; Transformer Engine PR #1016 measures ~10-20 us of CPU per small PyTorch op launch and states
# that "FP8 training is frequently bottlenecked by CPU overheads" (TE issue #761: an FP8 te.Linear takes
# over 2x the CPU time of a BF16 one). Magnitudes (estimates, not fitted): 20 us of CPU per op, the top of
# PR #1016's range, because the ops counted here are module-level Python calls rather than bare tensor ops:
# Transformer Engine modules and autograd Functions that loop in Python over their quantizers and, in the
# grouped linear, over the local experts (transformer_engine/pytorch/module/grouped_linear.py forward:
# per-GEMM weight quantisation, workspace and bias loops around one grouped GEMM call). Chosen within the
# cited range by leaving model families out: every value from 10 to 20 us lowers the dev-set error of
# Qwen3-30B-A3B with Qwen3-235B-A22B held out and the other way round, and leaves the dense, GPT-OSS and
# DeepSeek-V3 rows no worse; the eager Qwen3-30B run on 8 B200 at micro-batch 1 (Megatron-Bridge 25.11,
# 9.2 ms per layer forward + backward) sits at this floor.
# A Megatron-Core transformer layer issues ~30 ops forward (norm+QKV, RoPE, attention, projection,
# bias-dropout-add x2, norm+FC1, activation, FC2, FP8 casts); an MoE block adds ~40 (router, top-k and
# aux loss, permutation, token counts, all-to-alls, unpermute) plus ~3 per local expert (FC1, activation,
# FC2 launches); backward issues about twice the forward's.
HOST_OP_S = 20e-6
DENSE_LAYER_OPS = 30
MOE_BLOCK_OPS = 40
OPS_PER_LOCAL_EXPERT = 3
# Under FP8, Transformer Engine's grouped linear (transformer_engine/pytorch/module/grouped_linear.py, forward)
# quantises its input with one quantizer per expert (`tex.split_quantize(inp, m_splits, input_quantizers)`:
# one cast kernel per expert) and fetches each expert's FP8 weight copy in a Python loop over the GEMMs
# (`get_weight_workspace`), for FC1 and for FC2: 2 more issued ops per local expert forward (the backward's
# gradient casts follow BACKWARD_OPS_FACTOR). TE issue #761 measures the FP8 te.Linear at over 2x the CPU
# issue time of the BF16 one; TE issue #836 (timmoon10) names the extra launches: the FP8 casts and the
# scale bookkeeping.
FP8_OPS_PER_LOCAL_EXPERT = 2
BACKWARD_OPS_FACTOR = 2.0


def ops_per_local_expert(fp8: bool) -> int:
    """Ops the host issues per local expert in one MoE layer's forward (FC1, activation, FC2; FP8 casts)."""
    return OPS_PER_LOCAL_EXPERT + (FP8_OPS_PER_LOCAL_EXPERT if fp8 else 0)


def host_issue_time(moe: bool, local_experts: float, fp8: bool = False) -> tuple[float, float]:
    """(forward, backward) CPU seconds to issue one layer's ops for one micro-batch."""
    ops = DENSE_LAYER_OPS + (MOE_BLOCK_OPS + ops_per_local_expert(fp8) * local_experts if moe else 0)
    return ops * HOST_OP_S, BACKWARD_OPS_FACTOR * ops * HOST_OP_S
