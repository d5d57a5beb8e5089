"""The analytical model: per-GPU memory and step time of one strategy, with full breakdowns.

Pure and deterministic. This module composes the concerns, each in its own module: per-layer costs
(layers.py), context parallelism (cp.py), pipeline stages and schedules (pipeline.py), memory (memory.py),
data-parallel collectives (fsdp.py), CPU optimizer offload (offload.py), activation offload (act_offload.py). Time is for the most loaded pipeline stage;
memory is the peak over the first, a middle and the last stage (the most loaded GPU).

One model for one strategy and for a block of them: the per-strategy formulas here and in memory.py,
fsdp.py, pipeline.py, comm.py and offload.py run on floats (this `estimate`) and on numpy arrays (the
block, perf/vector.py). A formula that depends on a per-strategy value branches with perf/arith.py
(`where`, `choose`, `maximum`, ...), not `if`; tests/perf/test_batch_model.py checks that a block row equals
the single estimate bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autopar.errors import InvalidStrategyError
from autopar.knobs import reruns_layer_forward
from autopar.layouts import family_runs_te_cp, stack_notes
from autopar.perf import act_offload, comm, cp, fsdp, memory, offload, pipeline
from autopar.perf.arith import Num, maximum, ratio, where
from autopar.perf.context import PerfContext, perf_context, usable_memory_bytes
from autopar.perf.finetune import base_weight_bytes, trainable_fraction
from autopar.perf.layers import (
    OVERLAP_SLOWDOWN,
    LayerCosts,
    activation_bytes_per_layer,
    strategy_layer_costs,
)
from autopar.perf.remat import Spread, spread_of
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.perf.validate import validate_strategy
from autopar.specs import ClusterSpec, Knobs, ModelSpec, Strategy, Workload

__all__ = [
    "activation_bytes_per_layer",
    "estimate",
    "stage_memories",
    "strategy_violations",
    "usable_memory_bytes",
]


def estimate(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    check: bool = True,
    strict: bool = True,
) -> Estimate:
    """Predict memory and step time of one strategy; raises InvalidStrategyError if it breaks a rule.

    Unset knobs (None in Strategy.unset_knobs) are completed with the best feasible value, as the search
    would pick them; Estimate.assumed says which (perf/complete.py). Explicit values are never changed.
    """
    s = strategy.with_dp(cluster.num_gpus)
    if s.unset_knobs(model.is_moe):
        from autopar.perf.complete import complete

        return complete(model, cluster, workload, s, estimate=estimate, strict=strict, check=check)
    if check:
        violations = strategy_violations(model, cluster, workload, s, strict=strict)
        if violations:
            raise InvalidStrategyError(violations)
    return _estimate(model, cluster, workload, s)


def strategy_violations(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, s: Strategy, *, strict: bool = True
) -> list[str]:
    """Every rule a complete strategy breaks (autopar.layouts: layout, pipeline split and schedule, CP
    variant, HSDP and activation-offload rules), then the host memory the offloaded activations need."""
    out = validate_strategy(model, cluster, workload, s, strict=strict)
    if s.activation_offload_layers and not out:
        out += _host_memory_problems(model, cluster, workload, s)
    return out


def _host_memory_problems(model: ModelSpec, cluster: ClusterSpec, w: Workload, s: Strategy) -> list[str]:
    """Host (CPU) memory the offloaded layers' activations need, against the GPU's share of it (perf/act_offload)."""
    ctx, k = perf_context(model, cluster, w), s.knobs()
    lc = strategy_layer_costs(ctx, s, k)
    act = (model.dense_layers * lc.act_dense + model.moe_layers * lc.act_moe) / model.layers
    if not model.is_moe:
        act = lc.act_dense
    n, gpu = s.activation_offload_layers or 0, cluster.gpu
    return act_offload.host_memory_problems(gpu.host_memory_bytes, gpu.name, n, act)


@dataclass(frozen=True, slots=True)
class StageTime:
    """One micro-batch on one stage: compute (incl. recompute) and exposed comm by dimension, seconds
    (floats for one strategy; arrays for a block, perf/vector.py)."""

    comp: Num
    re: Num
    tp: Num
    cp: Num
    ep: Num
    fwd: Num  # forward share of comp
    n_layers: Num

    @property
    def total(self) -> Num:
        return self.comp + self.tp + self.cp + self.ep

    def pick(self, cond: Num, other: StageTime) -> StageTime:
        """This stage time where `cond`, else `other` (field by field; arrays of a block)."""
        return StageTime(*(where(cond, getattr(self, f), getattr(other, f)) for f in self.__slots__))


def _mix(model: ModelSpec, start: int, n: int) -> tuple[int, int]:
    """(dense layers, MoE layers) among layers [start, start+n): MoE models lead with their dense layers."""
    if not model.is_moe:
        return n, 0
    nd = max(0, min(start + n, model.dense_layers) - start)
    return nd, n - nd


_NO_CP = cp.CpCost(0.0, 0.0)


def _cp_cost(ctx: PerfContext, s: Strategy, k: Knobs, lc: LayerCosts) -> cp.CpCost:
    """The CP cost of one layer sharding and variant, memoised on the context (what it reads: the
    variant, the layer sharding behind `lc`, the micro-batch and whether the layer is recomputed)."""
    if s.cp == 1:
        return _NO_CP
    key = (s.cp_comm, s.cp, s.tp, k.micro_batch, k.recompute, s.ep, s.expert_tp, s.sp and s.tp > 1)
    hit = ctx.cp_costs.get(key)
    if hit is None:
        hit = ctx.cp_costs[key] = cp_cost_of(ctx, s.tp, s.cp, k.micro_batch, k.recompute, s.cp_comm, lc)
    return hit


def cp_cost_of(ctx: PerfContext, t: int, c: int, b: int, rec: str, variant: str, lc: LayerCosts) -> cp.CpCost:
    """CP cost per layer per micro-batch of a layer sharding (tp t, cp c, micro-batch b, recompute rec) and
    CP variant; shared with the vectorized estimator (perf/vector_*.py), which calls it once per distinct key."""
    if c == 1:
        return _NO_CP
    model, w = ctx.model, ctx.w
    # the stack's PyTorch ring, unless the model's family runs Transformer Engine's (NeMo AutoModel's custom MoE)
    torch_ring = ctx.sw.torch_cp and not family_runs_te_cp(w.framework, model)
    dv = model.mla.v if model.is_mla else model.dh
    qk = (model.mla.qk_nope + model.mla.qk_rope) if model.is_mla else model.dh
    x = cp.CpInputs(
        c=c,
        t=t,
        tokens=b * w.seq_len / c,
        seq_len=w.seq_len,
        kv_bytes_tok=lc.kv_bytes_tok,
        q_bytes_tok=2.0 * model.heads * qk,
        out_elems_tok=model.heads * dv / t,
        attn_fwd=lc.attn_fwd,
        attn_bwd=lc.attn_bwd,
        mla=model.is_mla,
        full_recompute=rec == "full",
        kernel_overhead_s=ctx.eff.kernel_overhead_s,
        hbm_bw=ctx.hbm,
        torch_ring=torch_ring,
        kv_rep=_torch_kv_rep(model, t, lc.kv_bytes_tok) if torch_ring and ctx.sw.torch_cp_repeats_kv else 1.0,
    )
    return cp.cp_cost(variant, x, ctx.links)


def _torch_kv_rep(model: ModelSpec, t: int, kv_bytes_tok: float) -> float:
    """K/V bytes SDPA receives over the model's KV bytes (what PyTorch's ring exchanges, perf/cp.py):
    GQA heads repeated to the query heads (torchtitan `repeat_kv`); MLA's K and V decompressed to every
    head (qk_nope + qk_rope and v_head_dim per head), bf16, a/t heads on this TP rank."""
    if model.is_mla:
        mla = model.mla
        return (
            2.0 * model.heads * (mla.qk_nope + mla.qk_rope + mla.v) / (t * kv_bytes_tok)
            if kv_bytes_tok
            else 1.0
        )
    return model.heads / max(model.kv, t)


def stage_time(lc: Any, nd: Num, nm: Num, logits: Num, cp_comm: Num, cp_compute: Num) -> StageTime:
    """One micro-batch on a stage of nd dense and nm MoE layers (`logits`: it runs the output layer and
    the loss); `lc` a LayerCosts or the same fields as arrays; the CP cost per layer."""
    fwd = nd * lc.dense_fwd + nm * lc.moe_fwd + where(logits, lc.logits_time / 3, 0.0)
    comp = nd * (lc.dense_fwd + lc.dense_bwd + lc.dense_re) + nm * (lc.moe_fwd + lc.moe_bwd + lc.moe_re)
    comp = comp + (where(logits, lc.logits_time, 0.0) + (nd + nm) * cp_compute)
    re = nd * lc.dense_re + nm * lc.moe_re
    return StageTime(
        comp, re, nd * lc.tp_dense + nm * lc.tp_moe, (nd + nm) * cp_comm, nm * lc.ep_layer, fwd, nd + nm
    )


def dualpipe(x: StageTime) -> StageTime:
    """DualPipe hides the expert all-to-all under the paired micro-batch's compute (pipeline.dualpipe_overlap)."""
    comp, ep = pipeline.dualpipe_overlap(x.comp, x.ep)
    scale = ratio(comp, x.comp, 1.0)
    return StageTime(comp, x.re * scale, x.tp, x.cp, ep, x.fwd * scale, x.n_layers)


