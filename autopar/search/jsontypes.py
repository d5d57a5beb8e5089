"""Named types for the search's heterogeneous values, defined once.

JSON read back from Optuna (user and system attrs, stored inputs, a trial's params) or written to it and to
the report (rows, stats) is heterogeneous by nature: a value's type depends on its key, which mypy cannot
follow, so `JSONValue` stays dynamic on purpose, under one name, rather than as a bare `Any` everywhere.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, TypeAlias

JSONValue: TypeAlias = Any  # one JSON value: str, int, float, bool, None, or a list / dict of them
JSONDict: TypeAlias = dict[str, JSONValue]  # a JSON object (attrs, inputs, params, a report row)
Key: TypeAlias = tuple[Hashable, ...]  # an identity key (Point.key, a trial's params in name order)
