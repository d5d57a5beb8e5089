"""Run records as specs: `row_to_specs` turns one record into model, cluster, workload and strategy.

Empty cells mean "the source is silent"; `row_to_specs` fills architecture and cluster cells with the
framework default and says so in `assumed`; the strategy knobs vpp, micro_batch, recompute, etp, pp_schedule
and zero stay unset and `estimate` completes them (perf/complete.py). The model, workload and strategy are
read by records/model_spec.py, workload_spec.py and strategy_spec.py; the cluster's fabric here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autopar.calibration.records.cells import cell, positive_cell
from autopar.calibration.records.legacy_notes import notes_only_knobs
from autopar.calibration.records.model_spec import gpu_from_row, model_from_row
from autopar.calibration.records.stack_columns import StackKnobs, stack_knobs
from autopar.calibration.records.strategy_spec import strategy_from_row
from autopar.calibration.records.workload_spec import workload_from_row
from autopar.errors import DataError
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload


@dataclass
class RecordSpecs:
    """The specs a run record describes, plus the defaults that were filled in."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    strategy: Strategy
    assumed: list[str] = field(default_factory=list)
    knobs: StackKnobs = field(default_factory=StackKnobs)


def row_to_specs(row: Mapping[str, Any]) -> RecordSpecs:
    """Turn one run record into specs, filling silent cells with framework defaults (listed in `assumed`)."""
    assumed: list[str] = []
    row = _with_legacy_knobs(row, assumed)
    knobs = stack_knobs(row)
    _check_offload(knobs)
    model = model_from_row(row, knobs, assumed)
    gpu = gpu_from_row(row, assumed)
    num_gpus = positive_cell(row, "num_gpus")
    if not num_gpus:
        raise DataError("column 'num_gpus' is empty")
    cluster = ClusterSpec(
        gpu=gpu, num_gpus=num_gpus, gpus_per_node=positive_cell(row, "gpus_per_node"), **_fabric(row, assumed)
    )
    workload = workload_from_row(row, knobs, assumed)
    strategy, workload = strategy_from_row(row, model, cluster, workload, knobs, assumed)
    return RecordSpecs(model, cluster, workload, strategy, assumed, knobs)


def _check_offload(knobs: StackKnobs) -> None:
    """CPU offload the model estimates: none, or the optimizer states (Strategy.optimizer_offload = 1). Parameters
    (FSDP2 CPUOffloadPolicy) and whole-model activation offload are refused rather than estimated as resident."""
    if knobs.cpu_offload in ("params", "activations"):
        raise DataError(
            f"column 'cpu_offload' = {knobs.cpu_offload}: not modelled for run records (optimizer offload is; "
            "Megatron's per-layer activation offload is the 'cpu_offloading_num_layers' column)"
        )


def _with_legacy_knobs(row: Mapping[str, Any], assumed: list[str]) -> Mapping[str, Any]:
    """The row with the stack knobs a file from before issue 44 states only in its notes moved into their
    empty columns (legacy_notes.py, the one place notes are read; `autopar calibrate upgrade` writes them
    into the file), each said in `assumed`."""
    said = notes_only_knobs(row)
    if not said:
        return row
    assumed.extend(
        f"{k}={v} (from the notes of a file without the column: calibrate upgrade)" for k, v in said.items()
    )
    return {**row, **said}


# The scale-out transport a record states (ClusterSpec.transport): optional column `transport`. Unstated:
# InfiniBand (the DGX systems most records ran on).
def _fabric(row: Mapping[str, Any], assumed: list[str]) -> dict[str, Any]:
    """ClusterSpec.transport as the record states it (absent when not stated)."""
    from autopar.specs import TRANSPORTS

    out: dict[str, Any] = {}
    transport = cell(row, "transport")
    if transport is not None:
        if str(transport).lower() not in TRANSPORTS:
            raise DataError(f"transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
        out["transport"] = str(transport).lower()
    out.update(_internode_bw(row, assumed))
    return out


def _internode_bw(row: Mapping[str, Any], assumed: list[str]) -> dict[str, float]:
    """ClusterSpec.internode_bw (bytes/s per GPU per direction): the record's `internode_gbps` column (GB/s),
    else what its source's hardware description states (calibration/records/fabrics.py), else absent (the GPU's
    catalog default)."""
    from autopar.calibration.records.fabrics import parse_internode_gbps, source_fabrics

    stated = cell(row, "internode_gbps")
    if stated is not None:
        return {"internode_bw": parse_internode_gbps("column 'internode_gbps'", stated) * 1e9}
    known = source_fabrics().get(str(cell(row, "source") or ""))
    if known is None:
        return {}
    assumed.append(f"internode_gbps={known.internode_gbps:g} (the source's hardware: {SOURCE_FABRICS_NOTE})")
    return {"internode_bw": known.internode_gbps * 1e9}


SOURCE_FABRICS_NOTE = "autopar/data/source_fabrics.yaml"
