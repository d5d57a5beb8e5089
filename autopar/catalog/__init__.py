"""Built-in catalogs of models and GPUs, name lookup, and Hugging Face config.json import."""

from __future__ import annotations

from autopar.lazy import lazy_exports

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

__getattr__, __dir__, __all__ = lazy_exports(__name__, _LAZY)
