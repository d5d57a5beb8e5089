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

The tables those rules read live here too (the spine imports nothing above the specs): pipeline schedules
and Megatron's pipeline splits (used by perf/pipeline.py), CP variants (perf/cp.py) and the memory savers a
search may choose (perf/memory.py); the perf modules re-export them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

# The axes and the schedule table are declared in the knob registry; re-exported here with the rules.
from autopar.knobs import (
    CP_COMM_NAMES,
    OPTIMIZER_KINDS,
    RECOMPUTE_LEVELS,
    implied_schedule,
    recompute_modules,
    stack_schedules,
)
from autopar.knobs import SCHEDULE_NAMES as SCHEDULE_NAMES
from autopar.knobs import SCHEDULES as SCHEDULES
from autopar.knobs import Axis as Axis
from autopar.knobs import ScheduleRule as ScheduleRule
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

# Below this many tokens per CP rank the two causal chunks of ring attention (Megatron's load-balanced
# CP, arXiv:2310.01889 / TransformerEngine) are too short for the KV exchange to hide behind attention.
MIN_TOKENS_PER_CP_RANK = 1024


# ---------------------------------------------------------------------------------------------- rule tables
# Pipeline schedules and splits (used by perf/pipeline.py), CP variants (perf/cp.py) and memory savers
# (perf/memory.py): the tables and checks the rules below read; the perf modules re-export them.


# Pipeline schedules are declared in the knob registry (autopar/knobs.py SCHEDULES: virtual-stage counts, what
# they need of p and m, which stacks ship them under which name); the rules below read those rows.


def schedule_violations(schedule: str, p: int, v: int, m: int, *, strict: bool = True) -> list[str]:
    """Every rule of SCHEDULES[schedule] that (p, v, m) breaks, as sentences ([] = valid)."""
    rule = SCHEDULES.get(schedule)
    if rule is None:
        return [f"pp_schedule={schedule!r} is not one of {', '.join(SCHEDULE_NAMES)}"]
    if p == 1:
        return [] if v == 1 else [f"vpp={v} needs pp > 1"]
    out: list[str] = []
    if not rule.takes_vpp(v):
        out.append(_chunks_message(rule, v))
    if rule.m_multiple_of_p and strict and m % p:
        out.append(f"pp_schedule={schedule} needs micro-batches per step ({m}) divisible by pp={p}")
    if rule.p_even and p % 2:
        out.append(f"pp_schedule={schedule} needs an even pp (got {p})")
    if rule.m_even and m % 2:
        out.append(f"pp_schedule={schedule} needs an even number of micro-batches (got {m})")
    return out


def _chunks_message(rule: ScheduleRule, v: int) -> str:
    if rule.vpp == "1":
        return f"pp_schedule={rule.name} runs one model chunk per rank (vpp=1), got vpp={v}"
    if rule.vpp == ">1":
        return f"pp_schedule={rule.name} needs vpp > 1"
    return f"pp_schedule={rule.name} runs {rule.vpp} model chunks per rank (vpp={rule.vpp}), got vpp={v}"


@dataclass(frozen=True, slots=True)
class StageLayout:
    """Transformer layers on the first, a middle and the last pipeline stage."""

    first: int
    middle: int
    last: int
    note: str = ""


