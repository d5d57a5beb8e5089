"""Batch model, part 1: the block's knobs as rows, per-layer costs, pipeline stages, stage times.

Per-layer costs, CP cost and stage specs are the single-strategy functions called once per distinct key
(perf/vector_keys.py); the stage times are perf/estimate.py `stage_time` / `dualpipe` run on (n, 3)
arrays, one column per distinct stage slot: 0 = first, 1 = middle (pp > 2), 2 = last (pp > 1). Slots a
pipeline does not have are marked invalid.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace

import numpy as np

from autopar.layouts import EP_OVERLAP_STACKS, ep_overlap_recompute_ok
from autopar.perf.context import PerfContext
from autopar.perf.estimate import (
    StageSpec,
    StageTime,
    cp_cost_of,
    dualpipe,
    mean_stage_time,
    micro_batches,
    stage_specs_of,
    stage_time,
)
from autopar.perf.layers import LayerCosts, layer_costs
from autopar.perf.memory import state_bytes_of
from autopar.perf.vector_columns import (
    CP_COMM_CODES,
    RECOMPUTE_CODES,
    SCHEDULE_CODES,
    STATES_CODES,
    StrategyColumns,
)
from autopar.perf.vector_keys import memo, per_key

LC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LayerCosts))
SLOTS = 3  # first, middle, last
DUALPIPE = SCHEDULE_CODES.index("dualpipe")


@dataclass(frozen=True)
class Rows:
    """The knobs of a complete block (no unset knob), normalised as the scalar model reads them."""

    t: np.ndarray
    p: np.ndarray
    c: np.ndarray
    d: np.ndarray  # dp filled from the cluster when 0 (Strategy.with_dp)
    e: np.ndarray
    te: np.ndarray  # expert TP (etp or tp)
    v: np.ndarray
    sp: np.ndarray  # sequence parallelism as the layer costs see it (sp and tp > 1)
    zero: np.ndarray
    ds: np.ndarray  # dp_shard, 0 = None
    mb: np.ndarray
    rc: np.ndarray
    sched: np.ndarray
    cpc: np.ndarray
    split: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    state_bytes: np.ndarray
    offload: np.ndarray
    ao: np.ndarray
    m: np.ndarray  # micro-batches per step per pipeline


def rows_of(ctx: PerfContext, s: StrategyColumns) -> Rows:
    """Normalised rows of a block whose knobs are all set."""
    t, p, c = s.tp, s.pp, s.cp
    d = np.where(s.dp > 0, s.dp, np.maximum(1, ctx.W // (t * p * c)))
    w, h = ctx.w, ctx.model.hidden
    # the workload optimizer's bytes per state-precision code, the last entry its own (an unset code, -1)
    table = [state_bytes_of(w.optimizer, w.master_weights, h, x) for x in (*STATES_CODES, None)]
    state_bytes = np.array(table)[np.where(s.optimizer_states >= 0, s.optimizer_states, len(STATES_CODES))]
    split = (s.pp_first_layers, s.pp_last_layers, s.pp_account_embedding, s.pp_account_loss)
    return Rows(
        t, p, c, d, s.ep, np.where(s.etp > 0, s.etp, t), s.vpp, s.sp & (t > 1), s.zero, s.dp_shard,
        s.micro_batch, s.recompute, s.pp_schedule, s.cp_comm, split, state_bytes, s.optimizer_offload,
        s.activation_offload_layers, micro_batches(ctx.w, s.micro_batch, d),
    )  # fmt: skip


@dataclass(frozen=True)
class LayerTable:
    """Per-layer costs of every row: the distinct LayerCosts, each row's key, and the fields as columns."""

    costs: list[LayerCosts]
    keys: list[tuple[int, int, int, int, int, bool, str, bool]]
    inv: np.ndarray
    col: dict[str, np.ndarray]


def ep_overlap_column(ctx: PerfContext, r: Rows) -> np.ndarray:
    """layouts.ep_overlap_applies of every row, as a boolean column."""
    w = ctx.w
    if not w.moe_ep_overlap or w.framework not in EP_OVERLAP_STACKS:
        return np.zeros(len(r.t), dtype=bool)
    rc_ok = np.array([ep_overlap_recompute_ok(x) for x in RECOMPUTE_CODES], dtype=bool)[r.rc]
    out: np.ndarray = (r.e > 1) & rc_ok & ((r.p == 1) | (r.v > 1))
    return out


