"""Strategy search: the space, Optuna NSGA-II (or exhaustive) study, Pareto set and recommendations.

Names are resolved lazily (PEP 562) so that importing a submodule such as ``autopar.search.result``
does not pull in the whole search (and so autopar.objectives can import it without a cycle).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ObjectiveInfo": "autopar.search.result",
    "Recommendation": "autopar.search.result",
    "SearchResult": "autopar.search.result",
    "TrialRecord": "autopar.search.result",
    "Space": "autopar.search.space",
    "build_space": "autopar.search.space",
    "hypervolume": "autopar.search.pareto",
    "nondominated_mask": "autopar.search.pareto",
    "normalized_hypervolume": "autopar.search.pareto",
    "pareto_frame": "autopar.search.pareto",
    "optimize": "autopar.search.study",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import an exported name on first use."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'autopar.search' has no attribute {name!r}")
