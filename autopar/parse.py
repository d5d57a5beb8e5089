"""Parsers for the search's command-line values: memory sizes, token counts, GPU-count ranges, lists."""

from __future__ import annotations

import math
import re

from autopar.errors import AutoparError, SpecError
from autopar.units import GB, TB, GiB, MiB, TiB, parse_tokens

_MEM_UNITS = {  # size in GiB of one unit
    "": 1.0,
    "gib": 1.0,
    "g": 1.0,
    "gb": GB / GiB,
    "mib": MiB / GiB,
    "mb": 1e6 / GiB,
    "tib": TiB / GiB,
    "tb": TB / GiB,
}
_NUM = r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)"
# Largest GPU count a plan may name: 2^20, about five times the largest training clusters announced
# (100k-200k GPUs); beyond it every figure is extrapolation and ranges become slow to list.
MAX_GPU_COUNT = 2**20
# Most GPU counts one --gpus may list: each count is a separate search (seconds each), so 256 is hours
# already; '8..8000000:8' (a million searches) is a typo, not a plan.
MAX_GPU_COUNT_OPTIONS = 256
# --seed: numpy's and Optuna's samplers take an unsigned 32-bit seed.
MAX_SEED = 2**32 - 1


def parse_gib(text: str | float | None, field: str = "min-headroom") -> float:
    """Parse a memory size ('4GiB', '4 GB', '512MiB', '4' = GiB) into GiB (GB = 1e9 bytes)."""
    if text is None:
        return 0.0
    if isinstance(text, int | float):
        return float(text)
    m = re.fullmatch(_NUM + r"\s*([a-z]*)", text.strip().lower())
    if not m or m.group(2) not in _MEM_UNITS:
        raise AutoparError(f"{field}={text!r}: expected a size like 4GiB, 4GB or 512MiB")
    value = float(m.group(1)) * _MEM_UNITS[m.group(2)]
    if not math.isfinite(value):
        raise AutoparError(f"{field}={text!r}: expected a finite size like 4GiB")
    return value


def parse_count(text: str | float | None, field: str = "tokens") -> float | None:
    """A token count ('1T', '300B', '2.5e12', '15M'; see `autopar.units.parse_tokens`), None when not given."""
    if text is None or text == "":
        return None
    return parse_tokens(text, field)


def parse_list(text: str | None, field: str) -> list[str]:
    """Split a comma list ('H100-SXM,H200'), dropping blanks and keeping order without repeats."""
    items: list[str] = []
    for part in (text or "").split(","):
        p = part.strip()
        if p and p not in items:
            items.append(p)
    if not items:
        raise AutoparError(f"{field}: expected at least one value")
    return items


def check_seed(seed: int, field: str = "seed") -> int:
    """A random seed in 0..MAX_SEED (numpy refuses others with a traceback-worthy ValueError)."""
    if not 0 <= seed <= MAX_SEED:
        raise AutoparError(f"{field}={seed}: must be between 0 and {MAX_SEED} (2**32-1)")
    return seed


def _range_counts(part: str, lo: int, hi: int, step: str | None, field: str) -> list[int]:
    """The counts of one LOW..HIGH[:STEP] range (powers of two without a step), size-checked first."""
    if lo <= 0 or hi < lo:
        raise AutoparError(f"{field}={part!r}: a range needs 0 < low <= high")
    if hi > MAX_GPU_COUNT:
        raise AutoparError(f"{field}={part!r}: at most {MAX_GPU_COUNT} GPUs (high={hi})")
    if step is None:
        counts = [1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi]
        if not counts:
            raise AutoparError(f"{field}={part!r}: no power of two between {lo} and {hi}")
        return counts
    n = int(step)
    if n <= 0:
        raise AutoparError(f"{field}={part!r}: the step must be positive")
    size = (hi - lo) // n + 1
    if size > MAX_GPU_COUNT_OPTIONS:
        raise AutoparError(
            f"{field}={part!r}: {size} GPU counts; at most {MAX_GPU_COUNT_OPTIONS} per --{field} (use a larger step)"
        )
    return list(range(lo, hi + 1, n))


def parse_gpu_counts(text: str | int, node_size: int = 8, field: str = "gpus") -> list[int]:
    """Parse GPU counts: '64', '64,128,512', '64..1024' (powers of two) or '64..512:64' (a step).

    At most MAX_GPU_COUNT GPUs and MAX_GPU_COUNT_OPTIONS counts in all. Counts above one node must be
    node multiples (checked by the caller's ClusterSpec too).
    """
    if isinstance(text, int):
        text = str(text)
    counts: set[int] = set()
    for part in parse_list(str(text), field):
        m = re.fullmatch(r"(\d{1,30})\s*\.\.\s*(\d{1,30})(?::(\d{1,30}))?", part)
        if m:
            counts.update(_range_counts(part, int(m.group(1)), int(m.group(2)), m.group(3), field))
        elif part.isascii() and part.isdigit() and len(part) <= 30 and 0 < int(part) <= MAX_GPU_COUNT:
            counts.add(int(part))
        elif part.isascii() and part.isdigit() and len(part) <= 30 and int(part) > MAX_GPU_COUNT:
            raise AutoparError(f"{field}={part!r}: at most {MAX_GPU_COUNT} GPUs")
        else:
            raise AutoparError(f"{field}={part!r}: expected N, N,M,..., LOW..HIGH or LOW..HIGH:STEP")
        if len(counts) > MAX_GPU_COUNT_OPTIONS:
            raise AutoparError(f"{field}={shorten(str(text))}: more than {MAX_GPU_COUNT_OPTIONS} GPU counts")
    out = sorted(counts)
    bad = [n for n in out if n > node_size and n % node_size]
    if bad:
        raise AutoparError(f"{field}={text!r}: {bad[0]} is not a multiple of {node_size} GPUs per node")
    return out


def shorten(text: str, limit: int = 60) -> str:
    """repr of a value cut to `limit` characters for a one-line message."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def check_positive_finite(value: float, field: str) -> float:
    """A limit that must be a positive finite number (NaN passed every comparison and ran as no limit)."""
    if not (math.isfinite(value) and value > 0):
        raise SpecError(f"--{field.replace('_', '-')}={value}: must be a positive finite number")
    return value
