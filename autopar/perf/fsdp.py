"""Data-parallel collectives: bucketed gradient reduction (DDP, ZeRO-1/2) and ZeRO-3/FSDP/HSDP gathers.

Groups follow Megatron's rank order tp → cp → dp (formulas §4.1): the dense gradient group is dp·cp at
stride tp; the expert group is the expert data-parallel group at stride etp·ep. HSDP shards inside the
`dp_shard`·cp ranks next to each other and all-reduces the gradient shard across the dp/dp_shard replicas
(torchtitan data_parallel_shard/replicate_degree; PyTorch FSDP HYBRID_SHARD, Zhao et al. 2023 §3.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autopar.perf import comm
from autopar.perf.arith import Num, choose, maximum, minimum, where

# Gradient bucket per framework, in parameters (fp32/bf16 elements) or bytes, with the source.
# Megatron-Core: max(40M, 1M·dp) parameters per bucket ("larger DP sizes need larger buckets so collectives
# are not latency-bound": megatron/core/distributed/distributed_data_parallel_config.py `bucket_size`).
# PyTorch DDP: bucket_cap_mb = 25 (torch.nn.parallel.DistributedDataParallel). DeepSpeed: reduce_bucket_size
# 5e8 elements (deepspeed/runtime/zero/config.py default).
MEGATRON_BUCKET_MIN_PARAMS = 40e6
MEGATRON_BUCKET_PARAMS_PER_DP = 1e6
TORCH_DDP_BUCKET_BYTES = 25 * 2**20
DEEPSPEED_BUCKET_PARAMS = 5e8


def bucket_params(framework: str, dp: Num, grad_bytes: float) -> Num:
    """Parameters per gradient bucket of a framework at data-parallel size dp."""
    if framework in ("megatron", "megatron-legacy"):
        return maximum(MEGATRON_BUCKET_MIN_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP * dp)
    if framework == "deepspeed":
        return DEEPSPEED_BUCKET_PARAMS
    return TORCH_DDP_BUCKET_BYTES / grad_bytes


@dataclass(frozen=True, slots=True)
class DpGroups:
    """Sizes and strides of the data-parallel groups of one strategy."""

    n_shard: Num  # dense shard / reduction group (dp·cp, or dp_shard·cp under HSDP)
    shard_stride: Num
    n_rep: Num  # HSDP replicas (1 = plain FSDP / ZeRO)
    rep_stride: Num
    n_edp: Num  # expert data-parallel group
    edp_stride: Num


def dp_groups(t: Num, c: Num, d: Num, e: Num, te: Num, dp_shard: Num | None) -> DpGroups:
    """Data-parallel groups of a layout (dp_shard = HSDP shard degree over dp; None = shard over all dp)."""
    shard = 0 if dp_shard is None else dp_shard  # floats or arrays of a block (0 = None)
    ds = where((shard > 0) & (d % maximum(shard, 1) == 0), shard, d)
    n_edp = maximum(1, (t * c * d) // (e * te))
    return DpGroups(ds * c, t, d // ds, t * c * ds, n_edp, te * e)


@dataclass(frozen=True, slots=True)
class DpTime:
    """Data-parallel communication of one step: exposed seconds, and seconds hidden under compute."""

    exposed: Num
    overlapped: Num


# A collective's seconds by kind (AR, RS, AG) for (bytes, group size, stride): `collectives(links)` for one
# strategy; perf/vector_dp.py passes one that runs each distinct (bytes, size, stride) of a block once.
Collective = Callable[[int, Num, Num, Num], Num]
AR, RS, AG = 0, 1, 2
_KINDS = (comm.all_reduce, comm.reduce_scatter, comm.all_gather)


def collectives(links: comm.Links) -> Collective:
    """The collectives of one strategy (comm.all_reduce, reduce_scatter, all_gather by kind)."""
    return lambda kind, nbytes, size, stride: _KINDS[kind](nbytes, size, stride, links)


def _bucketed(
    coll: Collective, kind: int, total_params: Num, bucket: Num, bytes_per: float, size: Num, stride: Num,
    on: Num,
) -> tuple[Num, Num]:  # fmt: skip
    """(last bucket, all buckets) seconds of one bucketed collective; zeros where `on` is false, there are no
    parameters or the group is one rank."""
    on = on & (total_params > 0) & (size > 1)
    if on is False:  # one strategy with nothing to send: no collective to time
        return 0.0, 0.0
    per = where(on, coll(kind, where(on, bytes_per * minimum(bucket, total_params), 0.0), size, stride), 0.0)
    n = maximum(1, -(-total_params // bucket))
    return per, n * per


def shared_window(parts: list[tuple[Num, Num]], window: Num) -> DpTime:
    """Bucketed collectives issued in one pass (dense and expert buffers) hide under one window on one NIC.

    Megatron-Core keeps dense and expert-parallel parameters in separate buffers reduced over different groups
    (megatron/core/distributed/distributed_data_parallel.py: `buffers` over the dp·cp group,
    `expert_parallel_buffers` over the expert-DP group); the backward hook of either launches its bucket's
    collective as soon as the bucket is full (param_and_grad_buffer.py `_ParamAndGradBucketGroup.
    register_grad_ready` → `start_grad_sync`), so both run during the same backward and their bytes share the
    GPU's links: the window covers their summed time once. Each last bucket is ready only as the pass ends,
    so the last buckets never hide: exposed = max(Σ last buckets, Σ all buckets − window).
    """
    last: Num = 0.0
    total: Num = 0.0
    for per, all_buckets in parts:
        last, total = last + per, total + all_buckets
    exposed = maximum(last, total - window)
    return DpTime(exposed, total - exposed)


def ddp_time(
    zero: Num,
    ne: Num,
    ex: Num,
    g: DpGroups,
    links: comm.Links,
    framework: str,
    bwd_mb: Num,
    fwd_mb: Num,
    coll: Collective | None = None,
    reductions: Num = 1,
    gb: float = 4.0,
) -> DpTime:
    """Gradient all-reduce (zero 0) or reduce-scatter + parameter all-gather (ZeRO-1/2), bucketed.

    The dense and expert gradient buckets share one micro-batch's backward (--overlap-grad-reduce), the
    parameter gathers the first micro-batch's forward (--overlap-param-gather): `shared_window`; formulas
    §4.2 DP. The gradients are reduced in `reductions` backward passes, each its own window: 1 where a full
    gradient buffer accumulates the micro-batches (DDP, ZeRO-1), every micro-batch where the gradients are
    kept sharded (ZeRO-2: `grad_reductions`). `gb`: bytes per reduced gradient element, the main-gradient
    buffer's dtype (fp32: 4, Megatron's default; bf16: 2, --grad-reduce-in-bf16; perf/memory.py GRAD_BYTES).
    """
    coll = coll or collectives(links)
    reduce: list[tuple[Num, Num]] = []
    gather: list[tuple[Num, Num]] = []
    for n_params, size, stride in ((ne, g.n_shard, g.shard_stride), (ex, g.n_edp, g.edp_stride)):
        bucket = bucket_params(framework, size, gb)
        ddp, sharded = zero == 0, zero != 0
        reduce.append(_bucketed(coll, AR, n_params, bucket, gb, size, stride, ddp))
        reduce.append(_bucketed(coll, RS, n_params, bucket, gb, size, stride, sharded))
        gather.append(_bucketed(coll, AG, n_params, bucket, 2.0, size, stride, sharded))
    r, a = shared_window(reduce, bwd_mb), shared_window(gather, fwd_mb)
    return DpTime(reductions * r.exposed + a.exposed, reductions * r.overlapped + a.overlapped)


def grad_reductions(zero: Num, m: Num, pp: Num, pp_defers_sync: bool) -> Num:
    """Backward passes whose gradients are reduced in one step: every micro-batch where ZeRO-2 keeps the
    fp32 gradients sharded, there being no full buffer to accumulate them in (Megatron-FSDP `optim_grads`
    reduces on every backward: megatron_fsdp.py `_process_post_backward_gradients` `grad_reduce_every_bprop`,
    and waits for it as that backward ends, `_root_post_backward`; DeepSpeed stage 2: engine.py
    `allreduce_gradients`, "ZeRO stage 2 communicates during non gradient accumulation boundaries as well").
    Once otherwise: DDP and ZeRO-1 accumulate into a full buffer and reduce in the last micro-batch, and so does
    a stack whose PP schedule defers the sync (torch.distributed.pipelining; software.yaml
    pp_defers_grad_sync), keeping the stage's gradients unsharded (perf/memory.py `grads_sharded`)."""
    each = (zero == 2) & (pp <= 1) if pp_defers_sync else zero == 2
    return where(each, m, 1)


