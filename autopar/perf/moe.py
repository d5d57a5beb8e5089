"""Costs of one MoE layer as Megatron-Core runs it (alltoall token dispatcher, TE grouped GEMM).

Per micro-batch, on one GPU, a routed MoE layer does (megatron/core/transformer/moe/: router.py,
token_dispatcher.py `MoEAlltoAllTokenDispatcher`, experts.py `TEGroupedMLP`):
1. router: logits = x·W_r (BF16/FP32, never FP8), softmax/sigmoid, top-k, aux loss — a skinny GEMM plus
   memory-bound passes over the T x E score matrix;
2. permute: gather each token's top-k copies into expert order (memory-bound: read T·h, write T·k·h);
3. dispatch all-to-all over the EP group (T·k·h values, the share routed to local experts stays);
   with expert TP (etp > 1) the received tokens are all-gathered in the expert-TP group;
4. grouped GEMM over the E/ep local experts: gate/up (h -> 2·f_e/etp) and down (f_e/etp -> h);
5. combine all-to-all back and unpermute (weighted sum of the k copies);
and the backward pass runs the same in reverse (two all-to-alls, dgrad + wgrad grouped GEMMs).

Routing imbalance makes the busiest EP rank receive `load` times the mean number of token copies
(expert compute, dispatch/combine volume and the permuted buffers all scale with it); a capacity factor
caps it (tokens beyond capacity are dropped). Shared experts are plain TP-sharded MLPs on every token;
leading dense layers are ordinary layers (perf/estimate.py stage mix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autopar.perf import comm
from autopar.perf.efficiency import (
    DENSE_LAYER_OPS,
    HOST_OP_S,
    MOE_BLOCK_OPS,
    host_issue_time,
    ops_per_local_expert,
)
from autopar.perf.fp8 import quantise_time
from autopar.specs import MOE_IMBALANCE_DEFAULT

if TYPE_CHECKING:  # pragma: no cover
    from autopar.perf.context import PerfContext

# Default routed load of the busiest EP rank: specs.MOE_IMBALANCE_DEFAULT (cited there).
MOE_IMBALANCE = MOE_IMBALANCE_DEFAULT
# Transformer Engine's grouped linear (`general_grouped_gemm`) issues one cuBLAS GEMM per local expert,
# spread over its compute streams (TE common/util/multi_stream: 4 streams), so up to 4 expert GEMMs share
# the SMs at a time: wave quantisation is judged on their tiles together.
GROUPED_GEMM_STREAMS = 4
# Router passes over the T x E scores, forward (bytes per score): fp32 logits written (4), softmax/sigmoid
# read + write (8), top-k read (4), aux-loss/z-loss read (4). Backward reads and writes the same again.
ROUTER_BYTES_PER_SCORE = 20.0
# Megatron's alltoall dispatcher moves activations in their compute dtype (BF16) both ways; FP8 dispatch
# exists only with DeepEP (DeepSeek-V3 §3.3: FP8 dispatch, BF16 combine).
DISPATCH_BYTES = 2.0
COMBINE_BYTES = 2.0
# NCCL all-to-all is a group of point-to-point sends; peers are served concurrently over its channels
# (NCCL p2p uses up to 8 channels per peer group by default), so latency grows with peers / 8 rounds.
A2A_CONCURRENT_PEERS = 8
# With --overlap-moe-expert-parallel-comm the dispatch/combine kernels run beside another micro-batch's
# compute and occupy SMs: NVIDIA's Megatron-Bridge recipes give HybridEP 32 SMs (moe_hybridep_num_sms = 32,
# src/megatron/bridge/perf_recipes/deepseek/common.py), so compute under the overlap loses 32/SMs.
EP_OVERLAP_COMM_SMS = 32
# The alltoall dispatcher permutes twice on each side when a rank holds more than one expert: the first
# permutation groups the local tokens by destination rank before the all-to-all, and the received rows,
# which arrive ordered by source rank, are then re-sorted into local-expert order (`sort_chunks_by_idxs`
# in MoEAlltoAllTokenDispatcher.dispatch_postprocess; the inverse sort in combine_preprocess; fused or not,
# each reads and writes every received row). The flex dispatchers permute once, after the dispatch.
# Passes of the received token copies (read + write each) per forward for that second sort: 2 (dispatch
# sort, combine unsort); the backward runs their mirror images.
LOCAL_SORT_PASSES = 2
# Routed experts with clamped GLU inputs and biases (GPT-OSS) under a stack that runs both eagerly
# (software.yaml `moe_eager_clamp_bias`: Megatron-Core TEGroupedMLP without the TE op fuser), bytes moved per
# element of the tensor they touch, activations in bf16 (Megatron's router casts the probs to the logits'
# dtype: moe_utils.py `topk_routing_with_score_function`, probs.type_as(logits)).
# Clamp, on the FC1 output ((n_mat - 1) x f_e per routed row), fused_bias_geglu.py
# `weighted_bias_quick_geglu_impl`: forward chunk (views), clamp of each half (read 2 + write 2) and cat
# (read 2 + write 2) = 8; backward: each clamp's masked gradient (read the gradient and the saved input, write:
# 6) and the two halves' gradients put together into the FC1 output's gradient (read 2 + write 2) = 10. It is
# inside the moe_act checkpoint, so that recompute re-runs its forward.
CLAMP_BYTES_FWD = 8.0
CLAMP_BYTES_BWD = 10.0
# FC2 bias, on the FC2 output (h per routed row), experts.py `TEGroupedMLP._apply_bias`: per local expert
# bias x prob (write 2) and the add (read 2 + 2, write 2), then cat (read 2 + write 2) = 12; backward: the
# gradient flows to the FC2 output unchanged (cat and add backward are views), and the bias and prob
# gradients are reductions of gradient x prob and gradient x bias (read 2, write 2, reduce-read 2 each) = 12.
BIAS_BYTES_FWD = 12.0
BIAS_BYTES_BWD = 12.0


# A flex dispatcher's RDMA stage moves each token once per NVLink domain its experts sit in, the token's own
# domain included: DeepEP's internode kernels stage the own node's copy through the same chunked RDMA
# buffer and NVL forwarders, and both DeepEP and HybridEP report their "algorithm bandwidth" counting it
# (DeepEP tests/test_internode.py `num_rdma_token_sent`; hybrid-ep branch tests/utils.py
# `count_rdma_send_from_routing_map`: "we do not set the local node map to zeros"). Measured so on 50 GB/s
# CX7 NICs, that bandwidth is about the NIC's line rate: DeepEP V1 normal kernels (24 SMs, H800) 43 / 58 / 51
# GB/s dispatch and 43 / 57 / 50 combine at EP16 / 32 / 64 (docs/legacy.md); HybridEP on H100 (16 SMs, torch
# API, BF16) 54 / 47 / 41 dispatch and 53 / 53 / 47 combine at 16 / 32 / 64 ranks (docs/README_Hybrid-EP.md):
# mean 50 GB/s. So the RDMA stage runs at the nominal NIC rate (share 1.0) over every domain hit; on two
# nodes that is twice the remote-only traffic.
# The NVLink stage likewise writes every rank a token reaches, its own included, through the same buffers
# (both tests count `recv_x` / `dispatched_hidden` rows, self included); at the links' NVLink rate
# (efficiency.yaml scaleup 0.78 x 200 GB/s = 156 GB/s on H800) that is DeepEP's measured intranode 153 / 158
# GB/s dispatch / combine (docs/legacy.md). HybridEP's Blackwell figures are lower still (8 ranks, torch
# API, BF16, 16 SMs: 536 / 531 GB/s on B200 of 900), not modelled.
FLEX_RDMA_LINE_RATE_SHARE = 1.0
# EFA has no GPU-initiated RDMA (IBGDA): DeepEP's NVSHMEM puts go through NVSHMEM's libfabric host-proxy
# transport (awslabs/awsome-distributed-ai megatron-bridge/deepep/README.md: "host-proxy, IBGDA off"). With the
# same DeepEP test as above (hidden 7168, 4096 tokens, top-8; NVSHMEM 3.7.0) on p5.48xlarge (50 GB/s of EFA
# per GPU) its internode normal kernels reach 43.7 / 46.1 GB/s dispatch / combine on 4 nodes and 39.6 / 39.2
# on 8 (micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS-p5.md): mean 42.2 GB/s, 0.84 of the
# line rate. NCCL all-to-all on the same nodes reaches 51-54 GB/s peak busbw (aws-ofi-nccl), so it keeps the
# links' NIC rate. The same campaign's training runs (Qwen3-30B, hidden 2048) lose far more to DeepEP at EP32,
# which the authors put down to per-message proxy overhead with small messages: EFA_PROXY_REF_ROW_BYTES.
EFA_FLEX_RDMA_SHARE = 0.84
# DeepEP's internode dispatch/combine issue their RDMA traffic per chunk of tokens, not per byte: for each
# destination node a warp puts at most `num_max_rdma_chunked_send_tokens` tokens in one message and then
# bumps the receiver's tail with an atomic (csrc/kernels/legacy/internode.cu, dispatch: `num_bytes_per_msg
# = num_bytes_per_token * num_tokens_to_issue`, `nvshmemi_ibgda_put_nbi_warp`, `nvshmemi_ibgda_amo_nonfetch_
# add`), so the message count grows with the tokens whatever their width. On EFA each of those messages is
# handled by a CPU proxy thread (NVSHMEM's libfabric transport; UCCL-EP's proxy likewise), which is where
# the campaign puts the loss (awsome-distributed-ai qwen3-30b RESULTS.md: "DeepEP's per-dispatch
# proxy/kernel-launch overhead dominates" with hidden 2048). The only EFA measurement (EFA_FLEX_RDMA_SHARE)
# was taken with BF16 rows of hidden 7168; taken as message-bound, a narrower row costs the proxy the
# same time per token as that one did, so its bandwidth shrinks in proportion to the row width.
EFA_PROXY_REF_ROW_BYTES = 7168 * 2.0


def ep_exposed(a2a: float, compute: float, sms: int) -> tuple[float, float]:
    """(exposed all-to-all time, compute slowdown) when dispatch/combine overlap other compute."""
    hidden = min(a2a, compute)
    return a2a - hidden, hidden * EP_OVERLAP_COMM_SMS / sms


def routed_load(imbalance: float, capacity_factor: float | None) -> float:
    """Busiest EP rank's token copies / mean: the imbalance, capped by a capacity factor (token drop)."""
    return min(imbalance, capacity_factor) if capacity_factor else imbalance


