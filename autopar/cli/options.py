"""Every option of the problem (model, cluster, workload, search settings), declared once for every command.

How: a registry of `inspect.Parameter`s (name, typer `Annotated` type, default) and a signature-building
decorator, `with_options`. A command lists the registry keys it takes (plus its own parameters) in the order
its `--help` shows them; the decorator gives the function that signature, so typer sees ordinary parameters,
and calls the body with one `Flags` object. `problem_of(flags)` turns whatever problem options a command has
into the config tree (`autopar.problem.Problem`), the one builder every command uses.

Why a decorator rather than only shared `Annotated` aliases: the aliases alone still restate ~20 parameters
(name, alias, default) in every command's signature, which is what made those functions 60-215 lines; here
each command names its options in one tuple and each default comes from the tree (`autopar.problem`).

A key `name:variant` declares another option behind the same flag where the meaning differs (one GPU count
for an estimate, a range for a search); the parameter is still called `name`.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from autopar.catalog.prices import TIERS
from autopar.defaults import (
    DEFAULT_BUDGET,
    DEFAULT_FRAMEWORK,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_GPU,
    DEFAULT_GPUS,
    DEFAULT_MEMORY_BAND,
    DEFAULT_MIN_HEADROOM_GIB,
    DEFAULT_MODEL,
    DEFAULT_OBJECTIVES,
    DEFAULT_PRECISION,
    DEFAULT_SAMPLER,
    DEFAULT_SEED,
    DEFAULT_SEQ_LEN,
    DEFAULT_TIER,
    DEFAULT_WHATIF_BUDGET,
)
from autopar.errors import SpecError
from autopar.knobs import SCHEDULE_NAMES, Axis
from autopar.units import (
    BINARY_SUFFIX,
    DECIMAL_SUFFIX,
    expand_count_suffixes,
    parse_seq_len,
    parse_whole_count,
)

if TYPE_CHECKING:
    from autopar.problem import ClusterChoice, Problem

_KW = inspect.Parameter.KEYWORD_ONLY
HEADROOM_DEFAULT = f"{DEFAULT_MIN_HEADROOM_GIB:g}GiB"


def opt(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    """One command parameter (typer reads its `Annotated` type and default)."""
    return inspect.Parameter(name, _KW, annotation=annotation, default=default)


def _o(*decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, **kw)


_MODEL_HELP = f"Model name/alias or path to a Hugging Face config.json \\[default: {DEFAULT_MODEL}]."
_PARAMS: list[tuple[str, Any, Any]] = [
    # --- the model ---
    ("model", Annotated[str | None, _o("--model", help=_MODEL_HELP)], None),
    ("model:short", Annotated[str | None, _o("--model", "-m", help=_MODEL_HELP)], None),  # whatif: also -m
    # --- the cluster ---
    (
        "gpu",
        Annotated[
            str | None,
            _o(
                help="GPU type (see `autopar gpus`) or a YAML/JSON file of GPU fields (README: custom GPU) "
                f"\\[default: {DEFAULT_GPU}]"
            ),
        ],
        None,
    ),
    (
        "gpu:list",
        Annotated[
            str | None,
            _o(
                help="GPU type(s) or YAML/JSON GPU file(s), comma list makes it a search dimension "
                f"\\[default: {DEFAULT_GPU}]."
            ),
        ],
        None,
    ),
    (
        "gpus",
        Annotated[
            int | None, _o(help=f"Number of GPUs, e.g. 64 or 16K (= 16,384) \\[default: {DEFAULT_GPUS}]")
        ],
        None,
    ),
    (
        "gpus:range",
        Annotated[
            str | None,
            _o(
                help="GPU count: N, N,M,..., LOW..HIGH (powers of two) or LOW..HIGH:STEP; 1K = 1,024 "
                f"\\[default: {DEFAULT_GPUS}]."
            ),
        ],
        None,
    ),
    (
        "gpus:fix",
        Annotated[
            int | None,
            _o(
                help="Number of GPUs; with --goal gpus the count to move to \\[default: the label's "
                f"tp·pp·cp·dp, else {DEFAULT_GPUS}]"
            ),
        ],
        None,
    ),
    (
        "gpus_per_node",
        Annotated[
            int | None, _o("--gpus-per-node", help="GPUs per host (server or tray) \\[default: GPU's].")
        ],
        None,
    ),
    (
        "nvlink_domain",
        Annotated[
            int | None,
            _o(
                "--nvlink-domain",
                help="GPUs sharing one NVLink fabric (GB200 NVL72 = 72, NVL36 = 36; DGX H100 = 8) "
                "\\[default: the GPU's]. The GPU count need not be a multiple of it.",
            ),
        ],
        None,
    ),
    (
        "cluster_name",
        Annotated[
            str | None,
            _o(
                "--cluster",
                help="System shorthand NAME:COUNT, e.g. gb200-nvl72:4 (4 racks = 288 GPUs) or dgx-h100:32 "
                "(32 nodes); sets the GPU, the count, GPUs per host and the NVLink domain (`autopar "
                "clusters`). detect:COUNT = COUNT hosts like this one (`autopar topology`); "
                "detect@DIR:COUNT reads a folder recorded with `autopar topology --save DIR` (also: "
                "$AUTOPAR_TOPOLOGY_DIR).",
            ),
        ],
        None,
    ),
    (
        "internode_gbps",
        Annotated[
            float | None,
            _o("--internode-gbps", help="NIC GB/s per GPU per direction \\[default: GPU's]."),
        ],
        None,
    ),
    (
        "transport",
        Annotated[
            str | None,
            _o(
                "--transport",
                help="Scale-out NIC transport: infiniband, roce or efa (AWS Elastic Fabric Adapter); sets how "
                "a flex (DeepEP/HybridEP) MoE dispatcher reaches the NICs \\[default: the --cluster "
                "system's, else infiniband].",
            ),
        ],
        None,
    ),
    # --- the workload ---
    (
        "seq_len",
        Annotated[str, _o("--seq-len", help="Sequence length in tokens: 8192, or 8k (binary: 8,192).")],
        str(DEFAULT_SEQ_LEN),
    ),
    (
        "global_batch",
        Annotated[
            int | None,
            _o(
                "--global-batch",
                help=f"Global batch (sequences per step; 2K = 2,048) \\[default: {DEFAULT_GLOBAL_BATCH}].",
            ),
        ],
        None,
    ),
    ("precision", Annotated[str, _o(help="GEMM precision: bf16 or fp8.")], DEFAULT_PRECISION),
    (
        "precision:list",
        Annotated[str, _o("--precision", help="bf16, fp8 or bf16,fp8 (a search dimension).")],
        DEFAULT_PRECISION,
    ),
    (
        "framework",
        Annotated[
            str,
            _o(
                "--framework",
                help="Software stack: megatron, megatron-legacy, torchtitan, fsdp or deepspeed "
                "(sets kernel fusion, attention kernel, recompute semantics); a stack autopar has no "
                "profile for (other, maxtext, jax, internevo, colossalai, nanotron, paddle, mindspore, "
                "vescale) is estimated with Megatron's mechanics and the unprofiled-stack prior (a "
                "slower centre, a wider band); other is the sober prior for any stack.",
            ),
        ],
        DEFAULT_FRAMEWORK,
    ),
    (
        "tp_comm_overlap",
        Annotated[
            bool | None,
            _o(
                "--tp-comm-overlap/--no-tp-comm-overlap",
                help="Overlap TP collectives with GEMMs (Megatron --tp-comm-overlap, torchtitan async "
                "TP); needs sequence parallelism. Default: on for megatron, as its published recipes run "
                "it; off for the other stacks.",
                show_default=False,
            ),
        ],
        None,
    ),
    (
        "tokens",
        Annotated[str | None, _o(help="Token budget, e.g. 1T (for time/cost to train).")],
        None,
    ),
    (
        "memory_savers",
        Annotated[
            str,
            _o(
                "--memory-savers",
                help="Memory savers the search may choose, comma list of offload (CPU optimizer offload), "
                "bf16_states, 8bit_states (optimizer-state precision), act_offload (activation CPU offload, "
                "Megatron, pp=1), recompute_modules (Megatron's selective recompute modules); only those the "
                "--framework ships are offered; empty = none.",
            ),
        ],
        "",
    ),
    (
        "fp8_recipe",
        Annotated[
            str | None,
            _o(
                "--fp8-recipe",
                help="FP8 scaling recipe with --precision fp8: delayed (Transformer Engine default), "
                "current, rowwise (torchao) or mxfp8 (Blackwell) \\[default: delayed].",
            ),
        ],
        None,
    ),
    (
        "moe_imbalance",
        Annotated[
            float | None,
            _o(
                "--moe-imbalance",
                min=1.0,
                help="Routed tokens on the busiest EP rank / the mean (MoE models) \\[default: 1.1; 1.0 = "
                "force-balanced routing].",
            ),
        ],
        None,
    ),
    (
        "moe_capacity_factor",
        Annotated[
            float | None,
            _o(
                "--moe-capacity-factor",
                min=0.01,
                help="Expert capacity factor: tokens beyond it are dropped (MoE models) \\[default: dropless].",
            ),
        ],
        None,
    ),
    (
        "moe_dispatcher",
        Annotated[
            str | None,
            _o(
                "--moe-dispatcher",
                help="MoE token dispatcher: alltoall (one copy per routed expert) or flex (DeepEP/HybridEP: "
                "one copy per destination rank, hierarchical across NVLink domains) \\[default: alltoall].",
            ),
        ],
        None,
    ),
    (
        "moe_ep_overlap",
        Annotated[
            bool,
            _o(
                "--moe-ep-overlap",
                help="Dispatch/combine overlap another micro-batch's compute (Megatron "
                "--overlap-moe-expert-parallel-comm).",
            ),
        ],
        False,
    ),
    (
        "cuda_graphs",
        Annotated[
            bool,
            _o(
                "--cuda-graphs",
                help="Layers run as CUDA graphs (no CPU launch floor; Megatron --cuda-graph-impl).",
            ),
        ],
        False,
    ),
    (
        "grad_reduce_dtype",
        Annotated[
            str | None,
            _o(
                "--grad-reduce-dtype",
                help="Main-gradient buffer and data-parallel reduction dtype outside ZeRO-3: fp32 or bf16 "
                "(Megatron --grad-reduce-in-bf16) \\[default: the stack's recipes: bf16 for megatron, as "
                "Megatron-Bridge's performance configs run; fp32 elsewhere].",
            ),
        ],
        None,
    ),
    (
        "optimizer",
        Annotated[
            str | None,
            _o(
                "--optimizer",
                help="Training optimizer: adam (fp32 m, v: 12 B a parameter with the fp32 master), "
                "adam_bf16_states (8), adam_8bit (6), sgd (momentum: 8), adafactor (factored second moment, no "
                "momentum: 4), lion (one momentum: 8) or came (momentum + factored statistics: 8) \\[default: adam].",
            ),
        ],
        None,
    ),
    (
        "master_weights",
        Annotated[
            str | None,
            _o(
                "--master-weights",
                help="The optimizer's master copy of the weights: fp32 (4 B a parameter), fp16 (2 B; Megatron "
                "--main-params-dtype fp16) or bf16 (none: the bf16 weights are updated in place) \\[default: fp32].",
            ),
        ],
        None,
    ),
    (
        "finetune",
        Annotated[
            str | None,
            _o(
                "--finetune",
                help="What a step trains: full (every weight: pre-training, SFT) or lora (base weights frozen, "
                "rank-r adapters on linear_qkv, linear_proj, linear_fc1 and linear_fc2 of every layer, as "
                "Megatron-Bridge's LoRA: no base-weight gradients, optimizer states or weight-gradient GEMMs) "
                "\\[default: full].",
            ),
        ],
        None,
    ),
    (
        "lora_rank",
        Annotated[
            int | None,
            _o(
                "--lora-rank",
                help="LoRA adapter rank, with --finetune lora \\[default: 32, Megatron-Bridge's].",
            ),
        ],
        None,
    ),
    (
        "allow_uneven",
        Annotated[bool, _o(help="Accept layers not divisible by pp*vpp (uneven pipeline stages).")],
        False,
    ),
    # --- strategy knobs of `estimate` (unset: the best feasible, as optimize would pick) ---
    (
        "strategy",
        Annotated[
            str | None,
            _o(
                "--strategy",
                help="A strategy label as optimize prints it, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1 sel-AC' (any "
                "case), or key=value pairs, e.g. 'tp=4,sp=1,pp=2,vpp=2,dp=8,zero=1' (instead of the knob flags)",
            ),
        ],
        None,
    ),
    ("tp", Annotated[int, _o(help="Tensor parallel size")], 1),
    ("pp", Annotated[int, _o(help="Pipeline parallel size")], 1),
    ("cp", Annotated[int, _o(help="Context parallel size")], 1),
    (
        "cp_comm",
        Annotated[str, _o(help="Context-parallel variant: p2p, a2a, allgather or a2a+p2p (with --cp > 1)")],
        "p2p",
    ),
    ("ep", Annotated[int, _o(help="Expert parallel size")], 1),
    (
        "etp",
        Annotated[int | None, _o(help="Expert tensor parallel size (unset: the best feasible, as optimize)")],
        None,
    ),
    (
        "vpp",
        Annotated[
            int | None,
            _o(help="Virtual pipeline stages per rank (interleaved when > 1; unset: best feasible)"),
        ],
        None,
    ),
    (
        "pp_schedule",
        Annotated[str | None, _o(help=f"{', '.join(SCHEDULE_NAMES)} (unset: best feasible)")],
        None,
    ),
    (
        "sp",
        Annotated[bool | None, _o("--sp/--no-sp", help="Sequence parallelism (default: on when tp > 1)")],
        None,
    ),
    (
        "zero",
        Annotated[
            int | None,
            _o(help="0 DDP, 1 distributed optimizer/ZeRO-1, 2 ZeRO-2, 3 FSDP/ZeRO-3 (unset: best feasible)"),
        ],
        None,
    ),
    (
        "micro_batch",
        Annotated[int | None, _o(help="Micro-batch size in sequences (unset: best feasible)")],
        None,
    ),
    (
        "recompute",
        Annotated[
            str | None,
            _o(
                help="none, selective, full, or Megatron's recompute modules as sel:MOD+MOD, e.g. "
                "sel:mla_up_proj, sel:layernorm+moe_act (unset: best feasible)"
            ),
        ],
        None,
    ),
    (
        "activation_offload_layers",
        Annotated[
            int,
            _o(
                help="Layers whose activations go to CPU memory (Megatron --cpu-offloading-num-layers; "
                "needs pp=1 and recompute none)"
            ),
        ],
        0,
    ),
    # --- the search ---
    ("budget", Annotated[int, _o(help="Distinct strategies to evaluate (2k = 2,000).")], DEFAULT_BUDGET),
    (
        "budget:whatif",
        Annotated[int, _o("--budget", help="Search trials per option (2k = 2,000).")],
        DEFAULT_WHATIF_BUDGET,
    ),
    (
        "objectives",
        Annotated[str, _o(help="2-4 of throughput,headroom,cost,step_time,mfu.")],
        ",".join(DEFAULT_OBJECTIVES),
    ),
    (
        "seed",
        Annotated[int, _o("--seed", help="Random seed (same seed + inputs = same answer).")],
        DEFAULT_SEED,
    ),
    (
        "sampler",
        Annotated[
            str,
            _o(
                help="auto (exact sweep up to 1M points, else NSGA-II over layouts with exact inner knobs; "
                "nsga2 with --storage), nsga2, exhaustive or hybrid."
            ),
        ],
        DEFAULT_SAMPLER,
    ),
    (
        "min_headroom",
        Annotated[
            str,
            _o(
                "--min-headroom",
                help="Free memory per GPU a strategy must leave on top of the memory margin, e.g. 4GiB (the "
                "margin: the memory band's upper end on a stack whose peaks it measured and for top-k > 2 MoE "
                "on megatron, else 2 GiB).",
            ),
        ],
        HEADROOM_DEFAULT,
    ),
    (
        "memory_band",
        Annotated[
            bool,
            _o(
                "--memory-band/--no-memory-band",
                help="A strategy fits only if the upper end of its peak-memory band (90% one-sided) does, on "
                "the stacks whose measured peaks the band was fitted on and for top-k > 2 MoE on megatron "
                "(others: 2 GiB free); "
                "--no-memory-band: the point estimate plus --min-headroom.",
            ),
        ],
        DEFAULT_MEMORY_BAND,
    ),
    (
        "fix",
        Annotated[
            list[str] | None,
            _o(
                "--fix",
                help="Search only KNOB=VALUE, e.g. tp=8 (repeatable; knobs: tp pp cp ep etp dp vpp ...)",
            ),
        ],
        None,
    ),
    (
        "forbid",
        Annotated[
            list[str] | None,
            _o(
                help="Pin an axis to 1 or turn a feature off (cp, ep, pp, hsdp, ...), or drop one value "
                "(cp_comm=allgather); repeatable"
            ),
        ],
        None,
    ),
    (
        "prices",
        Annotated[
            Path | None,
            _o(
                "--prices",
                help="YAML/CSV price file overriding the built-in prices (gpu,tier,usd_per_gpu_hour).",
            ),
        ],
        None,
    ),
    ("tier", Annotated[str, _o("--tier", help=f"Price tier: {', '.join(TIERS)}.")], DEFAULT_TIER),
    # --- the model's correction, the report ---
    (
        "calibration",
        Annotated[
            Path | None,
            _o(
                "--calibration",
                help="Calibration model from `autopar calibrate fit` (default: the built-in model "
                "trained on the shipped published runs).",
            ),
        ],
        None,
    ),
    (
        "no_calibration",
        Annotated[
            bool, _o("--no-calibration", help="Use the analytical model alone (no learned correction).")
        ],
        False,
    ),
    (
        "plotly",
        Annotated[
            str,
            _o(
                "--plotly",
                help="How the --out report loads plotly.js: inline (self-contained, a compressed partial "
                "bundle, ~0.6 MB) or cdn (smaller file, needs network).",
            ),
        ],
        "inline",
    ),
]
# Counts take size suffixes (issue 46 item 5; units.py states the convention): an option of one of these names
# declared `int` (here or in a command's own options: launch's knobs, whatif's --max-gpus) is read as text by
# typer and by `with_options` as that count, inside the command's error boundary, so a bad value is one line
# naming the option and the command body still gets an int. Name -> (what it counts, its suffix table). The
# ranges stay the readers' (a plain integer reads as before: --gpus -4 is refused by the cluster's check).
COUNT_OPTIONS: dict[str, tuple[str, dict[str, int]]] = {
    "gpus": ("GPU count", BINARY_SUFFIX),
    "max_gpus": ("GPU count", BINARY_SUFFIX),
    "gpus_per_node": ("GPU count", BINARY_SUFFIX),
    "nvlink_domain": ("GPU count", BINARY_SUFFIX),
    "global_batch": ("batch size in sequences", BINARY_SUFFIX),
    "micro_batch": ("micro-batch size in sequences", BINARY_SUFFIX),
    **{a.value: ("parallel size", BINARY_SUFFIX) for a in (Axis.TP, Axis.PP, Axis.CP, Axis.EP, Axis.ETP)},
    **{a.value: ("parallel size", BINARY_SUFFIX) for a in (Axis.DP, Axis.VPP)},
    "activation_offload_layers": ("layer count", DECIMAL_SUFFIX),
    "budget": ("number of trials", DECIMAL_SUFFIX),
}


READ_AS_COUNT = "autopar: read as a count"  # the mark `_as_text` leaves in a count's Annotated metadata


def _as_text(p: inspect.Parameter) -> inspect.Parameter:
    """A count option (COUNT_OPTIONS) declared `int` or `int | None`, declared as text for typer instead and
    marked READ_AS_COUNT (typer reads only its OptionInfo); any other parameter as it is."""
    args = get_args(p.annotation)
    if p.name not in COUNT_OPTIONS or not args or args[0] not in (int, int | None):
        return p
    text = str if args[0] is int else str | None
    info = copy.copy(args[1])  # a command's copy: the metavar only
    info.metavar = info.metavar or "<count>"
    return p.replace(annotation=Annotated[text, info, READ_AS_COUNT])


def _is_count(p: inspect.Parameter) -> bool:
    return READ_AS_COUNT in get_args(p.annotation)[1:]


OPTIONS: dict[str, inspect.Parameter] = {
    key: _as_text(opt(key.partition(":")[0], a, d)) for key, a, d in _PARAMS
}

# The option sets several commands share, in their --help order.
CLUSTER = ("gpus_per_node", "nvlink_domain")
WORKLOAD_EXTRAS = (
    "fp8_recipe",
    "moe_imbalance",
    "moe_capacity_factor",
    "moe_dispatcher",
    "moe_ep_overlap",
    "cuda_graphs",
    "grad_reduce_dtype",
    "optimizer",
    "master_weights",
    "finetune",
    "lora_rank",
)
SHAPE = ("cluster_name", "internode_gbps", "transport", "seq_len", "global_batch")
STACK = ("framework", "tp_comm_overlap")
CALIBRATION = ("calibration", "no_calibration")
# The options of one problem evaluated on one cluster (estimate, compare, fix): model, cluster, workload.
SINGLE = ("model", "gpu", "gpus", *CLUSTER, *WORKLOAD_EXTRAS, *SHAPE, "precision", *STACK)
KNOBS = (
    *(
        "strategy",
        "tp",
        "pp",
        "cp",
        "cp_comm",
        "ep",
        "etp",
        "vpp",
        "pp_schedule",
        "sp",
        "zero",
        "micro_batch",
    ),
    *("recompute", "activation_offload_layers"),
)


class Flags(SimpleNamespace):
    """A command's option values by parameter name (what typer passed)."""

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


