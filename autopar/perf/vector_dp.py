"""Vectorized estimator, part 3: data-parallel communication (DDP / ZeRO-1/2 buckets, ZeRO-3/FSDP/HSDP).

The formulas are perf/estimate.py's `ddp_dp_time` / `zero3_dp_time` and perf/fsdp.py's, run on arrays;
what this module adds is the per-key side: each collective's time (comm.all_reduce etc., with their
placement branches) and each ZeRO-3 unit are computed once per distinct (bytes, group size, stride) and
gathered back to the rows, and the rows are split by ZeRO stage.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from autopar.perf import fsdp
from autopar.perf.arith import Num
from autopar.perf.context import PerfContext
from autopar.perf.estimate import StageTime, UnitFn, ddp_dp_time, zero3_comm_bytes, zero3_dp_time
from autopar.perf.fsdp import DpGroups, Zero3Unit
from autopar.perf.memory import StageParams
from autopar.perf.vector_keys import memo, per_key_floats
from autopar.perf.vector_stages import Rows


def _collective(ctx: PerfContext) -> fsdp.Collective:
    """fsdp.collectives on arrays: each distinct (kind, bytes, size, stride) computed once (memoised)."""
    cache, one_of = memo(ctx, "collective"), fsdp.collectives(ctx.links)

    def rows(kind: int, nbytes: Num, size: Num, stride: Num) -> Num:
        def one(b: float, n: int, s: int) -> float:
            key = (kind, b, n, s)
            hit = cache.get(key)
            if hit is None:
                hit = cache[key] = one_of(kind, b, n, s)
            return float(hit)

        return per_key_floats(one, (nbytes, size, stride), (float, int, int))

    return rows


def _unit(ctx: PerfContext) -> UnitFn:
    """fsdp.zero3_unit on arrays, once per distinct input (memoised)."""
    cache = memo(ctx, "zero3_unit")
    wb, gb = zero3_comm_bytes(ctx)  # per problem, not per key

    def rows(ne: Num, ex: Num, g: DpGroups, n_coll: int) -> Zero3Unit:
        def one(a: float, b: float, *grp: int) -> tuple[float, float, float]:
            key = (a, b, grp, n_coll)
            hit = cache.get(key)
            if hit is None:
                u = fsdp.zero3_unit(a, b, DpGroups(*grp), ctx.links, gb, n_coll, wb)
                hit = cache[key] = (u.ag, u.rs, u.ar)
            return hit

        n = len(g.n_shard)
        grp = (g.n_shard, g.shard_stride, g.n_rep, g.rep_stride, g.n_edp, g.edp_stride)
        cols = (np.broadcast_to(ne, n), np.broadcast_to(ex, n), *grp)
        u = per_key_floats(one, cols, (float, float, int, int, int, int, int, int))
        return Zero3Unit(u[:, 0], u[:, 1], u[:, 2])

    return rows


def dp_time(
    ctx: PerfContext, r: Rows, g: DpGroups, p0: StageParams, st0: StageTime
) -> tuple[np.ndarray, np.ndarray]:
    """(exposed, overlapped) data-parallel seconds per row: DDP / ZeRO-1/2 rows and ZeRO-3 rows."""
    n = len(r.t)
    exposed, overlapped = np.zeros(n), np.zeros(n)
    z3 = r.zero == 3
    if (~z3).any():
        k = ~z3
        x = ddp_dp_time(
            ctx, r.zero[k], _take(g, k), _take(p0, k), _take(st0, k), r.m[k], r.p[k], _collective(ctx)
        )
        exposed[k], overlapped[k] = x.exposed, x.overlapped
    if z3.any():
        k = z3
        x = zero3_dp_time(ctx, r.t[k], r.p[k], _take(g, k), _take(p0, k), _take(st0, k), r.m[k], _unit(ctx))
        exposed[k], overlapped[k] = x.exposed, x.overlapped
    return exposed, overlapped


def _take(x: Any, k: np.ndarray) -> Any:
    """The rows selected by k of a dataclass of arrays (DpGroups, StageParams, StageTime)."""
    return type(x)(*(np.asarray(getattr(x, f.name))[k] for f in fields(x)))
