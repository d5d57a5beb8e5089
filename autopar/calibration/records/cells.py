"""Cell values of run-record rows: blank/NaN/'null' to None, numeric text to numbers, catalog look-ups,
and a cell read as the type its column holds (whole, positive, float, boolean) or a one-line DataError.

Shared by row validation (records/checks.py), tokens/s derivation (records/throughput.py) and the specs
builders (records/specs.py) so CSV, JSONL and Parquet rows read the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from autopar.errors import DataError, UnknownNameError

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


def cell(row: Mapping[str, Any], key: str) -> Any:
    """The cell `key` of a row, None where it is empty (absent, NaN, blank, "nan", "none" or "null")."""
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, str):
        v = v.strip()
        if v == "" or v.lower() in ("nan", "none", "null"):
            return None
    return v


# The largest whole number a record cell may hold: beyond 2**53 a float no longer counts in ones, and no layout
# degree, dimension or batch comes near it (a fuzzed head_dim of 1e299 overflowed the model's float arithmetic).
MAX_WHOLE_CELL = float(2**53)


def int_cell(row: Mapping[str, Any], key: str) -> int | None:
    v = cell(row, key)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError) as e:
        raise DataError(f"column '{key}' = {v!r} is not a number") from e
    if not math.isfinite(f) or f != int(f):
        raise DataError(f"column '{key}' = {v!r} is not a whole number")
    if abs(f) > MAX_WHOLE_CELL:
        raise DataError(f"column '{key}' = {v!r} is out of range (at most {MAX_WHOLE_CELL:.0f})")
    return int(f)


def positive_cell(row: Mapping[str, Any], key: str) -> int | None:
    """A positive whole number, or None when the cell is empty."""
    v = int_cell(row, key)
    if v is not None and v <= 0:
        raise DataError(f"column '{key}' = {v} must be a positive whole number")
    return v


def float_cell(row: Mapping[str, Any], key: str) -> float | None:
    v = cell(row, key)
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError) as e:
        raise DataError(f"column '{key}' = {v!r} is not a number") from e


def bool_cell(row: Mapping[str, Any], key: str) -> bool | None:
    v = cell(row, key)
    if v is None:
        return None
    s = str(v).lower()
    if s in ("1", "true", "yes", "y", "t", "1.0"):
        return True
    if s in ("0", "false", "no", "n", "f", "0.0"):
        return False
    raise DataError(f"column '{key}' = {v!r} is not a boolean (use 0/1 or true/false)")