def _read_text(values: dict[str, Any], counts: frozenset[str]) -> dict[str, Any]:
    """The option values with each count read (COUNT_OPTIONS) and a model named by its size alone resolved."""
    out = dict(values)
    for name in counts & out.keys():
        what, suffixes = COUNT_OPTIONS[name]
        if out[name] is not None:
            example = "64, 16K" if suffixes is BINARY_SUFFIX else "500, 2k"
            out[name] = parse_whole_count(out[name], name.replace("_", "-"), what, suffixes, example)
    if isinstance(out.get("model"), str):
        out["model"] = _model_of_size(out["model"])
    return out


def _model_of_size(model: str) -> str:
    """`--model 405B`: the one built-in preset of that size, said on stderr (several: a one-line error)."""
    from autopar.catalog.loader import model_for_size

    preset = model_for_size(model)
    if preset is None:
        return model
    from autopar.cli.app import err_console

    err_console.print(f"--model {model}: {preset}, the one built-in preset of that size", highlight=False)
    return preset


def with_options(*params: str | inspect.Parameter) -> Callable[[Callable[[Flags], Any]], Callable[..., Any]]:
    """Give a `def cmd(f: Flags)` the signature of `params` (registry keys or `opt(...)`s, in --help order);
    counts given as text are read first (COUNT_OPTIONS)."""
    declared = [OPTIONS[p] if isinstance(p, str) else p for p in params]
    shown = [_as_text(p) for p in declared]  # the registry's are already (OPTIONS): the same objects
    sig = inspect.Signature(shown)
    counts = frozenset(p.name for p in shown if _is_count(p))

    def decorator(fn: Callable[[Flags], Any]) -> Callable[..., Any]:
        def command(**kwargs: Any) -> Any:
            return fn(Flags(**_read_text(kwargs, counts)))

        command.__name__, command.__qualname__ = fn.__name__, fn.__qualname__
        command.__doc__, command.__module__ = fn.__doc__, fn.__module__
        command.__signature__ = sig  # type: ignore[attr-defined]  # what typer and inspect read
        return command

    return decorator