def mean_stage_time(p: Num, first: Num, middle: Num, last: Num) -> Num:
    """Mean time of one micro-batch over the p stages: the first, p - 2 middle ones, the last."""
    mid = where(p > 2, middle, 0.0)
    return where(p == 1, first, (first + (p - 2) * mid + last) / p)


@dataclass(frozen=True, slots=True)
class StageSpec:
    """One distinct pipeline stage: its layers, what else it holds, and its in-flight micro-batches."""

    mix: tuple[int, int]
    first: bool  # holds the embedding
    last: bool  # holds the output layer and the loss (memory)
    logits: bool  # runs the output layer and the loss for every micro-batch (time)
    inflight: float


@dataclass(frozen=True, slots=True)
class Stages:
    """The distinct stages of the pipeline and one micro-batch's time on each."""

    specs: tuple[StageSpec, ...]
    times: tuple[StageTime, ...]
    mean_total: float
    note: str


def _stage_specs(ctx: PerfContext, s: Strategy, k: Knobs, m: int) -> tuple[tuple[StageSpec, ...], str]:
    """`stage_specs_of`, memoised on the context (a search meets few distinct pipelines)."""
    split = (s.pp_first_layers, s.pp_last_layers, s.pp_account_embedding, s.pp_account_loss)
    key = (s.pp, k.vpp, k.pp_schedule, m, split)
    hit = ctx.stage_specs.get(key)
    if hit is None:
        hit = ctx.stage_specs[key] = stage_specs_of(ctx.model, s.pp, k.vpp, k.pp_schedule, m, split)
    out: tuple[tuple[StageSpec, ...], str] = hit
    return out