def layer_table(ctx: PerfContext, r: Rows) -> LayerTable:
    """`layer_costs` once per distinct (tp, cp, micro-batch, ep, etp, sp, recompute, EP overlap)."""
    keys: list[tuple[int, int, int, int, int, bool, str, bool]] = []

    def one(t: int, c: int, b: int, e: int, te: int, sp: bool, rc: int, ovl: bool) -> LayerCosts:
        keys.append((t, c, b, e, te, sp, RECOMPUTE_CODES[rc], ovl))
        return layer_costs(ctx, *keys[-1])

    cols = (r.t, r.c, r.mb, r.e, r.te, r.sp, r.rc, ep_overlap_column(ctx, r))
    costs, inv = per_key(one, cols, (int, int, int, int, int, bool, int, bool))
    table = np.array([[getattr(lc, f) for f in LC_FIELDS] for lc in costs], dtype=np.float64)[inv]
    return LayerTable(costs, keys, inv, {f: table[:, i] for i, f in enumerate(LC_FIELDS)})


def cp_costs(ctx: PerfContext, r: Rows, lt: LayerTable) -> tuple[np.ndarray, np.ndarray]:
    """(comm, compute) of the CP cost per layer per micro-batch, once per distinct (layer key, CP variant)."""
    cache = memo(ctx, "cp_cost")

    def one(k: int, variant: int) -> tuple[float, float]:
        key = (lt.keys[k], variant)
        hit = cache.get(key)
        if hit is None:
            t, c, b, _, _, _, rc, _ = lt.keys[k]
            x = cp_cost_of(ctx, t, c, b, rc, CP_COMM_CODES[variant], lt.costs[k])
            hit = cache[key] = (x.comm, x.compute)
        return hit

    out, inv = per_key(one, (lt.inv, r.cpc), (int, int))
    arr = np.asarray(out, dtype=np.float64)[inv]
    return arr[:, 0], arr[:, 1]


@dataclass(frozen=True)
class StageSlots:
    """The distinct stages of every row as (n, 3) arrays (slot 0 first, 1 middle, 2 last)."""

    nd: np.ndarray
    nm: np.ndarray
    first: np.ndarray
    last: np.ndarray
    logits: np.ndarray
    inflight: np.ndarray
    valid: np.ndarray


def _slot_rows(specs: tuple[StageSpec, ...]) -> list[tuple[float, ...]]:
    """One key's stage specs as 3 slot rows (nd, nm, first, last, logits, inflight, valid)."""
    rows: list[tuple[float, ...]] = [(0.0,) * 7] * SLOTS
    slots = (0,) if len(specs) == 1 else (0, 2) if len(specs) == 2 else (0, 1, 2)
    for k, sp in zip(slots, specs, strict=True):
        rows[k] = (*sp.mix, sp.first, sp.last, sp.logits, sp.inflight, 1.0)
    return rows


def stage_slots(ctx: PerfContext, r: Rows) -> StageSlots:
    """`stage_specs_of` once per distinct (pp, vpp, schedule, micro-batches, split)."""
    model, cache = ctx.model, memo(ctx, "stages")

    def one(
        p: int, v: int, sched: int, m: int, f: int, la: int, emb: bool, loss: bool
    ) -> list[tuple[float, ...]]:
        key = (p, v, sched, m, f, la, emb, loss)
        hit = cache.get(key)
        if hit is None:
            split = (f if f >= 0 else None, la if la >= 0 else None, emb, loss)
            hit = cache[key] = _slot_rows(stage_specs_of(model, p, v, SCHEDULE_CODES[sched], m, split)[0])
        return hit

    cols = (r.p, r.v, r.sched, r.m, *r.split)
    out, inv = per_key(one, cols, (int, int, int, int, int, int, bool, bool))
    a = np.asarray(out, dtype=np.float64)[inv]  # (n, 3, 7)
    nd, nm = a[:, :, 0].astype(np.int64), a[:, :, 1].astype(np.int64)
    return StageSlots(nd, nm, a[:, :, 2] > 0, a[:, :, 3] > 0, a[:, :, 4] > 0, a[:, :, 5], a[:, :, 6] > 0)


def slot_times(
    lt: LayerTable, st: StageSlots, cpc: tuple[np.ndarray, np.ndarray], dual: np.ndarray
) -> StageTime:
    """perf/estimate.py `stage_time` on every slot ((n, 3) arrays), then DualPipe's overlap on the rows
    that run it (`dualpipe`)."""
    L = SimpleNamespace(**{k: v[:, None] for k, v in lt.col.items()})
    x = stage_time(L, st.nd, st.nm, st.logits, cpc[0][:, None], cpc[1][:, None])
    return dualpipe(x).pick(dual[:, None], x) if dual.any() else x


def mean_total(p: np.ndarray, tot: np.ndarray) -> np.ndarray:
    """Mean time of one micro-batch over the p stages (perf/estimate.py `mean_stage_time`)."""
    with np.errstate(invalid="ignore"):
        out: np.ndarray = mean_stage_time(p, tot[:, 0], tot[:, 1], tot[:, 2])
    return out
