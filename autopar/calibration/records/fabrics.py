"""The scale-out bandwidth of the clusters a source's runs ran on (autopar/data/source_fabrics.yaml).

A run record names its GPU, and the GPU's catalog entry supplies a DGX-class NIC bandwidth. Where a source
describes its own nodes otherwise (BLOOM's Jean Zay nodes: four 100 Gb/s Omni-Path links for eight GPUs),
that description is data, cited, in one file; a record's own `internode_gbps` column wins over it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from autopar.data import data_path
from autopar.errors import DataError

SOURCE_FABRICS_FILE = "source_fabrics.yaml"
_FIELDS = ("internode_gbps", "source")


@dataclass(frozen=True)
class SourceFabric:
    """A source's inter-node bandwidth: GB/s per GPU per direction, and where it is described."""

    internode_gbps: float
    source: str


def parse_internode_gbps(where: str, value: object) -> float:
    """A positive, finite GB/s figure, else a one-line DataError naming `where` and the value."""
    try:
        v = float(str(value))
    except ValueError:
        v = float("nan")
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise DataError(f"{where} = {value!r}: expected a positive number of GB/s per GPU per direction")
    return v


def parse_source_fabrics(doc: object, name: str) -> dict[str, SourceFabric]:
    """source -> SourceFabric from a parsed source_fabrics.yaml (`name` prefixes every error)."""
    raw = doc.get("sources") if isinstance(doc, dict) else None
    if not isinstance(raw, dict):
        raise DataError(f"{name}: expected a top-level 'sources:' mapping")
    out: dict[str, SourceFabric] = {}
    for src, entry in raw.items():
        where = f"{name}: source '{src}'"
        if not isinstance(entry, dict) or sorted(entry) != sorted(_FIELDS):
            raise DataError(f"{where}: expected exactly the fields {', '.join(_FIELDS)}")
        text = entry["source"]
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{where}: field 'source' must be a non-empty citation")
        gbps = parse_internode_gbps(f"{where}: internode_gbps", entry["internode_gbps"])
        out[str(src)] = SourceFabric(gbps, text)
    return out


@cache
def source_fabrics() -> dict[str, SourceFabric]:
    """The shipped table, read and validated once per process."""
    import yaml

    from autopar.catalog.loader import SAFE_LOADER

    path = data_path(SOURCE_FABRICS_FILE)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise DataError(f"{SOURCE_FABRICS_FILE}: not valid YAML ({e})") from None
    return parse_source_fabrics(doc, SOURCE_FABRICS_FILE)
