"""Process groups of a slice and the collectives its layers use, as autograd functions.

Ranks are ordered tp -> cp -> dp (tp innermost, as autopar's layouts assume); the expert mesh folds over the
same ranks with ep innermost (expert TP is 1 in a slice). Each collective's backward is its adjoint: a
copy whose gradients are summed (all-reduce), a sum whose gradient is copied, an all-gather whose gradient
is reduce-scattered, an all-to-all whose gradient goes back the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

# torch 2.13 renamed the tensor forms of all-gather / reduce-scatter (*_single); 2.6 has only the old names.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(frozen=True)
class Group:
    """One communication group as seen from this rank: the torch group (None when alone), size, index."""

    pg: Any
    size: int
    rank: int


@dataclass(frozen=True)
class Groups:
    """This rank's groups: tp, cp, dp×cp (dense-gradient sum), ep, edp (expert-gradient sum), world."""

    tp: Group
    cp: Group
    dpcp: Group
    ep: Group
    edp: Group
    world: Group


def _make(members_of: list[list[int]], rank: int) -> Group:
    """Create every group of one kind (all ranks must create all of them, in the same order); return ours.
    A one-rank group gets a process group too (FSDP2 shards over a mesh built from it); the collectives
    below skip it."""
    mine = Group(None, 1, 0)
    for members in members_of:
        pg = dist.new_group(members)
        if rank in members:
            mine = Group(pg, len(members), members.index(rank))
    return mine


def build_groups(rank: int, world: int, tp: int, cp: int, ep: int) -> Groups:
    """The tp, cp, dp×cp, ep and edp groups of a tp·cp·dp world (rank = t + tp·(c + cp·d))."""
    ranks = range(world)
    tp_groups = [[r for r in ranks if r // tp == i] for i in range(world // tp)]
    cp_groups = [
        [r for r in ranks if r % tp == t and r // (tp * cp) == d]
        for d in range(world // (tp * cp))
        for t in range(tp)
    ]
    dpcp_groups = [[r for r in ranks if r % tp == t] for t in range(tp)]
    ep_groups = [[r for r in ranks if r // ep == i] for i in range(world // ep)]
    edp_groups = [[r for r in ranks if r % ep == e] for e in range(ep)]
    return Groups(
        tp=_make(tp_groups, rank),
        cp=_make(cp_groups, rank),
        dpcp=_make(dpcp_groups, rank),
        ep=_make(ep_groups, rank),
        edp=_make(edp_groups, rank),
        world=_make([list(ranks)], rank),
    )


def all_reduce_(t: torch.Tensor, g: Group, op: Any = None) -> torch.Tensor:
    """In-place sum (or `op`) over the group; nothing when alone."""
    if g.size > 1:
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM, group=g.pg)
    return t


def all_gather_flat(out: torch.Tensor, mine: torch.Tensor, g: Group) -> None:
    """Fill `out` with every rank's `mine`, in rank order (the ZeRO-1 weight gather)."""
    _ALL_GATHER(out, mine, group=g.pg)


def gather_dim(t: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
    """Concatenate every rank's `t` along `dim` (no autograd)."""
    if g.size == 1:
        return t
    moved = t.movedim(dim, 0).contiguous()
    out = torch.empty((g.size * moved.shape[0], *moved.shape[1:]), dtype=t.dtype, device=t.device)
    _ALL_GATHER(out, moved, group=g.pg)
    return out.movedim(0, dim)


def scatter_sum_dim(t: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
    """Sum `t` over the group and keep this rank's chunk along `dim` (reduce-scatter, no autograd)."""
    if g.size == 1:
        return t
    moved = t.movedim(dim, 0).contiguous()
    out = torch.empty((moved.shape[0] // g.size, *moved.shape[1:]), dtype=t.dtype, device=t.device)
    _REDUCE_SCATTER(out, moved, group=g.pg)
    return out.movedim(0, dim)


def chunk_dim(t: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
    """This rank's chunk of `t` along `dim`."""
    return t if g.size == 1 else t.chunk(g.size, dim=dim)[g.rank].contiguous()


class _CopyToGroup(torch.autograd.Function):
    """Identity forward; backward sums the gradient over the group (input of a column-parallel linear)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g: Group) -> torch.Tensor:
        ctx.g = g
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return all_reduce_(grad.contiguous(), ctx.g), None


class _SumOverGroup(torch.autograd.Function):
    """All-reduce forward (output of a row-parallel linear); backward copies the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g: Group) -> torch.Tensor:
        return all_reduce_(x.contiguous().clone(), g)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _GatherDim(torch.autograd.Function):
    """All-gather along `dim` forward; backward reduce-scatters (SP before a column-parallel linear, CP K/V)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
        ctx.g, ctx.dim = g, dim
        return gather_dim(x, g, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return scatter_sum_dim(grad, ctx.g, ctx.dim), None, None


class _ScatterSumDim(torch.autograd.Function):
    """Reduce-scatter along `dim` forward (SP after a row-parallel linear); backward all-gathers."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
        ctx.g, ctx.dim = g, dim
        return scatter_sum_dim(x, g, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return gather_dim(grad, ctx.g, ctx.dim), None, None


class _AllToAll(torch.autograd.Function):
    """all_to_all_single of rows with uneven splits; backward sends the gradients back the way they came."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g: Group, send: list[int], recv: list[int]) -> torch.Tensor:
        ctx.g, ctx.send, ctx.recv = g, send, recv
        if g.size == 1:
            return x.clone()
        out = x.new_empty((sum(recv), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=g.pg)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _AllToAll.apply(grad.contiguous(), ctx.g, ctx.recv, ctx.send), None, None, None


def copy_to(x: torch.Tensor, g: Group) -> torch.Tensor:
    return x if g.size == 1 else _CopyToGroup.apply(x, g)


def sum_over(x: torch.Tensor, g: Group) -> torch.Tensor:
    return x if g.size == 1 else _SumOverGroup.apply(x, g)


def gather_along(x: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
    return x if g.size == 1 else _GatherDim.apply(x, g, dim)


def scatter_sum_along(x: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
    return x if g.size == 1 else _ScatterSumDim.apply(x, g, dim)


def all_to_all(x: torch.Tensor, g: Group, send: list[int], recv: list[int]) -> torch.Tensor:
    return x if g.size == 1 else _AllToAll.apply(x, g, send, recv)


class _GatherReplicated(torch.autograd.Function):
    """All-gather along `dim` forward, for an output whose consumers are replicated over the group (each
    rank gets the same whole gradient): backward keeps this rank's chunk, no sum."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
        ctx.g, ctx.dim = g, dim
        return gather_dim(x, g, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return chunk_dim(grad, ctx.g, ctx.dim), None, None


def gather_replicated(x: torch.Tensor, g: Group, dim: int) -> torch.Tensor:
    return x if g.size == 1 else _GatherReplicated.apply(x, g, dim)
