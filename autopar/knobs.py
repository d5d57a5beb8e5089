"""The knob registry: every Strategy knob and every categorical domain declared once (bottom layer).

In the spirit of torchtitan's ``JobConfig``/``ParallelDims`` (one declaration per setting): each row says a
knob's name, its domain, the label token that carries it, whether `estimate` completes it when unset, whether
the search sets it, and whether it is a CLI flag and a report column. Derived from here: the Strategy label
(`format_label`) and its parser (`parse_label`), `specs.COMPLETABLE_KNOBS`, the search's knob list, the CLI's
choices, the report columns, the value codes of the array model.

Pipeline schedules are a domain with more to say, one `ScheduleRule` each: the virtual-stage counts it takes,
what it needs of p and m, which stacks ship it under which name (the launch writers emit that name), and its
source. `autopar/layouts.py` reads these rows and stays the one place that validates a layout; the bubble and
memory of each schedule are perf/pipeline.py's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, get_args


# ------------------------------------------------------------------------------------------------ axes
# The parallel axes (autopar.layouts re-exports them: the mesh and its rules are there).
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


# ------------------------------------------------------------------------------------------------ domains
# Each categorical domain once, as the type the specs use; its values, in this order, are the array model's
# codes (perf/vector_columns.py): append new values at the end so stored codes keep their meaning.
# Recompute: none, Megatron's default selective (core attention), full, then Megatron-Core's selective recompute
# modules (RECOMPUTE_MODULE_SETS below), each value "sel:" + its module names sorted and joined by "+".
Recompute = Literal[
    "none",
    "selective",
    "full",
    "sel:moe_act",
    "sel:layernorm+moe_act",
    "sel:mla_up_proj",
    "sel:mla_up_proj+mlp",
    "sel:mlp",
    "sel:layernorm+mla_up_proj+moe_act",
    "sel:moe",
    "sel:layernorm+moe",
    # MaxText's remat policies (perf/remat.py: what each keeps per decoder layer); records only, never searched
    "remat:minimal",
    "remat:minimal_with_context",
    "remat:save_dot_with_context_except_mlp",
    "remat:save_dot_except_mlpwi",
    "remat:save_dot_except_mlp",
    "remat:save_qkv_proj",
    "remat:save_out_proj",
    "remat:qkv_proj_offloaded",
    "remat:minimal_offloaded",
]
Schedule = Literal["1f1b", "interleaved", "zb-h1", "dualpipe", "zb-2p", "zb-v"]
CpComm = Literal["p2p", "a2a", "allgather", "a2a+p2p"]  # perf/cp.py
OptimizerStates = Literal["fp32", "bf16", "8bit"]
# Software stacks (layouts.STACKS holds what each ships; perf/efficiency.py their kernel profiles).
Framework = Literal["megatron", "megatron-legacy", "torchtitan", "fsdp", "deepspeed"]

RECOMPUTE_MODES: tuple[Recompute, ...] = get_args(Recompute)  # the array model's codes (append only)
# The three levels every stack has, least memory-frugal first: what `estimate` completes an unset recompute to
# (perf/complete.py) and what the search offers outside Megatron-Core.
RECOMPUTE_LEVELS: tuple[Recompute, ...] = ("none", "selective", "full")
CP_COMM_NAMES: tuple[CpComm, ...] = get_args(CpComm)
OPTIMIZER_STATES: tuple[OptimizerStates, ...] = get_args(OptimizerStates)
FRAMEWORKS: tuple[Framework, ...] = get_args(Framework)

# Workload.optimizer (state bytes and step traffic: perf/memory.py state_bytes_of, optimizer_step_bytes).
Optimizer = Literal["adam", "adam_bf16_states", "adam_8bit", "sgd", "adafactor", "lion", "came"]
OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)
# Workload.master_weights: the optimizer's copy of the weights it updates (perf/memory.py MASTER_BYTES).
MasterWeights = Literal["fp32", "fp16", "bf16"]
MASTER_WEIGHTS: tuple[MasterWeights, ...] = get_args(MasterWeights)


@dataclass(frozen=True)
class OptimizerKind:
    """What an optimizer keeps per parameter besides its master weights, and the passes of its step."""

    moments: int  # full-size state tensors, in the precision of Strategy.optimizer_states (else `states`)
    factored: (
        int  # factored statistics: one row and one column vector per weight matrix (Shazeer & Stern 2018)
    )
    states: OptimizerStates  # the moments' precision when the strategy does not set it
    grad_reads: int = 1  # passes reading the gradient (factored statistics need the whole row/column first)
    state_rereads: int = 0  # further reads of the moments and statistics (CAME's confidence pass)
    source: str = ""


OPTIMIZER_KINDS: dict[str, OptimizerKind] = {
    "adam": OptimizerKind(
        2, 0, "fp32", source="Kingma & Ba 2015: m, v (torch.optim.AdamW exp_avg, exp_avg_sq)"
    ),
    "adam_bf16_states": OptimizerKind(
        2, 0, "bf16", source="Megatron --exp-avg-dtype/--exp-avg-sq-dtype bf16"
    ),
    "adam_8bit": OptimizerKind(
        2, 0, "8bit", source="Dettmers et al. 2022, arXiv 2110.02861: block-wise 8-bit m, v"
    ),
    "sgd": OptimizerKind(
        1, 0, "fp32", source="torch.optim.SGD momentum_buffer (Megatron --sgd-momentum 0.9)"
    ),
    # Shazeer & Stern 2018 (arXiv 1804.04235) Alg. 4, beta1 = 0: torch.optim.Adafactor (PyTorch >= 2.5,
    # torch/optim/_adafactor.py) keeps state row_var (shape [..., r, 1]) and col_var ([..., 1, c]) of a >= 2-D
    # parameter, a full `variance` only for vectors, and has no momentum; it reads the gradient once for the
    # row/column means and again for the update.
    "adafactor": OptimizerKind(0, 1, "fp32", grad_reads=2, source="Shazeer & Stern 2018, arXiv 1804.04235"),
    # Chen et al. 2023 (arXiv 2302.06675) Alg. 2: one momentum; Megatron-Core core_v0.19.0
    # megatron/core/optimizer/__init__.py ('lion'): state exp_avg = zeros_like(the fp32 main param).
    "lion": OptimizerKind(1, 0, "fp32", source="Chen et al. 2023, arXiv 2302.06675"),
    # Luo et al. 2023 (arXiv 2307.02693) Alg. 1: the first moment m, a factored second moment (r, c) and a
    # factored confidence (R, C) of the instability (u - m)^2; the final update reads m and R, C again after
    # their pass (the reference implementation github.com/yangluo7/CAME: exp_avg, exp_avg_sq_row/_col,
    # exp_avg_res_row/_col).
    "came": OptimizerKind(
        1, 2, "fp32", grad_reads=2, state_rereads=1, source="Luo et al. 2023, arXiv 2307.02693"
    ),
}

# Stacks autopar has no kernel profile for (issue 43): named so that a run on one is never read as a Megatron
# run. Such a stack is estimated with the SURROGATE_PROFILE's mechanics (the most general stack: every axis,
# ZeRO stage and CP variant) and, through the calibration, the unprofiled-stack prior
# (calibration/models/stack_prior.py: the between-source spread of the non-Megatron stacks autopar holds measured
# against that surrogate), which moves the figure and widens its band. Name -> what it covers.
UNPROFILED_STACKS: dict[str, str] = {
    "other": "a stack autopar has no kernel profile for",
    "maxtext": "MaxText (JAX/XLA)",
    "jax": "a JAX/XLA stack (Pax/Praxis, T5X, Levanter, EasyLM)",
    "internevo": "InternEvo / InternLM training (hybrid ZeRO)",
    "colossalai": "Colossal-AI",
    "nanotron": "Hugging Face nanotron",
    "paddle": "PaddlePaddle / PaddleNLP",
    "mindspore": "MindSpore / MindFormers",
    "vescale": "veScale / VeOmni",
}
SURROGATE_PROFILE: Framework = "megatron"
# Words in a record's free-text `framework` cell that name an unprofiled stack (checked before the profiled
# stacks' words: "MaxText (JAX, FSDP)" is MaxText, not PyTorch FSDP).
UNPROFILED_MARKERS: dict[str, tuple[str, ...]] = {
    "maxtext": ("maxtext",),
    "jax": ("jax", "xla", "praxis", "paxml", "t5x", "levanter", "easylm", "flax"),
    "internevo": ("internevo", "internlm", "hybrid zero", "hybrid-zero", "hybridzero"),
    "colossalai": ("colossal",),
    "nanotron": ("nanotron",),
    "paddle": ("paddle",),
    "mindspore": ("mindspore", "mindformers"),
    "vescale": ("vescale", "veomni"),
}
STACK_NAMES: tuple[str, ...] = (*FRAMEWORKS, *UNPROFILED_STACKS)  # what --framework accepts

# ------------------------------------------------------------------------------------------------ recompute
# Megatron-Core's --recompute-granularity selective --recompute-modules (TransformerConfig.recompute_modules;
# the allowed set of core_v0.17.1 to core_v0.19.0, megatron/core/transformer/transformer_config.py
# __post_init__). "moe_act", "layernorm" and "mla_up_proj" are output-discarding checkpoints
# (tensor_parallel.CheckpointWithoutOutput: the output's storage is freed after its consumer ran and refilled
# by re-running the module before that consumer's backward); "core_attn", "mlp", "moe" and "shared_experts"
# are normal checkpoints (the module's inputs kept, its internals re-run). Megatron's default list is
# ["core_attn"], autopar's "selective".
MEGATRON_RECOMPUTE_MODULES: tuple[str, ...] = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
)  # fmt: skip
# The module sets autopar models (perf/layers.py): the four the Megatron-Bridge presets state (DeepSeek-V3:
# mla_up_proj, mla_up_proj+mlp, mlp; GPT-OSS: layernorm+moe_act), moe_act alone, the union of the three
# output-discarding ones, and "moe" (alone and with layernorm: the whole MoE layer re-run with its
# all-to-alls, as Megatron-MoE-ModelZoo's long-context Qwen3-235B runs and xtuner's "recompute=moe" state).
# "shared_experts" alone is not modelled.
RECOMPUTE_MODULE_SETS: dict[str, frozenset[str]] = {
    "selective": frozenset({"core_attn"}),
    **{m: frozenset(m.removeprefix("sel:").split("+")) for m in RECOMPUTE_MODES if m.startswith("sel:")},
}
# Memory-frugality order (least first) for the search's moves and the report's axis: full keeps least.
RECOMPUTE_BY_FRUGALITY: tuple[Recompute, ...] = (
    *RECOMPUTE_MODES[:2],
    *(m for m in RECOMPUTE_MODES[3:] if not m.startswith("remat:")),
    "full",
)


def reruns_layer_forward(rec: str | None) -> bool:
    """Whether recompute `rec` keeps only (part of) a layer's outputs and re-runs its forward inside the
    backward, so one layer's whole working set is alive while it is recomputed: full recompute and MaxText's
    remat policies (perf/remat.py)."""
    return rec == "full" or str(rec).startswith("remat:")


def recompute_modules(rec: str | None) -> frozenset[str]:
    """The Megatron-Core modules a selective recompute mode re-runs (empty for none and full)."""
    return RECOMPUTE_MODULE_SETS.get(rec or "none", frozenset())


def recompute_of_modules(modules: Iterable[str]) -> Recompute:
    """The recompute mode of a Megatron --recompute-modules list; ValueError for a set autopar does not model."""
    mods = frozenset(modules)
    for rec, ms in RECOMPUTE_MODULE_SETS.items():
        if ms == mods:
            return rec  # type: ignore[return-value]
    bad = sorted(mods - set(MEGATRON_RECOMPUTE_MODULES))
    what = f"unknown Megatron module(s) {', '.join(bad)}" if bad else "a module set autopar does not model"
    known = ", ".join("+".join(sorted(m)) for m in RECOMPUTE_MODULE_SETS.values())
    raise ValueError(f"recompute modules {'+'.join(sorted(mods))}: {what} (modelled: {known})")


# Label token of each recompute mode ("none" shows nothing): "sel-AC", "full-AC", "sel:mla_up_proj+mlp-AC".
_AC_TOKENS: dict[str, str] = {
    "selective": "sel-AC",
    "full": "full-AC",
    **{m: f"{m}-AC" for m in RECOMPUTE_MODES if m.startswith(("sel:", "remat:"))},
}


# ------------------------------------------------------------------------------------------------ schedules
@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """One pipeline schedule: which virtual-stage counts it takes, what it needs of p and m, who ships it."""

    name: str
    vpp: str  # model chunks per rank: "1", ">1" (interleaved), or an exact count such as "2" (V-shaped)
    m_multiple_of_p: bool  # Megatron's interleaved schedule historically needs m % p == 0
    p_even: bool
    m_even: bool
    source: str
    # framework -> the stack's own name for it (what its launch file sets); a stack not listed lacks it
    stacks: Mapping[str, str]
    why: str  # one phrase for the recommendation ("interleaved pipeline (virtual stages shrink the bubble)")

    def takes_vpp(self, v: int) -> bool:
        """Whether the schedule runs v model chunks per rank."""
        if self.vpp == ">1":
            return v > 1
        return self.vpp == "any" or v == int(self.vpp)


# torch.distributed.pipelining's schedule class names (torch 2.13 schedules.py get_schedule_class) are what
# torchtitan's pipeline_parallel_schedule takes; PyTorch FSDP users instantiate the Schedule* classes.
SCHEDULES: dict[str, ScheduleRule] = {
    "1f1b": ScheduleRule(
        "1f1b",
        "1",
        False,
        False,
        False,
        "Narayanan et al. 2021 §2.2.1 (PipeDream-Flush); Megatron-LM default",
        {
            "megatron": "default 1F1B",
            "megatron-legacy": "default 1F1B",
            "torchtitan": "1F1B",
            "fsdp": "Schedule1F1B",
            "deepspeed": "TrainSchedule",
        },
        "1F1B pipeline",
    ),
    "interleaved": ScheduleRule(
        "interleaved",
        ">1",
        True,
        False,
        False,
        "Narayanan et al. 2021 §2.2.2; Megatron --num-layers-per-virtual-pipeline-stage; "
        "torchtitan Interleaved1F1B",
        {
            "megatron": "--num-layers-per-virtual-pipeline-stage",
            "megatron-legacy": "--num-layers-per-virtual-pipeline-stage",
            "torchtitan": "Interleaved1F1B",
            "fsdp": "ScheduleInterleaved1F1B",
        },
        "interleaved pipeline (virtual stages shrink the bubble)",
    ),
    "zb-h1": ScheduleRule(
        "zb-h1",
        "1",
        False,
        False,
        False,
        "Qi et al. 2023 (arXiv 2401.10241) §2.1; sail-sg/zero-bubble-pipeline-parallelism (Megatron-LM fork)",
        {},
        "ZB-H1 pipeline (weight-gradient passes fill the cool-down; 1F1B's activation memory)",
    ),
    "dualpipe": ScheduleRule(
        "dualpipe",
        "1",
        False,
        True,
        True,
        "DeepSeek-V3 report (arXiv 2412.19437) §3.2.1; deepseek-ai/DualPipe",
        {},
        "DualPipe pipeline (the expert all-to-all runs under the paired micro-batch's compute; "
        "two parameter copies per stage)",
    ),
    # ZB-2p: the automatic zero-bubble schedule under a 2·p micro-batch activation budget (Qi et al., ICLR 2024
    # §3). No stack ships it: Megatron-Core has no zero-bubble schedule (sail-sg's fork does), and torch's
    # ScheduleInterleavedZeroBubble is ZB-1p over several chunks.
    "zb-2p": ScheduleRule(
        "zb-2p",
        "1",
        False,
        False,
        False,
        "Qi et al., ICLR 2024 (arXiv 2401.10241) §3; sail-sg/zero-bubble-pipeline-parallelism (Megatron-LM fork)",
        {},
        "ZB-2p pipeline (weight-gradient passes and extra warm-up forwards fill the bubble; 2x 1F1B's "
        "activation memory)",
    ),
    # ZB-V: two chunks per rank in a V (rank i holds stages i and 2p-1-i); torch 2.13 ScheduleZBVZeroBubble
    # ("ZBV requires exactly 2 stages per rank"), torchtitan's pipeline_parallel_schedule ZBVZeroBubble.
    "zb-v": ScheduleRule(
        "zb-v",
        "2",
        False,
        False,
        False,
        "Qi et al., arXiv 2401.10241 §6 (ZB-V); Qi et al. 2024, arXiv 2405.15362 (V-ZB); "
        "torch.distributed.pipelining ScheduleZBVZeroBubble",
        {"torchtitan": "ZBVZeroBubble", "fsdp": "ScheduleZBVZeroBubble"},
        "ZB-V pipeline (two V-shaped chunks per rank: near-zero bubble with 1F1B's activation memory)",
    ),
}
SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)
if get_args(Schedule) != SCHEDULE_NAMES:  # the type and the table are declared side by side: keep them one
    raise AssertionError(f"knobs.Schedule {get_args(Schedule)} differs from SCHEDULES {SCHEDULE_NAMES}")


def implied_schedule(vpp: int | None) -> str:
    """The schedule a label leaves unsaid: interleaved with virtual stages, 1F1B without."""
    return "interleaved" if vpp and vpp > 1 else "1f1b"


def stack_schedules(framework: str) -> dict[str, str]:
    """autopar schedule -> the stack's own name, for the schedules the stack ships (layouts.STACKS)."""
    return {n: r.stacks[framework] for n, r in SCHEDULES.items() if framework in r.stacks}


