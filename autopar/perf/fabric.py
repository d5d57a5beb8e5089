"""Which fabric a communication group crosses: NVLink inside a domain, the NIC across, or both.

Ranks are numbered tp -> cp -> ep -> dp -> pp (tp fastest-varying; Megatron-Core's default order
`tp-cp-ep-dp-pp`, and for the expert mesh `tp(etp)-ep-dp(edp)-pp`). A group of `size` members whose
neighbours are `stride` ranks apart spans `size*stride` consecutive ranks. NVLink domains hold
`domain` consecutive ranks (the host for DGX/HGX; a whole rack for GB200 NVL72). The last domain of a
job may be partial, and launchers place whole groups inside a domain (Slurm `--segment` on NVL72, the
NVIDIA GB200 recipes' 64-of-72 layout), so a group that spans no more than a domain stays on NVLink.
A larger group splits into `k` domain blocks of `g` members each, `g` the largest divisor of the group
size that fits in a domain.
"""

from __future__ import annotations

from typing import Literal

Fabric = Literal["local", "nvlink", "nic", "hierarchical"]


def placement(size: int, stride: int, domain: int) -> tuple[int, int]:
    """(members per NVLink domain g, domains spanned k) of a group; g * k == size."""
    if size <= 1:
        return 1, 1
    if stride * size <= domain:
        return size, 1
    if stride >= domain:
        return 1, size
    cap = max(1, domain // stride)
    g = max(d for d in range(1, min(cap, size) + 1) if size % d == 0)
    return g, size // g


def fabric_of(size: int, stride: int, domain: int) -> Fabric:
    """The fabric a group's traffic crosses."""
    g, k = placement(size, stride, domain)
    if size <= 1:
        return "local"
    if k == 1:
        return "nvlink"
    return "nic" if g == 1 else "hierarchical"


def p2p_crosses_domain(stride: int, size: int, domain: int) -> bool:
    """Whether some neighbour pair of a ring/chain group (pipeline, CP ring) sits in different domains."""
    return size > 1 and stride * size > domain
