"""Load and validate the built-in model and GPU catalogs (YAML, read once) and user model files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from autopar.catalog.hf import canonical_fields, model_from_hf_config
from autopar.catalog.names import NameIndex
from autopar.errors import DataError
from autopar.files import expand_user
from autopar.inputs import CONFIG_MAX_BYTES, parse_document, read_text
from autopar.specs import GPUSpec, ModelSpec

DATA_DIR = Path(__file__).parent / "data"
MODELS_FILE = DATA_DIR / "models.yaml"
GPUS_FILE = DATA_DIR / "gpus.yaml"

S = TypeVar("S", bound=BaseModel)


# libyaml's C parser when PyYAML was built with it (same safe subset, ~10x faster: catalog load at start-up).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Catalog(Generic[S]):
    """Validated entries in file order, a name index and the free-text notes of each entry."""

    entries: tuple[S, ...]
    index: NameIndex[S]
    notes: dict[str, str]


def _read_entries(path: Path, key: str) -> list[dict[str, Any]]:
    """The list under `key` in a catalog YAML file, each item a mapping."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise DataError(f"{path.name}: not valid YAML ({e})") from None
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise DataError(f"{path.name}: expected a top-level '{key}:' list of mappings")
    return items


def _validation_text(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'entry'}: {e['msg']}" for e in err.errors())


def _build(path: Path, key: str, spec_type: type[S], kind: str) -> Catalog[S]:
    """Validate every entry of one catalog file and index it by name and alias."""
    entries: list[S] = []
    notes: dict[str, str] = {}
    index: NameIndex[S] = NameIndex(kind)
    for raw in _read_entries(path, key):
        item = dict(raw)
        note = str(item.pop("notes", "") or "").strip()
        if spec_type is ModelSpec:
            item = canonical_fields(item)
        try:
            spec = spec_type.model_validate(item)
        except ValidationError as e:
            raise DataError(f"{path.name}: entry '{raw.get('name', '?')}': {_validation_text(e)}") from None
        index.add(spec.name, spec.aliases, spec)
        entries.append(spec)
        notes[spec.name] = note
    return Catalog(tuple(entries), index, notes)


@lru_cache(maxsize=1)
def model_catalog() -> Catalog[ModelSpec]:
    """The built-in model catalog (models.yaml), validated once per process."""
    return _build(MODELS_FILE, "models", ModelSpec, "model")


@lru_cache(maxsize=1)
def gpu_catalog() -> Catalog[GPUSpec]:
    """The built-in GPU catalog (gpus.yaml), validated once per process."""
    return _build(GPUS_FILE, "gpus", GPUSpec, "GPU")


def list_models() -> list[ModelSpec]:
    """Every built-in model, in catalog order."""
    return list(model_catalog().entries)


def list_gpus() -> list[GPUSpec]:
    """Every built-in GPU, in catalog order."""
    return list(gpu_catalog().entries)


def model_notes(name: str) -> str:
    """The catalog's free-text notes on a model (assumptions, deviations from the source); '' if none."""
    spec = get_model(name)
    return model_catalog().notes.get(spec.name, "")


def gpu_notes(name: str) -> str:
    """The catalog's free-text notes on a GPU (estimated figures, variants); '' if none."""
    spec = get_gpu(name)
    return gpu_catalog().notes.get(spec.name, "")


def get_gpu(name: str) -> GPUSpec:
    """Look up a GPU by name or alias (case, '-', '_', '.', ' ' ignored); unknown -> UnknownNameError."""
    return gpu_catalog().index.get(name)


def _looks_like_path(text: str) -> bool:
    if text.lower().endswith((".json", ".yaml", ".yml")):
        return True
    try:  # a name longer than the OS allows for a path (ENAMETOOLONG) is a name, not a file
        p = expand_user(text)
        return p.is_file() or (p.is_dir() and (p / "config.json").is_file())
    except (OSError, ValueError):
        return False


def get_model(name_or_path: str) -> ModelSpec:
    """Look up a model by name or alias, or read it from a file.

    A path to an existing file (or anything ending in .json/.yaml/.yml), or a directory holding a
    config.json, is read with `load_model_file`; otherwise the name is matched case-insensitively,
    also ignoring '-', '_', '.', ' ' and an org prefix such as 'meta-llama/'.
    """
    if _looks_like_path(name_or_path):
        return load_model_file(name_or_path)
    return model_catalog().index.get(name_or_path)


def load_model_file(path: str | Path) -> ModelSpec:
    """Read a model from a Hugging Face config.json, or from a JSON/YAML mapping of ModelSpec fields."""
    p = expand_user(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise DataError(f"model file '{path}' does not exist")
    text = read_text(p, CONFIG_MAX_BYTES, "model file")
    data = parse_document(text, f"model file '{p}'", yaml_syntax=p.suffix.lower() in (".yaml", ".yml"))
    if not isinstance(data, dict):
        raise DataError(f"model file '{p}' must hold a JSON/YAML object")
    stem = p.parent.name if p.stem == "config" else p.stem
    if "model_type" in data or "text_config" in data:
        name = None if p.stem == "config" and not stem else stem
        return model_from_hf_config(data, name=name, source=str(p))
    fields = canonical_fields(
        {"name": stem, "source": str(p)} | {k: v for k, v in data.items() if k != "notes"}
    )
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as e:
        raise DataError(f"model file '{p}': {_validation_text(e)}") from None