def tokens_per_expert(tokens: float, topk: int, experts: int, t: int, e: int, te: int, load: float) -> float:
    """Token copies one local expert processes per micro-batch on the busiest rank.

    Each of the e EP ranks routes tokens/t tokens (sequence-parallel shard) with k copies each, spread over
    E experts; an expert-TP group of te ranks all-gathers what it received."""
    return max(1.0, tokens / t * topk * e * te / experts * load)


def a2a_bytes_per_token(
    topk: int,
    hidden: int,
    ep: int,
    dispatch_bytes: float = DISPATCH_BYTES,
    combine_bytes: float = COMBINE_BYTES,
) -> float:
    """Bytes one token puts on the wire per MoE layer forward (dispatch + combine), uniform routing.

    Each token sends k copies of its h-vector; the 1/ep share routed to experts on its own rank stays."""
    if ep <= 1:
        return 0.0
    return topk * hidden * (dispatch_bytes + combine_bytes) * (ep - 1) / ep


def a2a_time(nbytes: float, size: int, stride: int, links: comm.Links) -> float:
    """One all-to-all where each rank sends `nbytes` in total; adds the per-peer message latency."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    g, k = comm.placement(size, stride, links.node_size)
    rounds_local = math.ceil((g - 1) / A2A_CONCURRENT_PEERS)
    rounds_remote = math.ceil((size - g) / A2A_CONCURRENT_PEERS)
    lat = max(0, rounds_local - 1) * links.scaleup_lat + max(0, rounds_remote - 1) * links.scaleout_lat
    return comm.all_to_all(nbytes, size, stride, links) + lat


def distinct_hits(n: int, copies: int) -> float:
    """Expected distinct members of n equally likely ones that `copies` independent picks land on."""
    return n * (1.0 - (1.0 - 1.0 / n) ** copies) if n > 0 else 0.0


def domains_hit(k: int, topk: int, groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected NVLink domains (of k, equally loaded) one token's top-k experts sit in.

    Unconstrained routing: distinct_hits(k, topk). Group-limited routing (DeepSeek-V3 §2.1.2 node-limited
    routing; Megatron-Core `group_limited_topk`: the experts split into `groups` contiguous groups, a token
    keeps `group_topk` of them and takes its top-k experts inside those) confines a token to the domains of
    its groups when each domain holds whole groups (groups % k == 0; experts sit on EP ranks in order). With
    j of its kept groups in a domain (hypergeometric) and the k experts spread evenly over the kept groups,
    the domain is missed with probability (1 - j/group_topk)^topk."""
    if not (groups and group_topk and k > 1 and groups % k == 0 and group_topk < groups):
        return distinct_hits(k, topk)
    per = groups // k  # groups per domain
    total = math.comb(groups, group_topk)
    miss = sum(
        math.comb(per, j) * math.comb(groups - per, group_topk - j) / total * (1.0 - j / group_topk) ** topk
        for j in range(min(per, group_topk) + 1)
    )
    return k * (1.0 - miss)


