"""Per-layer costs of the analytical model: the (model, cluster, workload) context and, for one layer
sharding (tp, cp, micro-batch, ep, etp, sp, recompute), the compute/communication time and activation bytes
per layer per micro-batch. Memoised, because thousands of strategies share a sharding.

`_compute_layer_costs` composes one function per concern: attention (projection GEMMs and core attention:
MLA / GQA, FlashAttention or the unfused pre-FlashAttention kernels), MLP and MoE compute, elementwise and FP8
quantisation traffic, recompute, logits, TP communication with its overlap, the CP ring, EP dispatch/combine,
the CPU issue floor and activation bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autopar.knobs import recompute_modules
from autopar.layouts import ep_overlap_applies
from autopar.perf import comm
from autopar.perf.context import PerfContext, perf_context
from autopar.perf.efficiency import host_issue_time
from autopar.perf.finetune import dequantise_time, weight_grad_gemms
from autopar.perf.flops import attention_context
from autopar.perf.fp8 import quantise_time
from autopar.perf.moe import MoECompute, ep_exposed, issue_bound_layer, routed_expert_costs, routed_load
from autopar.perf.remat import REMAT_PREFIX, kept_on_gpu, recomputed_gemm_shares
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import GiB

# Modelling constants that are not GPU-specific (documented in the README's assumptions).
CUDA_CONTEXT_BYTES = 1.0 * GiB  # CUDA context + kernels (formulas §3.5: 0.5-2 GiB)
NCCL_BYTES = 0.75 * GiB  # NCCL communicators and buffers
FRAGMENTATION = 0.05  # caching-allocator slack on activations and transient buffers
OVERLAP_SLOWDOWN = 0.10  # compute slowdown while overlapped communication runs (SM sharing, Calculon)
OPTIMIZER_BYTES_PER_PARAM = 32.0  # Adam step traffic per local parameter (formulas §6, ~30 B + grad norm)

# Element sizes (bytes).
BF16_BYTES = 2.0  # activations, scores and TP/PP/CP buffers travel in bf16
FP8_BYTES = 1.0  # FP8 GEMM inputs (Transformer Engine / torchao float8 keep them for the backward)
FP32_BYTES = 4.0  # logits in the loss, router scores, FlashAttention's log-sum-exp

# ---- core attention --------------------------------------------------------------------------------------
# FlashAttention backward = 2.5x the forward's matmul FLOPs: it recomputes QK^T and runs 4 more matmuls
# (dV, dP, dQ, dK) against the forward's 2 (Dao 2023, FlashAttention-2; Dao-AILab/flash-attention
# benchmarks/benchmark_flash_attention.py `flops`: bwd = 2.5 x fwd).
ATTN_BWD_FLOP_RATIO = 2.5
# The efficiency tables' attention fractions hold at long sequences and head dim 128. Shorter KV loops spend
# relatively more in each tile's prologue/epilogue and smaller heads give each MMA less work, so both terms
# saturate hyperbolically, x / (x + half), normalised to 1 at the reference head dim. The half-saturation
# points are modelling assumptions on the kernels' scale (FlashAttention-2/3: 64-128-key tiles, 16-deep MMA
# k-steps), not fits: 512 keys (a few tiles) and 16 head-dim elements (one k-step).
ATTN_SEQ_HALF_SAT = 512.0
ATTN_HEAD_DIM_REF = 128  # head dim of the efficiency tables (and the FA2/FA3 sweet spot); larger adds nothing
ATTN_HEAD_DIM_HALF_SAT = 16.0
# Softmax exponentials per attention score: the forward exponentiates each score once (P = exp(S - m), online
# softmax); the backward recomputes P = exp(S - LSE) once per score (FlashAttention-2 Algorithm 2). They run on
# the special-function units (MUFU.EX2) at the catalog's exp_rate, not on the tensor cores.
EXP_PER_SCORE_FWD = 1.0
EXP_PER_SCORE_BWD = 1.0
# Unfused attention (Megatron before FlashAttention): per score, forward writes QK^T (2 B), the fused
# scale-mask-softmax reads it and writes the probabilities (2 + 2), dropout reads them and writes its output
# and mask (2 + 2 + 1): 11 B. The backward reads/writes the mirror images plus the incoming gradients: 2x.
UNFUSED_SCORE_BYTES_FWD = 11.0
UNFUSED_SCORE_BYTES_BWD = 22.0

# ---- elementwise (memory-bound) traffic per token per layer, forward -------------------------------------
# Outside the TP region (replicated, or SP-sharded): 2 norms (read + write bf16: 4 B/element each) and 2
# residual adds (2 reads + 1 write: 6 B each) = 20 B per hidden element.
NORM_RESIDUAL_BYTES_PER_HIDDEN = 20.0
ROPE_BYTES_PER_QK = 4.0  # RoPE on q and k: read + write bf16 per element of the a·dh + k·dh q/k columns
# The MLP activation per ffn element: SwiGLU reads gate and up and writes the product (6 B); GeLU 2 + 2 B.
ACTIVATION_BYTES_PER_FFN = {3: 6.0, 2: 4.0}  # keyed by the MLP's weight matrices (3 = SwiGLU, 2 = GeLU)
# Eager PyTorch SwiGLU, w2(silu(w1 x) * w3 x), keeps four f-wide bf16 tensors for its backward: w1 x (SiLU's
# input), silu(w1 x) and w3 x (the product's inputs) and the product (w2's input): one more than a fused
# SwiGLU (Transformer Engine / Megatron bias_swiglu: the fc1 output and the fc2 input), and one more than
# torch.compile's partitioner keeps (it recomputes the SiLU from w1 x in the backward: torch._functorch.partitioners
# min_cut_rematerialization_partition recomputes pointwise ops). Bytes per token per FFN unit, only without
# activation checkpointing: torchtitan's per-op SAC recomputes every op outside its save list (mm, SDPA,
# collectives), the SiLU among them, compiled or not. (Compile also lowers per-op SAC runs' peaks, 82.4 -> 77.0 GiB
# for Llama-3.1-8B FSDP on 8 H100 in torchtitan's benchmarks/llama3_h100_202412_torchtitan.md: a mechanism not
# modelled.)
EAGER_GLU_KEEPS_ACTIVATION = 2.0
ELEMENTWISE_BWD_RATIO = 2.0  # backward elementwise ~2x the forward (reads the saved input and the gradient)
# The two norms' share of NORM_RESIDUAL_BYTES_PER_HIDDEN (read + write bf16 each): what Megatron's "layernorm"
# recompute module re-runs.
NORM_BYTES_PER_HIDDEN = 8.0
# Selective recompute re-runs part of the elementwise work (norm/RoPE/activation, not the residual adds and
# not the backward's own passes): taken as half of the forward's.
SELECTIVE_ELEMENTWISE_FRACTION = 0.5

# ---- logits ---------------------------------------------------------------------------------------------
LOGITS_SOFTMAX_PASSES = 3  # fp32 cross-entropy over the logits: max, exp-sum/normalise, gradient write

# ---- TP collectives per layer per micro-batch (Megatron: Narayanan et al. 2021 §3.2; with SP, Korthikanti
# et al. 2022 §4.2.2: each all-reduce becomes an all-gather + reduce-scatter of the same cost) ----------------
TP_COLLECTIVES_FWD_BWD = 4  # 2 forward (after attention and after the MLP) + their 2 backward mirrors
TP_COLLECTIVES_FULL_RECOMPUTE = 2  # the forward's 2 once more when the layer is recomputed
GEMM_PASSES_FWD_BWD = 1 + 2  # a weight GEMM runs once forward, twice backward (dgrad + wgrad)

# ---- activations kept per token per layer (Korthikanti et al. 2022 Table 2 terms, bytes) -----------------
NORM_INPUTS_BYTES_PER_HIDDEN = 4.0  # the 2 norm inputs in bf16
HIDDEN_DROPOUT_MASKS_BYTES_PER_HIDDEN = 2.0  # two 1-byte hidden-dropout masks (part of Table 2's 34)
# Unfused scores kept per score: softmax output (2) + dropout mask (1) + dropout output (2) with dropout, else
# the softmax output only.
SCORE_BYTES_DROPOUT = 5.0
SCORE_BYTES_NO_DROPOUT = 2.0


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


@dataclass(frozen=True, slots=True)
class _Shard:
    """One layer sharding in the model's terms: local tokens and (TP-adjusted) dimensions."""

    t: int
    c: int
    e: int
    te: int
    sp: bool
    rec: str
    T: float  # tokens of one micro-batch on this GPU's CP shard (all TP ranks see them)
    S: int
    h: int
    a: int
    k: int  # KV heads, at least tp (with tp > kv_heads each TP rank holds a replica of one KV head)
    dh: int
    f: int
    n_mat: int  # weight matrices of the MLP: 3 SwiGLU (gate, up, down), 2 GeLU
    wg: int  # backward GEMMs per weight GEMM (2; 1 with frozen LoRA base weights)
    fp8: bool
    ovl: bool  # the EP all-to-all overlaps compute (layouts.ep_overlap_applies)

    @property
    def sp_div(self) -> int:
        """Sharding of the tensors outside the TP region: by TP under sequence parallelism."""
        return self.t if self.sp else 1


