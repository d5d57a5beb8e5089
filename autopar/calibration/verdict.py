"""Whether a configuration fits in GPU memory, said with the memory model's uncertainty.

The memory model's point estimate has a median error of ~5-13% (README, accuracy tables), so a run predicted a
fraction of a GiB over usable memory may well run. The verdict therefore has three values:

- ``fits``: the point estimate is within usable memory;
- ``at risk``: the point estimate is over it, but the 80% band reaches below it (the run may fit);
- ``oom``: the whole 80% band is over usable memory, or (with no band, analytical mode) the point estimate is.

``pred_fits`` of a run record is False only for ``oom``: the tool claims out-of-memory only when its own band
does. The search is stricter: it keeps the point estimate and asks for `min_headroom` free on top of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

FITS, AT_RISK, OOM = "fits", "at risk", "oom"
MEMORY_VERDICTS = (FITS, AT_RISK, OOM)


def memory_verdict(mem: float, band_lo: float | None, usable: float) -> str:
    """The verdict for peak memory `mem` with band low end `band_lo` (None/NaN: no band) against `usable`."""
    if mem <= usable:
        return FITS
    if band_lo is not None and math.isfinite(band_lo) and band_lo <= usable:
        return AT_RISK
    return OOM


def memory_verdicts(mem: Iterable[float], band_lo: Iterable[float], usable: Iterable[float]) -> list[str]:
    """`memory_verdict` per row (NaN memory or capacity, a row that was not evaluated, gives '')."""
    return [
        memory_verdict(float(m), float(lo), float(cap)) if math.isfinite(m) and math.isfinite(cap) else ""
        for m, lo, cap in zip(mem, band_lo, usable, strict=True)
    ]
