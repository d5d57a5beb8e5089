"""Vectorized estimator, part 2: parameters held, model states, activations and the peak over stages.

Mirrors perf/memory.py (stage_params, model_states, stage_activations, stage_memory) and perf/estimate.py
`_sharding`/`_memory` on (n, 3) stage-slot arrays (perf/vector_stages.py); the peak is the first slot with
the largest total, as the scalar loop keeps the first maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autopar.perf import act_offload, memory
from autopar.perf.context import PerfContext
from autopar.perf.estimate import ZERO3_PREFETCH_DEPTH
from autopar.perf.finetune import trainable_fraction
from autopar.perf.fsdp import DpGroups
from autopar.perf.layers import CUDA_CONTEXT_BYTES, FRAGMENTATION, NCCL_BYTES
from autopar.perf.vector_stages import DUALPIPE, LayerTable, Rows, StageSlots

MEMORY_PARTS: tuple[str, ...] = (
    "weights",
    "grads",
    "optimizer",
    "activations",
    "logits",
    "buffers",
    "overhead",
)
FULL = 2  # RECOMPUTE_CODES.index("full")


def dp_groups(r: Rows) -> DpGroups:
    """fsdp.dp_groups on arrays: dense shard group, HSDP replicas, expert data-parallel group."""
    ds = np.where((r.ds > 0) & (r.d % np.maximum(r.ds, 1) == 0), r.ds, r.d)
    n_edp = np.maximum(1, (r.t * r.c * r.d) // (r.e * r.te))
    return DpGroups(ds * r.c, r.t, r.d // ds, r.t * r.c * ds, n_edp, r.te * r.e)


@dataclass(frozen=True)
class Params:
    """memory.StageParams per row and slot."""

    ne: np.ndarray
    ex: np.ndarray
    biggest: np.ndarray


def stage_params(ctx: PerfContext, r: Rows, st: StageSlots) -> Params:
    """memory.stage_params on every slot."""
    pc, model = ctx.pc, ctx.model
    t, p = r.t[:, None], r.p[:, None]
    attn = (pc.attention - pc.attention_tp_replicated) / t + pc.attention_tp_replicated
    dense_layer = attn + pc.dense_mlp / t + pc.norms
    moe_ne = attn + pc.norms + pc.router + pc.shared_expert / t
    ne = st.nd * dense_layer + st.nm * moe_ne
    ne = ne + np.where(st.first, pc.embedding / t, 0.0)
    out = pc.output if pc.output else np.where(p > 1, pc.embedding, 0.0)
    ne = ne + np.where(st.last, out / t + pc.final_norm, 0.0)
    experts_layer = model.experts * pc.expert / (r.e * r.te)[:, None]
    ex = st.nm * experts_layer
    big = np.maximum(np.where(st.nd > 0, dense_layer, 0.0), np.where(st.nm > 0, moe_ne + experts_layer, 0.0))
    return Params(ne, ex, big)


@dataclass(frozen=True)
class Shard:
    """memory.Sharding per row ((n, 1) arrays, scalars where the context fixes them)."""

    zero: np.ndarray
    n_shard: np.ndarray
    n_eshard: np.ndarray
    state_bytes: np.ndarray
    offload: np.ndarray
    gathered: np.ndarray  # ZeRO-3 with PP
    fp8: bool
    units: float
    unit_fraction: float
    accum: float
    trainable: float


def sharding(ctx: PerfContext, r: Rows, g: DpGroups) -> Shard:
    """perf/estimate.py `_sharding` on arrays."""
    n_coll = ctx.sw.zero3_collectives_per_layer
    col = lambda a: np.asarray(a)[:, None]  # noqa: E731
    return Shard(
        col(r.zero), col(g.n_shard), col(g.n_edp), col(r.state_bytes), col(r.offload), col(r.p > 1),
        ctx.fp8, 1 + ZERO3_PREFETCH_DEPTH, 1.0 if n_coll == 1 else 3.0 / n_coll,
        memory.ACCUM_GRAD_BYTES.get(ctx.w.framework, 2.0), trainable_fraction(ctx.model, ctx.w, ctx.pc),
    )  # fmt: skip


def model_states(sp: Params, sh: Shard) -> tuple[np.ndarray, ...]:
    """(weights, grads, optimizer, buffers) bytes per slot: memory.model_states for both ZeRO branches."""
    ne, ex, big = sp.ne, sp.ex, sp.biggest
    on_gpu = 1.0 - sh.offload
    local = ne / sh.n_shard + ex / sh.n_eshard
    w3, g3, o3 = 2.0 * local, 2.0 * local * sh.trainable, sh.state_bytes * local * on_gpu * sh.trainable
    b3 = np.where(
        sh.gathered,
        (ne + ex) * (2.0 + sh.accum) + big * 4.0,
        big * sh.unit_fraction * (2.0 * sh.units + 2.0 + 4.0),
    )
    n_opt = np.where(sh.zero >= 1, sh.n_shard, 1), np.where(sh.zero >= 1, sh.n_eshard, 1)
    n_grd = np.where(sh.zero >= 2, sh.n_shard, 1), np.where(sh.zero >= 2, sh.n_eshard, 1)
    w = 2.0 * (ne + ex)
    g = 4.0 * (ne / n_grd[0] + ex / n_grd[1]) * sh.trainable
    o = sh.state_bytes * (ne / n_opt[0] + ex / n_opt[1]) * on_gpu * sh.trainable
    b = memory.DDP_BUCKET_BYTES + (2.0 * big if sh.fp8 else 0.0)
    z3 = sh.zero == 3
    return np.where(z3, w3, w), np.where(z3, g3, g), np.where(z3, o3, o), np.where(z3, b3, b)


def activations(lt: LayerTable, r: Rows, st: StageSlots) -> np.ndarray:
    """memory.stage_activations per slot (activation offload as act_offload.resident_saving_layers)."""
    L = lt.col
    total = (st.nd * L["act_dense"][:, None] + st.nm * L["act_moe"][:, None]) * st.inflight
    off = np.maximum(0, r.ao - act_offload.IN_FLIGHT_GROUPS)[:, None]
    total = total - np.minimum(total, off * total / np.maximum(1, st.nd + st.nm))
    full = (
        np.where(st.nm > 0, L["act_moe_full"][:, None], L["act_dense_full"][:, None]) - L["pp_bytes"][:, None]
    )
    return np.where((r.rc == FULL)[:, None], total + full, total)


def peak_memory(lt: LayerTable, r: Rows, st: StageSlots, sp: Params, sh: Shard) -> dict[str, np.ndarray]:
    """The breakdown of the slot with the largest total (memory.stage_memory; DualPipe holds 2 copies)."""
    wts, grd, opt, buf = model_states(sp, sh)
    act = activations(lt, r, st)
    L = lt.col
    lg = np.where(st.last, L["logits_mem"][:, None], 0.0) + np.where(st.first, L["embed_mem"][:, None], 0.0)
    over = CUDA_CONTEXT_BYTES + NCCL_BYTES + FRAGMENTATION * (act + lg + buf)
    k = np.where((r.p > 1) & (r.sched == DUALPIPE), 2.0, 1.0)[:, None]
    parts = (k * wts, k * grd, k * opt, act, lg, buf, over)
    total = parts[0] + parts[1] + parts[2] + parts[3] + parts[4] + parts[5] + parts[6]
    best = np.argmax(np.where(st.valid, total, -np.inf), axis=1)
    rows = np.arange(len(best))
    out = {
        name: np.broadcast_to(x, total.shape)[rows, best] for name, x in zip(MEMORY_PARTS, parts, strict=True)
    }
    out["total"] = total[rows, best]
    return out
