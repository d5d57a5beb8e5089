"""Context parallelism: KV exchange and the per-chunk costs of splitting attention over cp ranks.

Variants (Megatron `--cp-comm-type`, megatron/training/arguments.py; Megatron docs context_parallel.md):
- "p2p" ring attention (default): c steps per layer; step i computes attention on one KV chunk while the
  next chunk travels; causal load balancing gives every rank 2 of 2c sequence chunks, so each step runs
  half-size kernels [Liu et al. 2023, Ring Attention, arXiv 2310.01889; Megatron CP docs].
- "a2a" (DeepSpeed-Ulysses, arXiv 2309.14509 §3): all-to-all of Q, K, V and O forward (and their gradients
  backward) re-shards sequence ↔ heads; attention then runs whole-sequence on a/c heads; not overlapped.
- "allgather": all-gather the sequence's K, V before attention, reduce-scatter dK, dV after (Llama 3 report,
  arXiv 2407.21783 §3.3.2 uses this form).
- "a2a+p2p" hierarchical: a2a inside the NVLink domain, ring across (Megatron
  --hierarchical-context-parallel-sizes).
PyTorch's `context_parallel` (torchtitan; the fsdp stack's dense models) runs both of its variants as one
ring loop of c SDPA steps with an fp32 merge (torch/distributed/tensor/experimental/_attention.py
`_templated_ring_attention`); its rotate method only decides how K, V reach the ranks: "allgather"
(torchtitan's default) gathers them once per pass (`_torch_ring`), "alltoall" (autopar's "p2p") passes them
one hop per step (`_torch_permute_ring`). Neither is Transformer Engine's all-gather form (`_allgather`),
which runs two query-chunk kernels and no merge.
Every per-layer time below is per micro-batch, on one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

# The CP-variant rules live in the spine (autopar/layouts.py); re-exported here for the model.
from autopar.layouts import CP_VARIANTS, cp_violations, hierarchical_sizes  # noqa: F401
from autopar.perf import comm

# Sequence length (keys) at which a FlashAttention-class kernel reaches half its long-sequence efficiency:
# the x/(x + 512) form layers.py applies at the full sequence; ring CP runs kernels on S/(2c)-key blocks.
ATTN_HALF_EFFICIENCY_KEYS = 512.0
# Kernels per ring step: two half-block attention calls (load-balanced causal chunks) and the online-softmax
# merge of the partial output; backward runs twice as many (Megatron TE `AttnFuncWithCPAndKVP2P`).
RING_KERNELS_PER_STEP_FWD = 3
RING_KERNELS_PER_STEP_BWD = 6
# Kernels per layer of the all-gather form (TransformerEngine AttnFuncWithCPAndKVAllGather): forward two
# query-chunk attention calls, two output copies and the K, V reorder (index_select); backward the same reorder,
# two attention calls, their dQ copies and dK, dV accumulations.
ALLGATHER_KERNELS_FWD = 6
ALLGATHER_KERNELS_BWD = 10
# fp32 partial-output merge per step: read partial and accumulator, write accumulator (4 B each).
MERGE_BYTES_PER_OUT_ELEMENT = 12.0
# PyTorch context_parallel (torch/distributed/tensor/experimental/_attention.py, 2024-25): the backward keeps
# dK, dV in fp32 (_ContextParallelOptions.convert_to_f32 = True) and passes them round the ring every step
# (dkv_rotater, all-to-all permute); per step and per dK/dV element it adds the local bf16 gradient into the
# received fp32 buffer (read 4 + 2, write 4 B) and concatenates K and V grads for the send (read 4, write 4).
TORCH_DKV_BYTES = 4.0
TORCH_DKV_STEP_TRAFFIC_BYTES = 18.0
# Ulysses as Transformer Engine runs it (AttnFuncWithCPAndQKVOA2A, flash_attn_a2a_communicate and
# reorder_seq_chunks_for_a2a in transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py):
# every tensor crossing an all-to-all is copied 3 times in HBM. Before attention: the input's head split
# `movedim(-3, 0).contiguous()`, then on the received tensor `movedim(0, seq_dim).contiguous()` and the
# `index_select` that undoes the load-balanced chunk order; after attention the mirror image (movedim +
# index_select before the exchange, movedim(...).contiguous() after it). Per pass 4 tensors cross: Q, K, V
# and O forward; dO, dQ, dK, dV backward. Each copy reads and writes the tensor once (one kernel each).
A2A_COPIES_PER_TENSOR = 3
A2A_TENSORS_PER_PASS = 4


@dataclass(frozen=True, slots=True)
class CpInputs:
    """What the CP cost needs from one layer sharding."""

    c: int
    t: int
    tokens: float  # tokens of one micro-batch on this GPU (b·S/c)
    seq_len: int
    kv_bytes_tok: float  # K and V bytes per token over all KV heads (bf16)
    q_bytes_tok: float  # Q (and O) bytes per token over all heads
    out_elems_tok: float  # attention-output elements per token on this TP rank
    attn_fwd: float
    attn_bwd: float
    mla: bool
    full_recompute: bool
    kernel_overhead_s: float
    hbm_bw: float
    torch_ring: bool = False  # PyTorch context_parallel (torchtitan, fsdp), not Transformer Engine's
    kv_rep: float = 1.0  # exchanged K/V over the model's (torchtitan repeats KV heads; HF does not)


@dataclass(frozen=True, slots=True)
class CpCost:
    """Per-layer, per-micro-batch CP cost: exposed communication and extra compute."""

    comm: float
    compute: float


def _len_eff(keys: float) -> float:
    return keys / (keys + ATTN_HALF_EFFICIENCY_KEYS)


def _ring(x: CpInputs, steps: int, crosses: bool, links: comm.Links) -> CpCost:
    """Ring over `steps` ranks: transfer of the next KV chunk hidden behind each step's attention."""
    chunk = x.kv_bytes_tok * x.tokens / (1 if x.mla else x.t)
    xfer = comm.p2p(chunk, crosses, links)
    step_f, step_b = x.attn_fwd / steps, x.attn_bwd / steps
    fwd = (steps - 1) * max(0.0, xfer - step_f)
    bwd = (steps - 1) * max(0.0, 2.0 * xfer - step_b)  # K, V forward; dK, dV back
    exposed = fwd + bwd + (fwd if x.full_recompute else 0.0)
    # Per-chunk kernels are shorter: efficiency at S/(2·steps) keys instead of S.
    block = x.seq_len / (2 * steps)
    slow = _len_eff(x.seq_len) / _len_eff(block) - 1.0
    passes = 2 if x.full_recompute else 1
    extra = slow * (passes * x.attn_fwd + x.attn_bwd)
    kernels = steps * (passes * RING_KERNELS_PER_STEP_FWD + RING_KERNELS_PER_STEP_BWD)
    merge = (steps - 1) * passes * MERGE_BYTES_PER_OUT_ELEMENT * x.out_elems_tok * x.tokens / x.hbm_bw
    return CpCost(exposed, extra + kernels * x.kernel_overhead_s + merge)


