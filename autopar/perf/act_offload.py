"""Activation CPU offload (Megatron-Core --cpu-offloading-num-layers N, Transformer Engine's offload handler).

What the framework does (TransformerEngine transformer_engine/pytorch/cpu_offload.py,
`AsyncDoubleBufferGroupOffloadHandler`, reached from Megatron-Core megatron/core/transformer/
transformer_block.py through `get_cpu_offload_context(enabled, num_layers, model_layers,
offload_activations, offload_weights)`; megatron/training/arguments.py `validate_args` turns
`cpu_offloading` on when `cpu_offloading_num_layers > 0`):

- Each transformer layer is one "group". The saved activations of the first N layers (group id < N,
  tensors TE marks `activation_offloading`) are copied to pinned host memory on a dedicated d2h stream;
  Megatron's TransformerConfig offloads activations only by default (`cpu_offloading_weights = False`).
- The N copies are spread over the stage's L layers in windows (`layer_window_map`: window i ends at layer
  (L // N)·(i+1) − 1, the first L % N windows one layer longer). Group i's copy is issued when window i−1
  closes and the compute stream waits for it when window i closes (`synchronize_on_group_commit_forward`),
  so it hides behind the forward of that window's layers (group 0 starts after layer 0: one layer fewer).
  Only then is its GPU memory freed: one offloaded group is in flight (still resident) at a time.
- Backward mirrors it on an h2d stream (`on_group_commit_backward`): group i is reloaded when backward
  reaches the end of window i and must be back when it reaches the end of window i−1: the reload hides
  behind the backward of the window's layers.

The exposed time is therefore, per micro-batch, Σ over windows of max(0, copy − forward of the window) +
max(0, copy − backward of the window), each copy being one layer's activations over the host link (PCIe or
NVLink-C2C, perf/offload.py host_link_bw: one source of truth). The saving is N layers' activations less the
one group in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.layouts import ACT_OFFLOAD_FRACTIONS as CANDIDATE_FRACTIONS  # noqa: F401
from autopar.layouts import candidate_layers  # noqa: F401  (the spine owns the search's values)
from autopar.perf.arith import Num, maximum

# Groups still resident while their copy runs: TE frees group i only when window i closes, as it issues the
# copy of group i+1 (`synchronize_on_group_commit_forward`), so one offloaded layer is always in flight.
IN_FLIGHT_GROUPS = 1


def windows(layers: int, groups: int) -> tuple[int, ...]:
    """Layers of compute each offloaded group's copy overlaps (TE `layer_window_map`; group 0 one fewer)."""
    if groups <= 0 or layers <= 0:
        return ()
    base, extra = divmod(layers, groups)
    sizes = [base + (1 if i < extra else 0) for i in range(groups)]
    sizes[0] -= 1  # group 0's copy starts once layer 0 has run
    return tuple(max(0, w) for w in sizes)


def resident_saving_layers(groups: Num) -> Num:
    """Layers' worth of activations off the GPU at the peak: the offloaded ones less the one in flight."""
    return maximum(0, groups - IN_FLIGHT_GROUPS)


@dataclass(frozen=True, slots=True)
class ActOffload:
    """Per micro-batch: bytes each way over the host link, and the transfer time compute does not hide."""

    bytes_each_way: float
    exposed_s: float


def offload_cost(
    layers: int, groups: int, act_bytes: float, fwd_layer_s: float, bwd_layer_s: float, link_bw: float
) -> ActOffload:
    """Host-link traffic and exposed time of offloading `groups` of `layers` layers (act_bytes each)."""
    if groups <= 0 or act_bytes <= 0:
        return ActOffload(0.0, 0.0)
    copy = act_bytes / link_bw
    exposed = sum(
        max(0.0, copy - w * fwd_layer_s) + max(0.0, copy - w * bwd_layer_s) for w in windows(layers, groups)
    )
    return ActOffload(groups * act_bytes, exposed)


def host_memory_problems(host_bytes: float | None, gpu_name: str, groups: int, act_bytes: float) -> list[str]:
    """The offloaded activations must fit in the CPU memory of this GPU (known for Grace parts only): TE
    keeps one pinned host copy per offloaded tensor (`SynchronizedGroupOffloadHandler.offload`)."""
    need = groups * act_bytes
    if host_bytes is None or groups <= 0 or need <= host_bytes:
        return []
    return [
        f"activation_offload_layers={groups} needs {need / 1e9:.0f} GB of CPU memory per GPU; "
        f"{gpu_name} has {host_bytes / 1e9:.0f} GB"
    ]
