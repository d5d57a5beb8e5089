"""Parsers for the search's command-line values: memory sizes, token counts, GPU-count ranges, lists."""

from __future__ import annotations

import math
import re

from autopar.errors import AutoparError
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


def parse_gpu_counts(text: str | int, node_size: int = 8, field: str = "gpus") -> list[int]:
    """Parse GPU counts: '64', '64,128,512', '64..1024' (powers of two) or '64..512:64' (a step).

    Counts above one node must be node multiples (checked by the caller's ClusterSpec too).
    """
    if isinstance(text, int):
        return [text]
    counts: list[int] = []
    for part in parse_list(str(text), field):
        m = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)(?::(\d+))?", part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo <= 0 or hi < lo:
                raise AutoparError(f"{field}={part!r}: a range needs 0 < low <= high")
            if m.group(3):
                step = int(m.group(3))
                if step <= 0:
                    raise AutoparError(f"{field}={part!r}: the step must be positive")
                counts += list(range(lo, hi + 1, step))
            else:
                n = 1
                while n <= hi:
                    if n >= lo:
                        counts.append(n)
                    n *= 2
                if not counts:
                    raise AutoparError(f"{field}={part!r}: no power of two between {lo} and {hi}")
        elif part.isdigit() and int(part) > 0:
            counts.append(int(part))
        else:
            raise AutoparError(f"{field}={part!r}: expected N, N,M,..., LOW..HIGH or LOW..HIGH:STEP")
    out = sorted(set(counts))
    bad = [n for n in out if n > node_size and n % node_size]
    if bad:
        raise AutoparError(f"{field}={text!r}: {bad[0]} is not a multiple of {node_size} GPUs per node")
    return out