# ------------------------------------------------------------------------------------------------ knobs
@dataclass(frozen=True, slots=True)
class Knob:
    """One Strategy knob: where it shows (label token, CLI flag, report column) and who fills it."""

    name: str
    token: str  # the label token that carries it (LABEL_TOKENS key)
    # None means "unset" and `estimate` completes it (perf/complete.py); the rank orders Estimate.assumed
    complete_rank: int = 0  # 0 = never unset
    flag: bool = False  # an `estimate`/`launch` option named like the field (cli/common.py knob_strategy)
    column: str = ""  # its header as a column of the strategy tables (reports/table.py, search/pareto.py)
    ordered: bool = False  # its values have an order: a search move goes to the next one up or down


# Every Strategy field once (tests/core/test_knobs.py checks it), the report columns first in their order.
KNOBS: tuple[Knob, ...] = (
    Knob(Axis.TP, "TP", flag=True, column="TP", ordered=True),
    Knob(Axis.PP, "PP", flag=True, column="PP", ordered=True),
    Knob(Axis.VPP, "PP", complete_rank=1, flag=True, column="VPP", ordered=True),
    Knob(Axis.DP, "DP", flag=True, column="DP"),
    Knob(Axis.CP, "CP", flag=True, column="CP", ordered=True),
    Knob(Axis.EP, "EP", flag=True, column="EP", ordered=True),
    Knob(Axis.ETP, "ETP", complete_rank=4, flag=True, column="ETP", ordered=True),
    Knob("sp", "TP", column="SP"),
    Knob("zero", "DP", complete_rank=6, flag=True, column="ZeRO", ordered=True),
    Knob("micro_batch", "mb", complete_rank=2, flag=True, column="Micro-batch", ordered=True),
    Knob("recompute", "AC", complete_rank=3, flag=True, column="Recompute", ordered=True),
    Knob("pp_schedule", "PP", complete_rank=5, column="PP schedule"),
    Knob("pp_first_layers", "first"),
    Knob("pp_last_layers", "last"),
    Knob("pp_account_embedding", "split"),
    Knob("pp_account_loss", "split"),
    Knob("cp_comm", "CP"),
    Knob("dp_shard", "HSDP"),
    Knob("optimizer_states", "states"),
    Knob("optimizer_offload", "offload"),
    Knob("activation_offload_layers", "AO", complete_rank=7, flag=True, ordered=True),
)
KNOB_NAMES: tuple[str, ...] = tuple(str(k.name) for k in KNOBS)  # plain strings (Axis members are StrEnum)
COMPLETABLE_KNOBS: tuple[str, ...] = tuple(
    str(k.name) for k in sorted(KNOBS, key=lambda k: k.complete_rank) if k.complete_rank
)
FLAG_KNOBS: tuple[str, ...] = tuple(str(k.name) for k in KNOBS if k.flag)
COLUMN_KNOBS: tuple[str, ...] = tuple(str(k.name) for k in KNOBS if k.column)  # in KNOBS order
ORDERED_KNOBS: tuple[str, ...] = tuple(str(k.name) for k in KNOBS if k.ordered)
COLUMN_HEADERS: dict[str, str] = {str(k.name): k.column for k in KNOBS if k.column}