@dataclass(frozen=True, slots=True)
class _Attention:
    gemm: float  # projection GEMMs forward (QKV, MLA down/up projections, output)
    fwd: float  # core attention forward
    bwd: float
    qk_dim: int
    v_dim: int
    kv_bytes_tok: float  # K and V bytes per token exchanged by the CP ring
    up_gemm: float = 0.0  # MLA: the q and KV up-projection GEMMs forward (Megatron's "mla_up_proj" module)


@dataclass(frozen=True, slots=True)
class _Mlp:
    dense_gemm: float  # dense MLP GEMMs forward
    moe_gemm: float  # routed experts (busiest rank) + shared experts forward
    moe_fwd_extra: float  # router, permutation, grouped-GEMM overheads (perf/moe.py)
    moe_bwd_extra: float
    ep_a2a: float  # one dispatch + combine
    fe: int  # routed expert ffn width (0 for dense)
    load: float  # routed tokens on the busiest rank / the mean
    routed: MoECompute | None = None  # the routed experts' costs (perf/moe.py), for the MoE issue floor


@dataclass(frozen=True, slots=True)
class _Times:
    """Forward, backward and recompute time of a dense and a MoE layer (no communication)."""

    dense_fwd: float
    dense_bwd: float
    dense_re: float
    moe_fwd: float
    moe_bwd: float
    moe_re: float


def layer_costs(
    ctx: PerfContext, t: int, c: int, b: int, e: int, te: int, sp: bool, rec: str, ovl: bool
) -> LayerCosts:
    """Per-layer costs for one layer sharding (`ovl`: the EP all-to-all overlaps compute), computed once per
    context."""
    key = (t, c, b, e, te, sp, rec, ovl)
    lc = ctx.layers.get(key)
    if lc is None:
        lc = _compute_layer_costs(ctx, t, c, b, e, te, sp, rec, ovl)
        ctx.layers[key] = lc
    return lc


def strategy_layer_costs(ctx: PerfContext, s: Strategy, k: Any) -> LayerCosts:
    """`layer_costs` of a strategy with dp set (`k`: its completed knobs, Strategy.knobs())."""
    w = ctx.w
    ovl = ep_overlap_applies(w.framework, w.moe_ep_overlap, s.ep, s.pp, k.vpp, k.recompute)
    return layer_costs(ctx, s.tp, s.cp, k.micro_batch, s.ep, s.expert_tp, s.sp and s.tp > 1, k.recompute, ovl)


def _shard(
    ctx: PerfContext, t: int, c: int, b: int, e: int, te: int, sp: bool, rec: str, ovl: bool = False
) -> _Shard:
    """The layer sharding with its derived sizes (tokens per micro-batch on this CP shard, TP-adjusted KV heads)."""
    model = ctx.model
    S = ctx.w.seq_len
    n_mat = 3 if model.activation == "swiglu" else 2
    return _Shard(
        t=t,
        c=c,
        e=e,
        te=te,
        sp=sp,
        rec=rec,
        T=b * S / c,
        S=S,
        h=model.hidden,
        a=model.heads,
        k=max(model.kv, t),
        dh=model.dh,
        f=model.ffn_hidden,
        n_mat=n_mat,
        wg=weight_grad_gemms(ctx.w),
        fp8=ctx.fp8,
        ovl=ovl,
    )