@dataclass(frozen=True, slots=True)
class Zero3Unit:
    """Collective times of one FSDP unit (a transformer block): gather, reduce-scatter, HSDP all-reduce."""

    ag: Num
    rs: Num
    ar: Num


# NCCL's ring latency model (NVIDIA/nccl src/graph/tuning.cc, commit 01afd20): an all-gather or
# reduce-scatter over n ranks on k nodes costs baseLat + (n − k)·intra-node hop + (k − 1)·inter-node hop.
# Values in µs as (base, NVLink hop, network hop): LL, which NCCL picks for small messages (its NVLink hop
# ×1.8 once the ring spans nodes), and Simple for large ones.
NCCL_RING_LATENCY_US: dict[str, tuple[float, float, float]] = {
    "LL": (3.6, 0.47 * 1.8, 2.7),
    "Simple": (8.4, 3.4, 9.6),
}


def flat_ring(nbytes: float, size: int, stride: int, links: comm.Links, proto: str) -> float:
    """One all-gather / reduce-scatter as a single flat NCCL ring over the group (no node-local hierarchy):
    the bandwidth term at the NIC rate once the ring leaves the node, the latency per NCCL's ring model."""
    if size <= 1:
        return 0.0
    _, k = comm.placement(size, stride, links.node_size)
    base, intra, inter = NCCL_RING_LATENCY_US[proto]
    lat = (base + (size - k) * intra + (k - 1) * inter) * 1e-6
    bw = links.scaleout_bw if k > 1 else links.scaleup_bw
    return lat + (size - 1) / size * nbytes / bw