def flat(*groups: Iterable[str] | str) -> tuple[str, ...]:
    """Option keys from keys and groups of keys, in order."""
    return tuple(k for g in groups for k in ((g,) if isinstance(g, str) else g))


def detect(cluster: str) -> ClusterChoice | None:
    """`--cluster detect[@DIR][:COUNT]`: COUNT hosts like this one (or like the one recorded in DIR)."""
    from autopar.cli.topology import detect_host, parse_detect
    from autopar.problem import ClusterChoice

    parsed = parse_detect(cluster.strip())
    if parsed is None:
        return None
    from autopar.catalog.topology import describe

    folder, hosts = parsed
    d = describe(detect_host(folder), hosts)
    return ClusterChoice(d.gpu, str(d.num_gpus), d.gpus_per_node, d.nvlink_domain, d.internode_gbps)


def problem_of(f: Flags, **over: Any) -> Problem:
    """The config tree of a command's problem options (absent ones keep the tree's defaults); `over` replaces
    option values by name (e.g. the GPU count a label implies)."""
    from autopar.parse import parse_count
    from autopar.problem import ClusterConfig, Problem, SearchSettings, WorkloadConfig

    g = Flags(**{**vars(f), **over}).get
    gpus = g("gpus")
    cluster = ClusterConfig(
        system=g("cluster_name"),
        gpu=g("gpu"),
        gpus=None if gpus is None else expand_count_suffixes(str(gpus)),  # a range: '1k..4k'
        gpus_per_node=g("gpus_per_node"),
        nvlink_domain=g("nvlink_domain"),
        internode_gbps=g("internode_gbps"),
        transport=g("transport"),
    )
    wl = {k: g(k) for k in (*WORKLOAD_EXTRAS, "seq_len", "precision", "framework", "tp_comm_overlap")}
    wl = {k: v for k, v in wl.items() if v is not None}
    if "seq_len" in wl:
        wl["seq_len"] = parse_seq_len(wl["seq_len"])
    if g("global_batch") is not None:
        wl["global_batch"] = g("global_batch")
    workload = WorkloadConfig(
        **wl, tokens=parse_count(g("tokens")), memory_savers=_savers(g("memory_savers"))
    )
    search = SearchSettings(**_search_fields(f)) if hasattr(f, "budget") else SearchSettings()
    return Problem(model=g("model") or DEFAULT_MODEL, cluster=cluster, workload=workload, search=search)