def _torch_kv_chunk(x: CpInputs) -> float:
    """Bytes of this rank's K, V as PyTorch's ring exchanges them: those SDPA receives, GQA heads already
    repeated to the query heads (x.kv_rep)."""
    return x.kv_rep * x.kv_bytes_tok * x.tokens / (1 if x.mla else x.t)


def _torch_ring_compute(x: CpInputs, crosses: bool, links: comm.Links) -> float:
    """Extra compute of PyTorch's ring loop, whatever its rotate method: per-chunk SDPA kernels, launches and
    fp32 merges as in any ring (`_ring`), plus the fp32 dK, dV accumulation of every step after the first."""
    elems = _torch_kv_chunk(x) / 2.0  # bf16 elements of this rank's K and V
    accum = (x.c - 1) * TORCH_DKV_STEP_TRAFFIC_BYTES * elems / x.hbm_bw
    return _ring(x, x.c, crosses, links).compute + accum


def _torch_ring(x: CpInputs, crosses: bool, links: comm.Links) -> CpCost:
    """PyTorch's ring attention with the all-gather rotater (torchtitan `context_parallel_rotate_method =
    "allgather"`, its default; `_AllGatherRotater`: "Only one communication will be done"):

    forward: one all-gather of every rank's K, V issued before step 0 and awaited at step 1, so only step
    0's attention hides it; backward: K, V gathered again the same way, and the fp32 dK, dV accumulators
    travel one hop per step (`dkv_rotater` is always the all-to-all one): each of the c − 1 hops sent after
    a step hides behind the next step's backward kernel when it is shorter; the last one is awaited after the
    loop (`_templated_ring_attention_backward`'s final `dkv_rotater.next_buffer()`), exposed."""
    c = x.c
    chunk = _torch_kv_chunk(x)
    ag = comm.all_gather(chunk * c, c, x.t, links)
    dkv = comm.p2p(chunk * TORCH_DKV_BYTES / 2.0, crosses, links)
    step_f, step_b = x.attn_fwd / c, x.attn_bwd / c
    fwd = max(0.0, ag - step_f)
    bwd = max(0.0, ag - step_b) + (c - 1) * max(0.0, dkv - step_b) + dkv
    return CpCost(fwd * (2 if x.full_recompute else 1) + bwd, _torch_ring_compute(x, crosses, links))


