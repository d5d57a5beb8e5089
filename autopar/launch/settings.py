"""Launch settings for a strategy: Megatron-LM args, torchtitan TOML, DeepSpeed JSON, torchrun + SLURM.

Each output names the framework release it targets (`versions`, default the newest in
autopar.reports.launch_schema.VERSIONS) and is checked in tests against the schema extracted from
that release's source (autopar/data/launch_schemas/, scripts/extract_launch_schemas.py).
Framework-specific builders: autopar.reports.launch_megatron, launch_torchtitan, launch_deepspeed;
stage splits: autopar.reports.launch_split. torchrun: pytorch/pytorch torch/distributed/run.py
(`--nnodes`, `--nproc-per-node`, `--rdzv-backend`, `--rdzv-endpoint`, `--rdzv-id`, `--standalone`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from autopar.errors import InvalidStrategyError, SpecError
from autopar.layouts import Axis, mesh_problems
from autopar.reports.launch_deepspeed import deepspeed_config
from autopar.reports.launch_megatron import (
    CHECKPOINT_INTERVAL,
    PLACEHOLDERS,
    megatron_args,
    megatron_env,
    placeholder,
)
from autopar.reports.launch_schema import VERSIONS, resolve_version, schema_source
from autopar.reports.launch_split import strategy_split
from autopar.reports.launch_torchtitan import torchtitan_toml, torchtitan_unsupported
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.text import shell_comment

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "slurm")
MEGATRON_ENTRYPOINT = "pretrain_gpt.py"
TORCHTITAN_MODULE = "torchtitan.train"
TORCHTITAN_CONFIG = "autopar_torchtitan.toml"
DEEPSPEED_CONFIG = "ds_config.json"
MASTER_PORT = 29500
# the data and checkpoint arguments every Megatron launch needs
DATA_PLACEHOLDERS = ("DATA_PATH", "TOKENIZER", "CHECKPOINT_DIR")
DATA_ARGS = [
    f"--data-path {placeholder('DATA_PATH')}",
    "--split 99,1,0",
    "--tokenizer-type HuggingFaceTokenizer",
    f"--tokenizer-model {placeholder('TOKENIZER')}",
    f"--save {placeholder('CHECKPOINT_DIR')}",
    f"--load {placeholder('CHECKPOINT_DIR')}",
    f"--save-interval {CHECKPOINT_INTERVAL}",
]


@dataclass(frozen=True)
class LaunchSettings:
    """Ready-to-paste settings for one strategy in each supported framework."""

    megatron_args: tuple[str, ...]  # one "--flag [value]" per entry
    megatron: str  # the same, one per line with shell continuations
    torchtitan: str | None  # TOML job config, None when torchtitan cannot run it as is
    torchtitan_reason: str  # why torchtitan is None
    deepspeed: str | None  # DeepSpeed config JSON, None when the strategy is not expressible
    deepspeed_reason: str  # why deepspeed is None (or caveats when it is not)
    torchrun: str  # torchrun command line for Megatron on this cluster
    slurm: str  # sbatch script (Megatron; torchtitan alternative commented)
    env: dict[str, str] = field(default_factory=dict)  # environment variables the launch needs
    notes: tuple[str, ...] = ()  # approximations and caveats, one sentence each
    nodes: int = 1
    gpus_per_node: int = 1
    versions: dict[str, str] = field(default_factory=dict)  # framework -> targeted release
    sources: dict[str, str] = field(default_factory=dict)  # framework -> "repo ref (commit)"
    placeholders: dict[str, str] = field(default_factory=dict)  # shell variable -> what to set
    framework_notes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # notes by framework

    def as_dict(self) -> dict[str, object]:
        """JSON-ready dict (for `autopar launch --json`): the DeepSpeed config as an object."""
        return {
            "versions": dict(self.versions),
            "sources": dict(self.sources),
            "megatron_args": list(self.megatron_args),
            "megatron": self.megatron,
            "torchtitan": self.torchtitan,
            "torchtitan_reason": self.torchtitan_reason,
            "deepspeed": json.loads(self.deepspeed) if self.deepspeed is not None else None,
            "deepspeed_reason": self.deepspeed_reason,
            "torchrun": self.torchrun,
            "slurm": self.slurm,
            "env": dict(self.env),
            "placeholders": dict(self.placeholders),
            "notes": list(self.notes),
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
        }


# --------------------------------------------------------------------------- checks and batch


def _resolve(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy
) -> tuple[Strategy, int]:
    """Fill dp, check the world size, batch divisibility and the pipeline split; return (strategy,
    gradient-accumulation steps = global_batch / (micro_batch * dp))."""
    s = strategy.with_dp(cluster.num_gpus)
    problems = mesh_problems(cluster, workload, s)  # the layouts spine's model-independent rules
    if not problems and strategy_split(model.layers, s) is None:
        problems.append(
            f"layers={model.layers} cannot be split over pp={s.pp} x vpp={s.vpp} stages by Megatron-LM's "
            "options (every stage a multiple of vpp)"
        )
    if problems:
        raise InvalidStrategyError(problems)
    return s, workload.global_batch // (s.micro_batch * s.dp)


def _gpus_per_node(cluster: ClusterSpec) -> int:
    return min(cluster.host_size, cluster.num_gpus)


def _continued(lines: list[str], indent: str = "") -> str:
    """Join shell words one per line with backslash continuations."""
    return " \\\n".join(indent + x for x in lines)


# --------------------------------------------------------------------------- torchrun / SLURM


def _torchrun_prefix(nodes: int, gpn: int) -> list[str]:
    if nodes == 1:
        return ["torchrun", f"--standalone --nproc-per-node {gpn}"]
    return [
        "torchrun",
        f"--nnodes {nodes}",
        f"--nproc-per-node {gpn}",
        "--rdzv-id autopar",
        "--rdzv-backend c10d",
        f'--rdzv-endpoint {placeholder("MASTER_ADDR")[:-1]}:{MASTER_PORT}"',
    ]


def _slurm_header(name: str, header: str, nodes: int, gpn: int, versions: Mapping[str, str]) -> list[str]:
    job = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-").lower() or "run"
    return [
        "#!/bin/bash",
        f"#SBATCH --job-name=autopar-{job}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpn}",
        "#SBATCH --exclusive",
        shell_comment(f"autopar: {header}"),
        f"# Targets Megatron-LM {versions['megatron']} ({schema_source('megatron', versions['megatron'])})",
        "set -euo pipefail",
        "",
    ]


def _slurm(
    name: str,
    header: str,
    cluster: ClusterSpec,
    env: dict[str, str],
    args: list[str],
    versions: Mapping[str, str],
    placeholders: Mapping[str, str],
    torchtitan: bool,
) -> str:
    """An sbatch script that starts one torchrun per node running Megatron's pretrain_gpt.py (and, commented,
    torchtitan's trainer on the TOML when there is one)."""
    nodes, gpn = cluster.nodes, _gpus_per_node(cluster)
    lines = _slurm_header(name, header, nodes, gpn, versions)
    lines += [
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"export MASTER_PORT={MASTER_PORT}",
    ]
    lines += [f"export {k}={v}" for k, v in env.items()]
    lines += ["", "MEGATRON_ARGS=("] + [f"  {x}" for x in args] + [")"]
    lines += [
        "# Your data (Megatron .bin/.idx prefix), Hugging Face tokenizer folder and checkpoint folder:",
        "DATA_ARGS=(",
        *[f"  {x}" for x in DATA_ARGS],
        ")",
        "",
        "srun torchrun \\",
        '  --nnodes "$SLURM_NNODES" \\',
        f"  --nproc-per-node {gpn} \\",
        '  --rdzv-id "$SLURM_JOB_ID" \\',
        "  --rdzv-backend c10d \\",
        '  --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\',
        f'  {MEGATRON_ENTRYPOINT} "${{MEGATRON_ARGS[@]}}" "${{DATA_ARGS[@]}}"',
    ]
    if torchtitan:
        lines += _slurm_torchtitan(versions["torchtitan"], gpn, placeholders)
    return "\n".join(lines) + "\n"