def flex_a2a_time(
    tokens: float,
    topk: int,
    row_bytes: float,
    size: int,
    stride: int,
    links: comm.Links,
    rdma_bw: float | None = None,
    groups: tuple[int | None, int | None] = (None, None),
) -> float:
    """One dispatch (or combine) by a flex dispatcher (DeepEP / HybridEP): hierarchical and deduplicated.

    A token goes once to each NVLink domain that holds any of its experts, then is forwarded over NVLink to
    each destination rank once, however many of its experts that rank hosts (DeepEP README: "asymmetric-domain
    bandwidth forwarding"; DeepSeek-V3 §3.2.2; Megatron-Core flex dispatcher). Both stages carry the token's
    own domain / rank too (FLEX_RDMA_LINE_RATE_SHARE): the RDMA stage every domain hit at `rdma_bw`
    (flex_rdma_bandwidth; default: the links' NIC bandwidth), the NVLink stage every rank hit. Routing is
    taken as uniform over the EP group, within the kept groups of group-limited routing (`groups`: the
    router's groups and groups kept per token; domains_hit); `tokens` already includes the routed load."""
    if size <= 1 or tokens <= 0:
        return 0.0
    g, k = comm.placement(size, stride, links.node_size)
    nvl_rows = distinct_hits(size, topk)  # every destination rank, its own included
    nic_rows = domains_hit(k, topk, *groups) if k > 1 else 0.0  # every domain hit, its own included
    bw = rdma_bw or links.scaleout_bw
    t_nvl = tokens * nvl_rows * row_bytes / links.scaleup_bw + links.scaleup_lat
    t_nic = tokens * nic_rows * row_bytes / bw + (links.scaleout_lat if k > 1 else 0.0)
    return max(t_nvl, t_nic) + 0.25 * min(t_nvl, t_nic)