def stage_specs_of(
    model: ModelSpec, p: int, v: int, sched: str, m: int, split: tuple[int | None, int | None, bool, bool]
) -> tuple[tuple[StageSpec, ...], str]:
    """The distinct stages (first, middle when p > 2, last) of a pipeline of p stages, v virtual stages,
    schedule `sched`, m micro-batches and split (first, last, account_embedding, account_loss) -- shared
    with the vectorized estimator, which calls it once per distinct key."""
    if p == 1:
        return (StageSpec(_mix(model, 0, model.layers), True, True, True, 1.0),), ""
    first, last, emb, loss = split
    lay = pipeline.stage_layers(
        model.layers, p, first=first, last=last, account_embedding=emb, account_loss=loss
    )
    dual = sched == "dualpipe"  # rank 0 also holds the mirrored last stage (its output layer and loss)
    specs = [
        StageSpec(
            _mix(model, 0, lay.first), True, dual, False, pipeline.inflight_microbatches(sched, p, m, v)
        )
    ]
    if p > 2:  # the middle stage is rank 1's (the most loaded of the middle ranks)
        mid_inflight = pipeline.inflight_microbatches(sched, p, m, v, rank=1)
        specs.append(StageSpec(_mix(model, lay.first, lay.middle), False, False, False, mid_inflight))
    last_inflight = pipeline.inflight_microbatches(sched, p, m, v, rank=p - 1)
    specs.append(StageSpec(_mix(model, model.layers - lay.last, lay.last), dual, True, True, last_inflight))
    return tuple(specs), lay.note


