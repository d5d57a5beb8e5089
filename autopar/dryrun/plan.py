"""What a dry-run builds: the slice of a strategy that one host can run, without torch.

The slice is the most loaded pipeline stage (the one with the most layers) run as a whole model on every
rank (its layers, plus the embedding and the output layer so that a real loss is computed): PP is not run.
Its TP, CP and EP degrees are the strategy's when they fit the host's ranks, else reduced (each reduction
named in `notes`); DP takes what is left of the host. On CPU the shapes are shrunk by TINY rules below.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from autopar.errors import SpecError
from autopar.specs import ModelSpec, Strategy, Workload

# A CPU run starts one gloo process per rank; more than 4 on a laptop or CI runner measures nothing but
# contention, and 4 ranks are enough to exercise TP2 x CP2 or TP2 x EP2.
MAX_CPU_RANKS = 4
DEFAULT_CPU_RANKS = 2
# The tiny model of a CPU run, derived from the real shapes by one stated rule: one KV head per TP rank
# (the model's own count when smaller), its query-per-KV grouping up to TINY_MAX_GROUP, TINY_HEAD_DIM per
# head, hidden = heads x head dim, FFN and expert FFN widths scaled by the same factor as hidden, a
# TINY_VOCAB vocabulary, TINY_LAYERS layers, TINY_EXPERTS_PER_EP experts per EP rank (at least top-k),
# TINY_SEQ_PER_RANK tokens per TP x CP rank, micro-batch at most 2.
TINY_HEAD_DIM = 16
TINY_MAX_GROUP = 4
TINY_VOCAB = 512
TINY_LAYERS = 2
TINY_EXPERTS_PER_EP = 2
TINY_SEQ_PER_RANK = 32
TINY_MAX_MICRO_BATCH = 2


@dataclass(frozen=True)
class Degrees:
    """The parallel layout a slice runs: the world is tp·cp·dp ranks; experts fold ep over the same ranks."""

    tp: int
    sp: bool
    cp: int
    ep: int
    dp: int
    zero: int
    recompute: str
    micro_batches: int = 1  # gradient-accumulation steps per optimizer step

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp


@dataclass(frozen=True)
class SlicePlan:
    """The model to build (real or tiny shapes), its layout, the sequence and what was changed and why."""

    model: ModelSpec  # what is built: the stage's layers (tiny shapes on CPU)
    stage_model: ModelSpec  # the stage at the model's real shapes (what a GPU run builds)
    degrees: Degrees
    seq_len: int
    micro_batch: int
    device: str  # "cuda" or "cpu"
    stage: int  # index of the pipeline stage sliced
    notes: tuple[str, ...]
    # the workload's sequence and the strategy's micro-batch (what a GPU run uses; a CPU run shrinks them)
    stage_seq_len: int
    stage_micro_batch: int

    @property
    def tiny(self) -> bool:
        return self.device == "cpu"

    def strategy(self) -> Strategy:
        """The slice as a strategy autopar can estimate (one stage, K/V all-gathered for CP, expert TP 1)."""
        return Strategy(
            tp=self.degrees.tp,
            sp=self.degrees.sp,
            cp=self.degrees.cp,
            cp_comm="allgather",
            ep=self.degrees.ep,
            etp=1 if self.model.is_moe else None,
            dp=self.degrees.dp,
            zero=self.degrees.zero,
            micro_batch=self.micro_batch,
            recompute=self.degrees.recompute,
        )

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.degrees.dp * self.degrees.micro_batches

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def plan_to_json(plan: SlicePlan) -> dict[str, Any]:
    """The plan as JSON data (what the parent hands its ranks; no pickle)."""
    out = asdict(plan)
    out["model"], out["stage_model"] = plan.model.model_dump(), plan.stage_model.model_dump()
    return out


def plan_from_json(doc: dict[str, Any]) -> SlicePlan:
    fields = {**doc, "model": ModelSpec(**doc["model"]), "stage_model": ModelSpec(**doc["stage_model"])}
    fields["degrees"], fields["notes"] = Degrees(**doc["degrees"]), tuple(doc["notes"])
    return SlicePlan(**fields)


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def busiest_stage(model: ModelSpec, s: Strategy, workload: Workload) -> tuple[int, tuple[int, int]]:
    """(index, (dense layers, MoE layers)) of the pipeline stage holding the most layers (first on ties)."""
    from autopar.perf.estimate import stage_specs_of  # lazily: the ranks import this module, not the model

    dp = max(1, s.dp)
    m = max(1, workload.global_batch // (max(1, s.micro_batch or 1) * dp))
    split = (s.pp_first_layers, s.pp_last_layers, s.pp_account_embedding, s.pp_account_loss)
    specs, _ = stage_specs_of(model, s.pp, s.vpp or 1, s.pp_schedule or "1f1b", m, split)
    loads = [sum(sp.mix) for sp in specs]
    i = loads.index(max(loads))
    return i, specs[i].mix


def fit_degrees(model: ModelSpec, s: Strategy, ranks: int) -> tuple[Degrees, list[str]]:
    """The strategy's degrees as far as `ranks` allow (TP first, then CP, then DP, EP folded over them)."""
    notes: list[str] = []
    tp = _largest_divisor(s.tp, ranks)
    cp = _largest_divisor(s.cp, ranks // tp)
    dp = max(1, min(s.dp or 1, ranks // (tp * cp)))
    world = tp * cp * dp  # experts fold over these ranks: ep must divide both the label's EP and the world
    ep = max(e for e in range(1, s.ep + 1) if s.ep % e == 0 and world % e == 0) if model.is_moe else 1
    why = {
        "TP": f"the host has {ranks} rank(s) for the slice",
        "CP": f"the host has {ranks} rank(s) for the slice, TP{tp} first",
        "EP": f"experts fold over the slice's {world} rank(s): EP must divide {world}",
    }
    for name, want, got in (("TP", s.tp, tp), ("CP", s.cp, cp), ("EP", s.ep, ep)):
        if got != want:
            notes.append(f"{name}{want} reduced to {name}{got}: {why[name]}")
    if (s.dp or 1) > dp:
        notes.append(f"DP{s.dp} reduced to DP{dp} (what is left of the host after TP{tp} x CP{cp})")
    zero = s.zero or 0
    if zero == 2:
        notes.append(
            "ZeRO-2 not sliced: run as ZeRO-1 (optimizer states sharded over DP x CP; gradients whole), "
            "and predicted as such"
        )
        zero = 1
    if dp * cp == 1 and zero:
        zero = 0  # nothing to shard over
    elif zero == 3:
        notes.append("ZeRO-3 run as FSDP2 (torch fully_shard) over DP x CP, experts over their EP replicas")
    sp = s.sp and tp > 1
    deg = Degrees(tp, sp, cp, ep, dp, zero, s.recompute or "none")
    return deg, notes


def unsupported_notes(model: ModelSpec, s: Strategy, workload: Workload) -> list[str]:
    """What the slice leaves out of the strategy and model, one sentence each."""
    out = []
    if s.pp > 1:
        out.append(
            f"PP{s.pp} not run: the busiest stage's layers run on every rank (no pipeline, no bubble; the "
            "activations of one micro-batch in flight, not the schedule's several)"
        )
    if model.is_moe and s.expert_tp > 1:
        out.append(f"expert TP{s.expert_tp} not sliced: experts run whole on their EP rank (ETP1)")
    if s.cp > 1 and s.cp_comm != "allgather":
        out.append(f"CP exchange '{s.cp_comm}' run as an all-gather of K/V (contiguous chunks, no ring)")
    if workload.precision != "bf16":
        out.append(f"{workload.precision} GEMMs run in bf16")
    for knob, what in (
        (s.optimizer_offload, "optimizer offload"),
        (s.activation_offload_layers, "activation offload"),
        (s.dp_shard, "HSDP"),
        (s.optimizer_states, "optimizer-state precision"),
    ):
        if knob:
            out.append(f"{what} not sliced")
    if model.sliding_window:
        out.append("sliding-window attention run as full causal attention")
    return out


def stage_model(model: ModelSpec, mix: tuple[int, int]) -> ModelSpec:
    """The stage as a model of its own: its dense layers first, then its MoE layers."""
    if model.is_mla:
        raise SpecError(
            f"model '{model.name}' uses MLA attention, which `autopar dryrun` does not build (GQA/MHA only)"
        )
    dense, moe = mix
    return model.model_copy(
        update={"name": f"{model.name} stage", "layers": dense + moe, "dense_layers": dense}
    )


# Megatron-LM pads the vocabulary to a multiple of 128 x TP (--make-vocab-size-divisible-by, default 128) so that
# every TP rank holds an equal slice of the embedding and the output layer; the slice does the same.
VOCAB_MULTIPLE = 128


def split_over_tp(model: ModelSpec, tp: int) -> tuple[ModelSpec, list[str]]:
    """The stage with its vocabulary padded for `tp`; a SpecError when a width does not split over TP."""
    widths = {
        "heads": model.heads,
        "kv_heads": model.kv_heads or model.heads,
        "ffn_hidden": model.ffn_hidden,
        "shared expert width": model.shared_experts * model.shared_ffn,
    }
    bad = [f"{k}={v}" for k, v in widths.items() if v % tp]
    if bad:
        raise SpecError(
            f"model '{model.name}': {', '.join(bad)} not divisible by TP{tp}; the slice gives each TP rank whole "
            "heads and equal shares (Megatron's rule)"
        )
    step = VOCAB_MULTIPLE * tp
    vocab = -(-model.vocab // step) * step
    if vocab == model.vocab:
        return model, []
    note = f"vocabulary padded from {model.vocab} to {vocab} (a multiple of {VOCAB_MULTIPLE} x TP, as Megatron does)"
    return model.model_copy(update={"vocab": vocab}), [note]


def _scaled(width: int | None, factor: float, multiple: int) -> int | None:
    if not width:
        return width
    return max(multiple, round(width * factor / multiple) * multiple)


def tiny_model(model: ModelSpec, deg: Degrees) -> ModelSpec:
    """The TINY rule above applied to the stage model (CPU runs)."""
    kv = model.kv_heads or model.heads
    kv_t = deg.tp if kv >= deg.tp else kv
    heads_t = kv_t * min(model.heads // kv, TINY_MAX_GROUP)
    hidden_t = heads_t * TINY_HEAD_DIM
    factor = hidden_t / model.hidden
    layers = min(model.layers, TINY_LAYERS)
    upd: dict[str, object] = dict(
        name=f"{model.name} tiny",
        layers=layers,
        dense_layers=min(model.dense_layers, layers - 1) if model.is_moe else 0,
        hidden=hidden_t,
        heads=heads_t,
        kv_heads=kv_t,
        head_dim=TINY_HEAD_DIM,
        ffn_hidden=_scaled(model.ffn_hidden, factor, deg.tp),
        vocab=TINY_VOCAB,
    )
    if model.is_moe:
        experts = min(model.experts, max(TINY_EXPERTS_PER_EP * deg.ep, model.topk))
        experts = -(-experts // deg.ep) * deg.ep
        upd.update(
            experts=experts,
            topk=min(model.topk, experts),
            moe_ffn_hidden=_scaled(model.moe_ffn_hidden, factor, deg.tp),
            shared_ffn_hidden=_scaled(model.shared_ffn_hidden, factor, deg.tp),
        )
    return model.model_copy(update=upd)


def cut_layers(mix: tuple[int, int], layers: int | None) -> tuple[tuple[int, int], list[str]]:
    """The stage's (dense, MoE) layers cut to `layers` (--layers: a slice that fits where the whole stage, with
    its optimizer states sharded over fewer DP ranks than the real run, would not); MoE layers kept first."""
    dense, moe = mix
    if layers is None or layers >= dense + moe:
        return mix, []
    if layers < 1:
        raise SpecError(f"--layers {layers}: at least 1")
    kept_moe = min(moe, layers)
    cut = (layers - kept_moe, kept_moe)
    return cut, [f"stage cut to {layers} of its {dense + moe} layers (--layers); predicted as cut"]


def plan_slice(
    model: ModelSpec,
    workload: Workload,
    strategy: Strategy,
    ranks: int,
    device: str,
    micro_batches: int = 1,
    layers: int | None = None,
) -> SlicePlan:
    """The slice of `strategy` that `ranks` ranks of one host run (tiny shapes when device is cpu)."""
    index, mix = busiest_stage(model, strategy, workload)
    mix, cut = cut_layers(mix, layers)
    deg, notes = fit_degrees(model, strategy, ranks)
    notes += cut
    deg = Degrees(**{**deg.__dict__, "micro_batches": micro_batches})
    stage, padded = split_over_tp(stage_model(model, mix), deg.tp)
    notes = [*notes, *unsupported_notes(model, strategy, workload), *padded]
    mb = strategy.micro_batch or 1
    plan = SlicePlan(
        stage, stage, deg, workload.seq_len, mb, device, index, tuple(notes), workload.seq_len, mb
    )
    plan = tiny_plan(plan) if device == "cpu" else plan
    d = plan.degrees
    if plan.seq_len % (d.cp * d.tp) or (plan.seq_len // d.cp * plan.micro_batch) % d.tp:
        raise SpecError(
            f"seq_len={plan.seq_len} must divide into cp x tp = {d.cp} x {d.tp} chunks for the slice"
        )
    return plan


def tiny_plan(plan: SlicePlan) -> SlicePlan:
    """The plan on the tiny model (CPU runs, and the numerical check: shapes do not change the collectives)."""
    d = plan.degrees
    seq, mb = TINY_SEQ_PER_RANK * d.tp * d.cp, min(plan.micro_batch, TINY_MAX_MICRO_BATCH)
    return replace(plan, model=tiny_model(plan.stage_model, d), seq_len=seq, micro_batch=mb)
