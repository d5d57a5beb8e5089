"""Arithmetic that reads the same on floats and on numpy arrays, so each model formula is written once.

Why: a single estimate runs on Python floats (fast, no numpy import on the CLI's path); the search's
blocks run the same formulas on arrays of strategies. Plain `+ - * /` already work on both; these are
the few operations that do not: a conditional, max/min, log2. On floats they are the Python operation
(same result bit for bit as before); on arrays numpy's element-wise one, imported only then.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# A model quantity: a float for one strategy, a numpy array for a block of them. Typed Any because the
# formulas are the same text for both; mypy checks the callers' float paths.
Num = Any


# Python's scalar types: the single-estimate path never holds a numpy value. Checked by exact type (a set
# lookup), not isinstance: these helpers run ~100 times per estimate on the search's hot path.
_SCALARS = frozenset((bool, int, float))


def _is_scalar(x: Any) -> bool:
    return type(x) in _SCALARS


def where(cond: Any, a: Any, b: Any) -> Any:
    """`a if cond else b`; element-wise (numpy.where) when `cond` is an array."""
    if cond is True:  # comparisons of Python numbers return the two bool singletons
        return a
    if cond is False:
        return b
    import numpy as np

    return np.where(cond, a, b)


def maximum(a: Any, b: Any) -> Any:
    """`max(a, b)` of floats; element-wise (numpy.maximum) when either is an array."""
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return b if b > a else a  # exactly max(a, b), NaN included
    import numpy as np

    return np.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    """`min(a, b)` of floats; element-wise (numpy.minimum) when either is an array."""
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return b if b < a else a  # exactly min(a, b), NaN included
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


def choose(
    cond: Any, then: Callable[..., tuple[Any, ...]], other: Callable[..., tuple[Any, ...]], *args: Any
) -> tuple[Any, ...]:
    """`then(*args)` where `cond`, else `other(*args)`: for one strategy only the branch taken runs; for a
    block both run and each row takes its own (numpy.where term by term)."""
    if cond is True:
        return then(*args)
    if cond is False:
        return other(*args)
    import numpy as np

    return tuple(np.where(cond, a, b) for a, b in zip(then(*args), other(*args), strict=True))