def _spread(ctx: PerfContext, k: Knobs, mix: tuple[int, int]) -> Spread:
    """How the workload spreads full recompute over a stage's layers (perf/remat.py; every layer one by one
    unless stated)."""
    w = ctx.w
    if k.recompute != "full" or (w.recompute_method, w.recompute_num_layers) == ("uniform", 1):
        return Spread()
    return spread_of(w.recompute_method, w.recompute_num_layers, sum(mix), k.vpp)


def _spread_time(x: StageTime, share: float) -> StageTime:
    """A stage's time with only `share` of its layers re-run in the backward."""
    if share == 1.0:
        return x
    return dataclasses.replace(x, comp=x.comp - (1.0 - share) * x.re, re=share * x.re)


def _stages(ctx: PerfContext, s: Strategy, k: Knobs, lc: LayerCosts, m: int) -> Stages:
    specs, note = _stage_specs(ctx, s, k, m)
    cpc = _cp_cost(ctx, s, k, lc)
    times = tuple(
        _spread_time(stage_time(lc, *sp.mix, sp.logits, cpc.comm, cpc.compute), _spread(ctx, k, sp.mix).share)
        for sp in specs
    )
    if s.pp > 1 and k.pp_schedule == "dualpipe":
        times = tuple(dualpipe(x) for x in times)
    tot = [x.total for x in times]
    mean = mean_stage_time(s.pp, tot[0], tot[1] if s.pp > 2 else 0.0, tot[-1])
    return Stages(specs, times, mean, note)


def _sharding(ctx: PerfContext, s: Strategy, k: Knobs, g: fsdp.DpGroups) -> memory.Sharding:
    w = ctx.w
    state_bytes = memory.state_bytes_of(w.optimizer, w.master_weights, ctx.model.hidden, s.optimizer_states)
    return sharding_of(ctx, k.zero, g, state_bytes, s.optimizer_offload, s.pp > 1)


def sharding_of(
    ctx: PerfContext, zero: Num, g: fsdp.DpGroups, state_bytes: Num, offload: Num, piped: Num
) -> memory.Sharding:
    """How model states are sharded, for one strategy or a block (arrays): ZeRO stage, groups, optimizer."""
    n_coll = ctx.sw.zero3_collectives_per_layer
    return memory.Sharding(
        zero=zero,
        n_shard=g.n_shard,
        n_eshard=g.n_edp,
        state_bytes=state_bytes,
        offload=offload,
        fp8_weight_copies=ctx.fp8,
        zero3_units=1 + ZERO3_PREFETCH_DEPTH,
        unit_fraction=1.0 if n_coll == 1 else 3.0 / n_coll,
        stage_gathered=piped & ctx.sw.pp_defers_grad_sync,  # only where the PP schedule defers the sync
        accum_grad_bytes=memory.ACCUM_GRAD_BYTES.get(ctx.w.framework, 2.0),
        trainable=trainable_fraction(ctx.model, ctx.w, ctx.pc),
        grad_bytes=memory.GRAD_BYTES[ctx.w.grad_reduce_dtype],
        zero3_grad_bytes=zero3_grad_bytes(ctx) if ctx.sw.zero3_reduces_main_grads else 2.0,
        keep_gathered=ctx.w.reshard_after_forward is False,
        base_bytes=base_weight_bytes(ctx.w),
    )


def _memory(
    ctx: PerfContext, s: Strategy, k: Knobs, lc: LayerCosts, st: Stages, sh: memory.Sharding
) -> tuple[MemoryBreakdown, memory.StageParams]:
    """Peak memory over the distinct stages, and the parameters of the first stage."""
    per_stage = _stage_memories(ctx, s, k, lc, st, sh)
    best = per_stage[0][1]
    for _, mb in per_stage[1:]:
        if mb.total > best.total:
            best = mb
    return best, per_stage[0][0]