def _compute_layer_costs(
    ctx: PerfContext, t: int, c: int, b: int, e: int, te: int, sp: bool, rec: str, ovl: bool
) -> LayerCosts:
    """Compute and communication per layer per micro-batch, and activation bytes (formulas §2-4)."""
    g = _shard(ctx, t, c, b, e, te, sp, rec, ovl)
    model = ctx.model
    at = _attention(ctx, g)
    mlp = _mlp(ctx, g)
    elem_fwd = _elementwise_fwd(ctx, g, (mlp.fe * model.topk * mlp.load) if model.is_moe else g.f)
    x = _layer_times(ctx, g, at, mlp, elem_fwd)
    tp_dense, tp_moe, x = _tp_comm(ctx, g, at, mlp, x)
    cp_layer = _cp_ring(ctx, g, at)
    ep_layer, x = _ep_comm(ctx, g, mlp, x)
    x = _issue_floor(ctx, g, x, mlp, tp_dense + cp_layer, tp_moe + cp_layer, ep_layer)
    act = _ActivationTerms.of(ctx, g, mlp)
    return LayerCosts(
        dense_fwd=x.dense_fwd,
        dense_bwd=x.dense_bwd,
        dense_re=x.dense_re,
        moe_fwd=x.moe_fwd,
        moe_bwd=x.moe_bwd,
        moe_re=x.moe_re,
        logits_time=_logits_time(ctx, g),
        tp_dense=tp_dense,
        tp_moe=tp_moe,
        cp_layer=cp_layer,
        ep_layer=ep_layer,
        act_dense=act.layer(False, rec),
        act_moe=act.layer(True, rec),
        act_dense_full=act.layer(False, "none"),
        act_moe_full=act.layer(True, "none"),
        logits_mem=g.T * model.vocab / t * loss_bytes_per_logit(ctx) + _gathered_output_input(ctx, g),
        embed_mem=g.T * g.h * BF16_BYTES / g.sp_div,
        pp_bytes=BF16_BYTES * g.T * g.h / g.sp_div,
        attn_fwd=at.fwd,
        attn_bwd=at.bwd,
        kv_bytes_tok=at.kv_bytes_tok,
    )


# ---- attention ---------------------------------------------------------------------------------------------


# torch.compile of torchtitan's loss (Workload.compiled_loss): inductor fuses `cross_entropy(pred.float(), ...)`
# and its backward into row reductions, so the loss keeps only its bf16 input (2 B per logit) and writes the
# bf16 gradient (2 B), where eager keeps the fp32 log-softmax output and materialises fp32 gradients
# (software.yaml loss_bytes_per_logit 12; torchtitan components/loss.py `build_cross_entropy_loss`, commit
# bbb1b616: "compiling the loss function ... result in reduction of memory").
COMPILED_LOSS_BYTES_PER_LOGIT = 4.0


def loss_bytes_per_logit(ctx: PerfContext) -> float:
    """Peak bytes per logit element in the loss: the stack's, or the compiled loss's (torchtitan only)."""
    if ctx.w.compiled_loss and ctx.w.framework == "torchtitan":
        return min(COMPILED_LOSS_BYTES_PER_LOGIT, ctx.sw.loss_bytes_per_logit)
    return ctx.sw.loss_bytes_per_logit


def _gathered_output_input(ctx: PerfContext, g: _Shard) -> float:
    """Bytes of the output layer's input kept beyond its SP shard: a stack whose SP keeps GEMM inputs
    all-gathered (software.yaml sp_saves_gathered_inputs; torchtitan's TP plan redistributes the final norm's
    Shard(1) output to Replicate() for the vocab-parallel output projection) keeps the full sequence."""
    if not ctx.sw.sp_saves_gathered_inputs:
        return 0.0
    return g.T * g.h * BF16_BYTES * (1.0 - 1.0 / g.sp_div)


def _attention(ctx: PerfContext, g: _Shard) -> _Attention:
    """Projection GEMMs and core attention of one layer (MLA or MHA/GQA/MQA)."""
    if ctx.model.is_mla:
        gemm, qk_dim, v_dim, kv_bytes_tok = _mla_projections(ctx, g)
        up = _mla_up_gemm(ctx, g)
    else:
        gemm, qk_dim, v_dim, kv_bytes_tok = _gqa_projections(ctx, g)
        up = 0.0
    if ctx.sw.flash_attention:
        fwd, bwd = _flash_attention(ctx, g, qk_dim, v_dim)
    else:
        fwd, bwd = _unfused_attention(ctx, g, qk_dim, v_dim)
    return _Attention(gemm, fwd, bwd, qk_dim, v_dim, kv_bytes_tok, up)


def _mla_up_gemm(ctx: PerfContext, g: _Shard) -> float:
    """MLA's q up-projection (from the q latent, or h without one) and K/V up-projection GEMMs forward."""
    model, gemm = ctx.model, ctx.gemm
    rq, rkv, dn, dr, dv = model.mla
    return gemm(g.T, g.a * (dn + dr) / g.t, rq or g.h, g.fp8) + gemm(g.T, g.a * (dn + dv) / g.t, rkv, g.fp8)


def _mla_projections(ctx: PerfContext, g: _Shard) -> tuple[float, int, int, float]:
    """MLA (DeepSeek-V2/V3): q down/up (or direct q), compressed KV down, K/V up, output projection."""
    model, gemm, T, t, h, a, fp8 = ctx.model, ctx.gemm, g.T, g.t, g.h, g.a, g.fp8
    rq, rkv, dn, dr, dv = model.mla
    attn_gemm = gemm(T, rq, h, fp8) if rq else 0.0
    attn_gemm += gemm(T, a * (dn + dr) / t, rq or h, fp8)
    attn_gemm += gemm(T, rkv + dr, h, fp8) + gemm(T, a * (dn + dv) / t, rkv, fp8)
    attn_gemm += gemm(T, h, a * dv / t, fp8)
    return attn_gemm, dn + dr, dv, BF16_BYTES * (rkv + dr)  # compressed KV per token


def _gqa_projections(ctx: PerfContext, g: _Shard) -> tuple[float, int, int, float]:
    """Fused QKV and output projection; KV heads replicated when tp > kv_heads."""
    gemm, T, t, h, fp8 = ctx.gemm, g.T, g.t, g.h, g.fp8
    attn_gemm = gemm(T, (g.a + 2 * g.k) * g.dh / t, h, fp8) + gemm(T, h, g.a * g.dh / t, fp8)
    return attn_gemm, g.dh, g.dh, 2 * BF16_BYTES * g.k * g.dh


