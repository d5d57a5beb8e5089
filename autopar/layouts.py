"""The spine: parallel axes, the device meshes they form, and every rule a layout must obey, in words.

In the spirit of torchtitan's ``ParallelDims`` (torchtitan/distributed/parallel_dims.py): one enum of axis
names and one place that builds and validates the degrees. The estimator (`validate_strategy`), the search's
generators (`autopar.search.space`), the launch writers and the reports all call these functions, so a rule
is written once and a rejected layout is explained the same way everywhere.

Meshes (Megatron-Core "parallel folding", ``megatron/core/parallel_state.py``, Liu et al. 2025
arXiv:2504.14960): the dense mesh is tp·cp·dp·pp = world; experts use their own mesh on the same GPUs,
etp·ep·edp·pp = world, with edp derived, so the rule is (tp·cp·dp) % (ep·etp) == 0. Rank order
tp → cp → ep → dp → pp (tp innermost) decides which groups stay inside one NVLink domain
(``cluster.node_size``). An unset etp (``Strategy.etp=None``) is checked as Megatron's default etp = tp.

Rules have a level:
- HARD: the layout cannot run at all (a degree that does not divide what it splits).
- STRICT: framework conventions the search keeps but real, logged runs bend (uneven pipeline stages, KV
  heads replicated when tp > kv_heads, TP across nodes, interleaving with any micro-batch count, MoE
  without SP). `validate_strategy(strict=False)` checks HARD only.
- SEARCH: what the search does not offer although it would run: a no-op knob (SP without TP, an
  interleaved schedule without virtual stages) or a layout that cannot perform (CP chunks too short).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

# Below this many tokens per CP rank the two causal chunks of ring attention (Megatron's load-balanced
# CP, arXiv:2310.01889 / TransformerEngine) are too short for the KV exchange to hide behind attention.
MIN_TOKENS_PER_CP_RANK = 1024


class Axis(StrEnum):
    """A parallel dimension (names as in Strategy, Megatron-Core and torchtitan)."""

    DP = "dp"  # data parallel (with ZeRO/FSDP sharding over it)
    TP = "tp"  # tensor parallel (with SP on the same group)
    CP = "cp"  # context parallel
    PP = "pp"  # pipeline stages
    VPP = "vpp"  # virtual stages per pipeline rank (interleaved 1F1B)
    EP = "ep"  # expert parallel
    ETP = "etp"  # expert tensor parallel
    EDP = "edp"  # expert data parallel (derived: tp·cp·dp / (ep·etp))


class Level(IntEnum):
    """How binding a rule is (see the module docstring); checking at a level includes all below it."""

    HARD = 0
    STRICT = 1
    SEARCH = 2


@dataclass(frozen=True)
class ParallelDims:
    """The degrees of a layout on a world of GPUs; dp and edp derived, etp completed to tp when unset."""

    world: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    ep: int = 1
    etp: int = 1

    @property
    def model_parallel(self) -> int:
        """GPUs holding one replica: tp·cp·pp."""
        return self.tp * self.cp * self.pp

    @property
    def dense_group(self) -> int:
        """GPUs of one pipeline stage in the dense mesh: tp·cp·dp (the expert mesh folds out of it)."""
        return self.tp * self.cp * self.dp

    @property
    def edp(self) -> int:
        """Expert data parallel degree: tp·cp·dp / (ep·etp) (at least 1)."""
        return max(1, self.dense_group // (self.ep * self.etp))

    def degrees(self) -> dict[Axis, int]:
        """Every axis with its degree."""
        return {
            Axis.DP: self.dp,
            Axis.TP: self.tp,
            Axis.CP: self.cp,
            Axis.PP: self.pp,
            Axis.VPP: self.vpp,
            Axis.EP: self.ep,
            Axis.ETP: self.etp,
            Axis.EDP: self.edp,
        }


def derived_dp(world: int, tp: int, pp: int, cp: int) -> int:
    """dp = world / (tp·pp·cp), at least 1 (the world rule reports a remainder)."""
    return max(1, world // (tp * pp * cp))


def dims_of(cluster: ClusterSpec, strategy: Strategy) -> ParallelDims:
    """The degrees a strategy asks for on a cluster (dp derived from the world when unset)."""
    s = strategy
    dp = s.dp or derived_dp(cluster.num_gpus, s.tp, s.pp, s.cp)
    return ParallelDims(cluster.num_gpus, s.tp, s.cp, s.pp, dp, s.vpp, s.ep, s.expert_tp)


@dataclass(frozen=True)
class Violation:
    """One broken rule: the axis it concerns (None for batch/precision), its level and a sentence."""

    axis: Axis | None
    level: Level
    message: str

    def __str__(self) -> str:
        return self.message


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _v(axis: Axis | None, level: Level, message: str) -> Violation:
    return Violation(axis, level, message)


# ---------------------------------------------------------------------------------------------- rules
# Each rule family yields the violations of one concern; `check` keeps those at or below the level asked.


def world_rules(world: int, tp: int, pp: int, cp: int, dp: int = 0) -> Iterator[Violation]:
    """tp·pp·cp divides the GPUs; an explicit dp equals the derived one."""
    mp = tp * pp * cp
    if world % mp:
        yield _v(Axis.DP, Level.HARD, f"tp*pp*cp = {tp}*{pp}*{cp} = {mp} does not divide num_gpus={world}")
    d = derived_dp(world, tp, pp, cp)
    if dp and dp != d:
        yield _v(Axis.DP, Level.HARD, f"dp={dp} but num_gpus/(tp*pp*cp) = {world}/{mp} = {d}")


def domain_rules(
    axis: Axis, degree: int, cluster: ClusterSpec, allow_cross_node: bool
) -> Iterator[Violation]:
    """A TP-like group (tp, etp) lies inside one NVLink domain: degree divides min(domain, world)."""
    node = cluster.node_size
    if allow_cross_node or degree == 1:
        return
    if degree > node:
        why = f"{axis.value.upper()} across nodes is too slow"
        msg = f"{axis}={degree} exceeds the NVLink domain of {node} GPUs ({why})"
        yield _v(axis, Level.STRICT, msg)
    elif min(node, cluster.num_gpus) % degree:
        msg = (
            f"{axis}={degree} does not divide the NVLink domain of {node} GPUs (groups would straddle nodes)"
        )
        yield _v(axis, Level.STRICT, msg)


def tp_rules(model: ModelSpec, cluster: ClusterSpec, tp: int, allow_cross_node: bool) -> Iterator[Violation]:
    """TP splits attention heads, KV heads (or replicates them) and the dense FFN; stays in NVLink."""
    if model.heads % tp:
        yield _v(Axis.TP, Level.HARD, f"tp={tp} does not divide heads={model.heads}")
    if not model.is_mla and model.kv % tp:
        # tp > kv_heads with tp % kv == 0 replicates KV heads across TP ranks (real runs do; Megatron does not)
        level = Level.STRICT if tp % model.kv == 0 else Level.HARD
        yield _v(
            Axis.TP,
            level,
            f"tp={tp} does not divide kv_heads={model.kv} (Megatron needs query groups % tp == 0)",
        )
    if model.ffn_hidden % tp and model.layers > model.moe_layers:
        yield _v(Axis.TP, Level.HARD, f"tp={tp} does not divide ffn_hidden={model.ffn_hidden}")
    yield from domain_rules(Axis.TP, tp, cluster, allow_cross_node)


def pp_rules(model: ModelSpec, pp: int) -> Iterator[Violation]:
    """Pipeline stages: at most one per layer; an even split of the layers (uneven splits bend it)."""
    if pp > model.layers:
        yield _v(Axis.PP, Level.HARD, f"pp={pp} exceeds layers={model.layers}")
    elif model.layers % pp:
        yield _v(Axis.PP, Level.STRICT, f"layers={model.layers} is not divisible by pp={pp}")


def cp_rules(workload: Workload, cp: int) -> Iterator[Violation]:
    """CP: causal load balancing cuts the sequence into 2·cp chunks; each rank needs enough tokens."""
    s = workload.seq_len
    if cp == 1:
        return
    if s % (2 * cp):
        yield _v(
            Axis.CP, Level.HARD, f"seq_len={s} is not divisible by 2*cp = {2 * cp} (causal load balancing)"
        )
    if s // cp < MIN_TOKENS_PER_CP_RANK:
        few = f"fewer than {MIN_TOKENS_PER_CP_RANK} (ring exchange exposed)"
        msg = f"cp={cp} leaves {s // cp} tokens per rank, {few}"
        yield _v(Axis.CP, Level.SEARCH, msg)


def expert_rules(model: ModelSpec, dims: ParallelDims, etp_set: bool) -> Iterator[Violation]:
    """EP/ETP on the folded expert mesh: ep | experts, (tp·cp·dp) % (ep·etp) == 0, etp | moe_ffn_hidden."""
    ep, etp = dims.ep, dims.etp
    if ep == 1 and not (etp_set and etp != dims.tp):
        return
    if not model.is_moe:
        axis, degree = (Axis.EP, ep) if ep > 1 else (Axis.ETP, etp)
        yield _v(axis, Level.HARD, f"{axis}={degree} needs an MoE model ({model.name} is dense)")
        return
    if model.experts % ep:
        yield _v(Axis.EP, Level.HARD, f"ep={ep} does not divide experts={model.experts}")
    if dims.dense_group % (ep * etp):
        msg = (
            f"expert mesh: tp*cp*dp = {dims.dense_group} is not divisible by ep*etp = {ep}*{etp} = {ep * etp}"
        )
        yield _v(Axis.EDP, Level.HARD, msg)
    if model.moe_ffn_hidden and model.moe_ffn_hidden % etp:
        yield _v(Axis.ETP, Level.HARD, f"etp={etp} does not divide moe_ffn_hidden={model.moe_ffn_hidden}")


def sp_rules(model: ModelSpec, tp: int, ep: int, sp: bool) -> Iterator[Violation]:
    """SP shards the TP group's activations: a no-op without TP, required by Megatron for MoE with TP and EP."""
    if sp and tp == 1:
        yield _v(Axis.TP, Level.SEARCH, "sp=true has no effect with tp=1 (Megatron turns it off)")
    if model.is_moe and tp > 1 and ep > 1 and not sp:
        yield _v(
            Axis.TP, Level.STRICT, "MoE with tp>1 and ep>1 needs sequence parallelism (sp=true) in Megatron"
        )