def _slurm_torchtitan(version: str, gpn: int, placeholders: Mapping[str, str]) -> list[str]:
    """The commented torchtitan alternative (written next to the script as TORCHTITAN_CONFIG)."""
    return [
        "",
        f"# torchtitan {version} instead of Megatron-LM (same allocation; {TORCHTITAN_CONFIG} is written beside",
        "# this script; set its dataset on the command line too: --training.dataset --training.dataset_path):",
        f'# srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {gpn} --rdzv-id "$SLURM_JOB_ID" \\',
        '#   --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\',
        f"#   -m {TORCHTITAN_MODULE} --job.config_file {TORCHTITAN_CONFIG} \\",
        '#   --model.hf_assets_path "$TOKENIZER" --checkpoint.folder "$CHECKPOINT_DIR" \\',
        '#   --optimizer.lr "$LR" --lr_scheduler.warmup_steps "$WARMUP_ITERS"'
        + (' --training.steps "$TRAIN_ITERS"' if "TRAIN_ITERS" in placeholders else ""),
    ]


# --------------------------------------------------------------------------- public API


def target_versions(versions: Mapping[str, str] | None = None) -> dict[str, str]:
    """framework -> release targeted: the given ones (checked) and the defaults for the rest."""
    given = dict(versions or {})
    unknown = sorted(set(given) - set(VERSIONS))
    if unknown:
        raise SpecError(f"framework_version: unknown framework {unknown[0]!r} (known: {', '.join(VERSIONS)})")
    return {fw: resolve_version(fw, given.get(fw)) for fw in VERSIONS}


