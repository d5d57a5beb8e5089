"""Every option of the problem (model, cluster, workload, search settings), declared once for every command.

The problem inputs are not declared here: they are generated from the tree's marked fields (autopar/problem.py,
autopar/cliinput.py: the description is the help, the tree's default the option's), and `problem_of` reads them
back by the same marks. What is declared here is what is not a problem input: a command-specific form of one
(`gpus:fix`), the strategy knobs of `estimate`, --fix/--forbid, files and output.

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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer
from pydantic import BaseModel

from autopar.cliinput import UNSET, CliInput, cli_input
from autopar.constraints import parse_constraints
from autopar.defaults import DEFAULT_GPUS, DEFAULT_WHATIF_BUDGET
from autopar.knobs import SCHEDULE_NAMES, Axis
from autopar.problem import ClusterConfig, Problem, SearchSettings, WorkloadConfig
from autopar.units import BINARY_SUFFIX, DECIMAL_SUFFIX, parse_whole_count

if TYPE_CHECKING:
    from autopar.problem import ClusterChoice

_KW = inspect.Parameter.KEYWORD_ONLY
OptionSpec = str | inspect.Parameter  # what a command lists: a registry key, or its own `opt(...)`


def opt(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    """One command parameter (typer reads its `Annotated` type and default)."""
    return inspect.Parameter(name, _KW, annotation=annotation, default=default)


def _o(*decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, **kw)


def _help(text: str) -> str:
    """A tree description as typer's rich help: a literal `[` escaped (rich reads `[x]` as markup)."""
    return text.replace("[", "\\[")


def _cli_default(default: Any, spec: CliInput) -> Any:
    """The option's default: the mark's, else the tree field's, in the option's type (text: as typed)."""
    if spec.default == UNSET:
        return None
    if spec.default is not None:
        return spec.default
    if isinstance(default, tuple):
        return ",".join(default)
    return str(default) if spec.type is str and default is not None else default


def _tree_option(key: str, typ: Any, help_text: str, spec: CliInput, default: Any) -> tuple[str, Any, Any]:
    # the flag stated, so a bool gets no --no- form unless the mark names one
    decls = (spec.flag or "--" + key.partition(":")[0].replace("_", "-"),)
    info = typer.Option(*decls, help=_help(help_text), min=spec.minimum, show_default=spec.show_default)
    return key, Annotated[typ, info], default


def _tree_options(node: type[BaseModel]) -> list[tuple[str, Any, Any]]:
    """The options of a tree node's marked fields (autopar.cliinput), in field order; a field's single-value
    form (`OneForm`) as `param:one`."""
    out = []
    for name, field in node.model_fields.items():
        spec = cli_input(field.metadata)
        if spec is None:
            continue
        key, default = spec.param or name, _cli_default(field.default, spec)
        out.append(_tree_option(key, spec.type or field.annotation, field.description or "", spec, default))
        if spec.one is not None:
            typ = int | None if spec.one.count else field.annotation
            out.append(_tree_option(f"{key}:one", typ, spec.one.help, spec, default))
    return out


def _tree_keys(node: type[BaseModel]) -> list[str]:
    """The registry keys of a tree node's marked fields, in field order (their single-value forms left out)."""
    return [spec.param or name for name, f in node.model_fields.items() if (spec := cli_input(f.metadata))]


def _tree_counts(node: type[BaseModel]) -> dict[str, tuple[str, dict[str, int]]]:
    """COUNT_OPTIONS entries of a tree node's count fields (and single-value forms)."""
    out = {}
    for name, field in node.model_fields.items():
        spec = cli_input(field.metadata)
        if spec is None:
            continue
        for count in (spec.count, spec.one.count if spec.one else ""):
            if count:
                out[spec.param or name] = (count, DECIMAL_SUFFIX if spec.decimal else BINARY_SUFFIX)
    return out