def zero3_unit(
    unit_ne: float,
    unit_ex: float,
    g: DpGroups,
    links: comm.Links,
    grad_bytes: float,
    n_coll: int,
    weight_bytes: float = 2.0,
) -> Zero3Unit:
    """Per-unit collective times. n_coll > 1: DeepSpeed-style per-tensor collectives, each a flat ring over
    the whole group (no node-local hierarchy): the block's bulk in one large call, the other n_coll − 1
    tensors as small (latency-bound, NCCL LL) calls. `weight_bytes`: per gathered parameter (bf16: 2; QLoRA's
    NF4 blocks: perf/finetune.py); `grad_bytes`: per parameter reduced (LoRA: only the adapters have any)."""
    if n_coll > 1:
        ag = flat_ring(weight_bytes * unit_ne, g.n_shard, g.shard_stride, links, "Simple")
        ag += flat_ring(weight_bytes * unit_ex, g.n_edp, g.edp_stride, links, "Simple")
        rs = flat_ring(grad_bytes * unit_ne, g.n_shard, g.shard_stride, links, "Simple")
        rs += flat_ring(grad_bytes * unit_ex, g.n_edp, g.edp_stride, links, "Simple")
        small = (n_coll - 1) * flat_ring(0.0, g.n_shard, g.shard_stride, links, "LL")
        ag, rs = ag + small, rs + small
    else:
        ag = comm.all_gather(weight_bytes * unit_ne, g.n_shard, g.shard_stride, links)
        ag += comm.all_gather(weight_bytes * unit_ex, g.n_edp, g.edp_stride, links)
        rs = comm.reduce_scatter(grad_bytes * unit_ne, g.n_shard, g.shard_stride, links)
        rs += comm.reduce_scatter(grad_bytes * unit_ex, g.n_edp, g.edp_stride, links)
    ar = (
        comm.all_reduce(grad_bytes * unit_ne / g.n_shard, g.n_rep, g.rep_stride, links)
        if g.n_rep > 1
        else 0.0
    )
    return Zero3Unit(ag, rs, ar)


