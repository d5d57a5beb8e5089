"""Arithmetic that reads the same on floats and on numpy arrays, so each model formula is written once.

Why: a single estimate runs on Python floats (fast, no numpy import on the CLI's path); the search's
blocks run the same formulas on arrays of strategies. Plain `+ - * /` already work on both; these are
the few operations that do not: a conditional, max/min, log2. On floats they are the Python operation
(same result bit for bit as before); on arrays numpy's element-wise one, imported only then.
"""

from __future__ import annotations

import math
from typing import Any

# A model quantity: a float for one strategy, a numpy array for a block of them. Typed Any because the
# formulas are the same text for both; mypy checks the callers' float paths.
Num = Any


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float))


def where(cond: Any, a: Any, b: Any) -> Any:
    """`a if cond else b`; element-wise (numpy.where) when `cond` is an array."""
    if isinstance(cond, bool):
        return a if cond else b
    import numpy as np

    return np.where(cond, a, b)


def maximum(a: Any, b: Any) -> Any:
    """`max(a, b)` of floats; element-wise (numpy.maximum) when either is an array."""
    if _is_scalar(a) and _is_scalar(b):
        return max(a, b)
    import numpy as np

    return np.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    """`min(a, b)` of floats; element-wise (numpy.minimum) when either is an array."""
    if _is_scalar(a) and _is_scalar(b):
        return min(a, b)
    import numpy as np

    return np.minimum(a, b)


def log2(x: Any) -> Any:
    """math.log2 of a float; numpy.log2 of an array."""
    if _is_scalar(x):
        return math.log2(x)
    import numpy as np

    return np.log2(x)


def ratio(a: Any, b: Any, default: float) -> Any:
    """`a / b`, or `default` where b is 0 (no division by zero on floats, no warning on arrays)."""
    if _is_scalar(b):
        return a / b if b else default
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), default)
