"""Cell values of run-record rows: blank/NaN/'null' to None, numeric text to numbers, catalog look-ups.

Shared by row validation (`autopar.calibration.rows`) and tokens/s derivation
(`autopar.calibration.throughput`) so CSV, JSONL and Parquet rows read the same way.
"""

from __future__ import annotations

import math
import re
from typing import Any

from autopar.errors import UnknownNameError

_MISSING = frozenset({"", "nan", "none", "null", "na", "n/a"})


def blank_to_none(v: Any) -> Any:
    """Empty cells (blank, NaN, 'null') mean 'not stated'."""
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, str):
        s = v.strip()
        return None if s.lower() in _MISSING else s
    return v


def as_number(v: Any) -> Any:
    """Turn numeric text into a number (int when integral) so CSV and JSONL rows compare equal."""
    if hasattr(v, "item") and not isinstance(v, str | bytes):  # numpy scalar from Parquet/pandas
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        return v
    if isinstance(v, str):
        try:
            v = float(v.replace(",", "")) if re.fullmatch(r"[-+0-9.,eE]+", v) else v
        except ValueError:
            return v
        if isinstance(v, str):
            return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def catalog_lookup(kind: str, name: str) -> tuple[Any | None, str | None]:
    """(spec, None) if the catalog knows `name`; (None, reason) if it does not; (None, None) if no catalog."""
    try:
        from autopar import catalog
    except ImportError:
        return None, None
    fn = getattr(catalog, "get_model" if kind == "model" else "get_gpu", None)
    if fn is None:
        return None, None
    try:
        return fn(name), None
    except UnknownNameError as e:
        return None, str(e)
    except Exception:  # a catalog still being built or a broken entry: do not judge the row by it
        return None, None