TREE_NODES: tuple[type[BaseModel], ...] = (Problem, ClusterConfig, WorkloadConfig, SearchSettings)
_MODEL = Problem.model_fields["model"].description or ""
_PARAMS: list[tuple[str, Any, Any]] = [
    *(entry for node in TREE_NODES for entry in _tree_options(node)),
    # --- command-specific forms and the options that are not problem inputs ---
    ("model:short", Annotated[str | None, _o("--model", "-m", help=_help(_MODEL))], None),  # whatif: also -m
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
    (
        "budget:whatif",
        Annotated[int, _o("--budget", help="Search trials per option (2k = 2,000).")],
        DEFAULT_WHATIF_BUDGET,
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
    **{k: v for node in TREE_NODES for k, v in _tree_counts(node).items()},
    "max_gpus": ("GPU count", BINARY_SUFFIX),
    "micro_batch": ("micro-batch size in sequences", BINARY_SUFFIX),
    **{a.value: ("parallel size", BINARY_SUFFIX) for a in (Axis.TP, Axis.PP, Axis.CP, Axis.EP, Axis.ETP)},
    **{a.value: ("parallel size", BINARY_SUFFIX) for a in (Axis.DP, Axis.VPP)},
    "activation_offload_layers": ("layer count", DECIMAL_SUFFIX),
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

# The option sets several commands share, in their --help order. A field added to the cluster or workload
# node of the tree joins CLUSTER or WORKLOAD_EXTRAS, so every command that states a cluster or a workload takes it.
SHAPE = ("cluster_name", "seq_len", "global_batch")
STACK = ("framework", "tp_comm_overlap")
CALIBRATION = ("calibration", "no_calibration")
_CLUSTER_NAMED = ("cluster_name", "gpu", "gpus")
CLUSTER: tuple[str, ...] = tuple(k for k in _tree_keys(ClusterConfig) if k not in _CLUSTER_NAMED)
_WORKLOAD_NAMED = (*SHAPE, *STACK, "precision", "tokens", "memory_savers")
WORKLOAD_EXTRAS: tuple[str, ...] = tuple(k for k in _tree_keys(WorkloadConfig) if k not in _WORKLOAD_NAMED)
# The options of one problem evaluated on one cluster (estimate, compare, fix): model, cluster, workload.
SINGLE = ("model", "gpu:one", "gpus:one", *CLUSTER, *WORKLOAD_EXTRAS, *SHAPE, "precision:one", *STACK)
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


def with_options(*params: OptionSpec) -> Callable[[Callable[[Flags], Any]], Callable[..., Any]]:
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


def _node_values(node: type[BaseModel], g: Callable[[str], Any]) -> dict[str, Any]:
    """A tree node's fields the command's options state (unset ones keep the tree's default), each read from
    the command line's form (`CliInput.read`)."""
    out = {}
    for name, field in node.model_fields.items():
        spec = cli_input(field.metadata)
        value = None if spec is None else g(spec.param or name)
        if spec is not None and value is not None:
            out[name] = spec.read(value) if spec.read else value
    return out


def problem_of(f: Flags, **over: Any) -> Problem:
    """The config tree of a command's problem options (absent ones keep the tree's defaults); `over` replaces
    option values by name (e.g. the GPU count a label implies). The search settings are stated by a search
    command (one with --budget); the --fix/--forbid knob constraints are read here."""
    g = Flags(**{**vars(f), **over}).get
    search = SearchSettings()
    if hasattr(f, "budget"):
        constraints = tuple(parse_constraints(f.get("fix") or (), f.get("forbid") or ()))
        search = SearchSettings(**_node_values(SearchSettings, g), constraints=constraints)
    return Problem(
        **_node_values(Problem, g),
        cluster=ClusterConfig(**_node_values(ClusterConfig, g)),
        workload=WorkloadConfig(**_node_values(WorkloadConfig, g)),
        search=search,
    )


def single_problem(f: Flags | Mapping[str, Any], **over: Any) -> tuple[Any, Any, Any]:
    """(model, cluster, workload) of a single-cluster command's options (estimate, compare, fix, dryrun)."""
    flags = f if isinstance(f, Flags) else Flags(**f)
    return problem_of(flags, **over).build_one(detect)