def stage_layers(
    layers: int,
    p: int,
    *,
    first: int | None = None,
    last: int | None = None,
    account_embedding: bool = False,
    account_loss: bool = False,
) -> StageLayout:
    """Split `layers` over p stages the way Megatron-Core does.

    Explicit `first`/`last` are --decoder-first/last-pipeline-num-layers; the rest split evenly over the
    middle stages. `account_embedding`/`account_loss` (--account-for-embedding/loss-in-pipeline-split)
    count the embedding and the output layer + loss as one layer each, so the first/last stage get one
    transformer layer fewer. Without options the remainder of an uneven split goes on the last stage.
    """
    if p <= 1:
        return StageLayout(layers, layers, layers)
    if first is not None or last is not None:
        f = first if first is not None else None
        la = last if last is not None else None
        n_mid = p - (f is not None) - (la is not None)
        rest = layers - (f or 0) - (la or 0)
        mid = -(-rest // n_mid) if n_mid > 0 else 0
        return StageLayout(
            f if f is not None else mid, mid, la if la is not None else mid, "explicit first/last"
        )
    units = layers + int(account_embedding) + int(account_loss)
    per = -(-units // p)
    la = units - (p - 1) * per - int(account_loss)
    if la <= 0:
        per = units // p
        la = units - (p - 1) * per - int(account_loss)
    if account_embedding or account_loss:
        return StageLayout(
            max(0, per - int(account_embedding)), per, max(0, la), "embedding/loss counted as layers"
        )
    note = f"uneven pipeline split: {per} layers on the first stages, {la} on the last" if layers % p else ""
    return StageLayout(per, per, la, note)


def split_violations(
    layers: int, p: int, lay: StageLayout, account_embedding: bool, account_loss: bool
) -> list[str]:
    """Megatron's checks of an uneven split: every stage gets layers and the stages add up to the model."""
    if p <= 1:
        return []
    total = lay.first + (p - 2) * lay.middle + lay.last
    out = []
    if min(lay.first, lay.last) < 0 or (p > 2 and lay.middle <= 0):
        out.append(f"pipeline split leaves a stage without layers ({lay.first}/{lay.middle}/{lay.last})")
    if total != layers:
        out.append(
            f"pipeline split {lay.first} + {p - 2}x{lay.middle} + {lay.last} = {total} layers, not {layers}"
            + (
                " (embedding/loss counted as layers must make layers + 1 or + 2 divisible by pp)"
                if account_embedding or account_loss
                else ""
            )
        )
    return out


CP_VARIANTS: tuple[str, ...] = CP_COMM_NAMES  # the registry's domain (autopar/knobs.py)


def hierarchical_sizes(c: int, t: int, node_size: int) -> tuple[int, int]:
    """(a2a, ring) group sizes of hierarchical CP: the largest divisor of c whose a2a group (with its tp
    ranks) fits in one NVLink domain, and the ring across domains (Megatron
    --hierarchical-context-parallel-sizes)."""
    inner = max(1, min(c, node_size // t))
    while c % inner:
        inner -= 1
    return inner, c // inner


def cp_violations(variant: str, heads: int, kv_heads: int, t: int, c: int) -> list[str]:
    """Rules of a CP variant ([] = valid). kv_heads: K/V heads attention sees (all heads for MLA)."""
    if c <= 1:
        return []
    if variant not in CP_VARIANTS:
        return [f"cp_comm={variant!r} is not one of {', '.join(CP_VARIANTS)}"]
    q, kv = heads // t, max(1, kv_heads // t)
    if variant == "a2a" and (q % c or kv % c):
        # TransformerEngine's a2a CP asserts both Q and K head counts per rank divide by cp (context_parallel.py)
        return [
            f"cp_comm=a2a needs heads/tp = {q} and kv_heads/tp = {kv} divisible by cp={c} (Ulysses splits heads)"
        ]
    return []


# What each Workload.memory_savers entry lets the search try (the first value of each knob is the default).
MEMORY_SAVER_VALUES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "offload": ("optimizer_offload", (0.0, 1.0)),
    "bf16_states": ("optimizer_states", (None, "bf16")),
    "8bit_states": ("optimizer_states", (None, "8bit")),
}


# Activation offload counts the search offers (and the completion tries): eighths of the stage's layers, plus
# Megatron's maximum L - 1 (TransformerConfig: cpu_offloading_num_layers must be < num_layers).
ACT_OFFLOAD_FRACTIONS = tuple(k / 8 for k in range(1, 8))


def candidate_layers(layers: int) -> list[int]:
    """Activation-offload counts N, most memory-frugal first (ACT_OFFLOAD_FRACTIONS and L - 1)."""
    picks = {round(layers * f) for f in ACT_OFFLOAD_FRACTIONS} | {layers - 1}
    return sorted((n for n in picks if 0 < n < layers), reverse=True)


# Every Workload.memory_savers name: the optimizer savers above, layer-wise activation offload and Megatron's
# selective recompute modules (recompute_values).
MEMORY_SAVERS: tuple[str, ...] = (*MEMORY_SAVER_VALUES, "act_offload", "recompute_modules")


def saver_choices(memory_savers: tuple[str, ...]) -> dict[str, tuple[Any, ...]]:
    """Values of Strategy.optimizer_offload / optimizer_states the search may choose for these savers."""
    out: dict[str, tuple[Any, ...]] = {"optimizer_offload": (0.0,), "optimizer_states": (None,)}
    for saver in memory_savers:
        if (
            saver not in MEMORY_SAVER_VALUES
        ):  # act_offload: its values depend on the layers (perf/complete.py)
            continue
        knob, values = MEMORY_SAVER_VALUES[saver]
        out[knob] = tuple(dict.fromkeys(out[knob] + values))
    return out


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
    return ParallelDims(cluster.num_gpus, s.tp, s.cp, s.pp, dp, s.knobs().vpp, s.ep, s.expert_tp)


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


# Stacks that replicate KV heads when TP exceeds them: Megatron-Core accepts num_query_groups a multiple or a
# divisor of TP (transformer_config.py `TransformerConfig.__post_init__`, "must be a multiple or divisor of";
# attention.py `Attention.__init__`: with num_query_groups < TP every rank computes one KV head and its
# num_heads / num_query_groups query heads, then keeps its own share), in core_v0.17.1, 0.18.2 and 0.19.0.
# Elsewhere KV heads shard like the rest (torchtitan's colwise wk/wv need kv % tp == 0): real runs bend that.
KV_REPLICATING_STACKS = ("megatron",)


def tp_rules(
    model: ModelSpec, cluster: ClusterSpec, tp: int, allow_cross_node: bool, framework: str = "megatron"
) -> Iterator[Violation]:
    """TP splits attention heads, KV heads (or replicates them) and the dense FFN; stays in NVLink."""
    if model.heads % tp:
        yield _v(Axis.TP, Level.HARD, f"tp={tp} does not divide heads={model.heads}")
    if not model.is_mla and model.kv % tp:
        yield from _kv_rule(model.kv, tp, framework)
    if model.ffn_hidden % tp and model.layers > model.moe_layers:
        yield _v(Axis.TP, Level.HARD, f"tp={tp} does not divide ffn_hidden={model.ffn_hidden}")
    yield from domain_rules(Axis.TP, tp, cluster, allow_cross_node)


def _kv_rule(kv: int, tp: int, framework: str) -> Iterator[Violation]:
    """kv_heads neither a multiple of tp (sharded) nor, on a replicating stack, a divisor of it (replicated)."""
    if tp % kv:
        yield _v(Axis.TP, Level.HARD, f"tp={tp} neither divides nor is a multiple of kv_heads={kv}")
    elif framework not in KV_REPLICATING_STACKS:
        msg = f"tp={tp} exceeds kv_heads={kv}: {framework} shards KV heads (only {', '.join(KV_REPLICATING_STACKS)} replicates them)"
        yield _v(Axis.TP, Level.STRICT, msg)


class Split(NamedTuple):
    """How the layers split over pipeline stages (Megatron-Core options; all unset = an even split)."""

    first: int | None = None  # --decoder-first-pipeline-num-layers
    last: int | None = None  # --decoder-last-pipeline-num-layers
    account_embedding: bool = False  # --account-for-embedding-in-pipeline-split
    account_loss: bool = False  # --account-for-loss-in-pipeline-split

    @property
    def even(self) -> bool:
        return self == EVEN_SPLIT

    def stages(self, layers: int, pp: int) -> StageLayout:
        """Transformer layers on the first, a middle and the last stage (perf/pipeline.py stage_layers)."""
        return stage_layers(
            layers,
            pp,
            first=self.first,
            last=self.last,
            account_embedding=self.account_embedding,
            account_loss=self.account_loss,
        )


EVEN_SPLIT = Split()
# The search's uneven splits lighten the first and last stage by at most this many layers each: the first
# stage also runs the embedding, the last the output layer and the loss (Megatron's account-for-embedding/
# loss options weigh each as one layer; published splits such as DeepSeek-V3's 61 layers on PP16 differ
# from the middle stages by one or two layers).
MAX_STAGE_LIGHTENING = 2


def split_of(s: Strategy) -> Split:
    """The pipeline split a strategy asks for."""
    return Split(s.pp_first_layers, s.pp_last_layers, s.pp_account_embedding, s.pp_account_loss)


def _split_candidates(layers: int, pp: int) -> Iterator[Split]:
    """Account-for-embedding/loss splits, then first/last stages lighter than the middle ones."""
    yield Split(account_embedding=True, account_loss=True)
    yield Split(account_loss=True)
    yield Split(account_embedding=True)
    mid = -(-layers // pp)
    both = layers - (pp - 2) * mid  # first + last
    for first in range(mid - MAX_STAGE_LIGHTENING, mid + 1):
        yield Split(first=first, last=both - first)


def balanced_splits(layers: int, pp: int) -> tuple[Split, ...]:
    """The splits the search offers for pp stages: the even one when pp divides the layers; otherwise every
    valid candidate whose busiest stage holds ceil(layers/pp) layers and whose first/last stage is at most
    MAX_STAGE_LIGHTENING lighter than that (one per distinct stage layout)."""
    if pp == 1 or layers % pp == 0:
        return (EVEN_SPLIT,)
    mid, out, seen = -(-layers // pp), [], set()
    for sp in _split_candidates(layers, pp):
        lay = sp.stages(layers, pp)
        key = (lay.first, lay.middle if pp > 2 else 0, lay.last)  # two stages have no middle one
        bad = split_violations(layers, pp, lay, sp.account_embedding, sp.account_loss)
        if key in seen or bad or any(_megatron_split_rules(layers, pp, sp)):
            continue
        edges = (lay.first, lay.last)
        if max(*edges, lay.middle) == mid and min(edges) >= max(1, mid - MAX_STAGE_LIGHTENING):
            seen.add(key)
            out.append(sp)
    return tuple(out)


def pp_rules(model: ModelSpec, pp: int, split: Split = EVEN_SPLIT, vpp: int = 1) -> Iterator[Violation]:
    """Pipeline stages: at most one per layer; an even split of the layers, or one of Megatron's uneven splits
    (explicit first/last stage sizes, embedding/loss counted as layers) whose stages add up to the model."""
    if pp > model.layers:
        yield _v(Axis.PP, Level.HARD, f"pp={pp} exceeds layers={model.layers}")
        return
    if split.even:
        if model.layers % pp:
            yield _v(Axis.PP, Level.STRICT, f"layers={model.layers} is not divisible by pp={pp}")
        return
    if pp == 1:
        yield _v(Axis.PP, Level.SEARCH, "pipeline split options have no effect with pp=1")
        return
    lay = split.stages(model.layers, pp)
    for msg in split_violations(model.layers, pp, lay, split.account_embedding, split.account_loss):
        yield _v(Axis.PP, Level.HARD, msg)
    yield from _megatron_split_rules(model.layers, pp, split)
    if split not in balanced_splits(model.layers, pp):
        msg = f"pipeline split {lay.first}/{lay.middle}/{lay.last} is not a balanced split the search offers"
        yield _v(Axis.PP, Level.SEARCH, msg)
    if vpp > 1:
        yield _v(
            Axis.VPP, Level.SEARCH, "the search keeps uneven pipeline splits to one chunk per rank (vpp=1)"
        )


def _megatron_split_rules(layers: int, pp: int, split: Split) -> Iterator[Violation]:
    """Megatron's validate_args (megatron/training/arguments.py): explicit first/last stage sizes exclude the
    account-for options, which need layers + (embedding) + (loss) divisible by pp."""
    accounted = split.account_embedding or split.account_loss
    if accounted and (split.first is not None or split.last is not None):
        msg = "pipeline split: first/last stage sizes exclude account-for-embedding/loss (Megatron)"
        yield _v(Axis.PP, Level.HARD, msg)
    elif accounted and (layers + split.account_embedding + split.account_loss) % pp:
        units = layers + split.account_embedding + split.account_loss
        msg = f"pipeline split: layers with embedding/loss counted ({units}) not divisible by pp={pp} (Megatron)"
        yield _v(Axis.PP, Level.HARD, msg)


def split_model(model: ModelSpec, pp: int, split: Split) -> ModelSpec:
    """The model as the virtual-stage rules see it: an uneven split checked as pp evenly sized stages."""
    if split.even or pp == 1:
        return model
    return model.model_copy(update={"layers": pp * max(1, split.stages(model.layers, pp).middle)})


def schedule_rules(pp: int, vpp: int, m: int, schedule: str, moe: bool = True) -> Iterator[Violation]:
    """One-chunk schedules other than 1F1B (zero-bubble H1, DualPipe): pp > 1 and their rows of
    perf/pipeline.py SCHEDULES (vpp = 1; DualPipe: even pp and micro-batch count). Interleaving: vpp_rules.

    The search offers DualPipe for MoE models only: on a dense model its bubble is one micro-batch's F&B
    below ZB-H1's ((p−2) vs (p−1) × T_F in pipeline.bubble_fraction) for twice the parameters; what it was
    built for is hiding the expert all-to-all (DeepSeek-V3 report §3.2.1)."""
    if schedule in ("1f1b", "interleaved"):  # the plain schedules: vpp_rules and batch_rules check them
        return
    if pp == 1:
        yield _v(Axis.PP, Level.SEARCH, f"pp_schedule={schedule} has no effect with pp=1")
        return
    for msg in schedule_violations(schedule, pp, vpp, m):
        yield _v(Axis.PP, Level.HARD, msg)
    if schedule == "dualpipe" and not moe:
        msg = "pp_schedule=dualpipe on a dense model: ZB-H1 has nearly its bubble with one parameter copy"
        yield _v(Axis.PP, Level.SEARCH, msg)


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


def cp_comm_rules(
    model: ModelSpec, cluster: ClusterSpec, tp: int, cp: int, variant: str
) -> Iterator[Violation]:
    """CP variants (perf/cp.py): only with cp > 1; Ulysses splits heads; hierarchical only where it differs
    from both pure forms (an a2a group inside the NVLink domain and a ring across domains)."""
    if cp == 1:
        if variant != "p2p":
            yield _v(Axis.CP, Level.SEARCH, f"cp_comm={variant} has no effect with cp=1")
        return
    kv = model.heads if model.is_mla else model.kv  # MLA expands K/V to every head before attention
    for msg in cp_violations(variant, model.heads, kv, tp, cp):
        yield _v(Axis.CP, Level.HARD, msg)
    if variant == "a2a" and tp * cp > cluster.node_size:
        # Megatron's CP docs: all-to-all inside the NVLink domain, the ring across it (a2a+p2p)
        msg = f"cp_comm=a2a over tp*cp = {tp * cp} GPUs leaves the NVLink domain (a2a+p2p does a2a inside it)"
        yield _v(Axis.CP, Level.SEARCH, msg)
    if variant == "a2a+p2p":
        inner, outer = hierarchical_sizes(cp, tp, cluster.node_size)
        for msg in cp_violations("a2a", model.heads, kv, tp, inner):
            yield _v(Axis.CP, Level.HARD, msg.replace("cp_comm=a2a", "cp_comm=a2a+p2p (its a2a group)"))
        if inner == 1 or outer == 1:
            same = "p2p" if inner == 1 else "a2a"
            msg = f"cp_comm=a2a+p2p is plain {same} here (a2a group {inner}, ring {outer})"
            yield _v(Axis.CP, Level.SEARCH, msg)


def hsdp_degree(cluster: ClusterSpec, dims: ParallelDims) -> int | None:
    """The HSDP shard degree the search offers: the largest ds < dp whose shard group (tp·cp·ds consecutive
    ranks) fills at most one NVLink domain, when full sharding (tp·cp·dp) would leave it; else None.

    A smaller in-domain ds only keeps more memory per GPU and sends more over the slow fabric (the replica
    all-reduce carries 1/ds of the gradients per GPU), so it is not offered."""
    domain = min(cluster.node_size, cluster.num_gpus)
    if dims.tp * dims.cp * dims.dp <= domain:
        return None
    fits = [ds for ds in divisors(dims.dp) if 1 < ds < dims.dp and domain % (dims.tp * dims.cp * ds) == 0]
    return fits[-1] if fits else None


# Stacks whose HSDP replicas split the expert mesh too (Megatron-Core: one distributed-optimizer instance per
# replica over the dense and the expert data-parallel groups, parallel_state.py initialize_model_parallel).
HSDP_EXPERT_MESH_STACKS = ("megatron",)


def dp_shard_rules(
    cluster: ClusterSpec, dims: ParallelDims, zero: int | None, ds: int | None, framework: str = "megatron"
) -> Iterator[Violation]:
    """HSDP (perf/fsdp.py): ZeRO-3 sharded over ds·cp ranks, replicated across dp/ds; the search offers only
    hsdp_degree (shard groups filling one NVLink domain when full sharding would leave it)."""
    if ds is None:
        return
    d = dims.dp
    if d % ds or zero != 3:
        yield _v(Axis.DP, Level.HARD, f"dp_shard={ds} needs zero=3 and to divide dp={d} (HSDP)")
        return
    if framework in HSDP_EXPERT_MESH_STACKS and dims.edp % (d // ds):
        # "Expert data parallel size should be divisible by partial DistOpt shard factor" (parallel_state.py
        # line 1449 at core_v0.19.0, 1269 at core_v0.17.1)
        msg = (
            f"dp_shard={ds}: its dp/dp_shard = {d // ds} replicas do not divide the expert data-parallel "
            f"degree edp = {dims.edp} (Megatron-Core asserts it)"
        )
        yield _v(Axis.DP, Level.HARD, msg)
    if ds != hsdp_degree(cluster, dims):
        group = dims.tp * dims.cp * ds
        msg = (
            f"dp_shard={ds} (shard group tp*cp*dp_shard = {group}) is not the HSDP degree the search offers "
            f"for dp={d} in NVLink domains of {cluster.node_size}"
        )
        yield _v(Axis.DP, Level.SEARCH, msg)


def saver_rules(workload: Workload, states: str | None, offload: float) -> Iterator[Violation]:
    """Memory savers (optimizer-state precision, CPU offload): the search offers them only when
    Workload.memory_savers allows (perf/memory.py saver_choices); an explicit strategy may always use them."""
    allowed = saver_choices(workload.memory_savers)
    if states not in allowed["optimizer_states"]:
        msg = f"optimizer_states={states} is not among the memory savers allowed (memory_savers)"
        yield _v(None, Level.SEARCH, msg)
    if offload not in allowed["optimizer_offload"]:
        msg = f"optimizer_offload={offload} is not among the memory savers allowed (memory_savers)"
        yield _v(None, Level.SEARCH, msg)


def optimizer_saver_rules(
    framework: str, zero: int, states: str | None, offload: float
) -> Iterator[Violation]:
    """Reduced-precision optimizer states and optimizer CPU offload on a stack that runs them only inside its
    sharded optimizer (Stack.saver_min_zero; Megatron-Core refuses them at start-up without it: HARD)."""
    need = STACKS[framework].saver_min_zero
    if zero >= need or not (states or offload):
        return
    used = " and ".join(
        x
        for x, on in ((f"optimizer_states={states}", states), (f"optimizer_offload={offload:g}", offload))
        if on
    )
    msg = (
        f"{used} needs zero >= {need} on framework={framework} (--use-precision-aware-optimizer runs only "
        "with the distributed optimizer)"
    )
    yield _v(Axis.DP, Level.HARD, msg)


def saver_runs_with(framework: str, zero: int, saver: tuple[str | None, float]) -> bool:
    """Whether an (optimizer_states, optimizer_offload) pair runs with this ZeRO stage (optimizer_saver_rules)."""
    return not any(optimizer_saver_rules(framework, zero, *saver))


# Megatron-Core's flex token dispatcher (Workload.moe_dispatcher "flex") has two backends. DeepEP asserts
# TP x EP > 1 (megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher.__init__: line 1770 at
# core_v0.19.0, 1365 at core_v0.17.1), TP being the expert TP group (MoETokenDispatcher: tp_group =
# pg_collection.expt_tp); HybridEP has no such check. The Megatron-Bridge performance presets run HybridEP on
# rack-scale NVLink (GB200/GB300 NVL72) and on most 8-GPU hosts too (bench/data/frontier_runs.csv notes: B300,
# H100), DeepEP on some 8-GPU hosts; the launch writes DeepEP only where one NVLink domain is one host and
# DeepEP can run, so no layout the search offers is refused for its backend.


def flex_backend(cluster: ClusterSpec, etp: int, ep: int) -> str:
    """The flex dispatcher's backend the launch writes: deepep inside one host when etp*ep > 1, else hybridep."""
    return "deepep" if cluster.node_size <= cluster.host_size and etp * ep > 1 else "hybridep"


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


# Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm, Workload.moe_ep_overlap) runs only
# where TransformerConfig.__post_init__ accepts it (core_v0.17.1 to core_v0.19.0, the pinned releases): EP > 1,
# no full recompute (nor a recompute method), no "moe" recompute module, and with PP > 1 the interleaved
# schedule (virtual_pipeline_model_parallel_size set; the overlap pairs one micro-batch's dispatch with another
# chunk's compute). Elsewhere the flag is refused, so a layout there runs without it: the model prices no
# overlap and the launch does not write the flag (it says so). No other stack ships such an overlap
# (torchtitan v0.2.x, DeepSpeed, Megatron-LM's legacy models): `--moe-ep-overlap` there is an error.
EP_OVERLAP_STACKS = ("megatron",)


def ep_overlap_recompute_ok(recompute: str) -> bool:
    """Whether Megatron-Core accepts the EP all-to-all overlap with this recompute mode."""
    return recompute != "full" and "moe" not in recompute_modules(recompute)


def ep_overlap_applies(framework: str, requested: bool, ep: int, pp: int, vpp: int, recompute: str) -> bool:
    """Whether a requested EP all-to-all overlap takes effect for this layout (see EP_OVERLAP_STACKS)."""
    if not requested or ep <= 1 or framework not in EP_OVERLAP_STACKS:
        return False
    return ep_overlap_recompute_ok(recompute) and (pp == 1 or vpp > 1)


def ep_overlap_note(framework: str, requested: bool, ep: int, pp: int, vpp: int, recompute: str) -> str:
    """Why a requested EP overlap does not apply to this layout ('' when it does or was not requested)."""
    if not requested or ep <= 1 or ep_overlap_applies(framework, requested, ep, pp, vpp, recompute):
        return ""
    if framework not in EP_OVERLAP_STACKS:
        return f"moe_ep_overlap: {framework} has no dispatch/combine overlap; this layout runs without it"
    why = (
        f"recompute={recompute}"
        if not ep_overlap_recompute_ok(recompute)
        else f"pp={pp} without virtual stages"
    )
    return (
        f"moe_ep_overlap: Megatron-Core refuses --overlap-moe-expert-parallel-comm with {why} "
        "(TransformerConfig); this layout runs and is priced without it"
    )


def vpp_rules(model: ModelSpec, pp: int, vpp: int, schedule: str) -> Iterator[Violation]:
    """Virtual stages: need pp > 1, a schedule that runs that many chunks per rank (the interleaved one, or a
    V-shaped one: knobs.SCHEDULES vpp), and an even split of the layers."""
    rule = SCHEDULES.get(schedule)
    if vpp == 1:
        if rule is not None and not rule.takes_vpp(1):
            yield _v(Axis.VPP, Level.HARD, _chunks_message(rule, 1))
        return
    if pp == 1:
        yield _v(Axis.VPP, Level.HARD, f"vpp={vpp} needs pp > 1")
    if rule is None or not rule.takes_vpp(vpp):
        runs = ", ".join(n for n, r in SCHEDULES.items() if r.takes_vpp(vpp))
        yield _v(
            Axis.VPP, Level.HARD, f"vpp={vpp} needs pp_schedule={runs or 'interleaved'} (got {schedule})"
        )
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


def offload_rules(
    model: ModelSpec, workload: Workload, pp: int, recompute: str, n: int
) -> Iterator[Violation]:
    """Activation offload of n layers: Megatron-Core's own checks (TransformerConfig.__post_init__: fewer
    than num_layers, no pipeline parallelism, no activation recompute); the stacks that have it: stack_rules.
    The search offers only candidate_layers(layers) and only when Workload.memory_savers has "act_offload"."""
    if not n:
        return
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
    if "act_offload" not in workload.memory_savers:
        msg = f"activation_offload_layers={n}: act_offload is not among the memory savers allowed (memory_savers)"
        yield _v(None, Level.SEARCH, msg)
    elif n not in candidate_layers(model.layers):
        msg = f"activation_offload_layers={n} is not one of the counts the search offers (candidate_layers)"
        yield _v(None, Level.SEARCH, msg)


def recompute_rules(model: ModelSpec, workload: Workload, recompute: str) -> Iterator[Violation]:
    """Megatron-Core's checks on the selective recompute modules (TransformerConfig.__post_init__, core_v0.19.0):
    mla_up_proj needs multi-latent attention, moe_act an MoE model (grouped GEMM), and moe_act/layernorm under
    FP8 no delayed scaling. "moe" on a dense model is refused too: Megatron accepts it and re-runs nothing (no
    MoE layer), a setting that cannot take effect."""
    mods = recompute_modules(recompute)
    if "mla_up_proj" in mods and not model.is_mla:
        yield _v(None, Level.HARD, f"recompute={recompute}: mla_up_proj needs multi-latent attention")
    for module in ("moe_act", "moe"):
        if module in mods and not model.is_moe:
            yield _v(None, Level.HARD, f"recompute={recompute}: {module} needs an MoE model")
    if {"moe_act", "layernorm"} & mods and workload.precision == "fp8" and workload.fp8_recipe == "delayed":
        msg = f"recompute={recompute}: Megatron has no moe_act/layernorm recompute with FP8 delayed scaling"
        yield _v(None, Level.HARD, msg)


# Selective recompute module sets the search offers on Megatron-Core besides none/selective/full, when
# Workload.memory_savers has "recompute_modules" (a record whose preset states modules sets it): the ones the
# Megatron-Bridge presets run (GPT-OSS layernorm+moe_act, DeepSeek-V3 mla_up_proj) and, for MLA MoE models,
# the union of the three output-discarding modules. Each frees activations for elementwise work or the small
# up-projection GEMMs, between selective (core attention) and full recompute in cost; "mlp" (dense layers only,
# a few in MoE models) and moe_act alone are left to explicit strategies and records. Opt-in like the other
# memory savers: offered by default, the cheap memory they free let the search pick layouts the model rates
# too fast on MoE models (bench/recipes.py: median x1.037 -> x1.046, max x1.84 -> x1.89).
SEARCH_RECOMPUTE_MODULE_SETS: tuple[str, ...] = (
    "sel:layernorm+moe_act", "sel:mla_up_proj", "sel:layernorm+mla_up_proj+moe_act",
)  # fmt: skip


def recompute_values(model: ModelSpec, workload: Workload) -> tuple[str, ...]:
    """Recompute modes the search offers: none, selective and full, plus, with the "recompute_modules" memory
    saver, the module sets that apply to the model on a stack with --recompute-modules (least memory-frugal
    first, full last)."""
    fw = workload.framework
    offered = SEARCH_RECOMPUTE_MODULE_SETS if "recompute_modules" in workload.memory_savers else ()
    extra = tuple(
        r for r in offered if _ok([*recompute_rules(model, workload, r), *stack_rules(fw, recompute=r)])
    )
    return (*RECOMPUTE_LEVELS[:2], *extra, RECOMPUTE_LEVELS[2])


# ---------------------------------------------------------------------------------------------- stacks
# What each software stack ships in the release the launch writers target (autopar/launch/schema.py;
# the vendored argument/config schemas in autopar/data/launch_schemas/ record each commit). The search
# offers only these values (stack_rules, level SEARCH), the completion picks among them, and an explicit
# value outside them is still estimated (a what-if) with a note saying the stack does not ship it.


@dataclass(frozen=True, slots=True)
class Stack:
    """One software stack's parallelism features; each field cites where the stack defines it."""

    name: str
    schedules: dict[str, str]  # autopar pp_schedule -> the stack's own name for it (knobs.SCHEDULES stacks)
    zero: tuple[int, ...]  # ZeRO stages (3 = FSDP / fully sharded)
    cp_comm: tuple[str, ...]  # CP variants; () = no context parallelism
    hsdp: bool  # ZeRO-3 sharded inside groups, replicated across them (dp_shard)
    optimizer_states: tuple[str, ...]  # reduced-precision optimizer states it can keep
    optimizer_offload: bool  # optimizer states and step on the CPU
    act_offload: bool  # layer-wise activation CPU offload (activation_offload_layers)
    source: str
    sp: bool = True  # Megatron-style SP: norm/dropout activations sharded over the TP group
    # axes the stack runs only through model code that its launch file cannot set (autopar hands over the
    # file alone, so the search does not offer them and the launch writer refuses them: one rule, stack_rules)
    model_code: dict[str, str] = field(default_factory=dict)
    # expert TP of any degree; False: only 1 or the dense TP degree (torchtitan's ParallelDims asserts it)
    expert_tp_any: bool = True
    # Megatron-Core's --recompute-modules (knobs.MEGATRON_RECOMPUTE_MODULES); others: none/selective/full only
    recompute_modules: bool = False
    # the least ZeRO stage its reduced-precision optimizer states and optimizer CPU offload run with
    # (optimizer_saver_rules); 0 = any
    saver_min_zero: int = 0


STACKS: dict[str, Stack] = {
    # Megatron-Core core_v0.19.0 megatron/training/arguments.py (vendored megatron-core_v0.19.0.json): no
    # zero-bubble or DualPipe schedule argument (1F1B by default, interleaved through
    # --num-layers-per-virtual-pipeline-stage); --use-distributed-optimizer (ZeRO-1), --use-megatron-fsdp with
    # --data-parallel-sharding-strategy {optim_grads, optim_grads_params} (ZeRO-2/3) and
    # --num-distributed-optimizer-instances / --outer-dp-sharding-strategy (HSDP); --cp-comm-type
    # {p2p, a2a, allgather, a2a+p2p} (Transformer Engine attention, with --hierarchical-context-parallel-sizes);
    # --exp-avg-dtype/--exp-avg-sq-dtype bf16 with --use-precision-aware-optimizer (no 8-bit states);
    # --optimizer-cpu-offload; --cpu-offloading-num-layers (Transformer Engine's activation offload).
    "megatron": Stack(
        "megatron",
        stack_schedules("megatron"),
        (0, 1, 2, 3),
        CP_VARIANTS,
        True,
        ("bf16",),
        True,
        True,
        "NVIDIA/Megatron-LM core_v0.19.0 megatron/training/arguments.py",
        recompute_modules=True,  # --recompute-modules (TransformerConfig.recompute_modules)
        # --exp-avg-dtype bf16 and --optimizer-cpu-offload run through --use-precision-aware-optimizer
        # (validate_args asserts it for the offload: arguments.py:1803-1807 at core_v0.19.0, 1496-1500 at
        # core_v0.17.1), which OptimizerConfig.__post_init__ allows only with the distributed optimizer
        # (megatron/core/optimizer/optimizer_config.py:430-436 at core_v0.19.0, 394-400 at core_v0.17.1);
        # Megatron-FSDP turns that on itself (arguments.py:1106-1112), so ZeRO-1 and up
        saver_min_zero=1,
    ),
    # Megatron-LM before Megatron-Core (2019-2022; Narayanan et al. 2021): 1F1B and interleaved schedules and
    # the distributed optimizer (ZeRO-1, 2022); context parallelism, Megatron-FSDP, optimizer offload and
    # activation offload came later with Megatron-Core and Transformer Engine.
    "megatron-legacy": Stack(
        "megatron-legacy",
        stack_schedules("megatron-legacy"),
        (0, 1),
        (),
        False,
        (),
        False,
        False,
        "NVIDIA/Megatron-LM 2022 (Narayanan et al. 2021 §2.2; --use-distributed-optimizer)",
    ),
    # torchtitan v0.2.2 torchtitan/config/job_config.py (vendored torchtitan-v0.2.2.json): Parallelism.
    # pipeline_parallel_schedule names a torch.distributed.pipelining schedule class (which ones, per autopar
    # schedule: knobs.SCHEDULES stacks); data_parallel_shard_degree (FSDP2) with data_parallel_replicate_degree
    # (DDP or HSDP); context_parallel_rotate_method {allgather, alltoall} (ring passing K/V = p2p; no
    # Ulysses), "allgather" by default (listed first: default_cp_comm); optimizer-state precision and activation
    # offload are not job-config options.
    "torchtitan": Stack(
        "torchtitan",
        stack_schedules("torchtitan"),
        (0, 3),
        ("allgather", "p2p"),
        True,
        (),
        False,
        False,
        "pytorch/torchtitan v0.2.2 torchtitan/config/job_config.py",
        # torchtitan/distributed/parallel_dims.py ParallelDims._validate: "Currently we only support ETP=TP
        # or ETP=1" (asserted when ep > 1)
        expert_tp_any=False,
    ),
    # PyTorch FSDP (torch/distributed/fsdp ShardingStrategy NO_SHARD, SHARD_GRAD_OP, FULL_SHARD,
    # HYBRID_SHARD) with torch.distributed.pipelining (knobs.SCHEDULES stacks) and
    # torch.distributed.tensor.experimental.context_parallel (set_rotate_method "alltoall"/"allgather"),
    # "allgather" by default (listed first: default_cp_comm): PyTorch's _ContextParallelOptions.rotate_method
    # defaults to _RotateMethod.ALL_GATHER, and NeMo AutoModel's sharder passes cp_rotate_method="allgather"
    # (nemo_automodel/components/distributed/context_parallel/sharder.py, commit 36044ad).
    # Its CPUOffload moves parameters too, not the optimizer alone; no launch writer targets it.
    "fsdp": Stack(
        "fsdp",
        stack_schedules("fsdp"),
        (0, 2, 3),
        ("allgather", "p2p"),
        True,
        (),
        False,
        False,
        "pytorch/pytorch torch/distributed/fsdp/api.py ShardingStrategy; torch/distributed/pipelining",
    ),
    # DeepSpeed v0.19.5 (vendored deepspeed-v0.19.5.json): zero_optimization.stage 0-3 and
    # zero_optimization.offload_optimizer (DeepSpeedZeroOffloadOptimizerConfig); tensor_parallel.autotp_size
    # (AutoTP); PipelineModule's TrainSchedule is 1F1B (runtime/pipe/schedule.py); MiCS/hpZ are not HSDP as
    # autopar models it. Pipelines (deepspeed.pipe.PipelineModule), Ulysses sequence parallelism
    # (deepspeed.sequence.layer.DistributedAttention, autopar's cp_comm=a2a) and expert parallelism
    # (deepspeed.moe.layer.MoE(ep_size=...)) are built in the model code: no ds_config key sets them (the
    # vendored top-level keys and sections have none), so the search offers none of them (model_code).
    "deepspeed": Stack(
        "deepspeed",
        stack_schedules("deepspeed"),
        (0, 1, 2, 3),
        ("a2a",),
        False,
        (),
        True,
        False,
        "deepspeedai/DeepSpeed v0.19.5 deepspeed/runtime/zero/config.py, runtime/pipe/schedule.py",
        # AutoTP (runtime/tensor_parallel) shards the linear layers only: no Megatron-style SP of the
        # norm/dropout activations (DeepSpeed's "sequence parallel" is Ulysses, autopar's cp_comm=a2a)
        sp=False,
        model_code={
            Axis.PP: "deepspeed.pipe.PipelineModule",
            Axis.CP: "deepspeed.sequence.layer.DistributedAttention (Ulysses)",
            Axis.EP: "deepspeed.moe.layer.MoE(ep_size=...)",
        },
    ),
}

# Stacks with layer-wise activation CPU offload (read by the completion and the record importer).
ACT_OFFLOAD_FRAMEWORKS: tuple[str, ...] = tuple(n for n, st in STACKS.items() if st.act_offload)


def schedules_for(framework: str) -> tuple[str, ...]:
    """Schedules a software stack ships (what the search and the completion may choose for it).

    An explicit schedule is always estimated (a what-if), whatever the stack."""
    return tuple(STACKS[framework].schedules)


def stack_rules(
    framework: str,
    *,
    pp: int = 1,
    schedule: str = "1f1b",
    zero: int = 0,
    cp: int = 1,
    cp_comm: str = "p2p",
    dp_shard: int | None = None,
    states: str | None = None,
    offload: float = 0.0,
    act_offload: int = 0,
    sp: bool = False,
    ep: int = 1,
    etp: int | None = None,
    tp: int = 1,
    recompute: str = "none",
) -> Iterator[Violation]:
    """Knob values the stack does not ship (level SEARCH: a what-if still estimates, the search never offers
    them). Each knob defaults to a value every stack runs, so a generator can ask about one knob at a time."""
    st, fw = STACKS[framework], f"framework={framework}"
    if pp > 1 and schedule in SCHEDULES and schedule not in st.schedules:
        ships = ", ".join(st.schedules)
        yield _v(Axis.PP, Level.SEARCH, f"pp_schedule={schedule}: {fw} does not ship it (it runs {ships})")
    if zero not in st.zero:
        yield _v(Axis.DP, Level.SEARCH, f"zero={zero}: {fw} ships ZeRO stages {st.zero}")
    if cp > 1 and not st.cp_comm:
        yield _v(Axis.CP, Level.SEARCH, f"cp={cp}: {fw} has no context parallelism")
    elif cp > 1 and cp_comm not in st.cp_comm:
        yield _v(Axis.CP, Level.SEARCH, f"cp_comm={cp_comm}: {fw} ships {', '.join(st.cp_comm)}")
    if dp_shard and not st.hsdp:
        yield _v(Axis.DP, Level.SEARCH, f"dp_shard={dp_shard}: {fw} has no HSDP")
    if states and states not in st.optimizer_states:
        yield _v(None, Level.SEARCH, f"optimizer_states={states}: {fw} does not ship it")
    if offload and not st.optimizer_offload:
        yield _v(None, Level.SEARCH, f"optimizer_offload={offload:g}: {fw} has no optimizer CPU offload")
    if act_offload and not st.act_offload:
        msg = f"activation_offload_layers={act_offload}: {fw} has no layer-wise activation CPU offload"
        yield _v(None, Level.SEARCH, msg)
    if sp and not st.sp:
        msg = f"sp=true: {fw} has no Megatron-style sequence parallelism (its sequence parallelism is CP a2a)"
        yield _v(Axis.TP, Level.SEARCH, msg)
    if ep > 1 and etp not in (None, 1, tp) and not st.expert_tp_any:
        msg = f"etp={etp}: {fw} supports expert TP = 1 or = TP only (tp={tp})"
        yield _v(Axis.ETP, Level.SEARCH, msg)
    if recompute not in RECOMPUTE_LEVELS and not st.recompute_modules:
        msg = f"recompute={recompute}: {fw} has no per-module selective recompute (Megatron-Core's --recompute-modules)"
        yield _v(None, Level.SEARCH, msg)
    yield from model_code_rules(framework, pp=pp, cp=cp, ep=ep)


def model_code_rules(framework: str, *, pp: int = 1, cp: int = 1, ep: int = 1) -> Iterator[Violation]:
    """Axes the stack runs only through model code its launch file cannot set (Stack.model_code): the search
    does not offer them and the launch writer refuses them with these messages."""
    st = STACKS[framework]
    for axis, degree in ((Axis.PP, pp), (Axis.CP, cp), (Axis.EP, ep)):
        if degree > 1 and axis in st.model_code:
            msg = (
                f"{axis}={degree}: framework={framework} runs it only in model code ({st.model_code[axis]}), "
                "which its launch config cannot set"
            )
            yield _v(axis, Level.SEARCH, msg)


def strategy_stack_rules(framework: str, s: Strategy) -> list[Violation]:
    """stack_rules of every knob of a strategy."""
    return list(
        stack_rules(
            framework,
            pp=s.pp,
            schedule=s.pp_schedule or "1f1b",
            zero=s.zero if s.zero is not None else 0,
            cp=s.cp,
            cp_comm=s.cp_comm,
            dp_shard=s.dp_shard,
            states=s.optimizer_states,
            offload=s.optimizer_offload,
            act_offload=s.activation_offload_layers or 0,
            sp=s.sp,
            ep=s.ep,
            etp=s.etp,
            tp=s.tp,
            recompute=s.recompute or "none",
        )
    )


# Model families a stack runs with fewer axes than its job config offers. torchtitan has no generic model:
# it runs an architecture as one of its registered models (TrainSpec, torchtitan/models/<name>/__init__.py),
# and some of those cannot take an axis at all (the trainer raises: level HARD). On the PyTorch-FSDP stack a
# MoE model runs as NeMo AutoModel's custom MoE (nemo_automodel/components/moe: FSDP2 + expert parallelism),
# whose parallelizer refuses TP and wires CP into Transformer Engine's ring alone (llm-foundry's MegaBlocks
# MoE has neither TP nor CP).


@dataclass(frozen=True, slots=True)
class FamilyLimit:
    """An axis a stack's model family cannot use, with the stack's own words and where it says them."""

    framework: str
    family: str  # the stack's model name
    axis: Axis
    reason: str
    # Axis.CP only: the CP variants the family runs (None: no CP at all, the degree must be 1)
    cp_variants: tuple[str, ...] | None = None
    # Axis.CP only: the family runs Transformer Engine's CP where the stack's own is PyTorch's
    # (software.yaml torch_cp): the variants are then priced as Transformer Engine runs them
    te_cp: bool = False


def torchtitan_family(model: ModelSpec) -> str | None:
    """The torchtitan v0.2.2 model an architecture runs as, where a family limit depends on it.

    MLA (DeepSeek-V2/V3) is deepseek_v3; per-head q/k norms without local attention or shared experts is
    qwen3 (Gemma-3 has a sliding window, Llama-4 a shared expert and chunked attention); experts with
    sliding-window attention and attention biases is gpt_oss."""
    if model.is_mla:
        return "deepseek_v3"
    if model.is_moe and model.sliding_window and model.qkv_bias:
        return "gpt_oss"
    if model.qk_norm and not model.sliding_window and not model.shared_experts:
        return "qwen3"
    return None


def model_family(framework: str, model: ModelSpec) -> str | None:
    """The stack's own model an architecture runs as, where a FamilyLimit depends on it: torchtitan's
    registered models (torchtitan_family); on the PyTorch-FSDP stack every MoE model is a custom MoE."""
    if framework == "torchtitan":
        return torchtitan_family(model)
    if framework == "fsdp" and model.is_moe:
        return "custom_moe"
    return None


FAMILY_LIMITS: tuple[FamilyLimit, ...] = (
    FamilyLimit(
        "torchtitan",
        "deepseek_v3",
        Axis.CP,
        "torchtitan's deepseek_v3 uses flex attention (attn_type='flex', torchtitan v0.2.2 "
        "torchtitan/models/deepseek_v3/__init__.py:100,127,154) and its CP only supports SDPA "
        "(model/args.py:101-109: 'Context Parallel only supports SDPA attention')",
    ),
    FamilyLimit(
        "torchtitan",
        "qwen3",
        Axis.PP,
        "torchtitan's qwen3 has no pipelining_fn (torchtitan v0.2.2 torchtitan/models/qwen3/__init__.py:199; "
        "torchtitan/train.py:218-223 raises 'does not support pipelining')",
    ),
    FamilyLimit(
        "torchtitan",
        "gpt_oss",
        Axis.PP,
        "torchtitan's gpt_oss has no pipelining_fn (torchtitan v0.2.2 torchtitan/models/gpt_oss/__init__.py:85; "
        "torchtitan/train.py:218-223 raises 'does not support pipelining')",
    ),
    FamilyLimit(
        "torchtitan",
        "gpt_oss",
        Axis.CP,
        "torchtitan's gpt_oss raises 'CP support for gpt-oss model is still in progress' (torchtitan v0.2.2 "
        "torchtitan/models/gpt_oss/model/args.py:89-92)",
    ),
    FamilyLimit(
        "fsdp",
        "custom_moe",
        Axis.TP,
        "NeMo AutoModel's custom MoE parallelizer asserts 'Tensor parallelism not supported for custom MoE "
        "models' (nemo_automodel/components/moe/parallelizer.py parallelize_model, commit 037e04a, the release "
        "its published MoE benchmark configs ran; later releases replicate attention and the router across TP "
        "and accept only pretrained weights, so pre-training still runs TP 1)",
    ),
    FamilyLimit(
        "fsdp",
        "custom_moe",
        Axis.ETP,
        "NeMo AutoModel's custom MoE shards its experts by expert parallelism alone (apply_ep: "
        "ExpertParallel over the ep mesh, then FSDP over ep_shard; no expert tensor parallelism; "
        "nemo_automodel/components/moe/parallelizer.py, commit 037e04a)",
    ),
    FamilyLimit(
        "fsdp",
        "custom_moe",
        Axis.CP,
        "NeMo AutoModel's custom MoE runs CP as Transformer Engine's ring: apply_cp sets every "
        "DotProductAttention to cp_comm_type='p2p' and the parallelizer passes no other "
        "(nemo_automodel/components/moe/parallelizer.py, commit 037e04a)",
        cp_variants=("p2p",),
        te_cp=True,
    ),
)


def family_rules(
    framework: str,
    model: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    cp_comm: str | None = None,
    etp: int = 1,
) -> Iterator[Violation]:
    """Axes (and CP variants) the stack's model family for this architecture cannot use (HARD: the trainer
    raises or never runs them)."""
    family = model_family(framework, model)
    degrees = {Axis.TP: tp, Axis.PP: pp, Axis.CP: cp, Axis.ETP: etp}
    for lim in FAMILY_LIMITS:
        if lim.framework != framework or lim.family != family or degrees[lim.axis] <= 1:
            continue
        if lim.cp_variants is not None:
            if cp_comm is not None and cp_comm not in lim.cp_variants:
                msg = f"cp_comm={cp_comm}: framework={framework} runs only {', '.join(lim.cp_variants)} for {model.name}: {lim.reason}"
                yield _v(Axis.CP, Level.HARD, msg)
            continue
        msg = f"{lim.axis}={degrees[lim.axis]}: framework={framework} cannot run it for {model.name}: {lim.reason}"
        yield _v(lim.axis, Level.HARD, msg)


def stack_notes(framework: str, s: Strategy) -> list[str]:
    """Notes for an estimate or a launch config: what the strategy uses that the stack does not ship."""
    return [f"not shipped by the stack (a what-if): {v.message}" for v in strategy_stack_rules(framework, s)]


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
    s, dims, split, k = strategy, dims_of(cluster, strategy), split_of(strategy), strategy.knobs()
    m = max(1, workload.global_batch // (k.micro_batch * dims.dp))
    rules = [
        *world_rules(cluster.num_gpus, s.tp, s.pp, s.cp, s.dp),
        *tp_rules(model, cluster, s.tp, allow_cross_node_tp, workload.framework),
        *pp_rules(model, s.pp, split, k.vpp),
        *vpp_rules(split_model(model, s.pp, split), s.pp, k.vpp, k.pp_schedule),
        *schedule_rules(s.pp, k.vpp, m, k.pp_schedule, model.is_moe),
        *cp_rules(workload, s.cp),
        *cp_comm_rules(model, cluster, s.tp, s.cp, s.cp_comm),
        *dp_shard_rules(cluster, dims, k.zero, s.dp_shard, workload.framework),
        *saver_rules(workload, s.optimizer_states, s.optimizer_offload),
        *optimizer_saver_rules(workload.framework, k.zero, s.optimizer_states, s.optimizer_offload),
        *expert_rules(model, dims, s.etp is not None),
        *(
            domain_rules(Axis.ETP, dims.etp, cluster, allow_cross_node_tp)
            if s.etp not in (None, s.tp)
            else ()
        ),
        *sp_rules(model, s.tp, s.ep, s.sp),
        *batch_rules(workload, dims, k.micro_batch),
        *precision_rules(cluster, workload.precision),
        *offload_rules(model, workload, s.pp, k.recompute, s.activation_offload_layers or 0),
        *recompute_rules(model, workload, k.recompute),
        *strategy_stack_rules(workload.framework, s),
        *family_rules(workload.framework, model, tp=s.tp, pp=s.pp, cp=s.cp, cp_comm=s.cp_comm, etp=dims.etp),
    ]
    return _keep(rules, level)


def explain(violations: list[Violation] | list[str]) -> str:
    """One sentence for a rejected layout: its broken rules joined by '; ' ('' when valid)."""
    return "; ".join(str(v) for v in violations)


def mesh_problems(cluster: ClusterSpec, workload: Workload, strategy: Strategy) -> list[str]:
    """The model-independent HARD rules (world size, batch split, virtual stages need pp > 1)."""
    s, dims, k = strategy, dims_of(cluster, strategy), strategy.knobs()
    rules = [
        *world_rules(cluster.num_gpus, s.tp, s.pp, s.cp, s.dp),
        *batch_rules(workload, dims, k.micro_batch),
    ]
    if k.vpp > 1 and s.pp == 1:
        rules.append(_v(Axis.VPP, Level.HARD, f"vpp={k.vpp} needs pp > 1"))
    return [v.message for v in _keep(rules, Level.HARD)]


# ---------------------------------------------------------------------------------------------- generators
# The search's candidate values: divisors filtered through the rules above (SEARCH level), never re-derived.


def _ok(violations: Iterable[Violation]) -> bool:
    return not _keep(violations, Level.SEARCH)


def tp_degrees(model: ModelSpec, cluster: ClusterSpec, framework: str = "megatron") -> list[int]:
    """TP degrees the search offers on `framework`."""
    return [
        t
        for t in divisors(cluster.num_gpus)
        if _ok([*tp_rules(model, cluster, t, False, framework), *family_rules(framework, model, tp=t)])
    ]


def pp_degrees(model: ModelSpec, rest: int, framework: str = "megatron") -> list[int]:
    """PP degrees dividing the GPUs left after TP (with an even or a balanced uneven split) that the stack's
    model family runs."""
    return [
        p
        for p in divisors(rest)
        if split_values(model, p)
        and _ok([*family_rules(framework, model, pp=p), *stack_rules(framework, pp=p)])
    ]


def split_values(model: ModelSpec, pp: int) -> tuple[Split, ...]:
    """Pipeline splits the search offers for pp stages (at most a few balanced ones, see balanced_splits)."""
    if pp > model.layers:
        return ()
    return tuple(sp for sp in balanced_splits(model.layers, pp) if _ok(pp_rules(model, pp, sp)))


def cp_degrees(workload: Workload, rest: int, model: ModelSpec | None = None) -> list[int]:
    """CP degrees dividing the GPUs left after TP and PP (1 alone where the stack, or its model family for
    `model`, has no CP)."""
    fw = workload.framework
    return [
        c
        for c in divisors(rest)
        if _ok(cp_rules(workload, c))
        and _ok(stack_rules(fw, cp=c, cp_comm=default_cp_comm(fw, model)))
        and (model is None or _ok(family_rules(fw, model, cp=c)))
    ]


def default_cp_comm(framework: str, model: ModelSpec | None = None) -> str:
    """The CP variant a stack runs unless told otherwise: the first it ships (Stack.cp_comm lists the default
    first: Megatron's --cp-comm-type p2p, torchtitan's and PyTorch's rotate method "allgather"), or, for a
    `model` whose family runs fewer (FamilyLimit.cp_variants), the first of those; p2p for a stack without CP
    (no effect with cp=1). A run record that does not state its variant ran this one."""
    limit = _cp_family_limit(framework, model) if model is not None else None
    if limit is not None and limit.cp_variants:
        return limit.cp_variants[0]
    return (STACKS[framework].cp_comm or ("p2p",))[0]


def _cp_family_limit(framework: str, model: ModelSpec) -> FamilyLimit | None:
    family = model_family(framework, model)
    return next(
        (x for x in FAMILY_LIMITS if (x.framework, x.family, x.axis) == (framework, family, Axis.CP)), None
    )


def family_runs_te_cp(framework: str, model: ModelSpec) -> bool:
    """Whether the model's family on this stack runs Transformer Engine's CP (FamilyLimit.te_cp), not the
    stack's own (software.yaml torch_cp)."""
    limit = _cp_family_limit(framework, model)
    return limit is not None and limit.te_cp


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
    split = (split_values(model, pp) or (EVEN_SPLIT,))[0]
    probe = Strategy(
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        sp=tp > 1 and STACKS[workload.framework].sp,
        cp_comm=default_cp_comm(workload.framework, model),
        zero=STACKS[workload.framework].zero[0],
        pp_first_layers=split.first,
        pp_last_layers=split.last,
        pp_account_embedding=split.account_embedding,
        pp_account_loss=split.account_loss,
    )
    return check(model, cluster, workload, probe, level=Level.SEARCH)


def expert_degrees(
    model: ModelSpec, cluster: ClusterSpec, dims: ParallelDims, framework: str = "megatron"
) -> list[tuple[int, int | None]]:
    """(ep, etp) pairs on the folded expert mesh; etp explicit (1 included) for MoE, (1, None) for dense."""
    if not model.is_moe:
        return [(1, None)]
    out: list[tuple[int, int | None]] = []
    for ep in divisors(dims.dense_group):
        for etp in divisors(dims.dense_group // ep):
            d = ParallelDims(dims.world, dims.tp, dims.cp, dims.pp, dims.dp, 1, ep, etp)
            rules = [
                *expert_rules(model, d, True),
                *domain_rules(Axis.ETP, etp, cluster, False),
                *stack_rules(framework, ep=ep, etp=etp, tp=dims.tp),
                *family_rules(framework, model, etp=etp),
            ]
            if _ok(rules):
                out.append((ep, etp))
    return out


def sp_values(model: ModelSpec, tp: int, ep: int, framework: str = "megatron") -> tuple[bool, ...]:
    """SP settings the search offers for a layout, among those the stack ships."""
    return tuple(
        sp for sp in (False, True) if _ok([*sp_rules(model, tp, ep, sp), *stack_rules(framework, sp=sp)])
    )


def mb_vpp_pairs(model: ModelSpec, workload: Workload, dims: ParallelDims) -> tuple[tuple[int, int], ...]:
    """(micro_batch, vpp) pairs: mb splits the batch per dp rank; vpp > 1 only where interleaving is valid."""
    per_rank = workload.global_batch // dims.dp
    pairs = []
    for mb in divisors(per_rank):
        for v in divisors(model.layers):
            d = ParallelDims(dims.world, dims.tp, dims.cp, dims.pp, dims.dp, v, dims.ep, dims.etp)
            sched = implied_schedule(v)
            if _ok([*vpp_rules(model, dims.pp, v, sched), *batch_rules(workload, d, mb)]):
                pairs.append((mb, v))
    return tuple(pairs)


def pipe_choices(
    model: ModelSpec, workload: Workload, dims: ParallelDims
) -> tuple[tuple[int, int, str], ...]:
    """(micro_batch, vpp, pp_schedule) triples: the (mb, vpp) pairs, each with every schedule whose rules hold
    and the stack ships (interleaved for vpp > 1; 1F1B, ZB-H1 and DualPipe for one chunk per rank; 1F1B alone
    without PP)."""
    out = []
    for mb, v in mb_vpp_pairs(model, workload, dims):
        m = workload.global_batch // (mb * dims.dp)
        for sched in SCHEDULE_NAMES:
            rules = [
                *vpp_rules(model, dims.pp, v, sched),
                *schedule_rules(dims.pp, v, m, sched, model.is_moe),
                *stack_rules(workload.framework, pp=dims.pp, schedule=sched),
            ]
            if _ok(rules):
                out.append((mb, v, sched))
    return tuple(out)


def cp_comm_values(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, tp: int, cp: int
) -> tuple[str, ...]:
    """CP variants the search offers (p2p alone without CP), among those the stack ships."""
    fw = workload.framework
    return tuple(
        v
        for v in CP_VARIANTS
        if _ok(
            [
                *cp_comm_rules(model, cluster, tp, cp, v),
                *stack_rules(fw, cp=cp, cp_comm=v),
                *family_rules(fw, model, cp=cp, cp_comm=v),
            ]
        )
    )


def zero_values(workload: Workload) -> tuple[int, ...]:
    """ZeRO stages the search offers: those the stack ships."""
    return tuple(z for z in range(4) if _ok(stack_rules(workload.framework, zero=z)))


def dp_shard_values(cluster: ClusterSpec, workload: Workload, dims: ParallelDims) -> tuple[int, ...]:
    """HSDP shard degrees the search offers with ZeRO-3 (besides None: shard over all of dp), for the expert
    degrees in `dims` (dp_shard_rules)."""
    ds = hsdp_degree(cluster, dims)
    if ds is None:
        return ()
    fw = workload.framework
    ok = _ok([*stack_rules(fw, zero=3, dp_shard=ds), *dp_shard_rules(cluster, dims, 3, ds, fw)])
    return (ds,) if ok else ()


def saver_values(workload: Workload) -> tuple[tuple[str | None, float], ...]:
    """(optimizer_states, optimizer_offload) pairs the workload's memory_savers allow and the stack ships."""
    allowed = saver_choices(workload.memory_savers)
    return tuple(
        (st, off)
        for st in allowed["optimizer_states"]
        for off in allowed["optimizer_offload"]
        if _ok([*saver_rules(workload, st, off), *stack_rules(workload.framework, states=st, offload=off)])
        and not optimizer_saver_why(workload, st, off)
    )


def optimizer_saver_why(workload: Workload, states: str | None, offload: float) -> str:
    """Why the workload's optimizer cannot take these savers ('' when it can): a state precision needs
    full-size moments (Adafactor keeps none: knobs.OPTIMIZER_KINDS); Megatron-Core runs both savers through
    --use-precision-aware-optimizer, which OptimizerConfig.__post_init__ allows with Adam only
    (megatron/core/optimizer/optimizer_config.py core_v0.19.0: "only supported with adam")."""
    opt = workload.optimizer
    if states and not OPTIMIZER_KINDS[opt].moments:
        return f"optimizer={opt} keeps no full-size moments for {states} states"
    if (states or offload) and workload.framework == "megatron" and not opt.startswith("adam"):
        return f"optimizer={opt}: Megatron-Core's precision-aware optimizer (state precision, offload) runs Adam only"
    return ""


def idle_saver(model: ModelSpec, workload: Workload, saver: str) -> str:
    """Why memory saver `saver` cannot take effect for `model` on the workload's stack ('' when it can): the
    search would offer nothing it adds (saver_values, act_offload, recompute_values)."""
    fw = workload.framework
    alone = workload.model_copy(update={"memory_savers": (saver,)})
    if saver in MEMORY_SAVER_VALUES:
        if len(saver_values(alone)) > 1:
            return ""
        knob, values = MEMORY_SAVER_VALUES[saver]
        on = {knob: values[-1]}
        if why := optimizer_saver_why(alone, on.get("optimizer_states"), on.get("optimizer_offload", 0.0)):
            return why
        what = {"offload": "CPU offload of the optimizer", "bf16_states": "bf16 optimizer states"}
        return f"the {fw} stack ships no {what.get(saver, '8-bit optimizer states')}"
    if saver == "act_offload":
        return "" if STACKS[fw].act_offload else f"the {fw} stack has no activation CPU offload"
    if saver == "recompute_modules":
        if len(recompute_values(model, alone)) > len(RECOMPUTE_LEVELS):
            return ""
        return f"no recompute module set applies to {model.name} on the {fw} stack (--recompute-modules: megatron, MoE or MLA models)"
    return ""


def act_offload_values(model: ModelSpec, workload: Workload, pp: int) -> tuple[int, ...]:
    """Activation-offload layer counts the search offers (besides 0), each with recompute "none" only."""
    fw = workload.framework
    return tuple(
        n
        for n in candidate_layers(model.layers)
        if _ok([*offload_rules(model, workload, pp, "none", n), *stack_rules(fw, act_offload=n)])
    )
