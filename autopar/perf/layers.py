"""Per-layer costs of the analytical model: the (model, cluster, workload) context and, for one layer
sharding (tp, cp, micro-batch, ep, etp, sp, recompute), the compute/communication time and activation bytes
per layer per micro-batch. Memoised, because thousands of strategies share a sharding.
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.perf import comm
from autopar.perf.context import PerfContext, perf_context
from autopar.perf.efficiency import host_issue_time
from autopar.perf.finetune import weight_grad_gemms
from autopar.perf.flops import attention_context
from autopar.perf.fp8 import quantise_time
from autopar.perf.moe import ep_exposed, issue_bound_layer, routed_expert_costs, routed_load
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import GiB

# Modelling constants that are not GPU-specific (documented in the README's assumptions).
CUDA_CONTEXT_BYTES = 1.0 * GiB  # CUDA context + kernels (formulas §3.5: 0.5-2 GiB)
NCCL_BYTES = 0.75 * GiB  # NCCL communicators and buffers
FRAGMENTATION = 0.05  # caching-allocator slack on activations and transient buffers
OVERLAP_SLOWDOWN = 0.10  # compute slowdown while overlapped communication runs (SM sharing, Calculon)
OPTIMIZER_BYTES_PER_PARAM = 32.0  # Adam step traffic per local parameter (formulas §6, ~30 B + grad norm)


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """Per-layer, per-micro-batch times (s) and activation bytes for one layer sharding."""

    dense_fwd: float
    dense_bwd: float
    dense_re: float
    moe_fwd: float
    moe_bwd: float
    moe_re: float
    logits_time: float
    tp_dense: float
    tp_moe: float
    cp_layer: float
    ep_layer: float
    act_dense: float  # activation bytes kept per dense layer per micro-batch (for this recompute mode)
    act_moe: float
    act_dense_full: float  # without recompute (the working set while a layer is recomputed)
    act_moe_full: float
    logits_mem: float
    embed_mem: float
    pp_bytes: float
    # For perf/cp.py (pipe): core-attention times per layer per micro-batch and KV bytes per token.
    attn_fwd: float = 0.0
    attn_bwd: float = 0.0
    kv_bytes_tok: float = 0.0


def layer_costs(ctx: PerfContext, t: int, c: int, b: int, e: int, te: int, sp: bool, rec: str) -> LayerCosts:
    """Per-layer costs for one layer sharding, computed once per context."""
    key = (t, c, b, e, te, sp, rec)
    lc = ctx.layers.get(key)
    if lc is None:
        lc = _compute_layer_costs(ctx, t, c, b, e, te, sp, rec)
        ctx.layers[key] = lc
    return lc


def _compute_layer_costs(
    ctx: PerfContext, t: int, c: int, b: int, e: int, te: int, sp: bool, rec: str
) -> LayerCosts:
    """Compute and communication per layer per micro-batch, and activation bytes (formulas §2-4)."""
    model, sw, eff, links = ctx.model, ctx.sw, ctx.eff, ctx.links
    fp8, peak16, hbm, G = ctx.fp8, ctx.peak16, ctx.hbm, ctx.G
    gemm = ctx.gemm
    S = ctx.w.seq_len
    h = model.hidden
    a, k, dh = model.heads, model.kv, model.dh
    k = max(k, t)  # with tp > kv_heads each TP rank holds (a replica of) one KV head
    T = b * S / c  # tokens of one micro-batch on this GPU's CP shard (all TP ranks see them)

    if model.is_mla:
        dn, dr, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        rq, rkv = model.q_lora_rank or 0, model.kv_lora_rank
        attn_gemm = gemm(T, rq, h, fp8) if rq else 0.0
        attn_gemm += gemm(T, a * (dn + dr) / t, rq or h, fp8)
        attn_gemm += gemm(T, rkv + dr, h, fp8) + gemm(T, a * (dn + dv) / t, rkv, fp8)
        attn_gemm += gemm(T, h, a * dv / t, fp8)
        qk_dim, v_dim = dn + dr, dv
        kv_bytes_tok = 2 * (rkv + dr)  # compressed KV per token
    else:
        attn_gemm = gemm(T, (a + 2 * k) * dh / t, h, fp8) + gemm(T, h, a * dh / t, fp8)
        qk_dim, v_dim = dh, dh
        kv_bytes_tok = 2 * 2 * k * dh
    if sw.flash_attention:
        s_ctx = attention_context(model, S, causal=True)
        attn_core_flops = 2.0 * a * (qk_dim + v_dim) * s_ctx * T / t
        s_kv = min(S, model.sliding_window or S) if model.sliding_window_fraction >= 1 else S
        attn_eta_scale = (
            (s_kv / (s_kv + 512.0)) * (min(qk_dim, 128) / (min(qk_dim, 128) + 16.0)) / (128 / 144)
        )
        eta_f, eta_b = (
            (eff.attn_fwd_fused, eff.attn_bwd_fused) if sw.fused_attention else (eff.attn_fwd, eff.attn_bwd)
        )
        attn_fwd = attn_core_flops / (peak16 * eta_f * attn_eta_scale) + eff.kernel_overhead_s
        attn_bwd = 2.5 * attn_core_flops / (peak16 * eta_b * attn_eta_scale) + eff.kernel_overhead_s
    else:
        # Unfused attention (pre-FlashAttention Megatron): batched GEMMs over the full s x s scores, and the
        # scores/softmax/dropout tensors go through HBM: ~11 B per score forward, ~2x that backward.
        s_loc = S / c
        heads_local = a / t
        seqs = T / s_loc
        bmm = gemm(s_loc, S, qk_dim, False) + gemm(s_loc, v_dim, S, False) - 2 * eff.kernel_overhead_s
        scores = seqs * heads_local * s_loc * S
        attn_fwd = seqs * heads_local * bmm + 11.0 * scores / hbm + eff.kernel_overhead_s
        attn_bwd = 2.0 * seqs * heads_local * bmm + 22.0 * scores / hbm + eff.kernel_overhead_s

    n_mat = 3 if model.activation == "swiglu" else 2
    wg = weight_grad_gemms(ctx.w)  # backward GEMMs per weight GEMM (2; 1 with frozen LoRA base weights)
    f = model.ffn_hidden
    dense_mlp_gemm = gemm(T, (n_mat - 1) * f / t, h, fp8) + gemm(T, h, f / t, fp8)
    load = routed_load(ctx.w.moe_imbalance, ctx.w.moe_capacity_factor) if model.is_moe else 1.0
    moe_fwd_extra = moe_bwd_extra = 0.0
    ep_a2a = 0.0
    if model.is_moe:
        fe = model.moe_ffn_hidden or 0
        mc = routed_expert_costs(ctx, T, t, e, te, n_mat)
        moe_gemm = mc.expert_fwd
        frozen = (2 - wg) * mc.expert_fwd  # LoRA: no expert wgrad (perf/finetune.py)
        moe_fwd_extra = mc.overhead_fwd
        moe_bwd_extra = mc.overhead_bwd + mc.expert_bwd - frozen - wg * mc.expert_fwd
        ep_a2a = mc.dispatch_combine
        if model.shared_experts:  # shared experts: a TP-sharded MLP on every token
            fs = model.shared_ffn * model.shared_experts
            moe_gemm += gemm(T, (n_mat - 1) * fs / t, h, fp8) + gemm(T, h, fs / t, fp8)
    else:
        fe = 0
        moe_gemm = 0.0

    # Memory-bound elementwise work per token per layer, forward (bytes): norms, residual adds,
    # RoPE, activation function; backward ~2x. Sharded by TP inside the TP region, by SP outside.
    act_f = (fe * model.topk * load) if model.is_moe else f
    elem_rep = 20.0 * h
    elem_shard = 4.0 * (a + k) * dh + (6.0 if n_mat == 3 else 4.0) * act_f
    elem_fwd = sw.elementwise_passes * T * (elem_rep / (t if sp else 1) + elem_shard / t) / hbm
    # FP8 quantisation (perf/fp8.py) of the attention / dense-MLP / shared-expert GEMM operands: inputs in
    # the forward, output gradients in the backward (routed experts are counted in perf/moe.py).
    q_fwd_dense = q_bwd_dense = q_fwd_moe = q_bwd_moe = 0.0
    if fp8:
        recipe = ctx.w.fp8_recipe
        attn_in, attn_grad = h + a * dh / t, (a + 2 * k) * dh / t + h
        mlp_in, mlp_grad = h + f / t, (n_mat - 1) * f / t + h
        fs_t = model.shared_ffn * model.shared_experts / t if model.is_moe else 0.0
        sh_in, sh_grad = (h + fs_t, (n_mat - 1) * fs_t + h) if fs_t else (0.0, 0.0)
        q_fwd_dense = quantise_time(T * (attn_in + mlp_in), recipe, hbm)
        q_bwd_dense = quantise_time(T * (attn_grad + mlp_grad), recipe, hbm)
        q_fwd_moe = quantise_time(T * (attn_in + sh_in), recipe, hbm)
        q_bwd_moe = quantise_time(T * (attn_grad + sh_grad), recipe, hbm)
    # Per-layer forward / backward (no comm).
    dense_fwd = attn_gemm + attn_fwd + dense_mlp_gemm + elem_fwd + q_fwd_dense
    dense_bwd = wg * (attn_gemm + dense_mlp_gemm) + attn_bwd + 2 * elem_fwd + q_bwd_dense
    moe_fwd = attn_gemm + attn_fwd + moe_gemm + elem_fwd + q_fwd_moe + moe_fwd_extra
    moe_bwd = wg * (attn_gemm + moe_gemm) + attn_bwd + 2 * elem_fwd + q_bwd_moe + moe_bwd_extra

    if rec == "full":
        dense_re, moe_re = dense_fwd, moe_fwd
    elif rec == "selective":
        # Megatron: core attention only (Korthikanti 2022); torchtitan per-op SAC: also half the matmuls.
        dense_re = attn_fwd + 0.5 * elem_fwd + sw.selective_gemm_fraction * (attn_gemm + dense_mlp_gemm)
        moe_re = attn_fwd + 0.5 * elem_fwd + sw.selective_gemm_fraction * (attn_gemm + moe_gemm)
    else:
        dense_re = moe_re = 0.0

    logits_fwd = gemm(T, model.vocab / t, h, False) + 3 * T * model.vocab / t * 4 / hbm
    logits_time = (1 + wg) * logits_fwd  # fwd + dgrad + wgrad (+ softmax passes)

    # ---- communication per layer per micro-batch -------------------------------------------
    tp_bytes = 2.0 * T * h  # one all-reduce buffer (bf16 activations of the micro-batch)
    ar_tp = comm.all_reduce(tp_bytes, t, 1, links) if t > 1 else 0.0
    n_tp_dense = 4 + (2 if rec == "full" else 0)
    tp_dense = n_tp_dense * ar_tp
    tp_moe = (n_tp_dense / 2) * ar_tp * (1 + (1 if te > 1 else 0))
    if ctx.w.tp_comm_overlap and sp and t > 1:
        # TP communication overlap (Megatron --tp-comm-overlap, torchtitan async TP): the AG/RS are split
        # into chunks pipelined with the neighbouring GEMMs; the first chunk (1/t) stays exposed, at most
        # sw.tp_overlap_hidden of the rest hides (NVLink/SM contention, serialized chunks), and the chunked
        # GEMMs run OVERLAP_SLOWDOWN slower while hiding it.
        gemm_dense = (1 + 2 + (1 if rec == "full" else 0)) * (attn_gemm + dense_mlp_gemm)
        gemm_moe = (1 + 2 + (1 if rec == "full" else 0)) * attn_gemm
        exp_dense = tp_dense - min(sw.tp_overlap_hidden * tp_dense * (1 - 1 / t), gemm_dense)
        exp_moe = tp_moe - min(sw.tp_overlap_hidden * tp_moe * (1 - 1 / t), gemm_moe)
        dense_fwd += OVERLAP_SLOWDOWN * (tp_dense - exp_dense) / 3
        dense_bwd += OVERLAP_SLOWDOWN * (tp_dense - exp_dense) * 2 / 3
        moe_fwd += OVERLAP_SLOWDOWN * (tp_moe - exp_moe) / 3
        moe_bwd += OVERLAP_SLOWDOWN * (tp_moe - exp_moe) * 2 / 3
        tp_dense, tp_moe = exp_dense, exp_moe

    cp_layer = 0.0
    if c > 1:
        chunk = kv_bytes_tok * T / (t if not model.is_mla else 1)
        ring = comm.p2p(chunk, t * c > G, links) * (c - 1)
        cp_layer = max(0.0, ring - attn_fwd) + max(0.0, 2 * ring - attn_bwd)
        if rec == "full":
            cp_layer += max(0.0, ring - attn_fwd)

    # Dispatch + combine forward, their mirror images backward, once more under full recompute.
    ep_layer = 2 * ep_a2a + (ep_a2a if rec == "full" else 0.0)
    if ep_layer and ctx.w.moe_ep_overlap:  # hidden under another micro-batch's MoE-layer compute
        ep_layer, slow = ep_exposed(ep_layer, moe_fwd + moe_bwd + moe_re, eff.sms)
        moe_fwd += slow / 3
        moe_bwd += slow * 2 / 3

    # ---- CPU issue floor (no CUDA graphs): a layer's GPU work cannot outrun the ops' issue -----------
    if not ctx.w.cuda_graphs:
        hf, hb = host_issue_time(False, 0)
        dense_fwd, dense_bwd = _floor(dense_fwd, dense_bwd, hf, hb, tp_dense + cp_layer)
        if model.is_moe:  # one host sync per MoE forward (perf/moe.py moe_issue_floor)
            passes = 3 if rec == "full" else 2
            moe_fwd, moe_bwd = issue_bound_layer(
                moe_fwd, moe_bwd, mc, tp_moe + cp_layer, ep_layer, passes, model.experts / e
            )

    # ---- activations -----------------------------------------------------------------------
    if model.is_mla:
        qkv_tok = 2.0 * (a * (dn + dr) * 2 + a * dv) + 2.0 * ((model.q_lora_rank or 0) + rkv) * t
        ctx_tok = 2.0 * a * dv
    else:
        qkv_tok = 2.0 * dh * (a + 2 * k)
        ctx_tok = 2.0 * a * dh
    # FP8 (Transformer Engine / torchao float8) keeps the quantised GEMM inputs (1 byte) for backward.
    gemm_in = 1.0 if fp8 else 2.0
    rep_tok = 4.0 * h + 2.0 * gemm_in * h  # 2 norm inputs (bf16), QKV input, MLP input
    ctx_tok *= gemm_in / 2.0  # attention output = output-projection input
    mlp_tok = (2.0 * (n_mat - 1) + gemm_in) * f  # SwiGLU gate/up + act (fc2 input), GeLU fc1 + act

    # Per routed token copy (Megatron TEGroupedMLP, probs applied inside the activation): the FC1 input
    # (h, kept in FP8 when FP8), the FC1 output for the activation's backward ((n_mat - 1) x f_e in bf16) and the
    # FC2 input (f_e, FP8 when FP8); shared experts likewise per token; router scores in fp32.
    def expert_tok(width: float) -> float:
        return gemm_in * h + 2.0 * (n_mat - 1) * width + gemm_in * width

    moe_tok = (
        model.topk * load * expert_tok(fe)
        + model.shared_experts * expert_tok(model.shared_ffn)
        + 4.0 * model.experts
        if model.is_moe
        else 0.0
    )
    sp_div = t if sp else 1
    op_sac = sw.selective_gemm_fraction > 0

    # Without FlashAttention the softmax output and dropout mask of the s x s scores are kept (5·a·s B/token).
    # (softmax output 2 B + dropout mask 1 B + dropout output 2 B per score with dropout, else the softmax only)
    score_tok = 0.0 if sw.flash_attention else (5.0 if model.dropout else 2.0) * a * S
    lse_tok = 4.0 * a if sw.flash_attention else 0.0  # FlashAttention's fp32 log-sum-exp per head
    drop_tok = 2.0 * h if model.dropout else 0.0  # two 1-byte hidden-dropout masks (Korthikanti Table 2's 34)

    def layer_act(moe: bool, kind: str) -> float:
        mlp = moe_tok if moe else mlp_tok
        full = T * ((rep_tok + drop_tok) / sp_div + (qkv_tok + ctx_tok + lse_tok + mlp + score_tok) / t)
        if kind == "none":
            return full
        if kind == "selective":
            if op_sac:  # per-op SAC: layer input, attention output, every other matmul output
                return T * (
                    4.0 * h / sp_div
                    + (ctx_tok + lse_tok) / t
                    + (1.0 - sw.selective_gemm_fraction) * (qkv_tok + mlp) / t
                )
            return full - T * score_tok / t  # Megatron: the core attention (s x s scores) is recomputed
        return T * 2.0 * h / sp_div  # full recompute: the layer input only

    return LayerCosts(
        dense_fwd,
        dense_bwd,
        dense_re,
        moe_fwd,
        moe_bwd,
        moe_re,
        logits_time,
        tp_dense,
        tp_moe,
        cp_layer,
        ep_layer,
        layer_act(False, rec),
        layer_act(True, rec),
        layer_act(False, "none"),
        layer_act(True, "none"),
        T * model.vocab / t * sw.loss_bytes_per_logit,
        T * h * 2.0 / sp_div,
        2.0 * T * h / sp_div,
        attn_fwd,
        attn_bwd,
        kv_bytes_tok,
    )


def _floor(fwd: float, bwd: float, host_f: float, host_b: float, comm_s: float) -> tuple[float, float]:
    """Stretch a layer's forward/backward so GPU time (with its exposed comm) is at least the CPU issue time."""
    gpu = fwd + bwd + comm_s
    host = host_f + host_b
    if host <= gpu:
        return fwd, bwd
    extra = host - gpu
    return fwd + extra * host_f / host, bwd + extra * host_b / host


def activation_bytes_per_layer(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy
) -> float:
    """Activation bytes one dense layer keeps for backward per micro-batch (Korthikanti Table 2 form)."""
    s = strategy.with_dp(cluster.num_gpus)
    ctx = perf_context(model, cluster, workload)
    return layer_costs(
        ctx, s.tp, s.cp, s.micro_batch, s.ep, s.expert_tp, s.sp and s.tp > 1, s.recompute
    ).act_dense
