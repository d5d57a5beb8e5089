"""CLI command `autopar launch`: Megatron-LM / torchtitan / DeepSpeed / SLURM settings for a strategy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from autopar.cli.app import command, console, err_console
from autopar.cli.common import TpOverlapOpt
from autopar.errors import InvalidStrategyError, SpecError

FRAMEWORK_CHOICES = ("megatron", "torchtitan", "deepspeed", "slurm", "all")
FILES = {
    "megatron": "megatron_args.sh",
    "torchtitan": "autopar_torchtitan.toml",
    "deepspeed": "ds_config.json",
    "slurm": "autopar.sbatch",
}


def _strategy(
    label: str | None,
    tp: int,
    pp: int,
    dp: int,
    cp: int,
    ep: int,
    etp: int | None,
    vpp: int,
    sp: bool | None,
    zero: int,
    micro_batch: int,
    recompute: str,
    schedule: str | None,
):
    """The Strategy from --strategy LABEL or from the individual knobs (validated by pydantic)."""
    from autopar.reports.launch import parse_strategy_label
    from autopar.specs import Strategy

    if label:
        return parse_strategy_label(label)
    if recompute not in ("none", "selective", "full"):
        raise SpecError(f"recompute={recompute!r} is not allowed (allowed: none, selective, full)")
    sched = schedule or ("interleaved" if vpp > 1 else "1f1b")
    if sched not in ("1f1b", "interleaved"):
        raise SpecError(f"schedule={sched!r} is not allowed (allowed: 1f1b, interleaved)")
    return Strategy(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=vpp,
        sp=(tp > 1) if sp is None else sp,
        zero=zero,
        micro_batch=micro_batch,
        recompute=recompute,
        pp_schedule=sched,
    )


def _check(model, cluster, workload, strategy) -> None:
    """Refuse strategies the performance model's rules reject (when that validator is available)."""
    try:
        from autopar.perf import validate_strategy
    except ImportError:  # pragma: no cover - perf is part of the package; guard for partial builds
        return
    problems = validate_strategy(model, cluster, workload, strategy)
    if problems:
        raise InvalidStrategyError(problems)


@command("launch")
def launch_cmd(
    model: Annotated[str, typer.Option(help="Model name/alias or path to a Hugging Face config.json.")],
    gpu: Annotated[str, typer.Option(help="GPU type, e.g. H100-SXM.")],
    gpus: Annotated[int, typer.Option(help="Number of GPUs.")],
    seq_len: Annotated[int, typer.Option(help="Sequence length (tokens).")],
    global_batch: Annotated[int, typer.Option(help="Global batch (sequences per optimizer step).")],
    strategy: Annotated[
        str | None,
        typer.Option(
            help="A strategy label as printed by autopar, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1 sel-AC' "
            "(replaces the individual knobs)."
        ),
    ] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel size.")] = 1,
    dp: Annotated[int, typer.Option(help="Data-parallel size (0 = GPUs / (tp*pp*cp)).")] = 0,
    cp: Annotated[int, typer.Option(help="Context-parallel size.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel size (MoE).")] = 1,
    etp: Annotated[int | None, typer.Option(help="Expert tensor-parallel size [default: tp].")] = None,
    vpp: Annotated[int, typer.Option(help="Virtual pipeline stages per rank.")] = 1,
    sp: Annotated[
        bool | None, typer.Option("--sp/--no-sp", help="Sequence parallel [default: on when tp>1].")
    ] = None,
    zero: Annotated[int, typer.Option(help="0 DDP, 1 distributed optimizer, 2 ZeRO-2, 3 FSDP.")] = 1,
    micro_batch: Annotated[int, typer.Option(help="Micro-batch size (sequences).")] = 1,
    recompute: Annotated[str, typer.Option(help="Activation recompute: none, selective, full.")] = "none",
    schedule: Annotated[
        str | None,
        typer.Option(help="Pipeline schedule: 1f1b or interleaved [default: interleaved when vpp>1]."),
    ] = None,
    precision: Annotated[str, typer.Option(help="GEMM precision: bf16 or fp8.")] = "bf16",
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs per node [default: the GPU's NVLink domain].")
    ] = None,
    framework: Annotated[str, typer.Option(help="megatron, torchtitan, deepspeed, slurm or all.")] = "all",
    tp_comm_overlap: TpOverlapOpt = False,
    out: Annotated[Path | None, typer.Option(help="Also write the files into this folder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Print launch settings (Megatron-LM args, torchtitan TOML, DeepSpeed JSON, SLURM script) for a strategy."""
    from autopar.catalog import get_gpu, get_model
    from autopar.reports.launch import launch_settings
    from autopar.specs import ClusterSpec, Workload

    if framework not in FRAMEWORK_CHOICES:
        raise SpecError(f"framework={framework!r} is not allowed (allowed: {', '.join(FRAMEWORK_CHOICES)})")
    m = get_model(model)
    cluster = ClusterSpec(gpu=get_gpu(gpu), num_gpus=gpus, gpus_per_node=gpus_per_node)
    workload = Workload(
        seq_len=seq_len, global_batch=global_batch, precision=precision, tp_comm_overlap=tp_comm_overlap
    )
    s = _strategy(strategy, tp, pp, dp, cp, ep, etp, vpp, sp, zero, micro_batch, recompute, schedule)
    _check(m, cluster, workload, s)
    ls = launch_settings(m, cluster, workload, s)
    texts = {
        "megatron": ls.torchrun,
        "torchtitan": ls.torchtitan,
        "deepspeed": ls.deepspeed if ls.deepspeed is not None else f"# {ls.deepspeed_reason}\n",
        "slurm": ls.slurm,
    }
    chosen = list(FILES) if framework == "all" else [framework]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for k in chosen:
            if k == "deepspeed" and ls.deepspeed is None:
                continue
            (out / FILES[k]).write_text(
                texts[k] if texts[k].endswith("\n") else texts[k] + "\n", encoding="utf-8"
            )
        err_console.print(f"wrote {', '.join(FILES[k] for k in chosen)} to {out}", highlight=False)
    if as_json:
        d = ls.as_dict()
        keep = {
            "megatron": ["megatron_args", "megatron", "torchrun", "env"],
            "torchtitan": ["torchtitan"],
            "deepspeed": ["deepspeed", "deepspeed_reason"],
            "slurm": ["slurm"],
        }
        fields = [f for k in chosen for f in keep[k]] + ["notes", "nodes", "gpus_per_node"]
        typer.echo(
            json.dumps({"strategy": s.with_dp(gpus).model_dump(), **{f: d[f] for f in fields}}, indent=2)
        )
        return
    titles = {
        "megatron": "Megatron-LM (torchrun, run on every node)",
        "torchtitan": "torchtitan (TOML job config)",
        "deepspeed": "DeepSpeed (config JSON)",
        "slurm": "SLURM (sbatch script)",
    }
    for k in chosen:
        if len(chosen) > 1:
            console.rule(f"[bold]{titles[k]}", align="left")
        typer.echo(texts[k].rstrip("\n"))
    if ls.notes:
        err_console.print(
            "\n".join(f"note: {n}" for n in ls.notes), highlight=False, style="yellow", soft_wrap=True
        )
