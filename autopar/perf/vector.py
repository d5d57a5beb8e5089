"""The analytical model over a block of strategies: `estimate_columns(model, cluster, workload, columns)`.

Why: exhaustive search and the search's batches evaluate tens of thousands of strategies; the single
`estimate` spends most of its time on Python objects, not arithmetic. This path never builds a Strategy or
an Estimate per row. It is the same model, not a copy: the per-row formulas (stage times, DualPipe overlap,
memory and its peak over stages, DP time, bubble and p2p, optimizer step and offload, assembly) are the
functions of perf/estimate.py, memory.py, fsdp.py, pipeline.py, comm.py and offload.py, written once on
floats or arrays (perf/arith.py); the heavy per-key pieces (layer costs, CP cost, stage specs, collectives)
are called once per distinct key (perf/vector_keys.py). What this module and vector_*.py add is the block
plumbing: stage slots, grouping, selection over slots, the ZeRO split. A row equals the single estimate
bit for bit (tests/perf/test_batch_model.py).

Rows with an unset knob (vpp, micro_batch, recompute, pp_schedule, zero, activation_offload_layers, or etp
of an MoE model) need the completion search of perf/complete.py: they go through the single
`estimate(..., check=False)` and are filled in (VectorEstimates.n_fallback counts them). Like
`estimate(check=False)`, nothing here checks the rules: the search space only holds valid strategies.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from autopar.perf import act_offload, comm, offload, pipeline
from autopar.perf.context import PerfContext, perf_context
from autopar.perf.estimate import (
    StageTime,
    crosses_node,
    estimate,
    grad_accum_time,
    headline,
    layer_mean,
    optimizer_time,
    time_breakdown,
)
from autopar.perf.fsdp import DpGroups, DpTime
from autopar.perf.memory import Sharding, StageParams
from autopar.perf.types import STEP_PARTS, Estimate, TimeBreakdown, step_total
from autopar.perf.vector_columns import RECOMPUTE_CODES, SCHEDULE_CODES, StrategyColumns, columns_of
from autopar.perf.vector_dp import dp_time
from autopar.perf.vector_keys import per_key_floats
from autopar.perf.vector_memory import MEMORY_PARTS, dp_groups, peak_memory, sharding, stage_params
from autopar.perf.vector_stages import (
    DUALPIPE,
    LayerTable,
    Rows,
    StageSlots,
    cp_costs,
    layer_table,
    mean_total,
    rows_of,
    slot_times,
    stage_slots,
)
from autopar.specs import ClusterSpec, ModelSpec, Workload

__all__ = [
    "BOTTLENECK_PARTS",
    "TIME_PARTS",
    "StrategyColumns",
    "VectorEstimates",
    "columns_of",
    "estimate_columns",
]

# TimeBreakdown fields, in its order; BOTTLENECK_PARTS as Estimate.bottleneck ranks them (no "recompute").
TIME_PARTS: tuple[str, ...] = TimeBreakdown.__slots__
BOTTLENECK_PARTS: tuple[str, ...] = tuple(x for x in TIME_PARTS if x != "recompute")


@dataclass(frozen=True)
class VectorEstimates:
    """Estimate figures of n strategies, one array per figure, named as in Estimate; `time` holds every
    TimeBreakdown field (TIME_PARTS) and `mem` the MemoryBreakdown fields of the peak stage (MEMORY_PARTS;
    their sum is peak_memory_bytes). capacity_bytes is the cluster's; n_fallback counts the rows that went
    through the scalar estimate (unset knobs)."""

    step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    peak_memory_bytes: np.ndarray  # Estimate.memory.total
    headroom_bytes: np.ndarray
    fits: np.ndarray  # bool
    mfu: np.ndarray
    mfu_causal: np.ndarray
    hfu: np.ndarray
    model_tflops_per_gpu: np.ndarray
    hw_tflops_per_gpu: np.ndarray
    bottleneck: np.ndarray  # index into BOTTLENECK_PARTS
    time: dict[str, np.ndarray]  # TIME_PARTS
    mem: dict[str, np.ndarray]  # MEMORY_PARTS
    capacity_bytes: float
    n_fallback: int = 0

    def __len__(self) -> int:
        return len(self.step_time_s)


def estimate_columns(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cols: StrategyColumns
) -> VectorEstimates:
    """Predict memory and step time of every strategy of a block (as `estimate(..., check=False)` would)."""
    ctx = perf_context(model, cluster, workload)
    unset = _unset(model, cols)
    if (workload.recompute_method, workload.recompute_num_layers) != ("uniform", 1):
        unset |= cols.recompute == RECOMPUTE_CODES.index("full")  # a spread recompute: the scalar model's
    if not unset.any():
        return _vector(ctx, cols)
    out = _empty(ctx, len(cols))
    done = ~unset
    if done.any():
        _fill(out, np.nonzero(done)[0], _vector(ctx, cols.take(done)))
    for i in np.nonzero(unset)[0]:
        _fill_one(out, int(i), estimate(model, cluster, workload, cols.strategy_at(int(i)), check=False))
    return _frozen(ctx, out, int(unset.sum()))


def _unset(model: ModelSpec, c: StrategyColumns) -> np.ndarray:
    """Rows with a knob the scalar completion search must fill (Strategy.unset_knobs)."""
    bad = (c.vpp <= 0) | (c.micro_batch <= 0) | (c.recompute < 0) | (c.pp_schedule < 0) | (c.zero < 0)
    bad |= c.activation_offload_layers < 0
    return bad | (c.etp <= 0) if model.is_moe else bad


def _vector(ctx: PerfContext, cols: StrategyColumns) -> VectorEstimates:
    """The whole model on arrays (every knob set)."""
    if len(cols) == 0:
        return _frozen(ctx, _empty(ctx, 0), 0)
    r = rows_of(ctx, cols)
    lt = layer_table(ctx, r)
    st = stage_slots(ctx, r)
    dual = (r.p > 1) & (r.sched == DUALPIPE)
    times = slot_times(lt, st, cp_costs(ctx, r, lt), dual)
    g = dp_groups(r)
    sh = sharding(ctx, r, g)
    params = stage_params(ctx, r, st)
    mem = peak_memory(lt, r, st, params, sh)
    tb = _time_breakdown(ctx, r, lt, st, times, g, sh, params)
    return _assemble(ctx, r, tb, mem)


def _slowest(times: StageTime, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row index, slot) of the first slot with the largest total (max over st.times)."""
    slot = np.argmax(np.where(valid, times.total, -np.inf), axis=1)
    return np.arange(len(slot)), slot