def _no_act_offload(s: Strategy, stack: str) -> list[str]:
    """What a stack without layer-wise activation offload (layouts.ACT_OFFLOAD_FRAMEWORKS) must do instead."""
    if not s.activation_offload_layers:
        return []
    return [
        f"{stack} config without Megatron's --cpu-offloading-num-layers {s.activation_offload_layers}: it "
        "keeps every layer's activations on the GPU, which needs more memory than the estimate (use "
        "activation recompute instead if it does not fit)"
    ]


def launch_settings(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    versions: Mapping[str, str] | None = None,
) -> LaunchSettings:
    """Framework settings for a strategy, so a recommendation can be launched without re-typing it."""
    vers = target_versions(versions)
    s, microbatches = _resolve(model, cluster, workload, strategy)
    header = f"{model.name} on {cluster.num_gpus} x {cluster.gpu.name}, {s.label()}, {workload.precision}"
    meg = megatron_args(model, cluster, workload, s)
    env = megatron_env(model, s)
    tt_reason = torchtitan_unsupported(model, s, vers["torchtitan"]) or ""
    tt, tt_notes = (
        (None, []) if tt_reason else torchtitan_toml(model, cluster, workload, s, header, vers["torchtitan"])
    )
    ds, ds_reason, ds_notes = deepspeed_config(workload, s, microbatches)
    tt_notes, ds_notes = (
        [*tt_notes, *_no_act_offload(s, "torchtitan")],
        [*ds_notes, *_no_act_offload(s, "DeepSpeed")],
    )
    launch = (
        _torchrun_prefix(cluster.nodes, _gpus_per_node(cluster))
        + [MEGATRON_ENTRYPOINT]
        + meg.args
        + DATA_ARGS
    )
    torchrun = " ".join(f"{k}={v}" for k, v in env.items())
    torchrun = (torchrun + " " if torchrun else "") + _continued(launch)
    return LaunchSettings(
        megatron_args=tuple(meg.args),
        megatron=_continued(meg.args),
        torchtitan=tt,
        torchtitan_reason=tt_reason,
        deepspeed=ds,
        deepspeed_reason=ds_reason,
        torchrun=torchrun,
        slurm=_slurm(model.name, header, cluster, env, meg.args, vers, meg.placeholders, tt is not None),
        env=env,
        notes=tuple(meg.notes + tt_notes + ds_notes),
        nodes=cluster.nodes,
        gpus_per_node=_gpus_per_node(cluster),
        versions=vers,
        sources={fw: schema_source(fw, v) for fw, v in vers.items()},
        placeholders={
            k: PLACEHOLDERS[k]
            for k in (*meg.placeholders, *DATA_PLACEHOLDERS, *(("MASTER_ADDR",) if cluster.nodes > 1 else ()))
        },
        framework_notes={
            "megatron": tuple(meg.notes),
            "slurm": tuple(meg.notes),
            "torchtitan": tuple(tt_notes),
            "deepspeed": tuple(ds_notes),
        },
    )


