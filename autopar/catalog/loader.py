"""Load and validate the built-in model and GPU catalogs (YAML, read once) and user model and GPU files."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from autopar.catalog.hf import canonical_fields, model_from_hf_config
from autopar.catalog.names import NameIndex
from autopar.errors import DataError, SpecError, UnknownNameError, close_hint
from autopar.files import expand_user
from autopar.inputs import (
    CONFIG_MAX_BYTES,
    parse_document,
    parse_json,
    parse_yaml,
    read_text,
    require_finite,
    shown,
)
from autopar.specs import GPUSpec, ModelSpec
from autopar.text import excerpt

DATA_DIR = Path(__file__).parent / "data"
MODELS_FILE = DATA_DIR / "models.yaml"
GPUS_FILE = DATA_DIR / "gpus.yaml"
# The efficiency table (autopar/perf/efficiency.py reads its numbers): a GPU file's `family` must be one of its
# families. Read here for the names only - the catalog sits below autopar.perf and does not import it.
EFFICIENCY_FILE = DATA_DIR.parent.parent / "data" / "efficiency.yaml"
GPU_FILE_SUFFIXES = (".json", ".yaml", ".yml")

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
    """The catalog's free-text notes on a GPU (estimated figures, variants), or a GPU file's `notes`; ''
    if none."""
    if _looks_like_gpu_file(name):
        return str(_gpu_file_fields(name)[1].get("notes", "") or "").strip()
    spec = get_gpu(name)
    return gpu_catalog().notes.get(spec.name, "")


def get_gpu(name_or_path: str) -> GPUSpec:
    """Look up a GPU by name or alias (case, '-', '_', '.', ' ' ignored; unknown -> UnknownNameError), or
    read it from a JSON/YAML file of GPUSpec fields (`load_gpu_file`): a name ending in .json/.yaml/.yml,
    or a path with a folder part to an existing file. The file's GPU wins over a catalog GPU of the same
    name; it keeps the file's `name` (default: the file's stem)."""
    if _looks_like_gpu_file(name_or_path):
        return load_gpu_file(name_or_path)
    return gpu_catalog().index.get(name_or_path)


def _looks_like_gpu_file(text: str) -> bool:
    """A --gpu value naming a file rather than a catalog GPU (a bare 'H100' is a name even if such a file
    exists in the working folder)."""
    if text.lower().endswith(GPU_FILE_SUFFIXES):
        return True
    if "/" not in text and "\\" not in text:
        return False
    try:  # a name longer than the OS allows for a path (ENAMETOOLONG) is a name, not a file
        return expand_user(text).is_file()
    except (OSError, ValueError):
        return False


@lru_cache(maxsize=1)
def efficiency_families() -> tuple[str, ...]:
    """The GPU families autopar/data/efficiency.yaml profiles (a GPU's `family` picks its profile)."""
    try:
        doc = yaml.load(EFFICIENCY_FILE.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise DataError(f"{EFFICIENCY_FILE.name}: not valid YAML ({e})") from None
    fams = doc.get("families") if isinstance(doc, dict) else None
    if not isinstance(fams, dict):
        raise DataError(f"{EFFICIENCY_FILE.name}: expected a top-level 'families:' mapping")
    return tuple(sorted(str(f).lower() for f in fams))


def _gpu_file_fields(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(resolved path, the mapping) of a GPU file, each number finite; one-line DataError otherwise."""
    p = expand_user(path)
    try:
        found = p.is_file()
    except (OSError, ValueError):
        found = False
    if not found:
        raise DataError(f"GPU file '{path}' does not exist (or is not a file)")
    text = read_text(p, CONFIG_MAX_BYTES, "GPU file")
    source = f"GPU file '{p}'"
    if p.suffix.lower() == ".json":  # NaN/Infinity kept, then refused naming the field
        data = parse_json(text, source, finite=False)
        require_finite(data, source)
    else:
        data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise DataError(f"{source} must hold a JSON/YAML mapping of GPU fields (family, memory_bytes, ...)")
    return p, data


def _field_errors(err: ValidationError) -> str:
    """Pydantic's errors on one line, each naming the field and the value it refused."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "entry"
        if e["type"] == "missing":
            parts.append(f"missing field '{loc}' (required)")
        else:
            parts.append(f"{loc}={shown(e['input'])}: {e['msg']}")
    return "; ".join(parts)


def _check_gpu_fields(source: str, data: dict[str, Any]) -> None:
    """Refuse an unknown field (with the closest known one) and an unknown efficiency family."""
    allowed = [*GPUSpec.model_fields, "notes"]
    for key in data:
        if str(key) not in allowed:
            raise DataError(
                f"{source}: unknown field '{key}'{close_hint(str(key), allowed)} (allowed: {', '.join(allowed)})"
            )
    fam = data.get("family")
    known = efficiency_families()
    if isinstance(fam, str) and fam.strip().lower() not in known:
        raise DataError(
            f"{source}: family={shown(fam)} is not an efficiency family{close_hint(fam.strip().lower(), known)}"
            f" (known: {', '.join(known)})"
        )


def load_gpu_file(path: str | Path) -> GPUSpec:
    """Read a GPU from a JSON/YAML mapping of GPUSpec fields (e.g. name, family, memory_bytes, bf16_flops,
    hbm_bw, scaleup_bw, scaleout_bw; optional `notes`). `name` defaults to the file's stem, `source` to its
    path. Every problem (unknown or missing field, a non-positive or non-finite number, an unknown family)
    is one DataError line naming the field and the value."""
    p, data = _gpu_file_fields(path)
    source = f"GPU file '{p}'"
    _check_gpu_fields(source, data)
    fields = {"name": p.stem, "source": str(p)} | {k: v for k, v in data.items() if k != "notes"}
    if isinstance(fields.get("family"), str):
        fields["family"] = fields["family"].strip().lower()
    try:
        spec = GPUSpec.model_validate(fields)
    except ValidationError as e:
        raise DataError(f"{source}: {_field_errors(e)}") from None
    for key, value in spec.model_dump().items():  # strings such as 'inf' pass pydantic's float parsing
        if isinstance(value, float) and not math.isfinite(value):
            raise DataError(f"{source}: {key}={shown(data.get(key, value))}: only finite numbers are allowed")
    return spec


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
    index = model_catalog().index
    try:
        return index.get(name_or_path)
    except UnknownNameError as e:
        sized = _preset_of_size(name_or_path)
        if sized is not None:
            return index.get(sized)
        e.args = (f"{e}{OFFLINE_HINT}",)
        raise


# Said with every unknown model name: a model autopar has no preset for is read from its Hugging Face
# config.json, a local file, without the network.
OFFLINE_HINT = "; or pass the path of its config.json (autopar reads it offline)"
# A model size as people write it ('70B', '1.3b', '1T') or an MoE total as the names write it ('8x7B').
_SIZE_RE = re.compile(r"(?:(\d+)x)?(\d+(?:\.\d+)?)([BT])", re.IGNORECASE)
_BILLIONS = {"B": 1.0, "T": 1e3}


def _size_key(text: str) -> tuple[int, float] | None:
    """(experts, billions of parameters) of a size: '70B' -> (1, 70.0), '1T' -> (1, 1000.0), '8x7B' -> (8,
    7.0); None for text that is not a size."""
    m = _SIZE_RE.fullmatch(text.strip())
    return None if m is None else (int(m[1] or 1), float(m[2]) * _BILLIONS[m[3].upper()])


def nominal_size(spec: ModelSpec) -> str | None:
    """A preset's nominal size: the first part of its name, else of an alias, that is a size ('Llama-3.1-70B'
    -> '70B', 'Qwen3-235B-A22B' -> '235B', 'Mixtral-8x7B' -> '8x7B', DeepSeek-V3 by deepseek-v3-671b -> '671B');
    the catalog stores no parameter count (autopar.perf.params derives it), so the names carry the size."""
    for label in (spec.name, *spec.aliases):
        for part in re.split(r"[-_/ ]+", label):
            if _size_key(part) is not None:
                return part[:-1] + part[-1].upper()
    return None


def presets_of_size(size: str) -> list[str] | None:
    """The built-in presets of nominal size `size` (`nominal_size`), in catalog order; None when `size` is no
    size ('70B' -> Llama-2-70B, ... ; '8x7B' -> Mixtral-8x7B)."""
    key = _size_key(size)
    if key is None:
        return None
    return [s.name for s in model_catalog().entries if (n := nominal_size(s)) and _size_key(n) == key]


def _preset_of_size(size: str) -> str | None:
    """The one preset of nominal size `size`; None when `size` is no size; SpecError when several or none have it."""
    names = presets_of_size(size)
    if names is None or len(names) == 1:
        return names[0] if names else None
    shown = excerpt(size)
    if names:
        raise SpecError(f"model '{shown}' is a size; presets of that size: {', '.join(names)}; pass one")
    raise SpecError(
        f"model '{shown}' is a size no built-in preset has (`autopar models` lists them){OFFLINE_HINT}"
    )


def model_for_size(query: str) -> str | None:
    """The preset a `--model` value names by its size alone ('405B' -> Llama-3.1-405B), for the CLI to say so;
    None when the value is a model name, a path or no size; SpecError when several presets (or none) have it."""
    if _size_key(query) is None or _looks_like_path(query):
        return None
    try:
        model_catalog().index.get(query)
    except UnknownNameError:
        return _preset_of_size(query)
    return None


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