def flex_rdma_bandwidth(nic_bw: float, transport: str, row_bytes: float | None = None) -> float:
    """Per-GPU bandwidth of a flex dispatcher's RDMA stage (algorithm bandwidth, own domain counted).

    InfiniBand / RoCE (IBGDA): the NIC's line rate (FLEX_RDMA_LINE_RATE_SHARE); EFA (NVSHMEM's libfabric host
    proxy): the share DeepEP measured there (EFA_FLEX_RDMA_SHARE), scaled down for rows (`row_bytes` per
    token) narrower than the measured ones (EFA_PROXY_REF_ROW_BYTES: the proxy's cost is per message)."""
    if transport != "efa":
        return nic_bw * FLEX_RDMA_LINE_RATE_SHARE
    narrow = min(1.0, row_bytes / EFA_PROXY_REF_ROW_BYTES) if row_bytes else 1.0
    return nic_bw * EFA_FLEX_RDMA_SHARE * narrow


def grouped_gemm(ctx: PerfContext, m: float, n: float, k: float, groups: float, fp8: bool) -> float:
    """Time of `groups` same-shape GEMMs (m x k)·(k x n) run as TE's grouped linear (see constant)."""
    if groups <= 0 or m <= 0:
        return 0.0
    c = max(1.0, min(groups, GROUPED_GEMM_STREAMS))
    return groups / c * ctx.gemm(c * m, n, k, fp8)