_LABEL_TOKENS = [
    (re.compile(r"^TP(\d+)(\+SP)?$"), Axis.TP),
    (re.compile(r"^PP(\d+)(?:v(\d+))?(?:-(1f1b|interleaved|zb-h1|dualpipe))?$"), Axis.PP),
    (re.compile(r"^CP(\d+)(?:-(p2p|a2a|allgather|a2a\+p2p))?$"), Axis.CP),
    (re.compile(r"^first(\d+)$"), "pp_first_layers"),
    (re.compile(r"^last(\d+)$"), "pp_last_layers"),
    (re.compile(r"^(emb|loss)-split$"), "account"),
    (re.compile(r"^HSDP(\d+)$"), "dp_shard"),
    (re.compile(r"^(fp32|bf16|8bit)-states$"), "states"),
    (re.compile(r"^offload([\d.]+)?$"), "offload"),
    (re.compile(r"^EP(\d+)$"), Axis.EP),
    (re.compile(r"^ETP(\d+)$"), Axis.ETP),
    (re.compile(r"^Z(\d)$"), "z"),
    (re.compile(r"^DP(\d+)(?:/Z(\d))?$"), Axis.DP),
    (re.compile(r"^mb(\d+)$"), "mb"),
    (re.compile(r"^(sel|full)-AC$"), "ac"),
    (re.compile(r"^AO(\d+)$"), "activation_offload_layers"),
]


def parse_strategy_label(label: str) -> Strategy:
    """Parse a `Strategy.label()` string ('TP4+SP PP2v2 DP8/Z1 mb1 sel-AC') back into a Strategy."""
    fields: dict[str, object] = {"zero": 0}
    for tok in label.split():
        for rx, key in _LABEL_TOKENS:
            m = rx.match(tok)
            if not m:
                continue
            if key == Axis.TP:
                fields[Axis.TP], fields["sp"] = int(m[1]), bool(m[2])
            elif key == Axis.PP:
                fields[Axis.PP] = int(m[1])
                if m[2]:
                    fields[Axis.VPP], fields["pp_schedule"] = int(m[2]), "interleaved"
                if m[3]:
                    fields["pp_schedule"] = m[3]
            elif key == Axis.CP:
                fields[Axis.CP], fields["cp_comm"] = int(m[1]), m[2] or "p2p"
            elif key == "account":
                fields[f"pp_account_{'embedding' if m[1] == 'emb' else 'loss'}"] = True
            elif key == "states":
                fields["optimizer_states"] = m[1]
            elif key == "offload":
                fields["optimizer_offload"] = float(m[1] or 1.0)
            elif key == Axis.DP:
                fields[Axis.DP], fields["zero"] = int(m[1]), int(m[2] or 0)
            elif key == "z":
                fields["zero"] = int(m[1])
            elif key == "mb":
                fields["micro_batch"] = int(m[1])
            elif key == "ac":
                fields["recompute"] = {"sel": "selective", "full": "full"}[m[1]]
            else:
                fields[key] = int(m[1])
            break
        else:
            raise SpecError(
                f"strategy label token '{tok}' not understood (expected e.g. "
                "'TP4+SP PP2v2 CP2 EP8 DP8/Z1 mb1 sel-AC')"
            )
    return Strategy(**fields)
