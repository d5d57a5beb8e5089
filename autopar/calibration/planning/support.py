"""Is a published recipe the measured best of its problem? Measured runs that ran faster per GPU.

A recipe beside the pick (bench/recipes.py, search/evidence.py) stands for "what the experts found
fastest". That holds only where nobody measured a faster layout of the same problem. A measured run
*supports* a pick that beats the recipe when it is the same problem at a nearby scale and was measured
faster per GPU than the recipe:

- the same network (calibration/planning/recipes.py SHAPE_FIELDS), GPU, precision (and FP8 scaling recipe),
  sequence length and software as the record names it (its `framework` text: NeMo's rows name the
  container release, so a newer release's gain is not taken for a layout's): what the per-GPU throughput
  of a layout depends on besides the layout;
- a GPU count within SCALE_DOUBLINGS doublings of the recipe's: novelty's "NVLink domains spanned"
  steps (calibration/evaluation/novelty.py), kept under its knee (KNEE_STEPS = 3.5), within which the calibrated
  band holds without widening;
- sequences per GPU per step within BATCH_DOUBLINGS doubling: the global batch per GPU sets the
  micro-batches a pipeline fills and what each data-parallel exchange is amortised over.

A run on *another stack* of the same system supports it too (`other_stack`): the same network, GPU and
sequence, the same scale rules, run by another framework (`Workload.framework`: NeMo AutoModel's FSDP2
against Megatron-Bridge) at a precision no faster than the recipe's (PRECISION_RANK: a BF16 run backs an FP8
recipe, FP8 GEMMs running at twice the BF16 peak; an FP8 run does not back a BF16 one). It answers issue 21's
"a cited measurement shows the pick's layout really is faster on that system": the hardware is the same, and
the other stack's software is a confound the sentence names. Another *release* of the same stack is not
taken (a newer one's gain would be read as a layout's).

The supporting gain is the fastest such run's measured throughput over the recipe's; a pick's claim beyond
it (claim / gain) is what no measurement backs. The bench (`python bench/recipes.py --export`) writes each
recipe's support into the shipped recipe table (calibration/planning/recipes.py `Support`), so the tool reads no run
record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autopar.calibration.planning.recipes import SHAPE_FIELDS, Support
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

SCALE_DOUBLINGS = 2
BATCH_DOUBLINGS = 1
# How fast a precision's GEMMs run relative to the others (dense peaks: FP8 twice BF16 on every GPU that has
# it, catalog GPUSpec.fp8_flops): a run backs a recipe on another stack only at a rank no higher.
PRECISION_RANK = {"bf16": 0, "fp8": 1}


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run: its problem, its layout and its measured tokens/s per GPU."""

    id: str
    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    strategy: Strategy
    measured: float
    software: str = ""  # the record's `framework` text (release included where the record names it)


def _shape(m: ModelSpec) -> tuple:
    return tuple(getattr(m, f, None) for f in SHAPE_FIELDS)


def _doublings(a: float, b: float) -> float:
    return abs(math.log2(a / b))


def same_system(run: MeasuredRun, model: ModelSpec, cluster: ClusterSpec, workload: Workload) -> bool:
    """Whether `run` trains the same network on the same GPU and sequence at a nearby scale: GPU count and
    sequences per GPU within SCALE_DOUBLINGS and BATCH_DOUBLINGS (module docstring)."""
    w = run.workload
    if _shape(run.model) != _shape(model) or run.cluster.gpu.name != cluster.gpu.name:
        return False
    if w.seq_len != workload.seq_len:
        return False
    if _doublings(run.cluster.num_gpus, cluster.num_gpus) > SCALE_DOUBLINGS:
        return False
    per_gpu = workload.global_batch / cluster.num_gpus
    return _doublings(w.global_batch / run.cluster.num_gpus, per_gpu) <= BATCH_DOUBLINGS


def same_family(
    run: MeasuredRun, model: ModelSpec, cluster: ClusterSpec, workload: Workload, software: str = ""
) -> bool:
    """Whether `run` is the problem (model, cluster, workload, on `software`) at a nearby scale (module
    docstring)."""
    w = run.workload
    if run.software != software or not same_system(run, model, cluster, workload):
        return False
    if (w.precision, w.framework) != (workload.precision, workload.framework):
        return False
    return w.precision != "fp8" or w.fp8_recipe == workload.fp8_recipe


def other_stack(run: MeasuredRun, model: ModelSpec, cluster: ClusterSpec, workload: Workload) -> bool:
    """Whether `run` is the problem on the same system run by another stack, at a precision no faster than
    the recipe's (module docstring)."""
    w = run.workload
    if w.framework == workload.framework or not same_system(run, model, cluster, workload):
        return False
    return PRECISION_RANK[w.precision] <= PRECISION_RANK[workload.precision]


def measured_support(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    recipe_measured: float,
    runs: Iterable[MeasuredRun],
    exclude: str = "",
    software: str = "",
) -> Support | None:
    """The fastest run of the problem's family (on `software`, the recipe record's framework text) or of its
    system on another stack (`other_stack`) measured faster per GPU than the recipe (`recipe_measured`
    tokens/s per GPU), the recipe's own row `exclude` left out; None when the recipe is the measured best.
    Ties go to the smaller id (a fixed order)."""
    best: MeasuredRun | None = None
    for r in runs:
        if r.id == exclude or r.measured <= recipe_measured:
            continue
        if not (
            same_family(r, model, cluster, workload, software) or other_stack(r, model, cluster, workload)
        ):
            continue
        if best is None or (r.measured, best.id) > (best.measured, r.id):
            best = r
    if best is None:
        return None
    w = best.workload
    stack = f"{best.software or w.framework}, {w.precision}" if w.framework != workload.framework else ""
    label, n = best.strategy.label(), best.cluster.num_gpus
    return Support(best.id, label, n, w.global_batch, best.measured, best.measured / recipe_measured, stack)


def runs_from_rows(rows: Iterable[Mapping[Any, Any]]) -> tuple[MeasuredRun, ...]:
    """Run-record rows (calibration/records/columns.py columns) with a measured throughput, as MeasuredRuns; a row
    the records module cannot state as a problem is left out (it is no run of a problem autopar can
    compare)."""
    from autopar.calibration.records.specs import row_to_specs
    from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
    from autopar.errors import AutoparError

    out = []
    for row in rows:
        meas = measured_tokens_per_s_per_gpu(row)[0]
        if meas is None:
            continue
        try:
            s = row_to_specs(row)
        except (AutoparError, ValueError):
            continue
        soft = str(row.get("framework") or "")
        out.append(MeasuredRun(str(row["id"]), s.model, s.cluster, s.workload, s.strategy, meas, soft))
    return tuple(out)


def recipe_support(recipe_id: str, runs: Iterable[MeasuredRun]) -> Support | None:
    """The support for beating the recipe measured as run `recipe_id` (its own problem, software and
    measurement), among `runs`; None when no run has that id or the recipe is the measured best."""
    runs = tuple(runs)
    own = next((r for r in runs if r.id == recipe_id), None)
    if own is None:
        return None
    return measured_support(own.model, own.cluster, own.workload, own.measured, runs, own.id, own.software)