def _stage_memories(
    ctx: PerfContext, s: Strategy, k: Knobs, lc: LayerCosts, st: Stages, sh: memory.Sharding
) -> list[tuple[memory.StageParams, MemoryBreakdown]]:
    """(parameters, memory) of each distinct stage: first, middle when p > 2, last."""
    copies = float(pipeline.parameter_copies(k.pp_schedule) if s.pp > 1 else 1)
    off = act_offload.resident_saving_layers(s.activation_offload_layers or 0)
    full = reruns_layer_forward(k.recompute)
    out = []
    for sp in st.specs:
        params = memory.stage_params(
            ctx.model, ctx.pc, s.tp, s.pp, s.ep, s.expert_tp, sp.mix, sp.first, sp.last
        )
        spread = _spread(ctx, k, sp.mix)
        mb = memory.stage_memory_of(
            params, sh, lc, *sp.mix, sp.inflight, full, sp.first, sp.last, copies, off, spread
        )
        out.append((params, mb))
    return out


def stage_memories(
    model: ModelSpec, cluster: ClusterSpec, w: Workload, s: Strategy
) -> tuple[MemoryBreakdown, ...]:
    """Memory of each distinct pipeline stage (first, middle when p > 2, last) of a completed strategy (an
    Estimate's `strategy`), for comparing a measurement taken on one stage (e.g. Megatron-LM logs the last
    rank's, which is the last pipeline stage); `estimate`'s memory is the largest of them."""
    ctx = perf_context(model, cluster, w)
    s = s.with_dp(cluster.num_gpus)
    t, c, d, k = s.tp, s.cp, s.dp, s.knobs()
    lc = strategy_layer_costs(ctx, s, k)
    st = _stages(ctx, s, k, lc, micro_batches(w, k.micro_batch, d))
    sh = _sharding(ctx, s, k, fsdp.dp_groups(t, c, d, s.ep, s.expert_tp, s.dp_shard))
    return tuple(mb for _, mb in _stage_memories(ctx, s, k, lc, st, sh))


def layer_mean(mix: tuple[int, int], dense: float, moe: float) -> float:
    """Mean of a per-layer figure over a stage of nd dense and nm MoE layers (shared with perf/vector.py)."""
    nd, nm = mix
    return (nd * dense + nm * moe) / max(1, nd + nm)


def _offload_time(ctx: PerfContext, s: Strategy, lc: LayerCosts, st: Stages) -> float:
    """Exposed host-link time of activation offload per micro-batch on the (single) stage."""
    n = s.activation_offload_layers or 0
    if not n:
        return 0.0
    sp = st.specs[0]
    fwd = layer_mean(sp.mix, lc.dense_fwd, lc.moe_fwd)
    bwd = layer_mean(sp.mix, lc.dense_bwd, lc.moe_bwd)
    act = layer_mean(sp.mix, lc.act_dense, lc.act_moe)
    layers = sum(sp.mix)
    return act_offload.offload_cost(layers, n, act, fwd, bwd, offload.host_link_bw(ctx.cluster.gpu)).exposed_s


# FSDP2 prefetches one unit ahead by default (implicit forward/backward prefetch; torchtitan does not raise
# it): two gathered units live at once.
ZERO3_PREFETCH_DEPTH = 1


def _dp_time(
    ctx: PerfContext,
    s: Strategy,
    k: Knobs,
    g: fsdp.DpGroups,
    params: memory.StageParams,
    st0: StageTime,
    m: int,
) -> fsdp.DpTime:
    if k.zero != 3:
        return ddp_dp_time(ctx, k.zero, g, params, st0, m, s.pp)
    return zero3_dp_time(ctx, s.tp, s.pp, g, params, st0, m, _unit_of(ctx))


# A ZeRO-3 unit's collective times from (non-expert, expert parameters, groups, collectives per unit): the
# scalar fsdp.zero3_unit for one strategy; perf/vector_dp.py runs it once per distinct input of a block.
UnitFn = Callable[[Num, Num, fsdp.DpGroups, int], fsdp.Zero3Unit]


def _unit_of(ctx: PerfContext) -> UnitFn:
    wb, gb = zero3_comm_bytes(ctx)
    return lambda ne, ex, g, n_coll: fsdp.zero3_unit(ne, ex, g, ctx.links, gb, n_coll, wb)


