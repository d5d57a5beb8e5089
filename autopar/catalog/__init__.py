"""Built-in catalogs of models and GPUs, name lookup, and Hugging Face config.json import."""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> module; loaded on first access (PEP 562) so that a light submodule (names,
# prices) does not pull in the catalog loader and pydantic specs.
_LAZY: dict[str, str] = {
    "SUPPORTED_MODEL_TYPES": "autopar.catalog.hf",
    "model_from_hf_config": "autopar.catalog.hf",
    "get_gpu": "autopar.catalog.loader",
    "get_model": "autopar.catalog.loader",
    "gpu_notes": "autopar.catalog.loader",
    "list_gpus": "autopar.catalog.loader",
    "list_models": "autopar.catalog.loader",
    "load_model_file": "autopar.catalog.loader",
    "model_notes": "autopar.catalog.loader",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
