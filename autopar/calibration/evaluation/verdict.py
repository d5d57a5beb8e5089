"""Whether a configuration fits in GPU memory, said with the memory model's uncertainty.

A memory verdict decides whether a job starts, so it is said with the 80% band of the predicted peak (the
calibration's memory band, validated per left-out source: bench/memory.py):

- ``fits``: the band's high end is within usable memory (with no band, analytical mode: the point estimate);
- ``uncertain``: usable memory falls inside the band: the run may or may not fit; only a measurement settles it
  (`autopar tune` or `autopar dryrun` measure the peak; a measured OOM is evidence, calibration/oom.py);
- ``oom``: the band's low end is over usable memory (no band: the point estimate is), so autopar calls a run
  out of memory only when even its optimistic end does not fit, never confidently for a run far from the
  evidence.

``pred_fits`` of a run record is False only for ``oom``. The search is stricter: a strategy fits only when the
band's upper end does (search/margin.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

FITS, UNCERTAIN, OOM = "fits", "uncertain", "oom"
MEMORY_VERDICTS = (FITS, UNCERTAIN, OOM)


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def memory_verdict(mem: float, band_lo: float | None, usable: float, band_hi: float | None = None) -> str:
    """The verdict for peak memory `mem` with its band (`band_lo`, `band_hi`; None/NaN: no band) against
    `usable`. A band with only its low end given is read as reaching up to the point estimate."""
    lo = band_lo if _finite(band_lo) else None
    hi = band_hi if _finite(band_hi) else (mem if lo is not None else None)
    if lo is None:
        return FITS if mem <= usable else OOM
    if max(mem, hi or mem) <= usable:
        return FITS
    return UNCERTAIN if min(mem, lo) <= usable else OOM


def memory_verdicts(
    mem: Iterable[float],
    band_lo: Iterable[float],
    usable: Iterable[float],
    band_hi: Iterable[float] | None = None,
) -> list[str]:
    """`memory_verdict` per row (NaN memory or capacity, a row that was not evaluated, gives '')."""
    mem, band_lo, usable = list(mem), list(band_lo), list(usable)
    his = [math.nan] * len(mem) if band_hi is None else list(band_hi)
    return [
        memory_verdict(float(m), float(lo), float(cap), float(hi))
        if math.isfinite(m) and math.isfinite(cap)
        else ""
        for m, lo, cap, hi in zip(mem, band_lo, usable, his, strict=True)
    ]