def zero3_comm_bytes(ctx: PerfContext) -> tuple[float, float]:
    """(bytes gathered, bytes reduced) per parameter of a ZeRO-3 unit: the weights as stored (QLoRA's NF4:
    perf/finetune.py) and the gradients of the trainable share only (LoRA: the adapters')."""
    return base_weight_bytes(ctx.w), zero3_grad_bytes(ctx) * trainable_fraction(ctx.model, ctx.w, ctx.pc)


def zero3_grad_bytes(ctx: PerfContext) -> float:
    """Bytes per gradient element of the ZeRO-3 reduce-scatter: the main-gradient dtype where the stack
    reduce-scatters its main-gradient buffer (Megatron-FSDP: software.yaml zero3_reduces_main_grads), else the
    stack's own (zero3_grad_bytes)."""
    if ctx.sw.zero3_reduces_main_grads:
        return memory.GRAD_BYTES[ctx.w.grad_reduce_dtype]
    return ctx.sw.zero3_grad_bytes


def sync_windows(ctx: PerfContext, st0: StageTime, p: Num) -> tuple[Num, Num]:
    """(backward, forward) seconds the gradient reduction and the parameter gather may hide under: one
    micro-batch's backward and forward, or none where the stack's pipeline schedule runs the data-parallel
    sync after the flush (software.yaml pp_syncs_after_flush: DeepSpeed's PipelineEngine)."""
    bwd, fwd = st0.comp - st0.fwd, st0.fwd
    if not ctx.sw.pp_syncs_after_flush:
        return bwd, fwd
    serial = p > 1
    return where(serial, 0.0, bwd), where(serial, 0.0, fwd)


def ddp_dp_time(
    ctx: PerfContext, zero: Num, g: fsdp.DpGroups, params: memory.StageParams, st0: StageTime, m: Num,
    p: Num, coll: fsdp.Collective | None = None,
) -> fsdp.DpTime:  # fmt: skip
    """DDP / ZeRO-1/2 gradient and parameter collectives of the first stage over m micro-batches (ZeRO-2
    reduces every micro-batch: fsdp.grad_reductions); only trainable parameters' gradients are reduced
    (LoRA: the adapters)."""
    f = trainable_fraction(ctx.model, ctx.w, ctx.pc)
    bwd, fwd = sync_windows(ctx, st0, p)
    ne, ex = f * params.non_expert, f * params.expert
    n_red = fsdp.grad_reductions(zero, m, p, ctx.sw.pp_defers_grad_sync)
    gb = memory.GRAD_BYTES[ctx.w.grad_reduce_dtype]
    return fsdp.ddp_time(zero, ne, ex, g, ctx.links, ctx.w.framework, bwd, fwd, coll, n_red, gb)


def zero3_dp_time(
    ctx: PerfContext, t: Num, p: Num, g: fsdp.DpGroups, params: memory.StageParams, st0: StageTime, m: Num,
    unit: UnitFn,
) -> fsdp.DpTime:  # fmt: skip
    """ZeRO-3/FSDP collectives of the first stage: per-block units and the root (embedding, and the output
    layer without PP); nothing when neither group shards."""
    bwd, fwd = st0.comp - st0.fwd, st0.fwd
    n = maximum(1, st0.n_layers)
    root_ne = _root_params(ctx, t, p)
    sw = ctx.sw
    u = unit(
        maximum(0.0, params.non_expert - root_ne) / n, params.expert / n, g, sw.zero3_collectives_per_layer
    )
    root = unit(root_ne, 0.0, g, 1)
    dt = fsdp.zero3_time(u, root, n, fwd / n, bwd / n, sw.zero3_overlap, m, (p > 1) & sw.pp_defers_grad_sync)
    idle = (g.n_shard <= 1) & (g.n_edp <= 1)
    return fsdp.DpTime(where(idle, 0.0, dt.exposed), where(idle, 0.0, dt.overlapped))


def _root_params(ctx: PerfContext, t: Num, p: Num) -> Num:
    """Parameters outside the transformer blocks on the first stage (embedding; output layer without PP)."""
    pc = ctx.pc
    return pc.embedding / t + where(p == 1, (pc.output if pc.output else 0.0) / t + pc.final_norm, 0.0)