def _time_breakdown(
    ctx: PerfContext,
    r: Rows,
    lt: LayerTable,
    st: StageSlots,
    times: StageTime,
    g: DpGroups,
    sh: Sharding,
    params: StageParams,
) -> dict[str, np.ndarray]:
    """TimeBreakdown fields per row (perf/estimate.py `_estimate`)."""
    rows, slot = _slowest(times, st.valid)
    slow = StageTime(*(getattr(times, f)[rows, slot] for f in StageTime.__slots__))
    st0 = StageTime(*(getattr(times, f)[:, 0] for f in StageTime.__slots__))
    p0 = StageParams(*(getattr(_slot0(params), f.name)[:, 0] for f in fields(StageParams)))
    dp_exposed, dp_overlapped = dp_time(ctx, r, g, p0, st0)
    bubble, pp_comm = _pipeline(ctx, r, lt, mean_total(r.p, np.where(st.valid, times.total, 0.0)))
    opt = optimizer_time(ctx, _slot0(params), sh, (slow.comp - slow.fwd)[:, None])[:, 0]
    acc = grad_accum_time(ctx, _slot0(params), sh, r.m[:, None])[:, 0]
    tb = time_breakdown(
        r.m, slow, DpTime(dp_exposed, dp_overlapped), bubble, pp_comm, opt, _act_offload(ctx, r, lt, st), acc
    )
    return {k: getattr(tb, k) for k in TIME_PARTS}


