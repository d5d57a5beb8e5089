"""Lazy public names for a package's __init__ (PEP 562), so importing a package loads nothing heavy."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str], extra: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(__getattr__, __dir__, __all__) for `package`: each name imports from its module on first access."""
    public = sorted([*names, *extra])

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return public

    return __getattr__, __dir__, public
