"""Per-GPU memory of one pipeline stage: parameters held, model states by ZeRO stage, activations, overheads.

Model-state bytes per parameter follow ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054 §3.1, §5) and
Megatron's distributed optimizer (docs/user-guide/features/dist_optimizer.md): bf16 weights 2 B, main
gradients 4 B in fp32 or 2 B in bf16 (GRAD_BYTES; ZeRO-3/FSDP: 2 B), optimizer states by OPTIMIZER_STATE_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Which memory savers the search may choose lives in the spine (autopar/layouts.py); re-exported here.
from autopar.knobs import OPTIMIZER_KINDS, reruns_layer_forward
from autopar.layouts import MEMORY_SAVER_VALUES, saver_choices  # noqa: F401
from autopar.perf.arith import Num, choose, maximum, minimum, where
from autopar.perf.layers import CUDA_CONTEXT_BYTES, FRAGMENTATION, NCCL_BYTES, LayerCosts
from autopar.perf.params import ParamCounts
from autopar.perf.remat import Spread
from autopar.perf.types import MemoryBreakdown
from autopar.specs import ModelSpec

GiB = 2**30
_ALL_LAYERS = Spread()  # full recompute of every layer, one by one (Megatron uniform 1)

# Adam's optimizer-state bytes per parameter (fp32 master copy included) by state precision, and the source of
# each variant; every optimizer's (knobs.OPTIMIZER_KINDS, Workload.master_weights): state_bytes_of below.
OPTIMIZER_STATE_BYTES: dict[str, float] = {
    "fp32": 12.0,  # Adam: fp32 master 4 + m 4 + v 4 (ZeRO §3.1, "K = 12")
    "bf16": 8.0,  # fp32 master 4 + bf16 m, v (Megatron --use-precision-aware-optimizer --exp-avg(-sq)-dtype bf16)
    "8bit": 6.0,  # fp32 master 4 + block-wise 8-bit m, v (Dettmers et al. 2022, arXiv 2110.02861 §2)
    "sgd": 8.0,  # fp32 master 4 + momentum 4
}
# ZeRO-3 under PP keeps each stage's unsharded gradients across micro-batches. FSDP2 accumulates them in the
# reduce dtype (torch.distributed.fsdp._fully_shard._fsdp_param.FSDPParam.to_accumulated_grad_if_needed), which
# torchtitan sets to float32 (training.mixed_precision_reduce = "float32"); other stacks: bf16 (2 B).
ACCUM_GRAD_BYTES: dict[str, float] = {"torchtitan": 4.0}
# Workload.grad_reduce_dtype -> bytes per main-gradient element outside ZeRO-3. Megatron-Core allocates the
# gradient buffer in the reduce dtype (megatron/core/distributed/distributed_data_parallel.py:
# `grad_dtype = torch.float if self.ddp_config.grad_reduce_in_fp32 else param.dtype`) and reduces that buffer.
GRAD_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0}
DDP_BUCKET_BYTES = 0.125 * GiB  # gradient-bucket staging outside ZeRO-3 (Megatron/DDP buckets, formulas §3.5)


# Bytes per element of the optimizer's full-size moments by precision (Strategy.optimizer_states): fp32, bf16,
# and block-wise 8-bit (its fp32 absmax per 2048-element block, 0.002 B, left out as in "8bit" above).
MOMENT_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "8bit": 1.0}
# Workload.master_weights -> bytes of the optimizer's master copy per trainable parameter, counted in the
# optimizer states (the bf16 model weights, 2 B, are the weights term either way, never counted twice).
# fp32: the fp32 main params of Megatron's mixed-precision/distributed optimizer (ZeRO §3.1), FSDP2's fp32 shard.
# fp16: Megatron --use-precision-aware-optimizer --main-params-dtype fp16 (TE FusedAdam master_weight_dtype;
# megatron/core/optimizer/optimizer_config.py core_v0.19.0: Adam with the distributed optimizer only).
# bf16: no master copy: the optimizer updates the bf16 model weights in place (pure-bf16 training, e.g. torchao
# torchao.optim.AdamW(bf16_stochastic_round=True) on a bf16 model), so 0 B here.
MASTER_BYTES: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 0.0}


def factored_bytes(hidden: int) -> float:
    """Bytes per parameter of one factored statistic (Adafactor's second moment; CAME's second moment and
    confidence): an fp32 row and column vector per r x c matrix, 4(r + c)/(rc) B a parameter. Approximated by
    the square h x h matrix, 8/h (0.002 B at h = 4096; under 0.01 B for h >= 1024 even with a matrix's columns
    split over TP 8); the full-size state Adafactor keeps for vectors (norms, biases: ~2h of ~12h^2 a layer)
    is left out."""
    return 8.0 / max(hidden, 1)


def state_bytes_of(optimizer: str, master: str, hidden: int, states: str | None = None) -> float:
    """Optimizer-state bytes per trainable parameter: master copy (MASTER_BYTES) + full-size moments at their
    precision (`states`, else the optimizer's) + factored statistics. fp32 Adam 4 + 8 = 12 (ZeRO's K = 12),
    bf16 moments 8, 8-bit 6; SGD and Lion 4 + 4 = 8; CAME 8 + 2·8/h; Adafactor 4 + 8/h."""
    k = OPTIMIZER_KINDS[optimizer]
    moments = k.moments * MOMENT_BYTES[states or k.states]
    return MASTER_BYTES[master] + moments + k.factored * factored_bytes(hidden)


def optimizer_step_bytes(
    state_bytes: Num, grad_bytes: Num = 4.0, optimizer: str = "adam", master: str = "fp32"
) -> Num:
    """HBM traffic of one optimizer step per local parameter: read the main grad (`grad_bytes`: 4 in fp32)
    and the states, write the states back, write the bf16 copy (2), plus the grad-norm pass (2) — 32 B for
    fp32 Adam with fp32 grads (formulas §6). The same count for every optimizer, at its fused minimum:
    Adafactor and CAME read the gradient twice (its row/column statistics before the update), CAME reads its
    moment and statistics once more (the confidence pass: states less master); without a master copy
    (master_weights bf16) the step reads the bf16 weights it updates in place (+2). Adafactor 2·4 + 4 + 2·4 = 20 B
    with fp32 grads, Lion and SGD 4 + 4 + 2·8 = 24, CAME 8 + 4 + 2·8 + 4 = 32 (factored bytes aside)."""
    k = OPTIMIZER_KINDS[optimizer]
    master_b = MASTER_BYTES[master]
    rereads = k.state_rereads * (state_bytes - master_b)
    in_place = 2.0 if master_b == 0.0 else 0.0
    return k.grad_reads * grad_bytes + 4.0 + 2.0 * state_bytes + rereads + in_place


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU holds for its stage (before ZeRO sharding); floats, or arrays of a block."""

    non_expert: Num
    expert: Num
    biggest_layer: Num  # the largest single layer (ZeRO-3 gathers units of this size)
    linear: Num = (
        0.0  # the non-expert part's block linear weights (QLoRA stores them in NF4: perf/finetune.py)
    )
    largest_linear: Num = 0.0  # the largest single linear weight (QLoRA dequantises one at a time to bf16)


