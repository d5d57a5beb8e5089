"""Vectorized estimator, part 2: parameters held, model states, activations and the peak over stages.

The formulas are perf/memory.py's (stage_params, stage_memory_of) and perf/estimate.py's `sharding_of`,
run on (n, 3) stage-slot arrays (perf/vector_stages.py); the peak is the first slot with the largest
total, as the scalar loop keeps the first maximum.
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import numpy as np

from autopar.knobs import reruns_layer_forward
from autopar.perf import act_offload, fsdp, memory
from autopar.perf.context import PerfContext
from autopar.perf.estimate import sharding_of
from autopar.perf.fsdp import DpGroups
from autopar.perf.types import MemoryBreakdown
from autopar.perf.vector_columns import RECOMPUTE_CODES
from autopar.perf.vector_stages import DUALPIPE, LayerTable, Rows, StageSlots

MEMORY_PARTS: tuple[str, ...] = MemoryBreakdown.__slots__
# per recompute code: whether the mode re-runs a layer's forward in the backward (full, MaxText remat policies)
RERUNS_LAYER = np.array([reruns_layer_forward(r) for r in RECOMPUTE_CODES], dtype=bool)


def dp_groups(r: Rows) -> DpGroups:
    """fsdp.dp_groups on arrays: dense shard group, HSDP replicas, expert data-parallel group."""
    return fsdp.dp_groups(r.t, r.c, r.d, r.e, r.te, r.ds)


def stage_params(ctx: PerfContext, r: Rows, st: StageSlots) -> memory.StageParams:
    """memory.stage_params on every slot."""
    t, p, e, te = (_col(x) for x in (r.t, r.p, r.e, r.te))
    return memory.stage_params(ctx.model, ctx.pc, t, p, e, te, (st.nd, st.nm), st.first, st.last)


def sharding(ctx: PerfContext, r: Rows, g: DpGroups) -> memory.Sharding:
    """perf/estimate.py `sharding_of` on (n, 1) arrays."""
    groups = DpGroups(*(_col(getattr(g, f.name)) for f in fields(DpGroups)))
    return sharding_of(ctx, _col(r.zero), groups, _col(r.state_bytes), _col(r.offload), _col(r.p > 1))


def _col(a: np.ndarray) -> np.ndarray:
    """A row array as an (n, 1) column, to broadcast over the stage slots."""
    return np.asarray(a)[:, None]


def peak_memory(
    lt: LayerTable, r: Rows, st: StageSlots, sp: memory.StageParams, sh: memory.Sharding
) -> dict[str, np.ndarray]:
    """The breakdown of the slot with the largest total (memory.stage_memory; DualPipe holds 2 copies)."""
    L = SimpleNamespace(**{k: v[:, None] for k, v in lt.col.items()})
    off = act_offload.resident_saving_layers(r.ao)[:, None]
    full = RERUNS_LAYER[r.rc][:, None]
    copies = np.where((r.p > 1) & (r.sched == DUALPIPE), 2.0, 1.0)[:, None]
    mb = memory.stage_memory_of(sp, sh, L, st.nd, st.nm, st.inflight, full, st.first, st.last, copies, off)
    total = np.asarray(mb.total)
    best = np.argmax(np.where(st.valid, total, -np.inf), axis=1)
    rows = np.arange(len(best))
    out = {name: np.broadcast_to(getattr(mb, name), total.shape)[rows, best] for name in MEMORY_PARTS}
    out["total"] = total[rows, best]
    return out
