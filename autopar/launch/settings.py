"""Launch settings for a strategy: Megatron-LM args, torchtitan TOML, DeepSpeed JSON, torchrun + SLURM.

Each output names the framework release it targets (`versions`, default the newest in
autopar.launch.schema.VERSIONS) and is checked in tests against the schema extracted from
that release's source (autopar/data/launch_schemas/, scripts/extract_launch_schemas.py).
Framework-specific builders: autopar.launch.megatron, torchtitan, deepspeed; torchrun and SLURM:
autopar.launch.slurm; stage splits: autopar.launch.split.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from autopar.errors import InvalidStrategyError, SpecError
from autopar.launch.deepspeed import deepspeed_config
from autopar.launch.megatron import (
    DATA_ARGS,
    DATA_PLACEHOLDERS,
    MEGATRON_ENTRYPOINT,
    PLACEHOLDERS,
    megatron_args,
    megatron_env,
)
from autopar.launch.optimizer import megatron_optimizer_why, torchtitan_optimizer_why
from autopar.launch.schema import VERSIONS, resolve_version, schema_source
from autopar.launch.slurm import continued, node_gpus, slurm_script, torchrun_prefix
from autopar.launch.split import strategy_split
from autopar.launch.torchtitan import torchtitan_toml, torchtitan_unsupported
from autopar.layouts import Level, mesh_problems, pp_rules, split_of
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "slurm")
DEEPSPEED_CONFIG = "ds_config.json"


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
    # why the Megatron-LM arguments (and the SLURM script) cannot run the workload's optimizer ('' = they can)
    megatron_reason: str = ""

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
    # the pipeline split's hard rules (Megatron's validate_args: account-for options need the counted units
    # divisible by pp, and exclude explicit first/last stage sizes), which strategy_split does not check
    problems += [v.message for v in pp_rules(model, s.pp, split_of(s), s.vpp or 1) if v.level == Level.HARD]
    if not problems and strategy_split(model.layers, s) is None:
        problems.append(
            f"layers={model.layers} cannot be split over pp={s.pp} x vpp={s.vpp} stages by Megatron-LM's "
            "options (every stage a multiple of vpp)"
        )
    if problems:
        raise InvalidStrategyError(problems)
    return s, workload.global_batch // (s.micro_batch * s.dp)


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


def _lora_note(workload: Workload) -> tuple[str, ...]:
    """LoRA: the files below train every weight; the adapters are Megatron-Bridge's PEFT config (QLoRA:
    torchtune's, whose base weights are NF4)."""
    if workload.finetune != "lora":
        return ()
    targets = ", ".join(workload.lora_targets)
    if workload.lora_base == "nf4":
        return (
            "QLoRA: these files train every weight in bf16; run the layout with torchtune's "
            "lora_finetune_distributed and a qlora_* model builder (NF4 base weights, torchao), or Hugging Face "
            f"PEFT with bitsandbytes 4-bit NF4, LoRA rank {workload.lora_dim} on {targets}, the adapters the "
            "estimate priced",
        )
    return (
        "LoRA: Megatron-LM, torchtitan and DeepSpeed train every weight, so these files run the layout as full "
        f"training; run it with Megatron-Bridge's PEFT (peft=LoRA(target_modules=[{targets}], "
        f"dim={workload.lora_dim})), the adapters the estimate priced",
    )


def _unprofiled_note(workload: Workload) -> tuple[str, ...]:
    """A stack autopar has no launcher (nor kernel profile) for: the files are the layout on the stacks it has."""
    if not workload.stack:
        return ()
    return (
        f"autopar writes no launch file for {workload.stack} (no kernel profile or launcher): the files below "
        "run the same layout on Megatron-LM, torchtitan and DeepSpeed; set the equivalent knobs in "
        f"{workload.stack} yourself",
    )


def launch_settings(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    *,
    versions: Mapping[str, str] | None = None,
    extra_megatron_args: Sequence[str] = (),
) -> LaunchSettings:
    """Framework settings for a strategy, so a recommendation can be launched without re-typing it;
    `extra_megatron_args` ("--flag value" entries) go after the strategy's (`autopar tune`'s short runs add
    `--log-interval 1` so every step is logged)."""
    vers = target_versions(versions)
    s, microbatches = _resolve(model, cluster, workload, strategy)
    header = f"{model.name} on {cluster.num_gpus} x {cluster.gpu.name}, {s.label()}, {workload.precision}"
    meg = megatron_args(model, cluster, workload, s)
    meg = replace(meg, args=[*meg.args, *extra_megatron_args])
    env = megatron_env(model, s)
    tt_reason = torchtitan_unsupported(model, s, vers["torchtitan"]) or torchtitan_optimizer_why(workload)
    tt, tt_notes = (
        (None, []) if tt_reason else torchtitan_toml(model, cluster, workload, s, header, vers["torchtitan"])
    )
    ds, ds_reason, ds_notes = deepspeed_config(workload, s, microbatches)
    tt_notes, ds_notes = (
        [*tt_notes, *_no_act_offload(s, "torchtitan")],
        [*ds_notes, *_no_act_offload(s, "DeepSpeed")],
    )
    launch = torchrun_prefix(cluster.nodes, node_gpus(cluster)) + [MEGATRON_ENTRYPOINT] + meg.args + DATA_ARGS
    torchrun = " ".join(f"{k}={v}" for k, v in env.items())
    torchrun = (torchrun + " " if torchrun else "") + continued(launch)
    general = (*_unprofiled_note(workload), *_lora_note(workload))
    return LaunchSettings(
        megatron_args=tuple(meg.args),
        megatron=continued(meg.args),
        torchtitan=tt,
        torchtitan_reason=tt_reason,
        deepspeed=ds,
        deepspeed_reason=ds_reason,
        torchrun=torchrun,
        slurm=slurm_script(
            model.name, header, cluster, env, meg.args, vers, meg.placeholders, tt is not None
        ),
        env=env,
        notes=(*general, *meg.notes, *tt_notes, *ds_notes),
        nodes=cluster.nodes,
        gpus_per_node=node_gpus(cluster),
        versions=vers,
        sources={fw: schema_source(fw, v) for fw, v in vers.items()},
        placeholders={
            k: PLACEHOLDERS[k]
            for k in (*meg.placeholders, *DATA_PLACEHOLDERS, *(("MASTER_ADDR",) if cluster.nodes > 1 else ()))
        },
        framework_notes={  # what holds for every file first (an unprofiled stack, LoRA), then each file's own
            "megatron": (*general, *meg.notes),
            "slurm": (*general, *meg.notes),
            "torchtitan": (*general, *tt_notes),
            "deepspeed": (*general, *ds_notes),
        },
        megatron_reason=megatron_optimizer_why(workload, s),
    )