def stage_params(
    model: ModelSpec,
    pc: ParamCounts,
    t: Num,
    p: Num,
    e: Num,
    te: Num,
    mix: tuple[Num, Num],
    first: Num,
    last: Num,
) -> StageParams:
    """Parameters held by one GPU of a stage with `mix` = (dense layers, MoE layers); floats or arrays."""
    nd, nm = mix
    attn = (pc.attention - pc.attention_tp_replicated) / t + pc.attention_tp_replicated
    dense_layer = attn + pc.dense_mlp / t + pc.norms
    moe_layer_ne = attn + pc.norms + pc.router + pc.shared_expert / t
    ne = nd * dense_layer + nm * moe_layer_ne
    ne = ne + where(first, pc.embedding / t, 0.0)
    out = pc.output if pc.output else where(p > 1, pc.embedding, 0.0)
    ne = ne + where(last, out / t + pc.final_norm, 0.0)
    experts_layer = model.experts * pc.expert / (e * te)
    ex = nm * experts_layer
    biggest = maximum(where(nd > 0, dense_layer, 0.0), where(nm > 0, moe_layer_ne + experts_layer, 0.0))
    linear = nd * (attn + pc.dense_mlp / t) + nm * (attn + pc.shared_expert / t)
    largest = max(model.hidden * model.ffn_hidden, model.hidden * model.heads * model.dh) / t
    return StageParams(ne, ex, biggest, linear, largest)


