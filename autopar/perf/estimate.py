"""The analytical model: per-GPU memory and step time of one strategy, with full breakdowns.

Pure and deterministic. Sources per term are in formulas.md (§ numbers in comments). Time is for the
most loaded pipeline stage; memory is the peak over the first and last stage (the most loaded GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from autopar.errors import InvalidStrategyError
from autopar.perf import comm
from autopar.perf.efficiency import efficiency_for, gemm_efficiency, software_for
from autopar.perf.flops import attention_context, forward_flops_per_token, hardware_flops_per_step
from autopar.perf.params import ParamCounts, count_params
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.perf.validate import validate_strategy
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

GiB = 2**30

# Modelling constants that are not GPU-specific (documented in the README's assumptions).
MOE_IMBALANCE = 1.1  # busiest EP rank's share of routed tokens relative to uniform (γ, formulas §3.2)
CUDA_CONTEXT_BYTES = 1.0 * GiB  # CUDA context + kernels (formulas §3.5: 0.5-2 GiB)
NCCL_BYTES = 0.75 * GiB  # NCCL communicators and buffers
FRAGMENTATION = 0.05  # caching-allocator slack on activations and transient buffers
OVERLAP_SLOWDOWN = 0.10  # compute slowdown while overlapped communication runs (SM sharing, Calculon)
TP_OVERLAP_HIDDEN = 0.5  # share of TP collectives that chunked overlap hides (torchtitan async-TP: ~+10%)
OPTIMIZER_BYTES_PER_PARAM = 32.0  # Adam step traffic per local parameter (formulas §6, ~30 B + grad norm)


@lru_cache(maxsize=256)
def _params(model: ModelSpec) -> ParamCounts:
    return count_params(model)


@lru_cache(maxsize=4096)
def _fwd_flops(model: ModelSpec, seq_len: int, causal: bool) -> float:
    return forward_flops_per_token(model, seq_len, causal).total


def usable_memory_bytes(memory_bytes: float) -> float:
    """Memory the framework can allocate: an '80 GB' part exposes ~79.2 GiB to torch (formulas §3.5)."""
    return memory_bytes / 1e9 * GiB * 0.99


def estimate(model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, *,
             check: bool = True, strict: bool = True) -> Estimate:
    """Predict memory and step time of one strategy; raises InvalidStrategyError if it breaks a rule."""
    s = strategy.with_dp(cluster.num_gpus)
    if check:
        violations = validate_strategy(model, cluster, workload, s, strict=strict)
        if violations:
            raise InvalidStrategyError(violations)
    return _estimate(model, cluster, workload, s)


class _Context:
    """Quantities fixed by (model, cluster, workload), and a cache of per-layer costs by layer sharding."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, w: Workload):
        gpu = cluster.gpu
        self.model, self.cluster, self.w, self.gpu = model, cluster, w, gpu
        self.eff = eff = efficiency_for(gpu.family)
        self.sw = software_for(w.framework)
        self.pc = _params(model)
        self.W = cluster.num_gpus
        self.G = cluster.node_size
        self.fp8 = w.precision == "fp8" and gpu.fp8_flops is not None
        self.peak16 = gpu.bf16_flops
        self.peak_gemm = gpu.peak_flops(w.precision)
        self.hbm = gpu.hbm_bw * eff.hbm
        self.links = comm.Links(self.G, gpu.scaleup_bw * eff.scaleup, cluster.nic_bw * eff.scaleout,
                                eff.scaleup_latency_s, eff.scaleout_latency_s)
        self.capacity = usable_memory_bytes(gpu.memory_bytes)
        tokens = w.global_batch * w.seq_len
        self.tokens = tokens
        self.flops_causal = 3.0 * tokens * _fwd_flops(model, w.seq_len, True)
        self.flops_full = 3.0 * tokens * _fwd_flops(model, w.seq_len, False)
        self.hw_flops = {r: hardware_flops_per_step(model, w.seq_len, w.global_batch, r, causal=False)
                         for r in ("none", "selective", "full")}
        self.opt_bytes = {"adam": 12.0, "adam_bf16_states": 8.0, "sgd": 8.0}[w.optimizer]
        self.layers: dict[tuple, _LayerCosts] = {}
        self.gemms: dict[tuple, float] = {}

    def gemm(self, mm: float, nn: float, kk: float, use_fp8: bool) -> float:
        """Time of one GEMM (m×k)·(k×n), memoised: many strategies share shapes."""
        key = (mm, nn, kk, use_fp8)
        tm = self.gemms.get(key)
        if tm is None:
            if mm <= 0 or nn <= 0 or kk <= 0:
                tm = 0.0
            else:
                pk = self.peak_gemm if use_fp8 else self.peak16
                eta = gemm_efficiency(mm, nn, kk, self.eff, use_fp8)
                tm = 2.0 * mm * nn * kk / (pk * eta) + self.eff.kernel_overhead_s
            self.gemms[key] = tm
        return tm