@dataclass(frozen=True, slots=True)
class MoECompute:
    """Per-micro-batch times (s) of the routed part of one MoE layer on the busiest rank."""

    expert_fwd: float  # grouped GEMMs forward
    expert_bwd: float  # grouped GEMMs dgrad + wgrad
    overhead_fwd: float  # router, permute/unpermute, FP8 quantisation (memory-bound)
    overhead_bwd: float
    dispatch_combine: float  # one forward's dispatch + combine all-to-alls (the backward repeats it)
    clamp_fwd: float = 0.0  # eager GLU clamp forward (in overhead_fwd); the moe_act recompute re-runs it


def eager_clamp_bias_bytes(ctx: PerfContext, up_n: float, h: int) -> tuple[float, float, float]:
    """Bytes per routed row of the eager clamp and FC2-bias passes (see CLAMP_BYTES_FWD, BIAS_BYTES_FWD):
    (forward, backward, the clamp's forward alone); zero unless the model has them and the stack runs them
    eagerly."""
    model = ctx.model
    if not ctx.sw.moe_eager_clamp_bias:
        return 0.0, 0.0, 0.0
    clamp = up_n if model.glu_clamp is not None else 0.0
    bias = float(h) if model.expert_bias else 0.0
    fwd = CLAMP_BYTES_FWD * clamp + BIAS_BYTES_FWD * bias
    return fwd, CLAMP_BYTES_BWD * clamp + BIAS_BYTES_BWD * bias, CLAMP_BYTES_FWD * clamp