def _estimate(model: ModelSpec, cluster: ClusterSpec, w: Workload, s: Strategy) -> Estimate:
    ctx = perf_context(model, cluster, w)
    t, p, c, d, k = s.tp, s.pp, s.cp, s.dp, s.knobs()
    m = micro_batches(w, k.micro_batch, d)
    lc = strategy_layer_costs(ctx, s, k)
    st = _stages(ctx, s, k, lc, m)
    g = fsdp.dp_groups(t, c, d, s.ep, s.expert_tp, s.dp_shard)
    sh = _sharding(ctx, s, k, g)
    mem, params = _memory(ctx, s, k, lc, st, sh)
    slowest = max(st.times, key=lambda x: x.total)
    dpt = _dp_time(ctx, s, k, g, params, st.times[0], m)
    send = comm.p2p(lc.pp_bytes, crosses_node(ctx, t, c, d, p), ctx.links)
    bubble, pp_comm = pipeline.pipeline_time(k.pp_schedule, p, m, k.vpp if p > 1 else 1, st.mean_total, send)
    opt = optimizer_time(ctx, params, sh, slowest.comp - slowest.fwd)
    acc = grad_accum_time(ctx, params, sh, m)
    tb = time_breakdown(m, slowest, dpt, bubble, pp_comm, opt, _offload_time(ctx, s, lc, st), acc)
    return _assemble(ctx, s, k, tb, mem, _notes(ctx, s, st))