def attention_shape_scale(s_kv: float, qk_dim: int) -> float:
    """Attention efficiency relative to the tables' (long sequence, head dim 128) figure."""
    d = min(qk_dim, ATTN_HEAD_DIM_REF)
    ref = ATTN_HEAD_DIM_REF / (ATTN_HEAD_DIM_REF + ATTN_HEAD_DIM_HALF_SAT)
    return (s_kv / (s_kv + ATTN_SEQ_HALF_SAT)) * (d / (d + ATTN_HEAD_DIM_HALF_SAT)) / ref


def _flash_attention(ctx: PerfContext, g: _Shard, qk_dim: int, v_dim: int) -> tuple[float, float]:
    """FlashAttention / fused attention: FLOP-bound, causal (and sliding-window) context per query."""
    model, eff, sw, S = ctx.model, ctx.eff, ctx.sw, g.S
    s_ctx = attention_context(model, S, causal=True)
    flops = 2.0 * g.a * (qk_dim + v_dim) * s_ctx * g.T / g.t
    s_kv = min(S, model.sliding_window or S) if model.sliding_window_fraction >= 1 else S
    scale = attention_shape_scale(s_kv, qk_dim)
    eta_f, eta_b = (
        (eff.attn_fwd_fused, eff.attn_bwd_fused) if sw.fused_attention else (eff.attn_fwd, eff.attn_bwd)
    )
    scores, rate, peak = g.a * s_ctx * g.T / g.t, ctx.gpu.exp_rate, ctx.peak16 * scale
    fwd = paced_time(flops / peak, EXP_PER_SCORE_FWD * scores, rate) / eta_f
    bwd = paced_time(ATTN_BWD_FLOP_RATIO * flops / peak, EXP_PER_SCORE_BWD * scores, rate) / eta_b
    return fwd + eff.kernel_overhead_s, bwd + eff.kernel_overhead_s


def paced_time(mma_s: float, exps: float, exp_rate: float | None) -> float:
    """Busy time of the unit that paces a fused-attention kernel, before its pipeline efficiency.

    FlashAttention-3/4 and cuDNN run one tile's softmax exponentials on the special-function units while
    another tile's MMAs run on the tensor cores (warpgroup ping-pong: Shah et al. 2024 §3.1; Zadouri et al.
    2025, FlashAttention-4), so the slower unit sets the pace: the larger of the MMA time at the tensor peak
    and the exponentials at the SFU peak. The efficiency tables' attention fraction (measured on Hopper, where
    the tensor cores pace: 989 TFLOP/s vs 3.9e12 exp/s, 512 FLOPs per score at head dim 128) is the share of
    time the pacing unit is kept busy, so it divides whichever term binds. An unpublished exp_rate (None)
    leaves the MMA time.
    """
    return max(mma_s, exps / exp_rate) if exp_rate else mma_s


def _unfused_attention(ctx: PerfContext, g: _Shard, qk_dim: int, v_dim: int) -> tuple[float, float]:
    """Pre-FlashAttention Megatron: batched GEMMs over the full s x s scores, which go through HBM."""
    eff, hbm, S, gemm = ctx.eff, ctx.hbm, g.S, ctx.gemm
    s_loc = S / g.c
    heads_local = g.a / g.t
    seqs = g.T / s_loc
    bmm = gemm(s_loc, S, qk_dim, False) + gemm(s_loc, v_dim, S, False) - 2 * eff.kernel_overhead_s
    scores = seqs * heads_local * s_loc * S
    fwd = seqs * heads_local * bmm + UNFUSED_SCORE_BYTES_FWD * scores / hbm + eff.kernel_overhead_s
    # backward: dgrad of both operands of each batched GEMM (2 GEMMs per forward GEMM)
    bwd = 2.0 * seqs * heads_local * bmm + UNFUSED_SCORE_BYTES_BWD * scores / hbm + eff.kernel_overhead_s
    return fwd, bwd


# ---- MLP, MoE, elementwise, FP8 ------------------------------------------------------------------------------


def _mlp(ctx: PerfContext, g: _Shard) -> _Mlp:
    """Dense MLP GEMMs, and for MoE models the routed experts (perf/moe.py) plus the shared experts."""
    model, gemm, T, t, h, fp8, n_mat = ctx.model, ctx.gemm, g.T, g.t, g.h, g.fp8, g.n_mat
    dense = gemm(T, (n_mat - 1) * g.f / t, h, fp8) + gemm(T, h, g.f / t, fp8)
    if not model.is_moe:
        return _Mlp(dense, 0.0, 0.0, 0.0, 0.0, 0, 1.0)
    load = routed_load(ctx.w.moe_imbalance, ctx.w.moe_capacity_factor)
    mc = routed_expert_costs(ctx, T, t, g.e, g.te, n_mat)
    moe_gemm = mc.expert_fwd
    frozen = (2 - g.wg) * mc.expert_fwd  # LoRA: no expert wgrad (perf/finetune.py)
    bwd_extra = mc.overhead_bwd + mc.expert_bwd - frozen - g.wg * mc.expert_fwd
    if model.shared_experts:  # shared experts: a TP-sharded MLP on every token
        fs = model.shared_ffn * model.shared_experts
        moe_gemm += gemm(T, (n_mat - 1) * fs / t, h, fp8) + gemm(T, h, fs / t, fp8)
    return _Mlp(
        dense, moe_gemm, mc.overhead_fwd, bwd_extra, mc.dispatch_combine, model.moe_ffn_hidden or 0, load, mc
    )


def _elementwise_fwd(ctx: PerfContext, g: _Shard, act_f: float) -> float:
    """Memory-bound elementwise time per layer forward (norms, residual adds, RoPE, activation function).

    Sharded by TP inside the TP region, by SP outside it; `act_f` is the activation width per token.
    """
    rep = NORM_RESIDUAL_BYTES_PER_HIDDEN * g.h
    shard = ROPE_BYTES_PER_QK * (g.a + g.k) * g.dh + ACTIVATION_BYTES_PER_FFN[g.n_mat] * act_f
    return ctx.sw.elementwise_passes * g.T * (rep / g.sp_div + shard / g.t) / ctx.hbm