@dataclass(frozen=True, slots=True)
class Sharding:
    """How model states are sharded: ZeRO stage, shard group sizes, optimizer variant, offload (the
    per-strategy fields are arrays for a block)."""

    zero: Num
    n_shard: Num  # dense-parameter shard group (dp·cp, or the HSDP shard group)
    n_eshard: Num  # expert-parameter shard group (expert data parallel)
    state_bytes: Num  # optimizer-state bytes per parameter
    offload: Num  # fraction of optimizer states (and their step) on the CPU
    fp8_weight_copies: bool
    zero3_units: float  # gathered ZeRO-3 units kept at once (prefetch depth + 1)
    unit_fraction: float  # size of one ZeRO-3 unit relative to the biggest layer (per-tensor gathers: < 1)
    stage_gathered: Num  # the PP schedule defers the DP sync: the stage's params (ZeRO-3) and unsharded
    # gradients stay across micro-batches (software.yaml pp_defers_grad_sync, with PP)
    accum_grad_bytes: float = 2.0  # unsharded gradient accumulated across micro-batches without sync
    trainable: float = 1.0  # share of parameters with gradients and optimizer states (LoRA: perf/finetune.py)
    grad_bytes: float = 4.0  # main-gradient bytes per element outside ZeRO-3 (GRAD_BYTES of the reduce dtype)
    # ZeRO-3 gradient-shard bytes per element: 2 (the 16 B/parameter convention: FSDP2's fp32 shard counted
    # with the weights and optimizer states), or the main-gradient dtype's where the stack keeps a sharded
    # main-gradient buffer beside bf16 weights and fp32 main weights (Megatron-FSDP: 2 + 4 + 4 + 8 = 18 B with
    # fp32 main grads; software.yaml zero3_reduces_main_grads)
    zero3_grad_bytes: float = 2.0
    # ZeRO-3 without PP: FSDP keeps every block's gathered bf16 parameters from its forward until its backward
    # (Workload.reshard_after_forward False: fully_shard(reshard_after_forward=False) skips the post-forward
    # free, torch.distributed.fsdp._fully_shard._fsdp_state.FSDPState._post_forward), so the stage's whole
    # unsharded parameters are alive when the backward starts
    keep_gathered: bool = False
    base_bytes: float = (
        2.0  # bytes of a frozen block linear weight (QLoRA NF4: perf/finetune.base_weight_bytes)
    )


def _weights(sp: StageParams, sh: Sharding, ne: Num, ex: Num) -> Num:
    """Bytes of `ne` non-expert and `ex` expert parameters of the stage, of which the block linears (the share
    sp.linear / sp.non_expert of ne, all of ex) are stored at sh.base_bytes and the rest in bf16."""
    if sh.base_bytes == 2.0:
        return 2.0 * (ne + ex)
    share = sp.linear / maximum(sp.non_expert, 1.0)
    return 2.0 * (ne + ex) - (2.0 - sh.base_bytes) * (share * ne + ex)


def _dequantised(sp: StageParams, sh: Sharding) -> Num:
    """The bf16 copy of the largest frozen linear that a QLoRA GEMM dequantises into (0 outside QLoRA)."""
    return 0.0 if sh.base_bytes == 2.0 else 2.0 * sp.largest_linear


def model_states(sp: StageParams, sh: Sharding) -> tuple[Num, ...]:
    """(weights, grads, optimizer, buffers) bytes of one GPU: ZeRO-3 or not, picked per strategy."""
    return choose(sh.zero == 3, _zero3_states, _replicated_states, sp, sh)