def micro_batches(w: Workload, micro_batch: Num, d: Num) -> Num:
    """Micro-batches per step per pipeline."""
    return maximum(1, w.global_batch // (micro_batch * d))


def time_breakdown(
    m: Num,
    slowest: StageTime,
    dpt: fsdp.DpTime,
    bubble: Num,
    pp_comm: Num,
    opt: Num,
    act_offload: Num,
    accum: Num = 0.0,
) -> TimeBreakdown:
    """The step's time terms: m micro-batches on the slowest stage (the DP collectives hidden under its
    compute slow it by OVERLAP_SLOWDOWN) with the gradient-accumulation passes between them (`accum`,
    grad_accum_time), and the per-step pipeline, DP, optimizer and offload terms."""
    return TimeBreakdown(
        compute=m * slowest.comp + OVERLAP_SLOWDOWN * dpt.overlapped + accum,
        recompute=m * slowest.re,
        tp_comm=m * slowest.tp,
        cp_comm=m * slowest.cp,
        ep_comm=m * slowest.ep,
        pp_comm=pp_comm,
        dp_comm=dpt.exposed,
        bubble=bubble,
        optimizer=opt,
        act_offload=m * act_offload,
    )


def crosses_node(ctx: PerfContext, t: Num, c: Num, d: Num, p: Num) -> Num:
    """Whether a pipeline neighbour sits in another scale-up domain (the p2p send crosses the scale-out)."""
    tcd = t * c * d
    return (tcd >= ctx.G) | (tcd * p > ctx.G)


def optimizer_time(ctx: PerfContext, params: memory.StageParams, sh: memory.Sharding, window: Num) -> Num:
    """The optimizer step on the GPU (memory bound) plus the exposed CPU offload of its share."""
    local = memory.local_optimizer_params(params, sh)
    # the main-gradient dtype (Workload.grad_reduce_dtype) outside ZeRO-3; ZeRO-3 paths keep their fp32 read
    grad = where(sh.zero == 3, 4.0, sh.grad_bytes)
    step = memory.optimizer_step_bytes(sh.state_bytes, grad, ctx.w.optimizer, ctx.w.master_weights)
    opt = step * local * (1 - sh.offload) / ctx.hbm
    return opt + offload.offload_time(ctx.cluster.gpu, local, sh.offload, window)


# DeepSpeed's BF16_Optimizer drops the bf16 gradients before each micro-batch's backward (`clear_lp_grads`,
# set to None) and after it adds them, cast to fp32, into fp32 copies (deepspeed/runtime/bf16_optimizer.py
# `_update_hp_grad`: `hp_grad.add_(lp.grad.to(fp32))`): the cast reads 2 B and writes 4, the add reads 4 + 4 and
# writes 4, per parameter and every micro-batch (the first one's too: the fp32 copies start at zero).
BF16_OPTIMIZER_ACCUM_BYTES = 18.0


def grad_accum_time(ctx: PerfContext, params: memory.StageParams, sh: memory.Sharding, m: Num) -> Num:
    """Memory-bound passes that add each micro-batch's weight gradients to the accumulated ones, for the m - 1
    micro-batches after the first (the first one's gradients are stored as they are): the stack's bytes per
    parameter (software.yaml grad_accum_bytes; 0 where the weight-gradient GEMM accumulates) over the gradients
    this GPU accumulates: all of its stage's, or its shard of them when ZeRO-2/3 reduce-scatters every
    micro-batch; under DeepSpeed's BF16 optimizer BF16_OPTIMIZER_ACCUM_BYTES for all m. The stage's parameters
    are the first stage's, as for the optimizer step."""
    ne, ex = params.non_expert, params.expert
    grads = where(sh.zero >= 2, ne / sh.n_shard + ex / sh.n_eshard, ne + ex) * sh.trainable
    if ctx.w.bf16_optimizer and ctx.w.framework == "deepspeed":  # the workload's, the same for every row
        return m * BF16_OPTIMIZER_ACCUM_BYTES * grads / ctx.hbm
    return (m - 1) * ctx.sw.grad_accum_bytes * grads / ctx.hbm


def _notes(ctx: PerfContext, s: Strategy, st: Stages) -> list[str]:
    notes = [st.note] if st.note else []
    model, w, t = ctx.model, ctx.w, s.tp
    notes += stack_notes(w.framework, s)  # explicit knobs the stack does not ship: estimated as what-ifs
    if model.is_moe and t > 1 and s.expert_tp == 1 and s.ep == 1:
        notes.append("experts replicated across TP ranks (etp=1, ep=1)")
    if t > 1 and not (w.tp_comm_overlap and s.sp):
        notes.append(
            "TP collectives not overlapped with compute"
            + (
                " (tp_comm_overlap needs sequence parallelism)"
                if w.tp_comm_overlap
                else "; Megatron --tp-comm-overlap / torchtitan async TP would hide most of them (--tp-comm-overlap)"
            )
        )
    return notes


def headline(ctx: PerfContext, step: Num, hw_flops: Num) -> dict[str, Num]:
    """Throughput and utilisation from the step time (floats, or arrays of a block)."""
    W, peak, fl = ctx.W, ctx.peak_gemm, ctx.flops
    return {
        "tokens_per_s": ctx.tokens / step,
        "tokens_per_s_per_gpu": ctx.tokens / step / W,
        "model_tflops_per_gpu": fl.model_full / step / W / 1e12,
        "hw_tflops_per_gpu": hw_flops / step / W / 1e12,
        "mfu": fl.model_full / step / W / peak,
        "mfu_causal": fl.model_causal / step / W / peak,
        "hfu": hw_flops / step / W / peak,
    }


def _assemble(
    ctx: PerfContext, s: Strategy, k: Knobs, tb: TimeBreakdown, mem: MemoryBreakdown, notes: list[str]
) -> Estimate:
    step = tb.total
    hw = ctx.flops.hardware[k.recompute]
    if k.recompute == "full":  # only the layers the spread re-runs add a forward (the first stage's share)
        share = _spread(ctx, k, (ctx.model.layers // s.pp, 0)).share
        hw = ctx.flops.hardware["none"] + share * (hw - ctx.flops.hardware["none"])
    parts = {k: getattr(tb, k) for k in tb.__slots__ if k != "recompute"}
    headroom = ctx.capacity - mem.total
    return Estimate(
        memory=mem,
        time=tb,
        step_time_s=step,
        model_flops_per_step=ctx.flops.model_causal,
        model_flops_per_step_full_attn=ctx.flops.model_full,
        hw_flops_per_step=hw,
        peak_flops=ctx.peak_gemm,
        capacity_bytes=ctx.capacity,
        headroom_bytes=headroom,
        fits=headroom >= 0,
        bottleneck=max(parts, key=parts.__getitem__),
        notes=tuple(notes),
        strategy=s,
        flops_basis=ctx.flops.basis,
        **headline(ctx, step, hw),
    )