def _fp8_quantise(ctx: PerfContext, g: _Shard) -> tuple[float, float, float, float]:
    """FP8 quantisation (perf/fp8.py) of the attention / dense-MLP / shared-expert GEMM operands: inputs in the
    forward, output gradients in the backward, as (dense fwd, dense bwd, MoE fwd, MoE bwd); routed experts are
    counted in perf/moe.py."""
    if not g.fp8:
        return 0.0, 0.0, 0.0, 0.0
    model, recipe, hbm, T, t, h, a, n_mat = ctx.model, ctx.w.fp8_recipe, ctx.hbm, g.T, g.t, g.h, g.a, g.n_mat
    attn_in, attn_grad = h + a * g.dh / t, (a + 2 * g.k) * g.dh / t + h
    mlp_in, mlp_grad = h + g.f / t, (n_mat - 1) * g.f / t + h
    fs_t = model.shared_ffn * model.shared_experts / t if model.is_moe else 0.0
    sh_in, sh_grad = (h + fs_t, (n_mat - 1) * fs_t + h) if fs_t else (0.0, 0.0)
    return (
        quantise_time(T * (attn_in + mlp_in), recipe, hbm),
        quantise_time(T * (attn_grad + mlp_grad), recipe, hbm),
        quantise_time(T * (attn_in + sh_in), recipe, hbm),
        quantise_time(T * (attn_grad + sh_grad), recipe, hbm),
    )


# ---- compute per layer, recompute, logits --------------------------------------------------------------------


def _layer_times(ctx: PerfContext, g: _Shard, at: _Attention, mlp: _Mlp, elem_fwd: float) -> _Times:
    """Forward / backward / recompute of a dense and a MoE layer, before communication."""
    q_fd, q_bd, q_fm, q_bm = _fp8_quantise(ctx, g)
    # QLoRA: each dense layer's NF4 weights are dequantised for the forward and again for the dgrad
    dq = dequantise_time((ctx.pc.attention + ctx.pc.dense_mlp) / g.t, ctx.w, ctx.hbm)
    wg, eb = g.wg, ELEMENTWISE_BWD_RATIO
    dense_fwd = at.gemm + at.fwd + mlp.dense_gemm + elem_fwd + q_fd + dq
    dense_bwd = wg * (at.gemm + mlp.dense_gemm) + at.bwd + eb * elem_fwd + q_bd + dq
    moe_fwd = at.gemm + at.fwd + mlp.moe_gemm + elem_fwd + q_fm + mlp.moe_fwd_extra
    moe_bwd = wg * (at.gemm + mlp.moe_gemm) + at.bwd + eb * elem_fwd + q_bm + mlp.moe_bwd_extra
    if g.rec == "full":
        dense_re, moe_re = dense_fwd, moe_fwd
    elif g.rec.startswith("sel:"):
        dense_re, moe_re = _module_recompute(ctx, g, at, mlp)
    elif g.rec.startswith(REMAT_PREFIX):  # the forward less the projections whose outputs the policy keeps
        qkv_share = (g.a + 2 * g.k) / (2 * g.a + 2 * g.k)  # QKV's share of the projection GEMMs (out_proj: a)
        a_re, m_re = recomputed_gemm_shares(g.rec, qkv_share, (g.n_mat - 1) / g.n_mat)
        rest = at.fwd + elem_fwd
        dense_re = rest + a_re * at.gemm + m_re * mlp.dense_gemm + q_fd
        moe_re = rest + a_re * at.gemm + m_re * mlp.moe_gemm + q_fm + mlp.moe_fwd_extra
    elif g.rec == "selective":
        # Megatron: core attention only (Korthikanti 2022); torchtitan per-op SAC: also half the matmuls.
        base, frac = at.fwd + SELECTIVE_ELEMENTWISE_FRACTION * elem_fwd, ctx.sw.selective_gemm_fraction
        dense_re = base + frac * (at.gemm + mlp.dense_gemm)
        moe_re = base + frac * (at.gemm + mlp.moe_gemm)
    else:
        dense_re = moe_re = 0.0
    return _Times(dense_fwd, dense_bwd, dense_re, moe_fwd, moe_bwd, moe_re)


def _module_recompute(ctx: PerfContext, g: _Shard, at: _Attention, mlp: _Mlp) -> tuple[float, float]:
    """Recompute time of a dense and a MoE layer under Megatron-Core's selective recompute modules: each module
    re-runs its forward once before its backward (transformer_layer.py, multi_latent_attention.py,
    moe/experts.py, moe/moe_layer.py): core_attn the core attention; layernorm the two norms; mla_up_proj the
    q/KV up-projection GEMMs and RoPE; mlp the dense MLP (dense layers only: Megatron skips it on MoE layers);
    moe_act the routed experts' activation function; moe the whole MoE layer (MoELayer.forward under
    tensor_parallel.checkpoint, te_checkpoint under FP8: router, permutation, expert and shared-expert GEMMs
    with their activations; its all-to-alls and TP collective are re-run too, `_ep_comm` and `_tp_comm`)."""
    mods, passes = recompute_modules(g.rec), ctx.sw.elementwise_passes * g.T / ctx.hbm
    act = ACTIVATION_BYTES_PER_FFN[g.n_mat]
    both = at.fwd if "core_attn" in mods else 0.0
    if "layernorm" in mods:
        both += passes * NORM_BYTES_PER_HIDDEN * g.h / g.sp_div
    if "mla_up_proj" in mods:
        both += at.up_gemm + passes * ROPE_BYTES_PER_QK * (g.a + g.k) * g.dh / g.t
    dense = both + (mlp.dense_gemm + passes * act * g.f / g.t if "mlp" in mods else 0.0)
    routed_act = passes * act * mlp.fe * ctx.model.topk * mlp.load / g.t
    if "moe" in mods:
        # the layer's forward: GEMMs, router/permutation overheads (the eager clamp among them), activations
        shared_act = passes * act * ctx.model.shared_ffn * ctx.model.shared_experts / g.t
        moe = both + mlp.moe_gemm + mlp.moe_fwd_extra + routed_act + shared_act
    elif "moe_act" in mods:  # the activation, and an eager GLU clamp inside the checkpoint (perf/moe.py)
        clamp = mlp.routed.clamp_fwd if mlp.routed else 0.0
        moe = both + routed_act + clamp
    else:
        moe = both
    return dense, moe