def routed_expert_costs(ctx: PerfContext, tokens: float, t: int, e: int, te: int, n_mat: int) -> MoECompute:
    """Router, permutation, grouped expert GEMMs and dispatch/combine of one MoE layer, one micro-batch.

    `tokens` is the micro-batch's tokens on this GPU's CP shard (all TP ranks see them)."""
    model, w = ctx.model, ctx.w
    h, E, K = model.hidden, model.experts, model.topk
    fe = (model.moe_ffn_hidden or 0) / te
    load = routed_load(w.moe_imbalance, w.moe_capacity_factor)
    local = tokens / t  # tokens this rank routes (Megatron requires sequence parallelism with TP + MoE)
    copies = local * K * load  # token copies the busiest rank receives, before the expert-TP all-gather
    m = tokens_per_expert(tokens, K, E, t, e, te, load)
    tile = ctx.eff.tile
    m_pad = math.ceil(m / tile) * tile  # each expert's rows are padded to whole tiles
    groups = E / e
    fp8 = ctx.fp8
    up_n = (n_mat - 1) * fe
    fwd = grouped_gemm(ctx, m_pad, up_n, h, groups, fp8) + grouped_gemm(ctx, m_pad, h, fe, groups, fp8)
    dgrad = grouped_gemm(ctx, m_pad, h, up_n, groups, fp8) + grouped_gemm(ctx, m_pad, fe, h, groups, fp8)
    wgrad = grouped_gemm(ctx, h, up_n, m, groups, fp8) + grouped_gemm(ctx, fe, h, m, groups, fp8)
    hbm = ctx.hbm
    router_gemm = ctx.gemm(local, E, h, False)
    router_mem = local * E * ROUTER_BYTES_PER_SCORE / hbm
    permute = 2.0 * 2.0 * h * (local + copies) / hbm  # permute + unpermute: bf16 read + write each
    gathered = copies * te  # rows entering the grouped GEMM on this rank
    if w.moe_dispatcher != "flex" and groups > 1:  # alltoall: received rows re-sorted by local expert
        permute += LOCAL_SORT_PASSES * 2.0 * 2.0 * h * gathered / hbm
    eager_f, eager_b, clamp_f = eager_clamp_bias_bytes(ctx, up_n, h)
    quant_fwd = quant_bwd = 0.0
    if fp8:  # expert GEMM inputs forward, output gradients backward
        quant_fwd = quantise_time(gathered * (h + fe), w.fp8_recipe, hbm)
        quant_bwd = quantise_time(gathered * (up_n + h), w.fp8_recipe, hbm)
    a2a = 0.0
    if e > 1 and w.moe_dispatcher == "flex":
        cl = ctx.cluster
        grp = (model.router_groups, model.router_group_topk)
        for row in (h * DISPATCH_BYTES, h * COMBINE_BYTES):
            rdma = flex_rdma_bandwidth(cl.nic_bw, cl.transport, row)
            a2a += flex_a2a_time(local * load, K, row, e, te, ctx.links, rdma, grp)
    elif e > 1:
        disp = local * K * h * DISPATCH_BYTES * load
        comb = local * K * h * COMBINE_BYTES * load
        a2a = a2a_time(disp, e, te, ctx.links) + a2a_time(comb, e, te, ctx.links)
    return MoECompute(
        fwd,
        dgrad + wgrad,
        router_gemm + router_mem + permute + quant_fwd + gathered * eager_f / hbm,
        2.0 * router_gemm + router_mem + permute + quant_bwd + gathered * eager_b / hbm,
        a2a,
        gathered * clamp_f / hbm,
    )


# ---- host sync per MoE forward (no CUDA graphs) ---------------------------------------------------------
# Megatron-Core's dispatchers block the CPU on the GPU once per MoE layer forward: the alltoall dispatcher
# needs the per-rank token counts on the host before the EP all-to-all ("A synchronization is needed before
# expert parallel AlltoAll communication to get the `input_splits` and `output_splits` CPU values",
# megatron/core/transformer/moe/token_dispatcher.py, `cuda_sync_point = "before_ep_alltoall"`), and the flex
# dispatcher waits for DeepEP's received-token count ("the CPU will wait for GPU's signal to arrive",
# megatron/core/transformer/moe/fused_a2a.py) and reads it with `.item()` to size the permutation. After the
# sync the GPU queue is empty, so the ops issued next run no earlier than the CPU issues them: the CPU cannot
# run ahead across MoE layers in the forward (the backward reuses the host-side splits and never syncs).
# Op counts per CPU issue (perf/efficiency.py: DENSE_LAYER_OPS, MOE_BLOCK_OPS, OPS_PER_LOCAL_EXPERT); of the
# MoE block's ops, the router / top-k / aux loss / token counts / first permutation (taken as half) are
# issued before the sync, the all-to-alls and (un)permutations after it, half on each side of the experts.
MOE_PRE_SYNC_SHARE = 0.5