def _pipeline(ctx: PerfContext, r: Rows, lt: LayerTable, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pipeline.pipeline_time: (bubble, p2p) seconds per step; the bubble fraction once per distinct key."""
    send = comm.p2p_of(lt.col["pp_bytes"], crosses_node(ctx, r.t, r.c, r.d, r.p), ctx.links)
    v = np.where(r.p > 1, r.v, 1)
    frac = per_key_floats(
        lambda s, p, m, vv: pipeline.bubble_fraction(SCHEDULE_CODES[s], p, m, vv),
        (r.sched, r.p, r.m, v),
        (int,) * 4,
    )
    out: tuple[np.ndarray, np.ndarray] = pipeline.pipeline_time_of(frac, r.p, r.m, v, mean, send)
    return out


def _slot0(params: StageParams) -> StageParams:
    """The first stage's parameters as (n, 1) columns."""
    return StageParams(
        *(np.broadcast_to(getattr(params, f.name), params.non_expert.shape)[:, :1] for f in fields(params))
    )


def _act_offload(ctx: PerfContext, r: Rows, lt: LayerTable, st: StageSlots) -> np.ndarray:
    """Exposed activation-offload seconds per micro-batch (`_offload_time`), once per distinct input."""
    bw = offload.host_link_bw(ctx.cluster.gpu)

    def one(k: int, nd: int, nm: int, n: int) -> float:
        if not n:
            return 0.0
        lc, mix = lt.costs[k], (nd, nm)
        fwd = layer_mean(mix, lc.dense_fwd, lc.moe_fwd)
        bwd = layer_mean(mix, lc.dense_bwd, lc.moe_bwd)
        act = layer_mean(mix, lc.act_dense, lc.act_moe)
        return act_offload.offload_cost(nd + nm, n, act, fwd, bwd, bw).exposed_s

    if not (r.ao > 0).any():
        return np.zeros(len(r.ao))
    return per_key_floats(one, (lt.inv, st.nd[:, 0], st.nm[:, 0], r.ao), (int,) * 4)


def _assemble(
    ctx: PerfContext, r: Rows, tb: dict[str, np.ndarray], mem: dict[str, np.ndarray]
) -> VectorEstimates:
    """Headline figures from the breakdowns (perf/estimate.py `_assemble`)."""
    t = tb
    step = step_total([t[k] for k in STEP_PARTS])
    hw = np.array([ctx.flops.hardware[x] for x in RECOMPUTE_CODES])[r.rc]
    headroom = ctx.capacity - mem["total"]
    bottleneck = np.argmax(np.stack([t[k] for k in BOTTLENECK_PARTS], axis=1), axis=1)
    return VectorEstimates(
        step_time_s=step,
        peak_memory_bytes=mem["total"],
        headroom_bytes=headroom,
        fits=headroom >= 0,
        bottleneck=bottleneck,
        time=tb,
        mem={k: mem[k] for k in MEMORY_PARTS},
        capacity_bytes=ctx.capacity,
        **headline(ctx, step, hw),
    )


# ---- filling in scalar results -----------------------------------------------------------------------------
_HEADLINE = tuple(
    f.name for f in fields(VectorEstimates) if f.name not in ("time", "mem", "capacity_bytes", "n_fallback")
)


def _empty(ctx: PerfContext, n: int) -> dict[str, Any]:
    """Mutable arrays for n rows."""
    out: dict[str, Any] = {k: np.zeros(n) for k in _HEADLINE}
    out["fits"], out["bottleneck"] = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    out["time"] = {k: np.zeros(n) for k in TIME_PARTS}
    out["mem"] = {k: np.zeros(n) for k in MEMORY_PARTS}
    return out


def _fill(out: dict[str, Any], rows: np.ndarray, part: VectorEstimates) -> None:
    """Scatter a vector result into `out` at `rows`."""
    for k in _HEADLINE:
        out[k][rows] = getattr(part, k)
    for group in ("time", "mem"):
        for k, v in getattr(part, group).items():
            out[group][k][rows] = v


def _fill_one(out: dict[str, Any], i: int, e: Estimate) -> None:
    """Write one scalar Estimate into row i."""
    for k in _HEADLINE:
        if k == "peak_memory_bytes":
            out[k][i] = e.memory.total
        elif k == "bottleneck":
            out[k][i] = BOTTLENECK_PARTS.index(e.bottleneck)
        else:
            out[k][i] = getattr(e, k)
    for k in TIME_PARTS:
        out["time"][k][i] = getattr(e.time, k)
    for k in MEMORY_PARTS:
        out["mem"][k][i] = getattr(e.memory, k)


def _frozen(ctx: PerfContext, out: dict[str, Any], n_fallback: int) -> VectorEstimates:
    return VectorEstimates(**out, capacity_bytes=ctx.capacity, n_fallback=n_fallback)