def reruns_moe_forward(rec: str) -> bool:
    """Whether recompute `rec` re-runs a MoE layer's whole forward (full recompute, or Megatron's "moe"
    module): its dispatch and combine, and its host sync before the dispatch, run a third time."""
    return rec == "full" or "moe" in recompute_modules(rec)


def _logits_time(ctx: PerfContext, g: _Shard) -> float:
    """Output layer: forward GEMM + fp32 softmax passes, then dgrad + wgrad (dgrad only when frozen)."""
    V, T, t = ctx.model.vocab, g.T, g.t
    fwd = ctx.gemm(T, V / t, g.h, False) + LOGITS_SOFTMAX_PASSES * T * V / t * FP32_BYTES / ctx.hbm
    return (1 + g.wg) * fwd


# ---- communication ----------------------------------------------------------------------------------------


def _spread(fwd: float, bwd: float, extra: float) -> tuple[float, float]:
    """Add time spread like the compute it slows: a third to the forward, two thirds to the backward (2x)."""
    return fwd + extra / 3, bwd + extra * 2 / 3


def _tp_comm(
    ctx: PerfContext, g: _Shard, at: _Attention, mlp: _Mlp, x: _Times
) -> tuple[float, float, _Times]:
    """Exposed TP collectives of a dense and a MoE layer, and the layer times slowed by any overlap.

    TP communication overlap (Megatron --tp-comm-overlap, torchtitan async TP): the AG/RS are split into chunks
    pipelined with the neighbouring GEMMs; the first chunk (1/t) stays exposed, at most sw.tp_overlap_hidden of
    the rest hides (NVLink/SM contention, serialized chunks), and the chunked GEMMs run OVERLAP_SLOWDOWN slower
    while hiding it.
    """
    t, full = g.t, g.rec == "full"
    ar_tp = comm.all_reduce(BF16_BYTES * g.T * g.h, t, 1, ctx.links) if t > 1 else 0.0
    n_tp_dense = TP_COLLECTIVES_FWD_BWD + (TP_COLLECTIVES_FULL_RECOMPUTE if full else 0)
    # the MLP's half (again with expert TP); the "moe" recompute module re-runs its forward collective
    n_tp_moe = n_tp_dense / 2 + ("moe" in recompute_modules(g.rec))
    tp_moe = n_tp_moe * ar_tp * (1 + (1 if g.te > 1 else 0))
    # the "mlp" recompute module re-runs the dense MLP with its forward collective (a normal checkpoint)
    tp_dense = (n_tp_dense + ("mlp" in recompute_modules(g.rec))) * ar_tp
    if not (ctx.w.tp_comm_overlap and g.sp and t > 1):
        return tp_dense, tp_moe, x
    passes = GEMM_PASSES_FWD_BWD + (1 if full else 0)
    hide = ctx.sw.tp_overlap_hidden * (1 - 1 / t)
    exp_dense = tp_dense - min(hide * tp_dense, passes * (at.gemm + mlp.dense_gemm))
    exp_moe = tp_moe - min(hide * tp_moe, passes * at.gemm)
    d_f, d_b = _spread(x.dense_fwd, x.dense_bwd, OVERLAP_SLOWDOWN * (tp_dense - exp_dense))
    m_f, m_b = _spread(x.moe_fwd, x.moe_bwd, OVERLAP_SLOWDOWN * (tp_moe - exp_moe))
    return exp_dense, exp_moe, _Times(d_f, d_b, x.dense_re, m_f, m_b, x.moe_re)


def _cp_ring(ctx: PerfContext, g: _Shard, at: _Attention) -> float:
    """Exposed CP ring per layer: c-1 KV chunk hops, each hidden under the core attention it feeds."""
    if g.c <= 1:
        return 0.0
    chunk = at.kv_bytes_tok * g.T / (g.t if not ctx.model.is_mla else 1)
    ring = comm.p2p(chunk, g.t * g.c > ctx.G, ctx.links) * (g.c - 1)
    out = max(0.0, ring - at.fwd) + max(0.0, 2 * ring - at.bwd)  # forward: K, V; backward: dK, dV too
    if g.rec == "full":
        out += max(0.0, ring - at.fwd)
    return out


def _ep_comm(ctx: PerfContext, g: _Shard, mlp: _Mlp, x: _Times) -> tuple[float, _Times]:
    """Dispatch + combine forward, their mirror images backward, once more under full recompute or the "moe"
    recompute module; with --overlap-moe-expert-parallel-comm hidden under another micro-batch's MoE-layer
    compute."""
    ep_layer = 2 * mlp.ep_a2a + (mlp.ep_a2a if reruns_moe_forward(g.rec) else 0.0)
    if not (ep_layer and g.ovl):
        return ep_layer, x
    ep_layer, slow = ep_exposed(ep_layer, x.moe_fwd + x.moe_bwd + x.moe_re, ctx.eff.sms)
    m_f, m_b = _spread(x.moe_fwd, x.moe_bwd, slow)
    return ep_layer, _Times(x.dense_fwd, x.dense_bwd, x.dense_re, m_f, m_b, x.moe_re)


def _issue_floor(
    ctx: PerfContext, g: _Shard, x: _Times, mlp: _Mlp, comm_dense: float, comm_moe: float, ep_s: float
) -> _Times:
    """CPU issue floor (no CUDA graphs): a layer's GPU work cannot outrun the issue of its ops; a MoE layer's
    forward also waits on one host sync before its dispatch (perf/moe.py moe_issue_floor).

    Full recompute re-runs the layer's forward from Python inside the backward (Megatron-Core
    `tensor_parallel.checkpoint` and torch.utils.checkpoint call the forward function again): every forward op
    is issued a second time and, in a MoE layer, the dispatcher syncs the host again before its all-to-all
    (token_dispatcher.py `cuda_sync_point`, reached by the same forward code), so the recompute gets the
    forward's floor. The "moe" recompute module re-runs the MoE layer's synced forward the same way. Other
    selective recompute re-runs a few ops and no dispatcher (not floored)."""
    if ctx.w.cuda_graphs:
        return x
    full = g.rec == "full"
    moe_again = reruns_moe_forward(g.rec)
    hf, hb = host_issue_time(False, 0)
    if full:
        d_f, d_b, d_re = _floor(x.dense_fwd, x.dense_bwd, hf, hb, comm_dense, x.dense_re, hf)
    else:  # selective: a few re-run ops, left out of the floor
        (d_f, d_b, _), d_re = _floor(x.dense_fwd, x.dense_bwd, hf, hb, comm_dense), x.dense_re
    m_f, m_b, m_re = x.moe_fwd, x.moe_bwd, x.moe_re
    if mlp.routed is not None:
        passes = 3 if moe_again else 2  # dispatch/combine passes: forward, backward, recompute
        local = ctx.model.experts / g.e
        m_f, m_b = issue_bound_layer(m_f, m_b, mlp.routed, comm_moe, ep_s, passes, local, ctx.fp8)
        if moe_again:  # the recompute re-runs the synced forward: the same stretch
            m_re = x.moe_re + (m_f - x.moe_fwd)
    return _Times(d_f, d_b, d_re, m_f, m_b, m_re)