@lru_cache(maxsize=64)
def _context(model: ModelSpec, cluster: ClusterSpec, workload: Workload) -> _Context:
    return _Context(model, cluster, workload)


@dataclass(frozen=True, slots=True)
class _LayerCosts:
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


def _layer_costs(ctx: _Context, t: int, c: int, b: int, e: int, te: int, sp: bool, rec: str) -> _LayerCosts:
    key = (t, c, b, e, te, sp, rec)
    lc = ctx.layers.get(key)
    if lc is None:
        lc = _compute_layer_costs(ctx, t, c, b, e, te, sp, rec)
        ctx.layers[key] = lc
    return lc


def _compute_layer_costs(ctx: _Context, t: int, c: int, b: int, e: int, te: int, sp: bool,
                         rec: str) -> _LayerCosts:
    """Compute and communication per layer per micro-batch, and activation bytes (formulas §2-4)."""
    model, sw, eff, links = ctx.model, ctx.sw, ctx.eff, ctx.links
    fp8, peak16, hbm, G = ctx.fp8, ctx.peak16, ctx.hbm, ctx.G
    gemm = ctx.gemm
    S = ctx.w.seq_len
    h = model.hidden
    a, k, dh = model.heads, model.kv, model.dh
    T = b * S / c  # tokens of one micro-batch on this GPU's CP shard (all TP ranks see them)

    if model.is_mla:
        dn, dr, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        rq, rkv = model.q_lora_rank or 0, model.kv_lora_rank
        attn_gemm = (gemm(T, rq, h, fp8) if rq else 0.0)
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
        attn_eta_scale = (s_kv / (s_kv + 512.0)) * (min(qk_dim, 128) / (min(qk_dim, 128) + 16.0)) / (128 / 144)
        eta_f, eta_b = (eff.attn_fwd_fused, eff.attn_bwd_fused) if sw.fused_attention else (eff.attn_fwd, eff.attn_bwd)
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
    f = model.ffn_hidden
    dense_mlp_gemm = gemm(T, (n_mat - 1) * f / t, h, fp8) + gemm(T, h, f / t, fp8)
    if model.is_moe:
        fe = model.moe_ffn_hidden or 0
        tokens_per_expert = max(1.0, T * model.topk * e * te / (model.experts * t))
        local_experts = model.experts / e
        moe_gemm = local_experts * (gemm(tokens_per_expert, (n_mat - 1) * fe / te, h, fp8)
                                    + gemm(tokens_per_expert, h, fe / te, fp8)) * MOE_IMBALANCE
        if model.shared_experts:
            fs = model.shared_ffn * model.shared_experts
            moe_gemm += gemm(T, (n_mat - 1) * fs / t, h, fp8) + gemm(T, h, fs / t, fp8)
        moe_gemm += gemm(T, model.experts, h, False)  # router
    else:
        fe = 0
        moe_gemm = 0.0

    # Memory-bound elementwise work per token per layer, forward (bytes): norms, residual adds,
    # RoPE, activation function; backward ~2x. Sharded by TP inside the TP region, by SP outside.
    act_f = (fe * model.topk * MOE_IMBALANCE) if model.is_moe else f
    elem_rep = 20.0 * h
    elem_shard = 4.0 * (a + k) * dh + (6.0 if n_mat == 3 else 4.0) * act_f
    elem_fwd = sw.elementwise_passes * T * (elem_rep / (t if sp else 1) + elem_shard / t) / hbm
    fp8_cast = 0.0
    if fp8:  # quantise GEMM inputs (read 2 B, write 1 B) fwd and bwd, plus the local weights each micro-batch
        in_elems = T * (2 * h + a * dh / t + (act_f if not model.is_moe else act_f) / t)
        fp8_cast = 3.0 * 2 * in_elems / hbm
    # Per-layer forward / backward (no comm).
    dense_fwd = attn_gemm + attn_fwd + dense_mlp_gemm + elem_fwd + fp8_cast / 2
    dense_bwd = 2 * (attn_gemm + dense_mlp_gemm) + attn_bwd + 2 * elem_fwd + fp8_cast / 2
    moe_fwd = attn_gemm + attn_fwd + moe_gemm + elem_fwd + fp8_cast / 2
    moe_bwd = 2 * (attn_gemm + moe_gemm) + attn_bwd + 2 * elem_fwd + fp8_cast / 2

    if rec == "full":
        dense_re, moe_re = dense_fwd, moe_fwd
    elif rec == "selective":
        # Megatron: core attention only (Korthikanti 2022); torchtitan per-op SAC: also half the matmuls.
        dense_re = attn_fwd + 0.5 * elem_fwd + sw.selective_gemm_fraction * (attn_gemm + dense_mlp_gemm)
        moe_re = attn_fwd + 0.5 * elem_fwd + sw.selective_gemm_fraction * (attn_gemm + moe_gemm)
    else:
        dense_re = moe_re = 0.0

    logits_fwd = gemm(T, model.vocab / t, h, False) + 3 * T * model.vocab / t * 4 / hbm
    logits_time = 3 * logits_fwd  # fwd + dgrad + wgrad (+ softmax passes)

    # ---- communication per layer per micro-batch -------------------------------------------
    tp_bytes = 2.0 * T * h  # one all-reduce buffer (bf16 activations of the micro-batch)
    ar_tp = comm.all_reduce(tp_bytes, t, 1, links) if t > 1 else 0.0
    n_tp_dense = 4 + (2 if rec == "full" else 0)
    tp_dense = n_tp_dense * ar_tp
    tp_moe = (n_tp_dense / 2) * ar_tp * (1 + (1 if te > 1 else 0))
    if ctx.w.tp_comm_overlap and sp and t > 1:
        # TP communication overlap (Megatron --tp-comm-overlap, torchtitan async TP): the AG/RS are split
        # into chunks pipelined with the neighbouring GEMMs; the first chunk (1/t) stays exposed, at most
        # TP_OVERLAP_HIDDEN of the rest hides (NVLink/SM contention, serialized chunks), and the chunked
        # GEMMs run OVERLAP_SLOWDOWN slower while hiding it.
        gemm_dense = (1 + 2 + (1 if rec == "full" else 0)) * (attn_gemm + dense_mlp_gemm)
        gemm_moe = (1 + 2 + (1 if rec == "full" else 0)) * attn_gemm
        exp_dense = tp_dense - min(TP_OVERLAP_HIDDEN * tp_dense * (1 - 1 / t), gemm_dense)
        exp_moe = tp_moe - min(TP_OVERLAP_HIDDEN * tp_moe * (1 - 1 / t), gemm_moe)
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

    ep_layer = 0.0
    if model.is_moe and e > 1:
        disp = (T / t) * model.topk * h * (1.0 if fp8 else 2.0) * MOE_IMBALANCE
        comb = (T / t) * model.topk * h * 2.0 * MOE_IMBALANCE
        a2a = comm.all_to_all(disp, e, te, links) + comm.all_to_all(comb, e, te, links)
        ep_layer = 2 * a2a + (a2a if rec == "full" else 0.0)

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
    moe_tok = model.topk * MOE_IMBALANCE * (2.0 * h + 2.0 * n_mat * fe) + model.shared_experts * (
        2.0 * h + 2.0 * n_mat * model.shared_ffn) + 4.0 * model.experts if model.is_moe else 0.0
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
                return T * (4.0 * h / sp_div + (ctx_tok + lse_tok) / t
                            + (1.0 - sw.selective_gemm_fraction) * (qkv_tok + mlp) / t)
            return full - T * score_tok / t  # Megatron: the core attention (s x s scores) is recomputed
        return T * 2.0 * h / sp_div  # full recompute: the layer input only

    return _LayerCosts(
        dense_fwd, dense_bwd, dense_re, moe_fwd, moe_bwd, moe_re, logits_time, tp_dense, tp_moe, cp_layer,
        ep_layer, layer_act(False, rec), layer_act(True, rec), layer_act(False, "none"), layer_act(True, "none"),
        T * model.vocab / t * sw.loss_bytes_per_logit, T * h * 2.0 / sp_div, 2.0 * T * h / sp_div,
    )