def _zero3_states(sp: StageParams, sh: Sharding) -> tuple[Num, ...]:
    """ZeRO-3: 16/n bytes per parameter (18/n on Megatron-FSDP with fp32 main grads) + gathered units (ZeRO §5;
    FSDP: Zhao et al. 2023 §3)."""
    ne, ex, big = sp.non_expert, sp.expert, sp.biggest_layer
    local = ne / sh.n_shard + ex / sh.n_eshard
    opt = sh.state_bytes * local * (1.0 - sh.offload) * sh.trainable
    # With PP: bf16 params of the whole stage + its unsharded gradients accumulated across micro-batches in
    # the reduce dtype (FSDP2 upcasts them: torch.distributed.fsdp._fully_shard._fsdp_param.FSDPParam.
    # to_accumulated_grad_if_needed) + an fp32 reduce buffer of one layer. Without: gathered bf16 units
    # (current + prefetched) + bf16 unsharded grad + fp32 reduce buffer.
    # QLoRA gathers NF4 units (a layer is its linears but for 2 norms, < 0.01%); LoRA: only the adapters have
    # gradients to hold and reduce
    unit_g = (2.0 + 4.0) * sh.trainable
    per_unit = big * sh.unit_fraction * (sh.base_bytes * sh.zero3_units + unit_g)
    stage_w = _weights(sp, sh, ne, ex)
    kept = stage_w + big * sh.unit_fraction * unit_g if sh.keep_gathered else per_unit
    stage_g = ((ne + ex) * sh.accum_grad_bytes + big * 4.0) * sh.trainable
    buf = where(sh.stage_gathered, stage_w + stage_g, kept)
    w_local = _weights(sp, sh, ne / sh.n_shard, ex / sh.n_eshard)
    return w_local, sh.zero3_grad_bytes * local * sh.trainable, opt, buf + _dequantised(sp, sh)


def _replicated_states(sp: StageParams, sh: Sharding) -> tuple[Num, ...]:
    """ZeRO 0-2: bf16 weights everywhere; main grads (fp32 or bf16: sh.grad_bytes) sharded from ZeRO-2,
    optimizer states from ZeRO-1."""
    ne, ex = sp.non_expert, sp.expert
    n_opt = where(sh.zero >= 1, sh.n_shard, 1), where(sh.zero >= 1, sh.n_eshard, 1)
    sharded = grads_sharded(sh)
    n_grd = where(sharded, sh.n_shard, 1), where(sharded, sh.n_eshard, 1)
    wts = _weights(sp, sh, ne, ex)
    grd = sh.grad_bytes * (ne / n_grd[0] + ex / n_grd[1]) * sh.trainable
    opt = sh.state_bytes * (ne / n_opt[0] + ex / n_opt[1]) * (1.0 - sh.offload) * sh.trainable
    buf = DDP_BUCKET_BYTES + where(sh.fp8_weight_copies, 2.0 * sp.biggest_layer, 0.0) + _dequantised(sp, sh)
    return wts, grd, opt, buf


def grads_sharded(sh: Sharding) -> Num:
    """ZeRO-2 keeps the fp32 gradients sharded, reduce-scattering each micro-batch's into the shard
    (perf/fsdp.py `grad_reductions`), unless the PP schedule defers the sync to the last micro-batch: then the
    stage accumulates them unsharded (torch.distributed.pipelining, software.yaml pp_defers_grad_sync)."""
    return (sh.zero >= 2) & (sh.stage_gathered == 0)


def local_optimizer_params(sp: StageParams, sh: Sharding) -> Num:
    """Parameters whose optimizer step this GPU runs (sharded from ZeRO-1 on)."""
    ne, ex = sp.non_expert, sp.expert
    return where(sh.zero >= 1, (ne / sh.n_shard + ex / sh.n_eshard) * sh.trainable, (ne + ex) * sh.trainable)


