"""CPU optimizer offload: host-link traffic and the CPU Adam step (ZeRO-Offload; Megatron
--optimizer-cpu-offload with --optimizer-offload-fraction).

The offloaded share of the optimizer states and of their step lives on the host: each step the GPU sends
its (sharded) gradients to the CPU and receives the updated bf16 parameters (ZeRO-Offload, Ren et al. 2021,
arXiv 2101.06840 §4.1: 4 bytes per parameter of traffic at fp16 — gradient down, parameter up). The
gradient copy overlaps the backward; the CPU step and the parameter copy back are exposed (no one-step
delayed update, which changes training semantics). The CPU Adam step is memory-bound on host DRAM.
"""

from __future__ import annotations

from autopar.perf.arith import Num, maximum, where
from autopar.specs import GPUSpec

# Host link per GPU per direction, achievable, bytes/s: PCIe Gen4 x16 (A100) ~25 GB/s and Gen5 x16 (H100/
# B200) ~50 GB/s of the 32/64 GB/s wire rates (nvbandwidth host-to-device on DGX, ml-engineering
# network/README.md PCIe table); NVLink-C2C on Grace Hopper/Blackwell 450 GB/s per direction (NVIDIA
# GH200/GB200 data sheets: 900 GB/s bidirectional).
# MI355X hosts attach over PCIe Gen5 x16 too (MLPerf Inference v6.0 AMD system descriptions); Ascend hosts
# are not documented here and take the Gen5 fallback below.
HOST_LINK_BW: dict[str, float] = {
    "ampere": 25e9,
    "hopper": 50e9,
    "blackwell": 50e9,
    "cdna3": 50e9,
    "cdna4": 50e9,
}
C2C_BW = 450e9
# Host DRAM bandwidth available to one GPU's CPU-Adam share: a 2-socket DDR5 host streams ~0.5 TB/s
# (8 channels × 4800 MT/s × 8 B ≈ 307 GB/s per socket nominal, ~80% achievable), shared by 8 GPUs.
HOST_MEM_BW_PER_GPU = 60e9
# CPU Adam traffic per parameter: read grad (fp32 4) + master/m/v (12), write master/m/v (12) + bf16 copy (2).
CPU_ADAM_BYTES_PER_PARAM = 30.0


# GPUs sharing one Grace CPU's NVLink-C2C: GH200 pairs one Grace with one Hopper; a GB200/GB300 superchip
# connects two Blackwell GPUs to one Grace over one 900 GB/s (bidirectional) C2C link (NVIDIA GB200 NVL72
# page: "two B200 Tensor Core GPUs to the NVIDIA Grace CPU over a 900GB/s ... NVLink chip-to-chip").
GPUS_PER_GRACE: dict[str, int] = {"GH": 1, "GB": 2}


def host_link_bw(gpu: GPUSpec) -> float:
    """Achievable GPU↔host bandwidth per direction per GPU (C2C on Grace-based parts, shared by the GPUs of
    one superchip; PCIe otherwise)."""
    prefix = gpu.name.upper()[:2]
    if prefix in GPUS_PER_GRACE:
        return C2C_BW / GPUS_PER_GRACE[prefix]
    return HOST_LINK_BW.get(gpu.family.lower(), 50e9)


def offload_time(gpu: GPUSpec, local_params: Num, fraction: Num, bwd_window: Num) -> Num:
    """Exposed seconds per step of offloading `fraction` of the optimizer of `local_params` parameters
    (floats, or arrays of a block)."""
    on = (fraction > 0) & (local_params > 0)
    if on is False:  # one strategy without offload: nothing to time
        return 0.0
    n = fraction * local_params
    bw = host_link_bw(gpu)
    grads_down = maximum(0.0, 4.0 * n / bw - bwd_window)  # fp32 grads, hidden under the last backward
    cpu_step = CPU_ADAM_BYTES_PER_PARAM * n / HOST_MEM_BW_PER_GPU
    params_up = 2.0 * n / bw
    return where(on, grads_down + cpu_step + params_up, 0.0)
