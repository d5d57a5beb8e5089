"""Analytical estimates of run records: one record (`estimate_row`), a table of them (`batch_estimate`, each
distinct configuration once), and the memory of the pipeline stage a record's peak was measured on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from autopar.calibration.records.cells import cell
from autopar.calibration.records.specs import RecordSpecs, row_to_specs
from autopar.errors import AutoparError
from autopar.perf.estimate import estimate, stage_memories
from autopar.perf.memory import as_measured
from autopar.units import GiB

if TYPE_CHECKING:
    import pandas as pd

PRED_COLUMNS = (
    "id",
    "status",
    "pred_tokens_per_s_per_gpu",
    "pred_step_s",
    "pred_tflops_per_gpu",
    "pred_hw_tflops_per_gpu",
    "pred_mfu",
    "pred_mem_gib_per_gpu",
    "pred_fits",
)


def estimate_row(row: Mapping[str, Any], strict: bool = False, keep: list | None = None) -> dict[str, Any]:
    """Evaluate one run record; status is 'ok' or the reason it can't be evaluated (never raises).
    `keep` (optional) gets (specs, estimate) appended, or None when the row cannot be evaluated."""
    rid = str(cell(row, "id") or "")
    if keep is not None:
        keep.append(None)
    try:
        specs = row_to_specs(row)
        est = estimate(specs.model, specs.cluster, specs.workload, specs.strategy, strict=strict)
        if keep is not None:
            keep[-1] = (specs, est)
    except AutoparError as e:
        return {"id": rid, "status": f"error: {e}"}
    except (ValueError, TypeError) as e:  # pydantic validation of a spec built from the row
        msg = str(e).splitlines()
        return {"id": rid, "status": "error: " + "; ".join(x.strip() for x in msg[:3])}
    except Exception as e:  # noqa: BLE001 - one odd row must not stop a batch; say what happened
        return {"id": rid, "status": f"error: could not evaluate ({type(e).__name__}: {e})"}
    mem = measured_stage_memory(row, specs, est)
    out: dict[str, Any] = {
        "id": rid,
        "status": "ok",
        "pred_tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "pred_step_s": est.step_time_s,
        "pred_tflops_per_gpu": est.model_tflops_per_gpu,
        "pred_hw_tflops_per_gpu": est.hw_tflops_per_gpu,
        "pred_mfu": est.mfu,
        "pred_mem_gib_per_gpu": mem.total / GiB,
        "pred_fits": est.fits,
        "pred_headroom_gib": est.headroom_gib,
        # the whole peak of the most loaded GPU (what must fit) and the usable memory it must fit in; the
        # figure above is the one to compare with the measurement (its stage, counted as the source measured)
        "pred_peak_gib_per_gpu": est.memory.total / GiB,
        "usable_gib": est.headroom_gib + est.memory.total / GiB,
        "bottleneck": est.bottleneck,
    }
    for k, v in mem.as_dict().items():
        out[f"mem_{k}_gib"] = v / GiB
    for k, v in est.time.as_dict().items():
        out[f"time_{k}_s"] = v
    out["assumed"] = "; ".join([*specs.assumed, *est.assumed])
    out["strategy"] = (est.strategy or specs.strategy).label()
    return out


def measured_stage_memory(row: Mapping[str, Any], specs: RecordSpecs, est: Any) -> Any:
    """The memory breakdown to compare with the record's measured peak: the stage its `memory_stage` column
    names (first or last pipeline stage: Megatron-LM logs torch.cuda.memory_stats() on its tensorboard rank, the
    last global rank, on the last stage: megatron/training/global_vars.py `_set_tensorboard_writer`), else the
    estimate's peak over the stages; counted as the source measured it (`memory_metric`: perf/memory.py
    `as_measured`)."""
    stage = specs.knobs.memory_stage
    mem = est.memory
    if stage in ("first", "last") and specs.strategy.pp > 1:
        per_stage = stage_memories(specs.model, specs.cluster, specs.workload, est.strategy or specs.strategy)
        mem = per_stage[0] if stage == "first" else per_stage[-1]
    return as_measured(mem, specs.knobs.memory_metric)


def stage_estimate(row: Mapping[str, Any], specs: RecordSpecs, est: Any) -> Any:
    """`est` with its memory replaced by the stage the record's peak was measured on (measured_stage_memory),
    so that a memory calibration learns and predicts like for like; `est` itself when no stage is stated."""
    import dataclasses

    mem = measured_stage_memory(row, specs, est)
    return est if mem is est.memory else dataclasses.replace(est, memory=mem)


def row_ids(df: pd.DataFrame) -> list[str]:
    """Each row's id as estimate_row reports it ('' when missing)."""
    if "id" not in df.columns:
        return [""] * len(df)
    return [str(cell({"id": v}, "id") or "") for v in df["id"]]


def unique_rows(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, index of the first row of each code): rows equal in every column but `id` share
    a code. A record's prediction depends on its cells and not its id, so a batch evaluates each distinct
    configuration once (a sweep file repeats model/GPU/cluster cells; exact equality, NaN equal to NaN)."""
    cols = [c for c in df.columns if c != "id"]
    if not cols or len(df) == 0:
        return np.arange(len(df)), np.arange(len(df))
    try:
        codes = df.groupby(cols, dropna=False, sort=False).ngroup().to_numpy()
    except TypeError:  # an unhashable cell (a list from JSONL): evaluate every row
        return np.arange(len(df)), np.arange(len(df))
    _, first = np.unique(codes, return_index=True)
    return codes, first


def distinct_records(df: pd.DataFrame) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """(each row's configuration code, the distinct configurations as records), in unique_rows' order."""
    codes, first = unique_rows(df)
    return codes, df.iloc[first].to_dict(orient="records")


def batch_estimate(
    df: pd.DataFrame, strict: bool = False, keep: list | None = None, distinct: tuple | None = None
) -> pd.DataFrame:
    """Evaluate every row of a run-record table; bad rows get status='error: ...' and the rest still run.
    Rows repeating a configuration (all cells but the id equal) are evaluated once; `keep` (optional)
    gets each distinct configuration's (specs, estimate) or None, in the order of unique_rows;
    `distinct` = (codes, distinct records) when the caller has them already (distinct_records)."""
    import pandas as pd

    from autopar.perf.complete import shared_candidates

    codes, uniq = distinct if distinct is not None else distinct_records(df)
    with shared_candidates():  # rows repeating a run with other knobs share their completions' candidates
        rows = [estimate_row(r, strict=strict, keep=keep) for r in uniq]
    out = pd.DataFrame(rows)
    for col in PRED_COLUMNS:
        if col not in out.columns:
            out[col] = None
    first_cols = list(PRED_COLUMNS)
    out = out[first_cols + [c for c in out.columns if c not in first_cols]]
    out = out.iloc[codes].reset_index(drop=True)
    out["id"] = row_ids(df)
    return out