def vpp_rules(model: ModelSpec, pp: int, vpp: int, schedule: str) -> Iterator[Violation]:
    """Virtual stages: need pp > 1, the interleaved schedule, and an even split of the layers."""
    if vpp == 1:
        if schedule == "interleaved":
            yield _v(Axis.VPP, Level.HARD, "pp_schedule=interleaved needs vpp > 1")
        return
    if pp == 1:
        yield _v(Axis.VPP, Level.HARD, f"vpp={vpp} needs pp > 1")
    if schedule != "interleaved":
        yield _v(Axis.VPP, Level.HARD, f"vpp={vpp} needs pp_schedule=interleaved (got {schedule})")
    if pp * vpp > model.layers:
        yield _v(Axis.VPP, Level.HARD, f"pp*vpp = {pp * vpp} exceeds layers={model.layers}")
    elif model.layers % (pp * vpp):
        msg = f"layers={model.layers} is not divisible by pp*vpp = {pp}*{vpp} = {pp * vpp}"
        yield _v(Axis.VPP, Level.STRICT, msg)


def batch_rules(workload: Workload, dims: ParallelDims, micro_batch: int) -> Iterator[Violation]:
    """The global batch splits into dp ranks x micro-batches; interleaving wants m % pp == 0 (Megatron)."""
    b, per = workload.global_batch, micro_batch * dims.dp
    if b % per:
        msg = f"global_batch={b} is not divisible by micro_batch*dp = {micro_batch}*{dims.dp} = {per}"
        yield _v(None, Level.HARD, msg)
    elif dims.vpp > 1 and dims.pp > 1 and (b // per) % dims.pp:
        msg = f"interleaved schedule needs micro-batches per step ({b // per}) divisible by pp={dims.pp}"
        yield _v(Axis.VPP, Level.STRICT, msg)


def precision_rules(cluster: ClusterSpec, precision: str) -> Iterator[Violation]:
    """FP8 GEMMs need FP8 tensor cores."""
    if precision == "fp8" and not cluster.gpu.fp8_flops:
        msg = f"precision=fp8 needs a GPU with FP8 tensor cores ({cluster.gpu.name} has none)"
        yield _v(None, Level.HARD, msg)


# Stacks with layer-wise activation CPU offload: Megatron-Core with Transformer Engine (--cpu-offloading-num-
# layers; megatron/core/transformer/transformer_block.py asserts TE is present). torchtitan's
# enable_cpu_offload and DeepSpeed's offload_param/offload_optimizer move parameters and optimizer states,
# not activations; legacy Megatron predates it.
ACT_OFFLOAD_FRAMEWORKS: tuple[str, ...] = ("megatron",)


def offload_rules(
    model: ModelSpec, workload: Workload, pp: int, recompute: str, n: int
) -> Iterator[Violation]:
    """Activation offload of n layers: Megatron-Core's own checks (TransformerConfig.__post_init__: fewer
    than num_layers, no pipeline parallelism, no activation recompute) and the stacks that have it."""
    if not n:
        return
    if workload.framework not in ACT_OFFLOAD_FRAMEWORKS:
        msg = f"activation_offload_layers={n}: framework={workload.framework} has no layer-wise activation offload"
        yield _v(None, Level.HARD, msg)
    if n >= model.layers:
        yield _v(None, Level.HARD, f"activation_offload_layers={n} must be < layers={model.layers}")
    if pp > 1:
        yield _v(
            Axis.PP,
            Level.HARD,
            f"activation_offload_layers={n} needs pp=1 (Megatron: no PP with CPU offloading)",
        )
    if recompute != "none":
        msg = f"activation_offload_layers={n} needs recompute=none (Megatron: not with recompute={recompute})"
        yield _v(None, Level.HARD, msg)


# ---------------------------------------------------------------------------------------------- checks


def _keep(violations: Iterable[Violation], level: Level) -> list[Violation]:
    return [v for v in violations if v.level <= level]


def check(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    level: Level = Level.STRICT,
    allow_cross_node_tp: bool = False,
) -> list[Violation]:
    """Every rule a (model, cluster, workload, strategy) breaks at `level` or below ([] = valid)."""
    s, dims = strategy, dims_of(cluster, strategy)
    rules = [
        *world_rules(cluster.num_gpus, s.tp, s.pp, s.cp, s.dp),
        *tp_rules(model, cluster, s.tp, allow_cross_node_tp),
        *pp_rules(model, s.pp),
        *vpp_rules(model, s.pp, s.vpp, s.pp_schedule),
        *cp_rules(workload, s.cp),
        *expert_rules(model, dims, s.etp is not None),
        *(
            domain_rules(Axis.ETP, dims.etp, cluster, allow_cross_node_tp)
            if s.etp not in (None, s.tp)
            else ()
        ),
        *sp_rules(model, s.tp, s.ep, s.sp),
        *batch_rules(workload, dims, s.micro_batch),
        *precision_rules(cluster, workload.precision),
        *offload_rules(model, workload, s.pp, s.recompute, s.activation_offload_layers or 0),
    ]
    return _keep(rules, level)


def explain(violations: list[Violation] | list[str]) -> str:
    """One sentence for a rejected layout: its broken rules joined by '; ' ('' when valid)."""
    return "; ".join(str(v) for v in violations)


def mesh_problems(cluster: ClusterSpec, workload: Workload, strategy: Strategy) -> list[str]:
    """The model-independent HARD rules (world size, batch split, virtual stages need pp > 1)."""
    s, dims = strategy, dims_of(cluster, strategy)
    rules = [
        *world_rules(cluster.num_gpus, s.tp, s.pp, s.cp, s.dp),
        *batch_rules(workload, dims, s.micro_batch),
    ]
    if s.vpp > 1 and s.pp == 1:
        rules.append(_v(Axis.VPP, Level.HARD, f"vpp={s.vpp} needs pp > 1"))
    return [v.message for v in _keep(rules, Level.HARD)]


# ---------------------------------------------------------------------------------------------- generators
# The search's candidate values: divisors filtered through the rules above (SEARCH level), never re-derived.


def _ok(violations: Iterable[Violation]) -> bool:
    return not _keep(violations, Level.SEARCH)


def tp_degrees(model: ModelSpec, cluster: ClusterSpec) -> list[int]:
    """TP degrees the search offers."""
    return [t for t in divisors(cluster.num_gpus) if _ok(tp_rules(model, cluster, t, False))]


def pp_degrees(model: ModelSpec, rest: int) -> list[int]:
    """PP degrees dividing the GPUs left after TP."""
    return [p for p in divisors(rest) if _ok(pp_rules(model, p))]


def cp_degrees(workload: Workload, rest: int) -> list[int]:
    """CP degrees dividing the GPUs left after TP and PP."""
    return [c for c in divisors(rest) if _ok(cp_rules(workload, c))]


def grid_problems(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    tp: int,
    pp: int,
    cp: int,
    ep: int = 1,
    etp: int | None = None,
) -> list[Violation]:
    """Why a (tp, pp, cp, ep, etp) grid is not a layout the search offers ([] = offered).

    Checks the mesh rules at SEARCH level with micro-batch 1 (if it does not split the global batch, none
    does), no virtual stages and SP on wherever TP is.
    """
    probe = Strategy(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, sp=tp > 1)
    return check(model, cluster, workload, probe, level=Level.SEARCH)


def expert_degrees(
    model: ModelSpec, cluster: ClusterSpec, dims: ParallelDims
) -> list[tuple[int, int | None]]:
    """(ep, etp) pairs on the folded expert mesh; etp explicit (1 included) for MoE, (1, None) for dense."""
    if not model.is_moe:
        return [(1, None)]
    out: list[tuple[int, int | None]] = []
    for ep in divisors(dims.dense_group):
        for etp in divisors(dims.dense_group // ep):
            d = ParallelDims(dims.world, dims.tp, dims.cp, dims.pp, dims.dp, 1, ep, etp)
            rules = [*expert_rules(model, d, True), *domain_rules(Axis.ETP, etp, cluster, False)]
            if _ok(rules):
                out.append((ep, etp))
    return out


def sp_values(model: ModelSpec, tp: int, ep: int) -> tuple[bool, ...]:
    """SP settings the search offers for a layout."""
    return tuple(sp for sp in (False, True) if _ok(sp_rules(model, tp, ep, sp)))


def mb_vpp_pairs(model: ModelSpec, workload: Workload, dims: ParallelDims) -> tuple[tuple[int, int], ...]:
    """(micro_batch, vpp) pairs: mb splits the batch per dp rank; vpp > 1 only where interleaving is valid."""
    per_rank = workload.global_batch // dims.dp
    pairs = []
    for mb in divisors(per_rank):
        for v in divisors(model.layers):
            d = ParallelDims(dims.world, dims.tp, dims.cp, dims.pp, dims.dp, v, dims.ep, dims.etp)
            sched = "interleaved" if v > 1 else "1f1b"
            if _ok([*vpp_rules(model, dims.pp, v, sched), *batch_rules(workload, d, mb)]):
                pairs.append((mb, v))
    return tuple(pairs)