def stage_activations(
    lc: LayerCosts, mix: tuple[int, int], inflight: float, recompute: str, offloaded: int = 0
) -> float:
    """Activation bytes the stage keeps: `inflight` micro-batches of its layers (formulas §3.2-3.3), less
    `offloaded` layers' worth in CPU memory (activation offload, perf/act_offload.py; mean layer)."""
    out: float = activations(lc, *mix, inflight, reruns_layer_forward(recompute), offloaded)
    return out


def activations(
    lc: Any, nd: Num, nm: Num, inflight: Num, full: Num, offloaded: Num, spread: Spread = _ALL_LAYERS
) -> Num:
    """`stage_activations` on floats or arrays (`lc`: LayerCosts or its fields as arrays; `full`: the layer's
    forward is re-run in the backward; `spread`: how full recompute is spread over the rank's layers, perf/remat.py:
    scalar path only, every layer one by one on arrays)."""
    if spread == _ALL_LAYERS:
        dense, moe = lc.act_dense, lc.act_moe
    else:  # a share of the layers checkpointed (their inputs, thinned), the rest keep everything
        sh, scale = spread.share, spread.input_scale
        dense = sh * scale * lc.act_dense + (1.0 - sh) * lc.act_dense_full
        moe = sh * scale * lc.act_moe + (1.0 - sh) * lc.act_moe_full
    total = (nd * dense + nm * moe) * inflight
    total = total - minimum(total, offloaded * total / maximum(1, nd + nm))
    # recompute: `group` layers' activations live while they are re-run (their input is already kept)
    working = spread.group * (where(nm > 0, lc.act_moe_full, lc.act_dense_full) - lc.pp_bytes)
    return where(full, total + working, total)


def stage_memory(
    sp: StageParams,
    sh: Sharding,
    lc: LayerCosts,
    mix: tuple[int, int],
    inflight: float,
    recompute: str,
    first: bool,
    last: bool,
    param_copies: int = 1,
    offloaded: int = 0,
) -> MemoryBreakdown:
    """Peak memory of one GPU of a stage (param_copies = 2 for DualPipe's mirrored stage; `offloaded`
    layers' activations in CPU memory)."""
    return stage_memory_of(
        sp,
        sh,
        lc,
        *mix,
        inflight,
        reruns_layer_forward(recompute),
        first,
        last,
        float(param_copies),
        offloaded,
    )


def stage_memory_of(
    sp: StageParams, sh: Sharding, lc: Any, nd: Num, nm: Num, inflight: Num, full: Num, first: Num, last: Num,
    copies: Num, offloaded: Num, spread: Spread = _ALL_LAYERS,
) -> MemoryBreakdown:  # fmt: skip
    """`stage_memory` on floats or arrays of a block (a MemoryBreakdown of arrays)."""
    wts, grd, opt, buf = model_states(sp, sh)
    act = activations(lc, nd, nm, inflight, full, offloaded, spread)
    lg = where(last, lc.logits_mem, 0.0) + where(first, lc.embed_mem, 0.0)
    over = CUDA_CONTEXT_BYTES + NCCL_BYTES + FRAGMENTATION * (act + lg + buf)
    return MemoryBreakdown(copies * wts, copies * grd, copies * opt, act, lg, buf, over)


def as_measured(mem: MemoryBreakdown, metric: str | None) -> MemoryBreakdown:
    """The peak as a source measured it. The model's total is what the process holds on the GPU (nvidia-smi):
    torch.cuda.max_memory_reserved leaves out the CUDA context and NCCL's own buffers (allocated by the driver
    and NCCL, outside PyTorch's caching allocator: CUDA_CONTEXT_BYTES, NCCL_BYTES); max_memory_allocated
    also leaves out the allocator's free blocks inside its segments (FRAGMENTATION). None (the source is
    silent) or 'nvidia_smi': the whole."""
    import dataclasses

    if metric == "max_memory_reserved":
        return dataclasses.replace(mem, overhead=max(0.0, mem.overhead - CUDA_CONTEXT_BYTES - NCCL_BYTES))
    if metric == "max_memory_allocated":
        return dataclasses.replace(mem, overhead=0.0)
    return mem
