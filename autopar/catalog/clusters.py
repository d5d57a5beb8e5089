"""Cluster shorthands (`--cluster gb200-nvl72:4`, `dgx-h100:32`): systems as data (clusters.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from autopar.catalog.names import NameIndex
from autopar.errors import DataError, SpecError

CLUSTERS_FILE = Path(__file__).parent / "data" / "clusters.yaml"


class SystemSpec(BaseModel):
    """One system type: its GPU, the unit a count refers to, host and NVLink-domain sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    aliases: tuple[str, ...] = ()
    gpu: str
    unit: str = Field(description="what COUNT counts: node or rack")
    unit_gpus: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    nvlink_domain: int = Field(gt=0)
    transport: Literal["infiniband", "roce", "efa"] | None = Field(
        default=None, description="scale-out transport (specs.TRANSPORTS); None: not stated (InfiniBand)"
    )
    source: str = ""


@dataclass(frozen=True)
class ClusterShape:
    """A resolved shorthand: GPU name, GPU count, host size and NVLink domain."""

    gpu: str
    num_gpus: int
    gpus_per_node: int
    nvlink_domain: int
    transport: str | None = None


@lru_cache(maxsize=1)
def system_catalog() -> NameIndex[SystemSpec]:
    """The built-in systems (clusters.yaml), validated once per process."""
    data = yaml.safe_load(CLUSTERS_FILE.read_text(encoding="utf-8"))
    index: NameIndex[SystemSpec] = NameIndex("cluster")
    for raw in data.get("clusters", []):
        try:
            spec = SystemSpec.model_validate(raw)
        except Exception as e:  # noqa: BLE001 - shipped data; report the entry
            raise DataError(f"clusters.yaml: entry {raw.get('name', '?')!r}: {e}") from None
        index.add(spec.name, spec.aliases, spec)
    return index


def parse_cluster(text: str) -> ClusterShape:
    """Resolve 'NAME:COUNT' (COUNT units, default 1) into a ClusterShape; one-line errors."""
    name, _, count = text.strip().partition(":")
    sys_ = system_catalog().get(name)
    try:
        n = int(count) if count.strip() else 1
    except ValueError:
        raise SpecError(f"cluster={text!r}: COUNT must be a whole number of {sys_.unit}s") from None
    if n <= 0:
        raise SpecError(f"cluster={text!r}: COUNT must be at least 1 {sys_.unit}")
    return ClusterShape(sys_.gpu, n * sys_.unit_gpus, sys_.gpus_per_node, sys_.nvlink_domain, sys_.transport)


def list_systems() -> list[SystemSpec]:
    """Every built-in system shorthand."""
    idx = system_catalog()
    return [idx.get(n) for n in idx.canonical]