# ------------------------------------------------------------------------------------------------ label
# One label token: its pattern, how a strategy writes it ("" = no token) and how a match reads back (fields).
@dataclass(frozen=True, slots=True)
class LabelToken:
    key: str
    pattern: re.Pattern[str]
    write: Callable[[Any], str]
    read: Callable[[re.Match[str]], dict[str, Any]]


def _alt(values: tuple[str, ...]) -> str:
    return "|".join(re.escape(v) for v in values)


def _pp(s: Any) -> str:
    if s.pp <= 1:
        return ""
    tok = f"PP{s.pp}" + (f"v{s.vpp}" if s.vpp and s.vpp > 1 else "")
    shown = s.pp_schedule not in (implied_schedule(s.vpp), None)
    return tok + (f"-{s.pp_schedule}" if shown else "")


def _read_pp(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {Axis.PP: int(m[1])}
    if m[2]:
        out[Axis.VPP] = int(m[2])
    out["pp_schedule"] = m[3] or implied_schedule(out.get(Axis.VPP))
    return out


def _dp(s: Any) -> str:
    z = f"Z{s.zero}" if s.zero else ""
    if s.dp:
        return f"DP{s.dp}" + (f"/{z}" if z else "")
    return z


def _split(s: Any) -> str:
    both = ("emb-split" if s.pp_account_embedding else "", "loss-split" if s.pp_account_loss else "")
    return " ".join(x for x in both if x)


def _offload(s: Any) -> str:
    f = s.optimizer_offload
    return "offload" + (f"{f:g}" if f != 1.0 else "") if f else ""


_REC_BY_TOKEN = {v.removesuffix("-AC"): k for k, v in _AC_TOKENS.items()}
_SCHED_RX = _alt(SCHEDULE_NAMES)

LABEL_TOKENS: tuple[LabelToken, ...] = (
    LabelToken(
        "TP",
        re.compile(r"^TP(\d+)(\+SP)?$"),
        lambda s: f"TP{s.tp}" + ("+SP" if s.sp and s.tp > 1 else ""),
        lambda m: {Axis.TP: int(m[1]), "sp": bool(m[2])},
    ),
    LabelToken("PP", re.compile(rf"^PP(\d+)(?:v(\d+))?(?:-({_SCHED_RX}))?$"), _pp, _read_pp),
    LabelToken(
        "first",
        re.compile(r"^first(\d+)$"),
        lambda s: f"first{s.pp_first_layers}" if s.pp_first_layers is not None else "",
        lambda m: {"pp_first_layers": int(m[1])},
    ),
    LabelToken(
        "last",
        re.compile(r"^last(\d+)$"),
        lambda s: f"last{s.pp_last_layers}" if s.pp_last_layers is not None else "",
        lambda m: {"pp_last_layers": int(m[1])},
    ),
    LabelToken(
        "split",
        re.compile(r"^(emb|loss)-split$"),
        _split,
        lambda m: {f"pp_account_{'embedding' if m[1] == 'emb' else 'loss'}": True},
    ),
    LabelToken(
        "CP",
        re.compile(rf"^CP(\d+)(?:-({_alt(CP_COMM_NAMES)}))?$"),
        lambda s: f"CP{s.cp}" + (f"-{s.cp_comm}" if s.cp_comm != "p2p" else "") if s.cp > 1 else "",
        lambda m: {Axis.CP: int(m[1]), "cp_comm": m[2] or "p2p"},
    ),
    LabelToken(
        "EP",
        re.compile(r"^EP(\d+)$"),
        lambda s: f"EP{s.ep}" if s.ep > 1 else "",
        lambda m: {Axis.EP: int(m[1])},
    ),
    LabelToken(
        "ETP",
        re.compile(r"^ETP(\d+)$"),
        lambda s: f"ETP{s.etp}" if s.etp is not None and s.etp != s.tp else "",
        lambda m: {Axis.ETP: int(m[1])},
    ),
    LabelToken(
        "DP", re.compile(r"^(?:DP(\d+)/)?Z(\d)$|^DP(\d+)$"), _dp, lambda m: _read_dp(m[1] or m[3], m[2] or 0)
    ),
    LabelToken(
        "HSDP",
        re.compile(r"^HSDP(\d+)$"),
        lambda s: f"HSDP{s.dp_shard}" if s.dp_shard is not None else "",
        lambda m: {"dp_shard": int(m[1])},
    ),
    LabelToken(  # an unset micro-batch (None) shows nothing
        "mb",
        re.compile(r"^mb(\d+)$"),
        lambda s: f"mb{s.micro_batch}" if s.micro_batch is not None else "",
        lambda m: {"micro_batch": int(m[1])},
    ),
    LabelToken(  # "none" and unset (None) show nothing
        "AC",
        re.compile(rf"^({_alt(tuple(_REC_BY_TOKEN))})-AC$"),
        lambda s: _AC_TOKENS.get(s.recompute, ""),
        lambda m: {"recompute": _REC_BY_TOKEN[m[1]]},
    ),
    LabelToken(
        "states",
        re.compile(rf"^({_alt(OPTIMIZER_STATES)})-states$"),
        lambda s: f"{s.optimizer_states}-states" if s.optimizer_states is not None else "",
        lambda m: {"optimizer_states": m[1]},
    ),
    LabelToken(
        "offload",
        re.compile(r"^offload(\d+(?:\.\d*)?(?:e-?\d+)?)?$"),
        _offload,
        lambda m: {"optimizer_offload": float(m[1] or 1.0)},
    ),
    LabelToken(
        "AO",
        re.compile(r"^AO(\d+)$"),
        lambda s: f"AO{s.activation_offload_layers}" if s.activation_offload_layers else "",
        lambda m: {"activation_offload_layers": int(m[1])},
    ),
)
_TOKENS_BY_KEY = {t.key: t for t in LABEL_TOKENS}
_WRITERS = tuple(t.write for t in LABEL_TOKENS)
if {k.token for k in KNOBS} != set(_TOKENS_BY_KEY):  # every knob has a token, every token a knob
    raise AssertionError("knobs.KNOBS and LABEL_TOKENS name different tokens")


def _read_dp(dp: str | None, zero: str | int) -> dict[str, Any]:
    return ({Axis.DP: int(dp)} if dp else {}) | {"zero": int(zero)}


def format_label(s: Any) -> str:
    """A strategy's compact label, e.g. 'TP4+SP PP2v2 CP2 EP8 ETP1 DP8/Z1 mb1 sel-AC' (Strategy.label)."""
    return " ".join([tok for write in _WRITERS if (tok := write(s))])


LABEL_EXAMPLE = "TP4+SP PP2v2 CP2 EP8 DP8/Z1 mb1 sel-AC"


def parse_label(label: str) -> dict[str, Any]:
    """The Strategy fields a label sets (zero 0 unless a Z token says otherwise), in any case ('tp4+sp pp2v2
    dp8/z1' = 'TP4+SP PP2v2 DP8/Z1'), or a key=value spec ('DP=4,TP=8,PP=2'); ValueError naming the first token
    or key no pattern reads."""
    if "=" in label:
        return _parse_key_values(label)
    fields: dict[str, Any] = {"zero": 0}
    for tok in label.split():
        for pattern, read in _READERS:
            m = pattern.match(tok.lower())
            if m:
                fields.update(read(m))
                break
        else:
            raise ValueError(
                f"strategy label token '{tok}' not understood{_token_hint(tok)} (expected e.g. '{LABEL_EXAMPLE}')"
            )
    return fields


# Labels read in any case: each token is matched lower-cased against its pattern made case-blind, so the
# words a token captures (schedules, CP variants, recompute modes, optimizer states: lower case, checked
# here) read as declared.
_READERS = tuple((re.compile(t.pattern.pattern, re.IGNORECASE), t.read) for t in LABEL_TOKENS)
if any(w != w.lower() for w in (*SCHEDULE_NAMES, *CP_COMM_NAMES, *_REC_BY_TOKEN, *OPTIMIZER_STATES)):
    raise AssertionError("a label word has upper case: parse_label reads tokens lower-cased")

# key=value strategy specs ('DP=4,TP=8,PP=2', 'tp=8 pp=2 dp=4 mb=1 zero=1'): keys in any case, pairs split by
# commas or spaces. Each key sets the Strategy field its label token sets; a knob's own name (micro_batch,
# pp_schedule, ...) is a key too. Left out, a field reads as when its label token is left out (no dp: the
# commands derive it from the GPU count; zero 0).
STRATEGY_KEYS: dict[str, str] = {
    **{a.value: a.value for a in (Axis.TP, Axis.PP, Axis.VPP, Axis.DP, Axis.CP, Axis.EP, Axis.ETP)},
    "sp": "sp",
    "zero": "zero",
    "mb": "micro_batch",
    "recompute": "recompute",
    "schedule": "pp_schedule",
    "cp_comm": "cp_comm",
    "hsdp": "dp_shard",
    "first": "pp_first_layers",
    "last": "pp_last_layers",
    "emb_split": "pp_account_embedding",
    "loss_split": "pp_account_loss",
    "states": "optimizer_states",
    "offload": "optimizer_offload",
    "ao": "activation_offload_layers",
}
_FIELD_OF_KEY = {**{n: n for n in KNOB_NAMES}, **STRATEGY_KEYS}
if set(_FIELD_OF_KEY.values()) != set(KNOB_NAMES):
    raise AssertionError("knobs.STRATEGY_KEYS names a field that is no knob")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_FLAG_FIELDS = ("sp", "pp_account_embedding", "pp_account_loss")
_WORD_FIELDS: dict[str, tuple[str, ...]] = {
    "pp_schedule": SCHEDULE_NAMES,
    "cp_comm": CP_COMM_NAMES,
    "optimizer_states": OPTIMIZER_STATES,
    "recompute": RECOMPUTE_MODES,
}


def _parse_key_values(spec: str) -> dict[str, Any]:
    """The Strategy fields of a key=value spec (parse_label's second form)."""
    pairs = re.split(r"[,\s]+", re.sub(r"\s*=\s*", "=", spec.strip()))
    tokens = [p for p in pairs if p and "=" not in p]
    if tokens:
        raise ValueError(
            f"strategy {spec!r} mixes a label token ('{tokens[0]}') with key=value pairs: write one form, "
            "e.g. 'TP8 PP2 DP4' or 'tp=8,pp=2,dp=4'"
        )
    fields: dict[str, Any] = {"zero": 0}
    given: set[str] = set()
    for pair in filter(None, pairs):
        key, _, value = pair.partition("=")
        field = _FIELD_OF_KEY.get(key.lower().replace("-", "_"))
        if field is None:
            close = difflib.get_close_matches(key.lower(), list(_FIELD_OF_KEY), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ValueError(f"strategy key '{key}' not understood{hint} (keys: {', '.join(STRATEGY_KEYS)})")
        if field in given:
            raise ValueError(f"strategy key '{key}' is given twice in {spec!r}")
        given.add(field)
        fields[field] = _key_value(field, key, value)
    if given & {Axis.PP.value, Axis.VPP.value} and "pp_schedule" not in given:  # as the PP token reads
        fields["pp_schedule"] = implied_schedule(fields.get(Axis.VPP.value))
    return fields


def _key_value(field: str, key: str, text: str) -> Any:
    """The value of one key=value pair, read as its field's type; ValueError naming the pair otherwise."""
    v = text.strip().lower()
    if field in _FLAG_FIELDS:
        if v in _TRUE + _FALSE:
            return v in _TRUE
        expected = "1 or 0 (true/false, yes/no, on/off)"
    elif field in _WORD_FIELDS:
        word = _REC_BY_TOKEN.get(v.removesuffix("-ac"), v) if field == "recompute" else v
        if word in _WORD_FIELDS[field]:
            return word
        expected = f"one of {', '.join(_WORD_FIELDS[field])}"
    elif field == "optimizer_offload":
        if re.fullmatch(r"\d+(?:\.\d*)?(?:e-?\d+)?", v):
            return float(v)
        expected = "a fraction such as 0.5"
    elif v.isascii() and v.isdigit():
        return int(v)
    else:
        expected = "a whole number"
    raise ValueError(f"strategy {key}={text!r}: expected {expected}")


def _token_forms() -> tuple[str, ...]:
    """Every token shape a label may hold, numbers written as '#' (for the close-match hint)."""
    forms = ["TP#", "TP#+SP", "PP#", "PP#v#", "first#", "last#", "emb-split", "loss-split", "CP#", "EP#"]
    forms += [f"PP#-{n}" for n in SCHEDULE_NAMES] + [f"PP#v#-{n}" for n in SCHEDULE_NAMES]
    forms += [f"CP#-{c}" for c in CP_COMM_NAMES] + ["ETP#", "DP#/Z#", "Z#", "DP#", "HSDP#", "mb#"]
    forms += [f"{r}-AC" for r in _REC_BY_TOKEN] + [f"{o}-states" for o in OPTIMIZER_STATES]
    return (*forms, "offload", "offload#", "AO#")


def token_candidates(tok: str) -> list[str]:
    """Every token shape (_token_forms) written with `tok`'s own numbers, in order ('1' where it has too few)."""
    numbers = re.findall(r"\d+(?:\.\d+)?", tok)

    def fill(form: str) -> str:
        it = iter(numbers)
        return re.sub("#", lambda _: next(it, "1"), form)

    return [fill(f) for f in _token_forms()]


def _token_hint(tok: str) -> str:
    """'; did you mean 'CP2-allgather'?' for a mistyped token: the closest known shape, its numbers kept."""
    close = difflib.get_close_matches(tok, token_candidates(tok), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
