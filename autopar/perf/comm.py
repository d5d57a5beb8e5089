"""Collective communication times (formulas.md §4.1): alpha-beta ring model on the link a group uses.

Rank order is tp -> cp -> ep/dp -> pp (tp fastest-varying, Megatron's `tp-cp-ep-dp-pp`). Which fabric a
group crosses (NVLink domain, NIC, or both) is decided in perf/fabric.py; `Links.node_size` is the NVLink
domain size (GPUs sharing one NVLink fabric: 8 on DGX H100, 72 on GB200 NVL72), not the host size.
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.perf.arith import Num, where
from autopar.perf.fabric import placement

__all__ = ["Links", "all_gather", "all_reduce", "all_to_all", "p2p", "placement", "reduce_scatter"]


@dataclass(frozen=True, slots=True)
class Links:
    """Effective per-GPU per-direction bandwidths (bytes/s) and latencies (s) of one cluster."""

    node_size: int  # GPUs per NVLink domain
    scaleup_bw: float  # NVLink busbw achievable (nominal x efficiency)
    scaleout_bw: float  # NIC busbw achievable per GPU
    scaleup_lat: float
    scaleout_lat: float


def _ring(factor_steps: float, size: int, nbytes: float, bw: float, lat: float, phases: float) -> float:
    """Time of a ring phase: `phases` latency steps plus the bandwidth term factor*(n-1)/n*S/bw."""
    return phases * lat + factor_steps * (size - 1) / size * nbytes / bw


def all_reduce(nbytes: float, size: int, stride: int, links: Links) -> float:
    """All-reduce of a buffer of `nbytes` over a group (hierarchical when it spans nodes)."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    g, k = placement(size, stride, links.node_size)
    t = 0.0
    if g > 1:  # intra-node reduce-scatter + all-gather
        t += 2 * _ring(1.0, g, nbytes, links.scaleup_bw, links.scaleup_lat, _log2(g))
    if k > 1:  # inter-node all-reduce of the 1/g shard, each local rank on its own NIC
        t += _ring(2.0, k, nbytes / g, links.scaleout_bw, links.scaleout_lat, 2 * _log2(k))
    return t


def reduce_scatter(nbytes: float, size: int, stride: int, links: Links) -> float:
    """Reduce-scatter (or all-gather: same cost) of a full buffer of `nbytes` over a group."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    g, k = placement(size, stride, links.node_size)
    t = 0.0
    # Ring all-gather / reduce-scatter: n-1 dependent steps, so latency grows linearly with the group.
    if g > 1:
        t += _ring(1.0, g, nbytes, links.scaleup_bw, links.scaleup_lat, g - 1)
    if k > 1:
        t += _ring(1.0, k, nbytes / g, links.scaleout_bw, links.scaleout_lat, k - 1)
    return t


all_gather = reduce_scatter


def all_to_all(nbytes: float, size: int, stride: int, links: Links) -> float:
    """All-to-all where each rank sends `nbytes` in total, (n-1)/n of it to peers.

    Across nodes the inter-node share (members on other nodes) goes over the NIC; the rest over NVLink.
    """
    if size <= 1 or nbytes <= 0:
        return 0.0
    g, k = placement(size, stride, links.node_size)
    local_share = (g - 1) / size
    remote_share = (size - g) / size
    t_local = local_share * nbytes / links.scaleup_bw + (links.scaleup_lat if g > 1 else 0.0)
    t_remote = remote_share * nbytes / links.scaleout_bw + (links.scaleout_lat if k > 1 else 0.0)
    return max(t_local, t_remote) + 0.25 * min(t_local, t_remote)


def p2p(nbytes: float, crosses_node: bool, links: Links) -> float:
    """Point-to-point send of `nbytes` to a neighbour."""
    out: float = p2p_of(nbytes, crosses_node, links)
    return out


def p2p_of(nbytes: Num, crosses_node: Num, links: Links) -> Num:
    """`p2p` on floats, or on arrays of a block."""
    send = where(
        crosses_node,
        links.scaleout_lat + nbytes / links.scaleout_bw,
        links.scaleup_lat + nbytes / links.scaleup_bw,
    )
    return where(nbytes <= 0, 0.0, send)


def _log2(n: int) -> float:
    return max(1.0, float((n - 1).bit_length()))