def synced_issue_time(segments: Sequence[tuple[float, float]]) -> float:
    """Time to run op groups [(CPU issue s, GPU s), ...] issued in order right after a host sync.

    Group k cannot start before the CPU has issued the groups before it, and the GPU then runs k and all
    later groups back to back: the time is max over k of (CPU time of groups < k + GPU time of groups >= k),
    and never less than the CPU's total issue time. Between max(sum CPU, sum GPU) and their sum."""
    cpu = [c for c, _ in segments]
    gpu = [g for _, g in segments]
    best = sum(cpu)
    for k in range(len(segments)):
        best = max(best, sum(cpu[:k]) + sum(gpu[k:]))
    return best


@dataclass(frozen=True, slots=True)
class MoEIssue:
    """GPU seconds of one MoE layer's forward, split where the host issues it, plus its backward."""

    dense_fwd: float  # attention block, shared experts, norms and their exposed TP/CP comm
    pre_sync_fwd: float  # router, score passes, first permutation (before the sync)
    expert_fwd: float  # grouped expert GEMMs (and their FP8 casts)
    a2a_fwd: float  # exposed dispatch + combine of the forward
    bwd: float  # backward with its exposed comm
    local_experts: float
    fp8: bool = False  # FP8 expert GEMMs: per-expert casts issued too (efficiency.ops_per_local_expert)


def moe_issue_floor(x: MoEIssue) -> tuple[float, float]:
    """(forward, backward) time of one MoE layer without CUDA graphs: forward as issued after the host sync
    (synced_issue_time), backward floored by its CPU issue time alone (no sync, the CPU runs ahead)."""
    pre_c = MOE_PRE_SYNC_SHARE * MOE_BLOCK_OPS * HOST_OP_S
    side_c = (MOE_BLOCK_OPS * HOST_OP_S - pre_c) / 2.0  # dispatch side, and the same on the combine side
    experts_c = ops_per_local_expert(x.fp8) * x.local_experts * HOST_OP_S
    half_a2a = x.a2a_fwd / 2.0
    segments = (  # from the sync: this layer's dispatch, experts, combine, then the next layer to its sync
        (side_c, half_a2a),
        (experts_c, x.expert_fwd),
        (side_c, half_a2a),
        (DENSE_LAYER_OPS * HOST_OP_S, x.dense_fwd),
        (pre_c, x.pre_sync_fwd),
    )
    return synced_issue_time(segments), max(x.bwd, host_issue_time(True, x.local_experts, x.fp8)[1])


def issue_bound_layer(
    fwd: float,
    bwd: float,
    mc: MoECompute,
    comm_s: float,
    ep_s: float,
    a2a_passes: int,
    local_experts: float,
    fp8: bool = False,
) -> tuple[float, float]:
    """A MoE layer's (forward, backward) compute stretched to its host-issue bound (moe_issue_floor).

    `fwd`/`bwd` are the layer's compute, `comm_s` its exposed TP/CP comm (a third forward), `ep_s` its
    exposed all-to-all time over `a2a_passes` passes (2, or 3 with full recompute), one of them forward."""
    a2a_f = ep_s / a2a_passes
    bwd_gpu = bwd + comm_s * 2.0 / 3.0 + ep_s - a2a_f
    x = MoEIssue(
        dense_fwd=fwd - mc.overhead_fwd - mc.expert_fwd + comm_s / 3.0,
        pre_sync_fwd=mc.overhead_fwd,
        expert_fwd=mc.expert_fwd,
        a2a_fwd=a2a_f,
        bwd=bwd_gpu,
        local_experts=local_experts,
        fp8=fp8,
    )
    t_f, t_b = moe_issue_floor(x)
    gpu_f = fwd + comm_s / 3.0 + a2a_f
    return fwd + max(0.0, t_f - gpu_f), bwd + max(0.0, t_b - bwd_gpu)