def _torch_permute_ring(x: CpInputs, crosses: bool, links: comm.Links) -> CpCost:
    """PyTorch's ring attention with the all-to-all rotater (torchtitan `context_parallel_rotate_method =
    "alltoall"`; `_AllToAllRotater.exchange_buffers`: `permute_tensor` to the next rank): each of the c − 1
    steps after the first receives the next rank's K, V, sent while the step before runs its SDPA; backward
    the K, V hop and the fp32 dK, dV hop share one communicator (one process group) under each step's
    backward kernel; the last dK, dV hop is awaited after the loop, exposed (as in `_torch_ring`)."""
    c = x.c
    chunk = _torch_kv_chunk(x)
    kv = comm.p2p(chunk, crosses, links)
    dkv = comm.p2p(chunk * TORCH_DKV_BYTES / 2.0, crosses, links)
    step_f, step_b = x.attn_fwd / c, x.attn_bwd / c
    fwd = (c - 1) * max(0.0, kv - step_f)
    bwd = (c - 1) * max(0.0, kv + dkv - step_b) + dkv
    return CpCost(fwd * (2 if x.full_recompute else 1) + bwd, _torch_ring_compute(x, crosses, links))


def _a2a(x: CpInputs, size: int, stride: int, links: comm.Links) -> CpCost:
    """Ulysses: 4 all-to-alls forward (Q, K, V, O) and 4 backward, exposed; plus the HBM copies and kernels
    that re-layout each exchanged tensor around its all-to-all (A2A_COPIES_PER_TENSOR)."""
    per_rank = x.tokens * (2 * x.q_bytes_tok + x.kv_bytes_tok) / x.t
    one = comm.all_to_all(per_rank, size, stride, links)
    passes = 3 if x.full_recompute else 2
    copies = passes * A2A_COPIES_PER_TENSOR * 2.0 * per_rank / x.hbm_bw
    kernels = passes * A2A_TENSORS_PER_PASS * A2A_COPIES_PER_TENSOR * x.kernel_overhead_s
    return CpCost(passes * one, copies + kernels)


def _allgather_slowdown(c: int, seq_len: int) -> float:
    """Attention slowdown of the all-gather form on its slowest rank: rank r runs its two query chunks
    (ids r and 2c−1−r of 2c) against the key prefix up to each chunk, (id+1)·S/(2c) keys, instead of one
    kernel over S keys; each chunk's work is proportional to its keys."""
    block = seq_len / (2 * c)
    full = _len_eff(seq_len)
    worst = 0.0
    for r in range(c):
        keys = ((r + 1) * block, (2 * c - r) * block)
        worst = max(worst, sum(k / _len_eff(k) for k in keys) * full / sum(keys) - 1.0)
    return worst


def _allgather(x: CpInputs, links: comm.Links) -> CpCost:
    """All-gather of the sequence's K, V before attention (forward, and again in backward, which keeps only
    the local K, V), reduce-scatter of dK, dV after; all exposed (TransformerEngine
    AttnFuncWithCPAndKVAllGather, the Llama 3 form, arXiv 2407.21783 §3.3.2). Attention runs as two
    query-chunk kernels per pass against the gathered key prefix (_allgather_slowdown)."""
    full = x.kv_bytes_tok * x.tokens * x.c / (1 if x.mla else x.t)
    ag = comm.all_gather(full, x.c, x.t, links)
    passes = 2 if x.full_recompute else 1
    exposed = (passes + 1) * ag + comm.reduce_scatter(full, x.c, x.t, links)
    extra = _allgather_slowdown(x.c, x.seq_len) * (passes * x.attn_fwd + x.attn_bwd)
    kernels = passes * ALLGATHER_KERNELS_FWD + ALLGATHER_KERNELS_BWD
    return CpCost(exposed, extra + kernels * x.kernel_overhead_s)


def cp_cost(variant: str, x: CpInputs, links: comm.Links) -> CpCost:
    """CP cost per layer per micro-batch for one variant (zero for cp = 1)."""
    if x.c <= 1:
        return CpCost(0.0, 0.0)
    G = links.node_size
    if x.torch_ring:  # PyTorch's context_parallel (torchtitan, fsdp): its two rotate methods
        torch_variant = _torch_ring if variant == "allgather" else _torch_permute_ring
        return torch_variant(x, x.t * x.c > G, links)
    if variant == "a2a":
        return _a2a(x, x.c, x.t, links)
    if variant == "allgather":
        return _allgather(x, links)
    if variant == "a2a+p2p":
        inner, outer = hierarchical_sizes(x.c, x.t, G)
        a = _a2a(x, inner, x.t, links) if inner > 1 else CpCost(0.0, 0.0)
        r = _ring(x, outer, True, links) if outer > 1 else CpCost(0.0, 0.0)
        return CpCost(a.comm + r.comm, a.compute + r.compute)
    return _ring(x, x.c, x.t * x.c > G, links)