def activation_bytes_per_layer(model: ModelSpec, cluster: ClusterSpec, workload: Workload,
                               strategy: Strategy) -> float:
    """Activation bytes one dense layer keeps for backward per micro-batch (Korthikanti Table 2 form)."""
    s = strategy.with_dp(cluster.num_gpus)
    ctx = _context(model, cluster, workload)
    return _layer_costs(ctx, s.tp, s.cp, s.micro_batch, s.ep, s.expert_tp, s.sp and s.tp > 1, s.recompute).act_dense


def _estimate(model: ModelSpec, cluster: ClusterSpec, w: Workload, s: Strategy) -> Estimate:
    ctx = _context(model, cluster, w)
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
    lc = _layer_costs(ctx, t, c, b, e, te, sp, s.recompute)

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
        biggest = max(dense_layer if nd else 0.0, moe_layer_ne + model.experts * pc.expert / (e * te) if nm else 0.0)
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
                unit = biggest if sw.zero3_collectives_per_layer == 1 else 3.0 * biggest / sw.zero3_collectives_per_layer
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

    def memory_for(mix: tuple[int, int], first_stage: bool, last_stage: bool, inflight: float) -> MemoryBreakdown:
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
            zl = links if n_coll == 1 else comm.Links(1, links.scaleout_bw, links.scaleout_bw,
                                                       links.scaleout_lat, links.scaleout_lat)
            ag = comm.all_gather(2.0 * layer_ne, n_dp, dp_stride, zl) + comm.all_gather(
                2.0 * layer_ex, n_edp, te * e, zl)
            gb = sw.zero3_grad_bytes
            rs = comm.reduce_scatter(gb * layer_ne, n_dp, dp_stride, zl) + comm.reduce_scatter(
                gb * layer_ex, n_edp, te * e, zl)
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
                    grad_bytes * ex_f, n_edp, te * e, links)
                t_gather = 0.0
            else:
                t_dp = comm.reduce_scatter(grad_bytes * ne_f, n_dp, dp_stride, links) + comm.reduce_scatter(
                    grad_bytes * ex_f, n_edp, te * e, links)
                t_gather = comm.all_gather(2.0 * ne_f, n_dp, dp_stride, links) + comm.all_gather(
                    2.0 * ex_f, n_edp, te * e, links)
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
        mean_stage = (stage_mb * (p - 1) + sum(last[:1] + last[2:])) / p if p > 1 else stage_mb
        bubble = (p - 1) / v * mean_stage
        if s.pp_schedule == "interleaved":
            pp_comm *= 1.0  # v already multiplies the number of sends

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
    parts = {"compute": tb.compute, "tp_comm": tb.tp_comm, "cp_comm": tb.cp_comm, "ep_comm": tb.ep_comm,
             "pp_comm": tb.pp_comm, "dp_comm": tb.dp_comm, "bubble": tb.bubble, "optimizer": tb.optimizer}
    bottleneck = max(parts, key=parts.__getitem__)
    if t > 1 and not (w.tp_comm_overlap and s.sp):
        notes.append("TP collectives not overlapped with compute" + (
            " (tp_comm_overlap needs sequence parallelism)" if w.tp_comm_overlap else
            "; Megatron --tp-comm-overlap / torchtitan async TP would hide most of them (--tp-comm-overlap)"))
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

