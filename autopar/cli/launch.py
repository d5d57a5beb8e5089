"""CLI command `autopar launch`: Megatron-LM / torchtitan / DeepSpeed / SLURM settings for a strategy."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar.cli.app import command, console, emit_json, err_console, styled
from autopar.cli.common import knob_strategy
from autopar.cli.options import Flags, opt, problem_of, with_options
from autopar.errors import InvalidStrategyError, SpecError
from autopar.files import ensure_dir, write_atomic
from autopar.knobs import FRAMEWORKS, RECOMPUTE_MODES, SCHEDULES, implied_schedule

# Kept literal so `autopar --help` does not import the schemas; a test keeps it equal to VERSIONS.
DEFAULT_VERSIONS = "megatron=core_v0.19.0, torchtitan=v0.2.2, deepspeed=v0.19.5"

FRAMEWORK_CHOICES = ("megatron", "torchtitan", "deepspeed", "slurm", "all")
# Schedules some stack the launch files target ships (knobs.SCHEDULES stacks); the others run 1F1B instead.
LAUNCH_SCHEDULES = tuple(
    n for n, r in SCHEDULES.items() if any(fw in r.stacks for fw in FRAMEWORK_CHOICES if fw in FRAMEWORKS)
)
# The stack whose TP-comm-overlap default a launch target takes (defaults.tp_comm_overlap_default): SLURM runs
# Megatron-LM; "all" writes every stack's files from one workload, so it keeps the overlap off unless stated.
_LAUNCH_STACK = {"slurm": "megatron"}
FILES = {
    "megatron": "megatron_args.sh",
    "torchtitan": "autopar_torchtitan.toml",
    "deepspeed": "ds_config.json",
    "slurm": "autopar.sbatch",
}


def _strategy(f: Flags) -> Any:
    """The Strategy from --strategy LABEL or from the individual knobs (validated by pydantic)."""
    from autopar.launch.labels import parse_strategy_label

    if f.strategy:
        return parse_strategy_label(f.strategy)
    if f.recompute not in RECOMPUTE_MODES:
        raise SpecError(f"recompute={f.recompute!r} is not allowed (allowed: {', '.join(RECOMPUTE_MODES)})")
    sched = f.schedule or implied_schedule(f.vpp)
    if sched not in LAUNCH_SCHEDULES:
        raise SpecError(f"schedule={sched!r} is not allowed (allowed: {', '.join(LAUNCH_SCHEDULES)})")
    return knob_strategy(vars(f), pp_schedule=sched)


def _check(model, cluster, workload, strategy, strict: bool = True) -> None:
    """Refuse strategies the performance model's rules reject (strict=False: uneven stages allowed), and an FP8
    recipe the GPU cannot run (the estimate refuses it the same way: perf.context)."""
    from autopar.perf import validate_strategy
    from autopar.perf.fp8 import check_recipe

    if workload.precision == "fp8" and cluster.gpu.fp8_flops is not None:
        try:
            check_recipe(workload.fp8_recipe, cluster.gpu.family)
        except ValueError as e:
            raise SpecError(str(e)) from None

    problems = validate_strategy(model, cluster, workload, strategy, strict=strict)
    if problems:
        raise InvalidStrategyError(problems)


def parse_framework_versions(values: list[str] | None, framework: str) -> dict[str, str]:
    """--framework-version VALUE(s): 'megatron=core_v0.19.0' or a bare version for the one --framework."""
    from autopar.launch.schema import VERSIONS

    out: dict[str, str] = {}
    for v in values or []:
        if "=" in v:
            fw, _, ver = v.partition("=")
        elif framework in (*VERSIONS, "slurm"):
            fw, ver = ("megatron" if framework == "slurm" else framework), v  # SLURM runs Megatron-LM
        else:
            raise SpecError(
                f"framework_version={v!r}: name the framework (e.g. torchtitan={VERSIONS['torchtitan'][0]}) "
                f"when --framework is {framework}"
            )
        out[fw.strip()] = ver.strip()
    return out


def _emit_json(ls, s, chosen: list[str], written: list[str]) -> None:
    d = ls.as_dict()
    keep = {
        "megatron": ["megatron_args", "megatron", "torchrun", "env", "placeholders"],
        "torchtitan": ["torchtitan", "torchtitan_reason"],
        "deepspeed": ["deepspeed", "deepspeed_reason"],
        "slurm": ["slurm", "placeholders"],
    }
    fields = (
        ["versions", "sources"] + [f for k in chosen for f in keep[k]] + ["notes", "nodes", "gpus_per_node"]
    )
    doc = {"strategy": s.model_dump(), **{f: d[f] for f in dict.fromkeys(fields)}, "written": written}
    doc["notes"] = list(dict.fromkeys(n for k in chosen for n in ls.framework_notes.get(k, ())))
    emit_json(doc, indent=2)


def _int(name: str, text: str, default: int) -> inspect.Parameter:
    return opt(name, Annotated[int, typer.Option(help=text)], default)


# launch's own options: the strategy's knobs as a launch sets them (each with a value; the problem options
# come from autopar.cli.options).
_LAUNCH = (
    *("model", "gpu:one", "gpus:one", "seq_len", "global_batch"),
    opt(
        "strategy",
        Annotated[
            str | None,
            typer.Option(
                help="A strategy label as printed by autopar, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1 sel-AC' "
                "(replaces the individual knobs)."
            ),
        ],
        None,
    ),
    _int("tp", "Tensor-parallel size.", 1),
    _int("pp", "Pipeline-parallel size.", 1),
    _int("dp", "Data-parallel size (0 = GPUs / (tp*pp*cp)).", 0),
    _int("cp", "Context-parallel size.", 1),
    _int("ep", "Expert-parallel size (MoE).", 1),
    opt(
        "etp", Annotated[int | None, typer.Option(help="Expert tensor-parallel size \\[default: tp].")], None
    ),
    _int("vpp", "Virtual pipeline stages per rank.", 1),
    opt(
        "sp",
        Annotated[
            bool | None, typer.Option("--sp/--no-sp", help="Sequence parallel \\[default: on when tp>1].")
        ],
        None,
    ),
    _int("zero", "0 DDP, 1 distributed optimizer, 2 ZeRO-2, 3 FSDP.", 1),
    _int("micro_batch", "Micro-batch size (sequences).", 1),
    opt(
        "recompute",
        Annotated[str, typer.Option(help=f"Activation recompute: {', '.join(RECOMPUTE_MODES)}.")],
        "none",
    ),
    opt(
        "schedule",
        Annotated[
            str | None,
            typer.Option(
                help=f"Pipeline schedule: {', '.join(LAUNCH_SCHEDULES)} \\[default: interleaved when vpp>1]."
            ),
        ],
        None,
    ),
    *("precision:one", "fp8_recipe", "workload", "optimizer", "master_weights", "finetune", "lora_rank"),
    "lora_targets",  # no --lora-base: none of the stacks launch writes for runs QLoRA
    opt(
        "tokens",
        Annotated[
            str | None, typer.Option(help="Token budget, e.g. 1T: sets --train-iters / training.steps.")
        ],
        None,
    ),
    "gpus_per_node",
    opt(
        "target",
        Annotated[str, typer.Option("--framework", help="megatron, torchtitan, deepspeed, slurm or all.")],
        "all",
    ),
    opt(
        "framework_version",
        Annotated[
            list[str] | None,
            typer.Option(
                help="Release to target, e.g. torchtitan=v0.2.2 (repeatable; a bare version applies to "
                "--framework) \\[default: the newest supported: " + DEFAULT_VERSIONS + "]."
            ),
        ],
        None,
    ),
    *("allow_uneven", "tp_comm_overlap", "moe_dispatcher", "moe_ep_overlap"),
    opt("out", Annotated[Path | None, typer.Option(help="Also write the files into this folder.")], None),
    opt("as_json", Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")], False),
)


@command("launch")
@with_options(*_LAUNCH)
def launch_cmd(f: Flags) -> None:
    """Print launch settings (Megatron-LM args, torchtitan TOML, DeepSpeed JSON, SLURM script) for a strategy.

    Each file names the framework release it targets; the settings are checked in autopar's tests
    against the argument parser / config classes of that release.
    """
    from autopar.catalog import get_model
    from autopar.launch.settings import launch_settings

    framework = f.target
    if framework not in FRAMEWORK_CHOICES:
        raise SpecError(f"framework={framework!r} is not allowed (allowed: {', '.join(FRAMEWORK_CHOICES)})")
    versions = parse_framework_versions(f.framework_version, framework)
    p = problem_of(f)
    m = get_model(p.model)
    cluster = p.cluster.build_one()
    workload = p.workload.build(m, stack=_LAUNCH_STACK.get(framework, framework))
    s = _strategy(f)
    _check(m, cluster, workload, s, strict=not f.allow_uneven)
    ls = launch_settings(m, cluster, workload, s, versions=versions)
    if ls.megatron_reason and framework in ("megatron", "slurm"):
        raise SpecError(f"--framework {framework}: {ls.megatron_reason}")
    texts = {
        "megatron": ls.torchrun if not ls.megatron_reason else f"# {ls.megatron_reason}\n",
        "torchtitan": ls.torchtitan if ls.torchtitan is not None else f"# {ls.torchtitan_reason}\n",
        "deepspeed": ls.deepspeed if ls.deepspeed is not None else f"# {ls.deepspeed_reason}\n",
        "slurm": ls.slurm if not ls.megatron_reason else f"# {ls.megatron_reason}\n",
    }
    chosen = list(FILES) if framework == "all" else [framework]
    written: list[str] = []
    if f.out is not None:
        # the sbatch script's torchtitan alternative reads the TOML: written beside it when there is one
        extra = ["torchtitan"] if chosen == ["slurm"] and ls.torchtitan is not None else []
        written = _write(f.out, chosen + extra, texts, ls)
    if f.as_json:
        _emit_json(
            ls, s.with_dp(cluster.num_gpus), chosen, [str(f.out / w) for w in written] if f.out else []
        )
        return
    _print_text(chosen, texts, ls)


def _write(out: Path, chosen: list[str], texts: dict[str, str], ls) -> list[str]:
    """Write the expressible files; say which were written and why any were not."""
    ensure_dir(out)
    written, skipped = [], []
    for k in chosen:
        reason = {"deepspeed": ls.deepspeed_reason, "torchtitan": ls.torchtitan_reason}.get(k, "")
        if (k == "deepspeed" and ls.deepspeed is None) or (k == "torchtitan" and ls.torchtitan is None):
            skipped.append(f"{FILES[k]} not written: {reason}")
            continue
        text = texts[k] if texts[k].endswith("\n") else texts[k] + "\n"
        write_atomic(out / FILES[k], text)
        written.append(FILES[k])
    msg = f"wrote {', '.join(written)} to {out}" if written else f"wrote nothing to {out}"
    for line in (msg, *skipped):
        err_console.print(line, highlight=False, soft_wrap=True)
    return written


def _print_text(chosen: list[str], texts: dict[str, str], ls) -> None:
    titles = {
        "megatron": f"Megatron-LM {ls.versions['megatron']} (torchrun, run on every node)",
        "torchtitan": f"torchtitan {ls.versions['torchtitan']} (TOML job config)",
        "deepspeed": f"DeepSpeed {ls.versions['deepspeed']} (config JSON)",
        "slurm": f"SLURM + Megatron-LM {ls.versions['megatron']} (sbatch script)",
    }
    for k in chosen:
        if len(chosen) > 1:
            console.rule(styled((titles[k], "bold")), align="left")
        elif k in ("megatron", "deepspeed"):  # on stderr: stdout stays a valid command / JSON file
            err_console.print(f"# {titles[k]}: {ls.sources[k]}", highlight=False, soft_wrap=True)
        typer.echo(texts[k].rstrip("\n"))
    if ls.placeholders and any(k in chosen for k in ("megatron", "slurm")):
        err_console.print(
            "set before launching: " + "; ".join(f"{k} = {v}" for k, v in ls.placeholders.items()),
            highlight=False,
            style="yellow",
            soft_wrap=True,
        )
    notes = list(dict.fromkeys(n for k in chosen for n in ls.framework_notes.get(k, ())))
    for n in notes:
        err_console.print(f"note: {n}", highlight=False, style="yellow", soft_wrap=True)
