"""What an answer assumes that the user did not say, in the words its first lines print (issue 43 items 2, 4).

- the stack: a profiled Megatron-class stack is predicted as NVIDIA's tuned recipes run it (the published runs
  the calibration rests on are the best-tuned in the world); an unprofiled one carries the unprofiled-stack
  prior (calibration/models/stack_prior.py), and `--framework other` is that sober prior for any stack;
- the fabric: a cluster of more than one NVLink domain with no stated NIC bandwidth runs on the GPU's catalog
  default (one NIC a GPU, as NVIDIA's DGX/HGX reference systems), which most clouds do not match.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from autopar.calibration.models.stack_prior import stack_prior

SOBER = "--framework other"


def stack_assumption(workload: Any, calibrated: bool = True) -> str:
    """The stack the figures assume, and the sober alternative (the prior rides on the calibration: without
    one the figure is the surrogate's, and the line says so)."""
    if workload.stack:
        off = "" if calibrated else " (not applied: uncalibrated)"
        return "assumes: " + stack_prior().sentence(workload.stack) + off
    p = stack_prior()
    return (
        f"assumes: {workload.framework} tuned like its published recipes (the runs the model is calibrated "
        f"on); a stack tuned less: {SOBER} (x{p.factor:.2f}, band ±{100 * math.expm1(p.halfwidth):.0f}% wider)"
    )


def fabric_assumption(cluster: Any) -> str:
    """The scale-out fabric assumed where the user stated none ('' when stated, or on one NVLink domain)."""
    if cluster.internode_bw is not None or cluster.domains <= 1:
        return ""
    gbit = cluster.gpu.scaleout_bw * 8 / 1e9
    return (
        f"assumes: {gbit:.0f} Gb/s {cluster.transport} per GPU across nodes ({cluster.gpu.name} catalog default, "
        "one NIC a GPU as in NVIDIA's reference systems); state yours with --internode-gbps and --transport"
    )


def assumption_lines(cluster: Any, workload: Any, calibrated: bool = True) -> list[str]:
    """The lines an answer prints first: the stack, and the fabric where it was not stated."""
    return [s for s in (stack_assumption(workload, calibrated), fabric_assumption(cluster)) if s]


def search_assumptions(clusters: Sequence[Any], workload: Any, calibrated: bool) -> list[str]:
    """assumption_lines over a search's hardware options (one fabric line per GPU type left unstated)."""
    lines = assumption_lines(clusters[0], workload, calibrated)
    return [a for a in dict.fromkeys([*lines, *(fabric_assumption(c) for c in clusters[1:])]) if a]
