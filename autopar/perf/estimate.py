"""The analytical model: per-GPU memory and step time of one strategy, with full breakdowns.

Pure and deterministic. Sources per term are in formulas.md (§ numbers in comments). Time is for the
most loaded pipeline stage; memory is the peak over the first and last stage (the most loaded GPU).
"""

from __future__ import annotations

from autopar.errors import InvalidStrategyError
from autopar.perf import comm
from autopar.perf.layers import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION,
    NCCL_BYTES,
    OPTIMIZER_BYTES_PER_PARAM,
    OVERLAP_SLOWDOWN,
    activation_bytes_per_layer,
    layer_costs,
    perf_context,
    usable_memory_bytes,
)
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.perf.validate import validate_strategy
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import GiB

__all__ = ["activation_bytes_per_layer", "estimate", "usable_memory_bytes"]


def estimate(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    check: bool = True,
    strict: bool = True,
) -> Estimate:
    """Predict memory and step time of one strategy; raises InvalidStrategyError if it breaks a rule."""
    s = strategy.with_dp(cluster.num_gpus)
    if check:
        violations = validate_strategy(model, cluster, workload, s, strict=strict)
        if violations:
            raise InvalidStrategyError(violations)
    return _estimate(model, cluster, workload, s)


def _estimate(model: ModelSpec, cluster: ClusterSpec, w: Workload, s: Strategy) -> Estimate:
    ctx = perf_context(model, cluster, w)
    sw, pc, links = ctx.sw, ctx.pc, ctx.links
    notes: list[str] = []
    t, p, c, d = s.tp, s.pp, s.cp, s.dp
    e, te = s.ep, s.expert_tp
    sp = s.sp and t > 1
    b, B = s.micro_batch, w.global_batch
    v = s.vpp if p > 1 else 1
    m_mb = max(1, B // (b * d))  # micro-batches per step per pipeline
    W, G, fp8, hbm = ctx.W, ctx.G, ctx.fp8, ctx.hbm
    L = model.layers
    lc = layer_costs(ctx, t, c, b, e, te, sp, s.recompute)

    # ---- layers per stage (uneven splits put the remainder on the last stage) --------------------
    Ls = -(-L // p)
    Ls_last = L - (p - 1) * Ls if p > 1 else Ls
    if Ls_last <= 0:
        Ls_last = max(1, L // p)
    if L % p:
        notes.append(f"uneven pipeline split: {Ls} layers on the first stages, {Ls_last} on the last")

    def stage_mix(n_layers: int, first: bool) -> tuple[int, int]:
        """(dense layers, MoE layers) on a stage."""
        if not model.is_moe:
            return n_layers, 0
        if first:
            nd = min(model.dense_layers, n_layers)
            return nd, n_layers - nd
        return 0, n_layers

    first_mix = stage_mix(Ls, True)
    last_mix = stage_mix(Ls_last, p == 1)
    dense_fwd, dense_bwd, dense_re = lc.dense_fwd, lc.dense_bwd, lc.dense_re
    moe_fwd, moe_bwd, moe_re = lc.moe_fwd, lc.moe_bwd, lc.moe_re
    logits_time, tp_dense, tp_moe = lc.logits_time, lc.tp_dense, lc.tp_moe
    cp_layer, ep_layer = lc.cp_layer, lc.ep_layer

    # ---- stage time for one micro-batch ----------------------------------------------------
    def stage_time(mix: tuple[int, int], has_logits: bool) -> tuple[float, float, float, float, float]:
        nd, nm = mix
        comp = nd * (dense_fwd + dense_bwd + dense_re) + nm * (moe_fwd + moe_bwd + moe_re)
        re = nd * dense_re + nm * moe_re
        if has_logits:
            comp += logits_time
        tpc = nd * tp_dense + nm * tp_moe
        cpc = (nd + nm) * cp_layer
        epc = nm * ep_layer
        return comp, re, tpc, cpc, epc

    first = stage_time(first_mix, p == 1)
    last = stage_time(last_mix, True) if p > 1 else first
    bottleneck_stage = first if sum(first[:1] + first[2:]) >= sum(last[:1] + last[2:]) else last
    comp_mb, re_mb, tp_mb, cp_mb, ep_mb = bottleneck_stage
    stage_mb = comp_mb + tp_mb + cp_mb + ep_mb
    if model.is_moe and t > 1 and te == 1 and e == 1:
        notes.append("experts replicated across TP ranks (etp=1, ep=1)")

    # ---- parameters held per GPU (most loaded stage) ---------------------------------------
    def stage_params(mix: tuple[int, int], first_stage: bool, last_stage: bool) -> tuple[float, float, float]:
        """(non-expert params, expert params, largest single layer's params) held by one GPU."""
        nd, nm = mix
        attn = (pc.attention - pc.attention_tp_replicated) / t + pc.attention_tp_replicated
        dense_layer = attn + pc.dense_mlp / t + pc.norms
        moe_layer_ne = attn + pc.norms + pc.router + pc.shared_expert / t
        ne = nd * dense_layer + nm * moe_layer_ne
        if first_stage:
            ne += pc.embedding / t
        if last_stage:
            ne += (pc.output if pc.output else (pc.embedding if p > 1 else 0.0)) / t + pc.final_norm
        ex = nm * model.experts * pc.expert / (e * te)
        biggest = max(
            dense_layer if nd else 0.0, moe_layer_ne + model.experts * pc.expert / (e * te) if nm else 0.0
        )
        return ne, ex, biggest

    n_dp = d * c  # gradient/optimizer sharding group for dense params (Megatron reduces over dp x cp)
    n_edp = max(1, (t * c * d) // (e * te))  # expert data-parallel size
    opt_bytes = ctx.opt_bytes

    def states(ne: float, ex: float, biggest: float) -> tuple[float, float, float, float]:
        """(weights, grads, optimizer, buffers) bytes for the given local parameter counts."""
        if s.zero == 3:  # 16/n bytes per parameter: bf16 params 2 + grads 2 + fp32 master/m/v 12 (ZeRO §5)
            wts = 2.0 * (ne / n_dp + ex / n_edp)
            grd = 2.0 * (ne / n_dp + ex / n_edp)
            opt = opt_bytes * (ne / n_dp + ex / n_edp)
            if p > 1:  # the stage stays gathered across micro-batches: bf16 params + bf16 accumulated grads
                buf = (ne + ex) * (2.0 + 2.0) + biggest * 4.0
            else:  # 2 gathered bf16 units (prefetch) + bf16 grad + fp32 reduce buffer
                unit = (
                    biggest
                    if sw.zero3_collectives_per_layer == 1
                    else 3.0 * biggest / sw.zero3_collectives_per_layer
                )
                buf = unit * (2.0 * 2 + 2.0 + 4.0)
            return wts, grd, opt, buf
        n_opt_dense = n_dp if s.zero >= 1 else 1
        n_opt_exp = n_edp if s.zero >= 1 else 1
        wts = 2.0 * (ne + ex)
        grd = 4.0 * (ne / (n_dp if s.zero >= 2 else 1) + ex / (n_edp if s.zero >= 2 else 1))
        opt = opt_bytes * (ne / n_opt_dense + ex / n_opt_exp)
        buf = 0.125 * GiB + (2.0 * biggest if fp8 else 0.0)  # bucket staging; fp8 weight copies
        return wts, grd, opt, buf

    def stage_act(mix: tuple[int, int], inflight: float) -> float:
        nd, nm = mix
        total = (nd * lc.act_dense + nm * lc.act_moe) * inflight
        if s.recompute == "full":  # one layer's activations live while it is recomputed (input already kept)
            total += (lc.act_moe_full if nm > 0 else lc.act_dense_full) - lc.pp_bytes
        return total

    if p == 1:
        inflight_first = 1.0
    else:
        inflight_first = float(min(p, m_mb))
        if v > 1:
            inflight_first *= 1 + (p - 1) / (p * v)

    def memory_for(
        mix: tuple[int, int], first_stage: bool, last_stage: bool, inflight: float
    ) -> MemoryBreakdown:
        ne, ex, biggest = stage_params(mix, first_stage, last_stage)
        wts, grd, opt, buf = states(ne, ex, biggest)
        act = stage_act(mix, inflight)
        lg = lc.logits_mem if last_stage else 0.0
        if first_stage:
            lg += lc.embed_mem  # embedding output
        over = CUDA_CONTEXT_BYTES + NCCL_BYTES + FRAGMENTATION * (act + lg + buf)
        return MemoryBreakdown(wts, grd, opt, act, lg, buf, over)

    mem_first = memory_for(first_mix, True, p == 1, inflight_first)
    if p > 1:
        mem_last = memory_for(last_mix, False, True, 1.0)
        mem = mem_first if mem_first.total >= mem_last.total else mem_last
    else:
        mem = mem_first

    # ---- data-parallel communication ---------------------------------------------------------
    ne_f, ex_f, biggest_f = stage_params(first_mix, True, p == 1)
    dp_stride = t * c
    bwd_last_mb = comp_mb * (2.0 / 3.0)  # backward share of one micro-batch on the stage
    fwd_first_mb = comp_mb / 3.0
    dp_exposed = 0.0
    dp_overlap_busy = 0.0
    n_layers_stage = first_mix[0] + first_mix[1]
    if s.zero == 3:
        if n_dp > 1 or n_edp > 1:
            layer_ne = ne_f / max(1, n_layers_stage)
            layer_ex = ex_f / max(1, n_layers_stage)
            n_coll = sw.zero3_collectives_per_layer
            # Per-tensor gathers (DeepSpeed) run flat over the whole DP group: no node-local hierarchy,
            # and each parameter tensor pays the collective latency once.
            zl = (
                links
                if n_coll == 1
                else comm.Links(
                    1, links.scaleout_bw, links.scaleout_bw, links.scaleout_lat, links.scaleout_lat
                )
            )
            ag = comm.all_gather(2.0 * layer_ne, n_dp, dp_stride, zl) + comm.all_gather(
                2.0 * layer_ex, n_edp, te * e, zl
            )
            gb = sw.zero3_grad_bytes
            rs = comm.reduce_scatter(gb * layer_ne, n_dp, dp_stride, zl) + comm.reduce_scatter(
                gb * layer_ex, n_edp, te * e, zl
            )
            if n_coll > 1:
                ag += (n_coll - 1) * comm.all_gather(1.0, n_dp, dp_stride, zl)  # latency-only calls
                rs += (n_coll - 1) * comm.reduce_scatter(1.0, n_dp, dp_stride, zl)
            per_layer_comm = 2 * ag + rs
            per_layer_comp = comp_mb / max(1, n_layers_stage)
            # With pipelining, FSDP keeps the stage's parameters gathered across micro-batches and
            # reduces gradients once per step (torchtitan); without it, every micro-batch re-gathers.
            rounds = 1 if p > 1 else m_mb
            hidden = sw.zero3_overlap * per_layer_comp
            exposed_layer = max(0.0, per_layer_comm - hidden)
            dp_exposed = rounds * (n_layers_stage * exposed_layer + (ag + rs) * sw.zero3_overlap)
            dp_overlap_busy = rounds * n_layers_stage * min(per_layer_comm, hidden)
    else:
        grad_bytes = 4.0
        if n_dp > 1 or n_edp > 1:
            if s.zero == 0:
                t_dp = comm.all_reduce(grad_bytes * ne_f, n_dp, dp_stride, links) + comm.all_reduce(
                    grad_bytes * ex_f, n_edp, te * e, links
                )
                t_gather = 0.0
            else:
                t_dp = comm.reduce_scatter(grad_bytes * ne_f, n_dp, dp_stride, links) + comm.reduce_scatter(
                    grad_bytes * ex_f, n_edp, te * e, links
                )
                t_gather = comm.all_gather(2.0 * ne_f, n_dp, dp_stride, links) + comm.all_gather(
                    2.0 * ex_f, n_edp, te * e, links
                )
            dp_exposed = max(0.0, t_dp - bwd_last_mb) + max(0.0, t_gather - fwd_first_mb)
            dp_overlap_busy = min(t_dp, bwd_last_mb) + min(t_gather, fwd_first_mb)

    # ---- pipeline ----------------------------------------------------------------------------
    pp_comm = 0.0
    bubble = 0.0
    if p > 1:
        act_bytes = lc.pp_bytes
        crosses = t * c * d >= G or t * c * d * p > G
        per_send = comm.p2p(act_bytes, crosses, links)
        pp_comm = 2.0 * m_mb * v * per_send
        mean_stage = (stage_mb * (p - 1) + sum(last[:1] + last[2:])) / p
        bubble = (p - 1) / v * mean_stage

    # ---- optimizer step ------------------------------------------------------------------------
    local_for_opt = (ne_f / n_dp + ex_f / n_edp) if s.zero >= 1 else (ne_f + ex_f)
    opt_time = OPTIMIZER_BYTES_PER_PARAM * local_for_opt / hbm

    compute = m_mb * comp_mb + OVERLAP_SLOWDOWN * dp_overlap_busy
    tb = TimeBreakdown(
        compute=compute,
        recompute=m_mb * re_mb,
        tp_comm=m_mb * tp_mb,
        cp_comm=m_mb * cp_mb,
        ep_comm=m_mb * ep_mb,
        pp_comm=pp_comm,
        dp_comm=dp_exposed,
        bubble=bubble,
        optimizer=opt_time,
    )
    step = tb.total
    tokens = ctx.tokens
    flops_causal, flops_full, hw = ctx.flops_causal, ctx.flops_full, ctx.hw_flops[s.recompute]
    peak_mfu = ctx.peak_gemm
    cap = ctx.capacity
    headroom = cap - mem.total
    parts = {
        "compute": tb.compute,
        "tp_comm": tb.tp_comm,
        "cp_comm": tb.cp_comm,
        "ep_comm": tb.ep_comm,
        "pp_comm": tb.pp_comm,
        "dp_comm": tb.dp_comm,
        "bubble": tb.bubble,
        "optimizer": tb.optimizer,
    }
    bottleneck = max(parts, key=parts.__getitem__)
    if t > 1 and not (w.tp_comm_overlap and s.sp):
        notes.append(
            "TP collectives not overlapped with compute"
            + (
                " (tp_comm_overlap needs sequence parallelism)"
                if w.tp_comm_overlap
                else "; Megatron --tp-comm-overlap / torchtitan async TP would hide most of them (--tp-comm-overlap)"
            )
        )
    return Estimate(
        memory=mem,
        time=tb,
        step_time_s=step,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / W,
        model_flops_per_step=flops_causal,
        model_flops_per_step_full_attn=flops_full,
        hw_flops_per_step=hw,
        model_tflops_per_gpu=flops_full / step / W / 1e12,
        hw_tflops_per_gpu=hw / step / W / 1e12,
        mfu=flops_full / step / W / peak_mfu,
        mfu_causal=flops_causal / step / W / peak_mfu,
        hfu=hw / step / W / peak_mfu,
        peak_flops=peak_mfu,
        capacity_bytes=cap,
        headroom_bytes=headroom,
        fits=headroom >= 0,
        bottleneck=bottleneck,
        notes=tuple(notes),
    )
