"""Built-in catalogs of models and GPUs, name lookup, and Hugging Face config.json import."""

from autopar.catalog.hf import SUPPORTED_MODEL_TYPES, model_from_hf_config
from autopar.catalog.loader import (
    get_gpu,
    get_model,
    gpu_notes,
    list_gpus,
    list_models,
    load_model_file,
    model_notes,
)

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "get_gpu",
    "get_model",
    "gpu_notes",
    "list_gpus",
    "list_models",
    "load_model_file",
    "model_from_hf_config",
    "model_notes",
]