def _floor(
    fwd: float, bwd: float, host_f: float, host_b: float, comm_s: float, re: float = 0.0, host_re: float = 0.0
) -> tuple[float, float, float]:
    """Stretch a layer's forward/backward/recompute so GPU time (with its exposed comm) is at least the CPU
    issue time of their ops (the CPU runs ahead across them: a dense layer never syncs the host)."""
    gpu = fwd + bwd + re + comm_s
    host = host_f + host_b + host_re
    if host <= gpu:
        return fwd, bwd, re
    extra = host - gpu
    return fwd + extra * host_f / host, bwd + extra * host_b / host, re + extra * host_re / host


# ---- activations ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ActivationTerms:
    """Activation bytes kept per token per layer, by tensor (Korthikanti et al. 2022 Table 2 form)."""

    g: _Shard
    rep_tok: float  # outside the TP region: norm inputs, QKV and MLP inputs (SP-sharded)
    drop_tok: float  # hidden-dropout masks (SP-sharded)
    qkv_tok: float  # Q, K, V (TP-sharded)
    ctx_tok: float  # attention output = output-projection input
    lse_tok: float  # FlashAttention's log-sum-exp
    score_tok: float  # unfused attention: the s x s scores kept
    mlp_tok: float
    moe_tok: float
    norm_out_tok: float  # the 2 norm outputs = QKV and MLP GEMM inputs (in rep_tok): "layernorm" frees them
    gathered_tok: (
        float  # the same GEMM inputs kept all-gathered under SP (sw.sp_saves_gathered_inputs), else 0
    )
    up_tok: float  # MLA: the up-projected per-head Q, K, V (in qkv_tok): "mla_up_proj" frees them
    moe_act_tok: float  # routed experts' FC2 inputs = activation outputs (in moe_tok): "moe_act" frees them
    router_in_tok: float  # MoE: the router keeps the bf16 MLP-norm output beyond rep_tok's GEMM-input copy
    eager_glu_tok: (
        float  # eager PyTorch SwiGLU's SiLU output, kept without checkpointing (EAGER_GLU_KEEPS_...)
    )
    gemm_frac: float  # share of forward matmul outputs per-op SAC recomputes (0: Megatron selective)

    @staticmethod
    def of(ctx: PerfContext, g: _Shard, mlp: _Mlp) -> _ActivationTerms:
        model, sw, h, a = ctx.model, ctx.sw, g.h, g.a
        qkv_tok, ctx_tok = _attention_activations(ctx, g)
        # FP8 (Transformer Engine / torchao float8) keeps the quantised GEMM inputs (1 byte) for backward.
        gemm_in = FP8_BYTES if g.fp8 else BF16_BYTES
        rep_tok = NORM_INPUTS_BYTES_PER_HIDDEN * h + 2.0 * gemm_in * h  # 2 norm inputs, QKV and MLP inputs
        ctx_tok *= gemm_in / BF16_BYTES
        mlp_tok = (
            BF16_BYTES * (g.n_mat - 1) + gemm_in
        ) * g.f  # SwiGLU gate/up + act (fc2 input), GeLU fc1 + act
        score = SCORE_BYTES_DROPOUT if model.dropout else SCORE_BYTES_NO_DROPOUT
        return _ActivationTerms(
            g=g,
            rep_tok=rep_tok,
            drop_tok=HIDDEN_DROPOUT_MASKS_BYTES_PER_HIDDEN * h if model.dropout else 0.0,
            qkv_tok=qkv_tok,
            ctx_tok=ctx_tok,
            lse_tok=FP32_BYTES * a if sw.flash_attention else 0.0,
            score_tok=0.0 if sw.flash_attention else score * a * g.S,
            mlp_tok=mlp_tok,
            moe_tok=_moe_activations(ctx, g, mlp, gemm_in),
            norm_out_tok=2.0 * gemm_in * h,
            eager_glu_tok=EAGER_GLU_KEEPS_ACTIVATION * g.f
            if g.n_mat == 3 and sw.elementwise_passes > 1.0 and not ctx.w.torch_compile
            else 0.0,
            gathered_tok=2.0 * gemm_in * h if sw.sp_saves_gathered_inputs else 0.0,
            up_tok=_mla_up_activations(ctx, g),
            moe_act_tok=model.topk * mlp.load * (gemm_in * mlp.fe + _clamp_copy(ctx, g, mlp))
            if model.is_moe
            else 0.0,
            router_in_tok=(BF16_BYTES - gemm_in) * h if model.is_moe else 0.0,
            gemm_frac=sw.selective_gemm_fraction,
        )

    def layer(self, moe: bool, kind: str) -> float:
        """Bytes one layer keeps per micro-batch under recompute `kind`."""
        g, T, sp_div, t = self.g, self.g.T, self.g.sp_div, self.g.t
        mlp = self.moe_tok if moe else self.mlp_tok
        rep = self.rep_tok + (self.router_in_tok if moe else 0.0)
        attn = self.qkv_tok + self.ctx_tok + self.lse_tok
        gathered = self.gathered_tok * (1.0 - 1.0 / sp_div)  # the full-sequence copies beyond the SP shard
        full = T * ((rep + self.drop_tok) / sp_div + gathered + (attn + mlp + self.score_tok) / t)
        if kind == "none":  # eager PyTorch also keeps the SwiGLU's SiLU output (dense layers)
            return full + (0.0 if moe else T * self.eager_glu_tok / t)
        if kind.startswith("sel:"):
            return full - T * self.module_freed(moe, kind)
        if kind.startswith(REMAT_PREFIX):
            return T * self.remat_kept(moe, kind)
        if kind == "selective":
            if self.gemm_frac > 0:  # per-op SAC: layer input, attention output, every other matmul output
                return T * (
                    NORM_INPUTS_BYTES_PER_HIDDEN * g.h / sp_div
                    + (self.ctx_tok + self.lse_tok) / t
                    + (1.0 - self.gemm_frac) * (self.qkv_tok + mlp) / t
                )
            return full - T * self.score_tok / t  # Megatron: the core attention (s x s scores) is recomputed
        return T * BF16_BYTES * g.h / sp_div  # full recompute: the layer input only

    def remat_kept(self, moe: bool, kind: str) -> float:
        """Bytes per token a MaxText remat policy keeps on the GPU (perf/remat.py): the layer input and the
        tagged outputs it names. A MoE layer's 'mlpwi'/'mlpwo' are its routed experts' (FC1 outputs: the FC2
        inputs x the GLU's matrices; FC2 output: counted as one hidden-size row per token, the combined one)."""
        g, kept = self.g, kept_on_gpu(kind)
        mats = g.n_mat - 1  # FC1 outputs per FFN unit: gate and up (GLU) or one
        wi = (mats * self.moe_act_tok if moe else BF16_BYTES * mats * g.f) if "mlpwi" in kept else 0.0
        wo = BF16_BYTES * g.h if "mlpwo" in kept else 0.0
        tagged = (
            (self.qkv_tok if "qkv" in kept else 0.0)
            + (BF16_BYTES * g.h if "out_proj" in kept else 0.0)
            + (self.ctx_tok + self.lse_tok if "context" in kept else 0.0)
            + wi
            + wo
        )
        return BF16_BYTES * g.h / g.sp_div + tagged / g.t

    def module_freed(self, moe: bool, kind: str) -> float:
        """Bytes per token Megatron's selective recompute modules free (see _module_recompute): the tensors a
        module's output-discarding checkpoint drops, or a normal checkpoint's internals."""
        mods, sp_div, t = recompute_modules(kind), self.g.sp_div, self.g.t
        freed = self.score_tok / t if "core_attn" in mods else 0.0
        gathered = self.gathered_tok * (1.0 - 1.0 / sp_div)
        # the router's input is the MLP-norm output: "layernorm" frees it with the norm's other outputs
        norm_out = self.norm_out_tok + (self.router_in_tok if moe else 0.0)
        freed += norm_out / sp_div + gathered if "layernorm" in mods else 0.0
        freed += self.up_tok / t if "mla_up_proj" in mods else 0.0
        freed += self.mlp_tok / t if "mlp" in mods and not moe else 0.0
        if "moe" in mods and moe:  # a normal checkpoint keeps the layer's input only: every MoE internal goes
            return freed + self.moe_tok / t
        return freed + (self.moe_act_tok / t if "moe_act" in mods and moe else 0.0)