def zero3_round(
    u: Zero3Unit,
    root: Zero3Unit,
    n: Num,
    c_f: Num,
    c_b: Num,
    hide: float,
    gather_fwd: bool,
    gather_bwd: bool,
    reduce: bool,
) -> DpTime:
    """One forward+backward pass over n equal FSDP units with prefetch of the next unit.

    Forward: the first unit's (and the root's) gather is exposed; each later gather hides under the previous
    unit's forward compute c_f. Backward: the last block stays gathered; each earlier unit's re-gather and the
    previous unit's reduce-scatter (+ HSDP all-reduce) hide under one unit's backward c_b, one after the other:
    a group's gather and reduce-scatter share its NCCL communicator, which runs them in launch order even from
    separate CUDA streams (Megatron-LM megatron/core/distributed/fsdp/src/docs/runtime_schedule.md
    "Prefetching"; Megatron-FSDP issues the reduce-scatter on a side stream, custom_fsdp
    GradReducePipeline). The final reduce-scatter and the root's (embedding gradients come last) are exposed. `hide` bounds the share of
    compute that can cover communication (DeepSpeed's bounded prefetch < 1). (FSDP: Zhao et al. 2023
    arXiv 2304.11277 §3.3-3.4 "backward/forward prefetching"; torchtitan keeps the last block unsharded.)
    """
    exposed: Num = 0.0
    busy: Num = 0.0
    if gather_fwd:
        exposed = exposed + (root.ag + u.ag + (n - 1) * maximum(0.0, u.ag - hide * c_f))
        busy = busy + (root.ag + n * u.ag)
    bwd_comm = (u.ag if gather_bwd else 0.0) + (u.rs + u.ar if reduce else 0.0)
    pos = bwd_comm > 0
    exposed = exposed + where(pos, (n - 1) * maximum(0.0, bwd_comm - hide * c_b), 0.0)
    busy = busy + where(pos, (n - 1) * bwd_comm, 0.0)
    if reduce:
        tail = u.rs + u.ar + root.rs + root.ar
        exposed, busy = exposed + tail, busy + tail
    return DpTime(exposed, maximum(0.0, busy - exposed))


def zero3_time(
    u: Zero3Unit, root: Zero3Unit, n: Num, c_f: Num, c_b: Num, hide: float, m: Num, pipelined: Num
) -> DpTime:
    """ZeRO-3/FSDP communication of one step.

    Without pipelining every micro-batch gathers and reduce-scatters (FSDP reshards after forward and syncs
    gradients per micro-batch). `pipelined` (PP under a schedule that defers the sync, software.yaml
    pp_defers_grad_sync): the stage stays gathered across micro-batches and gradients are reduced once, at the
    last micro-batch (torchtitan: reshard_after_forward=False under PP; PyTorch pipelining disables gradient
    sync except on the last backward). Megatron-FSDP reshards and reduces every micro-batch under PP too
    (megatron_fsdp.py: `release_module_parameters` after each forward and backward, `grad_reduce_every_bprop`).
    """
    args = (u, root, n, c_f, c_b, hide, m)
    exposed, overlapped = choose(pipelined, _zero3_pipelined, _zero3_each_micro_batch, *args)
    none = n <= 0
    return DpTime(where(none, 0.0, exposed), where(none, 0.0, overlapped))


def _zero3_pipelined(
    u: Zero3Unit, root: Zero3Unit, n: Num, c_f: Num, c_b: Num, hide: float, m: Num
) -> tuple[Num, Num]:
    """With PP: one gathering forward round and one reducing round per step."""
    first = zero3_round(u, root, n, c_f, c_b, hide, True, False, False)
    last = zero3_round(u, root, n, c_f, c_b, hide, False, False, True)
    return first.exposed + last.exposed, first.overlapped + last.overlapped


def _zero3_each_micro_batch(
    u: Zero3Unit, root: Zero3Unit, n: Num, c_f: Num, c_b: Num, hide: float, m: Num
) -> tuple[Num, Num]:
    """Without PP: every micro-batch gathers, re-gathers and reduces."""
    one = zero3_round(u, root, n, c_f, c_b, hide, True, True, True)
    return m * one.exposed, m * one.overlapped