def single_problem(f: Flags | Mapping[str, Any], **over: Any) -> tuple[Any, Any, Any]:
    """(model, cluster, workload) of a single-cluster command's options (estimate, compare, fix, dryrun)."""
    flags = f if isinstance(f, Flags) else Flags(**f)
    return problem_of(flags, **over).build_one(detect)


def _savers(value: str | None) -> tuple[str, ...]:
    from autopar.problem import check_memory_savers

    return check_memory_savers(value or "")


def _search_fields(f: Flags) -> dict[str, Any]:
    """SearchSettings fields from a search command's options."""
    from autopar.constraints import parse_constraints
    from autopar.parse import check_seed, parse_gib

    out = {"budget": f.budget, "seed": check_seed(f.seed), "min_headroom_gib": parse_gib(f.min_headroom)}
    if hasattr(f, "memory_band"):
        out["memory_band"] = f.memory_band
    for name in ("objectives", "sampler", "timeout", "max_cost", "tier", "storage", "study_name"):
        if hasattr(f, name):
            out[name] = getattr(f, name)
    for name in ("timeout", "max_cost"):  # nan passed every comparison and ran as if no limit were set
        v = out.get(name)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise SpecError(f"--{name.replace('_', '-')}={v}: must be a positive finite number")
    if hasattr(f, "heartbeat"):
        out["heartbeat_s"] = f.heartbeat
    out["constraints"] = tuple(parse_constraints(f.get("fix") or (), f.get("forbid") or ()))
    return out