def _attention_activations(ctx: PerfContext, g: _Shard) -> tuple[float, float]:
    """Q/K/V and attention-output bytes per token in bf16 (MLA: also the compressed latents, replicated)."""
    model, a = ctx.model, g.a
    if model.is_mla:
        rq, rkv, dn, dr, dv = model.mla
        qkv = BF16_BYTES * (a * (dn + dr) * 2 + a * dv) + BF16_BYTES * (rq + rkv) * g.t
        return qkv, BF16_BYTES * a * dv
    return BF16_BYTES * g.dh * (a + 2 * g.k), BF16_BYTES * a * g.dh


def _mla_up_activations(ctx: PerfContext, g: _Shard) -> float:
    """MLA: the per-head Q, K (with RoPE) and V bytes per token that the up-projections write."""
    if not ctx.model.is_mla:
        return 0.0
    _, _, dn, dr, dv = ctx.model.mla
    return BF16_BYTES * g.a * ((dn + dr) * 2 + dv)


def _moe_activations(ctx: PerfContext, g: _Shard, mlp: _Mlp, gemm_in: float) -> float:
    """Per routed token copy (Megatron TEGroupedMLP, probs applied inside the activation): the FC1 input (h, FP8
    when FP8), the FC1 output for the activation's backward ((n_mat - 1) x f_e in bf16) and the FC2 input (f_e,
    FP8 when FP8); shared experts likewise per token, but their FC1 input is the MLP-norm output the router
    keeps (rep_tok + router_in_tok): Megatron-Core's SharedExpertMLP saves that original tensor under FP8 too
    (moe/shared_experts.py: set_save_original_input on linear_fc1), except with delayed scaling, which Transformer
    Engine refuses there, so a 1-byte copy is kept; the router's fp32 scores and routing map (software.yaml
    moe_router_bytes_per_expert)."""
    model, h = ctx.model, g.h
    if not model.is_moe:
        return 0.0

    def expert_tok(width: float, fc1_in: float) -> float:
        return fc1_in * h + BF16_BYTES * (g.n_mat - 1) * width + gemm_in * width

    routed = model.topk * mlp.load * (expert_tok(mlp.fe, gemm_in) + _clamp_copy(ctx, g, mlp))
    fc1_copy = FP8_BYTES if g.fp8 and ctx.w.fp8_recipe == "delayed" else 0.0
    shared = model.shared_experts * expert_tok(model.shared_ffn, fc1_copy)
    return routed + shared + ctx.sw.moe_router_bytes_per_expert * model.experts


def _clamp_copy(ctx: PerfContext, g: _Shard, mlp: _Mlp) -> float:
    """Bytes per routed row an eager GLU clamp keeps besides the FC1 output (perf/moe.py CLAMP_BYTES_FWD):
    the clamped copy the fused activation saves for its backward, while clamp's own backward keeps the FC1
    output; the moe_act checkpoint keeps neither (its inputs, the FC1 output, are counted already)."""
    if not (ctx.sw.moe_eager_clamp_bias and ctx.model.glu_clamp is not None):
        return 0.0
    return BF16_BYTES * (g.n_mat - 1) * mlp.fe


def activation_bytes_per_layer(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy
) -> float:
    """Activation bytes one dense layer keeps for backward per micro-batch (Korthikanti Table 2 form)."""
    s = strategy.with_dp(cluster.num_gpus)
    ctx, k = perf_context(model, cluster, workload), s.knobs()
    return strategy_layer_costs(ctx, s, k).act_dense
