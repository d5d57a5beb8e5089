"""Grouping rows of a strategy block by the few inputs a scalar function reads (perf/vector.py).

Why: the expensive pieces of the model (per-layer costs, CP cost, collective times) depend on a handful of
knobs, so a block of thousands of strategies has only tens or hundreds of distinct inputs for each. We call
the scalar function once per distinct key and gather the results back to the rows, which keeps one source
of truth for the model and makes the vector path exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

Cast = Callable[[Any], Any]
_MAX_CODE = 2**62
MEMO_LIMIT = 500_000
_MEMOS: WeakKeyDictionary[Any, dict[str, dict[Any, Any]]] = WeakKeyDictionary()


def distinct(cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first row of each distinct key, key number of every row) over the columns' rows."""
    code = np.zeros(len(cols[0]), dtype=np.int64)
    span = 1
    for c in cols:
        if c.dtype.kind in "biu":  # integers: mixed radix over the value range (no sort per column)
            lo = int(c.min()) if len(c) else 0
            n, inv = (int(c.max()) - lo + 1 if len(c) else 1), c.astype(np.int64) - lo
        else:
            u, inv = np.unique(c, return_inverse=True)
            n = max(1, len(u))
        span *= n
        if span >= _MAX_CODE:  # too many combinations for one int64 code: unique over the stacked rows
            return _distinct_rows(cols)
        code = code * n + inv.reshape(-1)
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def memo(ctx: object, name: str) -> dict[Any, Any]:
    """A dict of results kept with a PerfContext (one per name), so that blocks after the first reuse the
    scalar calls of earlier blocks; dropped with the context, emptied past MEMO_LIMIT entries."""
    store = _MEMOS.setdefault(ctx, {})
    d = store.setdefault(name, {})
    if len(d) > MEMO_LIMIT:
        d.clear()
    return d


def _distinct_rows(cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1)
    _, first, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def per_key(
    fn: Callable[..., Any], cols: Sequence[np.ndarray], casts: Sequence[Cast]
) -> tuple[list[Any], np.ndarray]:
    """fn called once per distinct row of `cols` (each value converted by its cast): (results, key of each row)."""
    first, inv = distinct(cols)
    out = [fn(*(cast(c[i]) for c, cast in zip(cols, casts, strict=True))) for i in first]
    return out, inv


def per_key_floats(fn: Callable[..., Any], cols: Sequence[np.ndarray], casts: Sequence[Cast]) -> np.ndarray:
    """Like `per_key` for a function returning a float or a tuple of floats: an (n,) or (n, k) array."""
    out, inv = per_key(fn, cols, casts)
    arr: np.ndarray = np.asarray(out, dtype=np.float64)[inv]
    return arr
