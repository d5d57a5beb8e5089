"""Vectorized estimator, part 3: data-parallel communication (DDP / ZeRO-1/2 buckets, ZeRO-3/FSDP/HSDP).

Mirrors perf/estimate.py `_dp_time` and perf/fsdp.py: each collective's time (comm.all_reduce etc., with
their placement branches) is computed once per distinct (bytes, group size, stride); the bucket windows and
the ZeRO-3 prefetch rounds, which depend on each row's compute, run on arrays.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from autopar.perf import comm, fsdp
from autopar.perf.context import PerfContext
from autopar.perf.fsdp import DpGroups
from autopar.perf.memory import Sharding
from autopar.perf.vector_keys import memo, per_key_floats
from autopar.perf.vector_stages import Rows

_COLLECTIVES = (comm.all_reduce, comm.reduce_scatter, comm.all_gather)
AR, RS, AG = 0, 1, 2


def _collective(
    ctx: PerfContext, kind: int, nbytes: np.ndarray, size: np.ndarray, stride: np.ndarray
) -> np.ndarray:
    """One collective per row, computed once per distinct (bytes, size, stride)."""
    cache = memo(ctx, "collective")

    def one(b: float, n: int, s: int) -> float:
        key = (kind, b, n, s)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = _COLLECTIVES[kind](b, n, s, ctx.links)
        return hit

    return per_key_floats(one, (nbytes, size, stride), (float, int, int))


def _bucketed(
    ctx: PerfContext, kind: int, params: np.ndarray, bytes_per: float, size: np.ndarray, stride: np.ndarray,
    window: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """fsdp._bucketed: (exposed, overlapped) of buckets issued as gradients are ready."""
    fw = ctx.w.framework
    bucket = per_key_floats(lambda n: fsdp.bucket_params(fw, n, 4.0), (size,), (int,))
    on = (params > 0) & (size > 1)
    n = np.maximum(1, -(-params // bucket))
    per = np.where(
        on,
        _collective(ctx, kind, np.where(on, bytes_per * np.minimum(bucket, params), 0.0), size, stride),
        0.0,
    )
    total = n * per
    exposed = np.maximum(per, total - window)
    return np.where(on, exposed, 0.0), np.where(on, total - exposed, 0.0)


def ddp_time(
    ctx: PerfContext,
    zero: np.ndarray,
    ne: np.ndarray,
    ex: np.ndarray,
    g: DpGroups,
    bwd: np.ndarray,
    fwd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """fsdp.ddp_time: all-reduce (zero 0) or reduce-scatter + all-gather (ZeRO-1/2) of both groups."""
    gb = 4.0
    groups = ((ne, g.n_shard, g.shard_stride), (ex, g.n_edp, g.edp_stride))
    exp0, ovl0 = np.zeros(len(zero)), np.zeros(len(zero))
    exp1, ovl1 = np.zeros(len(zero)), np.zeros(len(zero))
    z0 = zero == 0
    for n_params, size, stride in groups:
        for kind, bytes_per, window, on in ((AR, gb, bwd, z0), (RS, gb, bwd, ~z0), (AG, 2.0, fwd, ~z0)):
            if not on.any():
                continue
            e, o = _bucketed(ctx, kind, n_params[on], bytes_per, size[on], stride[on], window[on])
            if kind == AR:
                exp0[on], ovl0[on] = exp0[on] + e, ovl0[on] + o
            else:
                exp1[on], ovl1[on] = exp1[on] + e, ovl1[on] + o
    return np.where(z0, exp0, exp1), np.where(z0, ovl0, ovl1)


def _unit(ctx: PerfContext, ne: np.ndarray, ex: np.ndarray, g: DpGroups, n_coll: int) -> np.ndarray:
    """fsdp.zero3_unit per row as an (n, 3) array (ag, rs, ar), once per distinct input."""

    cache = memo(ctx, "zero3_unit")

    def one(a: float, b: float, *grp: int) -> tuple[float, float, float]:
        key = (a, b, grp, n_coll)
        hit = cache.get(key)
        if hit is None:
            u = fsdp.zero3_unit(a, b, DpGroups(*grp), ctx.links, ctx.sw.zero3_grad_bytes, n_coll)
            hit = cache[key] = (u.ag, u.rs, u.ar)
        return hit

    cols = (ne, ex, g.n_shard, g.shard_stride, g.n_rep, g.rep_stride, g.n_edp, g.edp_stride)
    return per_key_floats(one, cols, (float, float, int, int, int, int, int, int))


def _round(u: np.ndarray, root: np.ndarray, n: np.ndarray, c_f: np.ndarray, c_b: np.ndarray, hide: float,
           flags: tuple[bool, bool, bool]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """fsdp.zero3_round on arrays (u, root: (n, 3) ag/rs/ar)."""
    gather_fwd, gather_bwd, reduce = flags
    exposed, busy = np.zeros(len(n)), np.zeros(len(n))
    if gather_fwd:
        exposed = exposed + (root[:, 0] + u[:, 0] + (n - 1) * np.maximum(0.0, u[:, 0] - hide * c_f))
        busy = busy + (root[:, 0] + n * u[:, 0])
    bwd_comm = (u[:, 0] if gather_bwd else 0.0) + (u[:, 1] + u[:, 2] if reduce else 0.0)
    pos = bwd_comm > 0
    exposed = exposed + np.where(pos, (n - 1) * np.maximum(0.0, bwd_comm - hide * c_b), 0.0)
    busy = busy + np.where(pos, (n - 1) * bwd_comm, 0.0)
    if reduce:
        tail = u[:, 1] + u[:, 2] + root[:, 1] + root[:, 2]
        exposed, busy = exposed + tail, busy + tail
    return exposed, np.maximum(0.0, busy - exposed)


def zero3_time(
    ctx: PerfContext, r: Rows, g: DpGroups, ne: np.ndarray, ex: np.ndarray, st0: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """perf/estimate.py `_dp_time` for ZeRO-3 rows (st0 = first slot's comp, fwd, n_layers)."""
    comp, fwd, n_layers = st0
    bwd = comp - fwd
    n = np.maximum(1, n_layers)
    pc = ctx.pc
    root_ne = pc.embedding / r.t + np.where(
        r.p == 1, (pc.output if pc.output else 0.0) / r.t + pc.final_norm, 0.0
    )
    sw = ctx.sw
    u = _unit(ctx, np.maximum(0.0, ne - root_ne) / n, ex / n, g, sw.zero3_collectives_per_layer)
    root = _unit(ctx, root_ne, np.zeros(len(n)), g, 1)
    c_f, c_b, hide = fwd / n, bwd / n, sw.zero3_overlap
    f_exp, f_ovl = _round(u, root, n, c_f, c_b, hide, (True, False, False))
    l_exp, l_ovl = _round(u, root, n, c_f, c_b, hide, (False, False, True))
    o_exp, o_ovl = _round(u, root, n, c_f, c_b, hide, (True, True, True))
    piped = r.p > 1
    exposed = np.where(piped, f_exp + l_exp, r.m * o_exp)
    overlapped = np.where(piped, f_ovl + l_ovl, r.m * o_ovl)
    idle = (g.n_shard <= 1) & (g.n_edp <= 1)
    return np.where(idle, 0.0, exposed), np.where(idle, 0.0, overlapped)


def dp_time(
    ctx: PerfContext, r: Rows, g: DpGroups, sh: Sharding, ne0: np.ndarray, ex0: np.ndarray, st0: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """(exposed, overlapped) data-parallel seconds per row: ddp_time or the ZeRO-3 rounds."""
    n = len(r.t)
    exposed, overlapped = np.zeros(n), np.zeros(n)
    z3 = r.zero == 3
    if (~z3).any():
        k = ~z3
        comp, fwd = st0[0][k], st0[1][k]
        sub = _take_groups(g, k)
        f = sh.trainable
        exposed[k], overlapped[k] = ddp_time(ctx, r.zero[k], f * ne0[k], f * ex0[k], sub, comp - fwd, fwd)
    if z3.any():
        sub = _take_groups(g, z3)
        rz = _take_rows(r, z3)
        exposed[z3], overlapped[z3] = zero3_time(ctx, rz, sub, ne0[z3], ex0[z3], tuple(x[z3] for x in st0))
    return exposed, overlapped


def _take_rows(r: Rows, k: np.ndarray) -> Rows:
    """The rows of `r` selected by k (only what zero3_time reads is used)."""
    return Rows(**{f: (tuple(x[k] for x in v) if isinstance(v, tuple) else v[k]) for f, v in vars(r).items()})


def _take_groups(g: DpGroups, k: np.ndarray) -> DpGroups:
    """The groups of the rows selected by k."""
    return DpGroups(*(np.asarray(getattr(g, f.name))[k] for f in fields(DpGroups)))
