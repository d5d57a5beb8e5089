"""Launch settings for a strategy: Megatron-LM args, torchtitan TOML, DeepSpeed JSON, torchrun + SLURM.

Every argument name below was checked against the framework's own source (stored copies read with
the code-search tool, 2026-11):

- Megatron-LM / Megatron-Core: NVIDIA/Megatron-LM megatron/training/arguments.py @000c4ac
  (`_add_distributed_args`, `_add_training_args`, `_add_mixed_precision_args`, `_add_moe_args`,
  `_add_mla_args`, `_add_network_size_args`, `_add_transformer_engine_args`; `validate_args` for the
  CUDA_DEVICE_MAX_CONNECTIONS rule and `--num-virtual-stages-per-pipeline-rank`), and
  docs/user-guide/features/megatron_fsdp.md @11ceb1d (`--use-megatron-fsdp`,
  `--data-parallel-sharding-strategy`, `--ckpt-format fsdp_dtensor`).
- torchtitan: pytorch/torchtitan torchtitan/config/job_config.py @6404b93 (TOML sections `[training]`,
  `[parallelism]`, `[activation_checkpoint]`); `expert_tensor_parallel_degree`, `[compile]` and
  `[quantize.linear.float8]` come from the later job_config.py revision. (The newest torchtitan
  moves to Python configs in torchtitan/config/configs/parallelism.py @d76f82d with the same
  parallelism field names.)
- DeepSpeed: deepspeedai/DeepSpeed docs/_pages/config-json.md @00376da (train_batch_size =
  train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel GPUs) and the AutoTP
  training guide (`"tensor_parallel": {"autotp_size": N}`, ZeRO 0-3).
- torchrun: pytorch/pytorch torch/distributed/run.py @010929f (`--nnodes`, `--nproc-per-node`,
  `--rdzv-backend`, `--rdzv-endpoint`, `--rdzv-id`, `--standalone`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from autopar.errors import InvalidStrategyError, SpecError
from autopar.layouts import mesh_problems
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "slurm")
MEGATRON_ENTRYPOINT = "pretrain_gpt.py"
TORCHTITAN_MODULE = "torchtitan.train"
TORCHTITAN_CONFIG = "autopar_torchtitan.toml"
DEEPSPEED_CONFIG = "ds_config.json"
MASTER_PORT = 29500


@dataclass(frozen=True)
class LaunchSettings:
    """Ready-to-paste settings for one strategy in each supported framework."""

    megatron_args: tuple[str, ...]  # one "--flag [value]" per entry
    megatron: str  # the same, one per line with shell continuations
    torchtitan: str  # TOML job config
    deepspeed: str | None  # DeepSpeed config JSON, None when the strategy is not expressible
    deepspeed_reason: str  # why deepspeed is None (or caveats when it is not)
    torchrun: str  # torchrun command line for Megatron on this cluster
    slurm: str  # sbatch script (Megatron; torchtitan alternative commented)
    env: dict[str, str] = field(default_factory=dict)  # environment variables the launch needs
    notes: tuple[str, ...] = ()  # approximations and caveats, one sentence each
    nodes: int = 1
    gpus_per_node: int = 1

    def as_dict(self) -> dict[str, object]:
        """JSON-ready dict (for `autopar launch --json` and the report)."""
        return {
            "megatron_args": list(self.megatron_args),
            "megatron": self.megatron,
            "torchtitan": self.torchtitan,
            "deepspeed": self.deepspeed,
            "deepspeed_reason": self.deepspeed_reason,
            "torchrun": self.torchrun,
            "slurm": self.slurm,
            "env": dict(self.env),
            "notes": list(self.notes),
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
        }


# --------------------------------------------------------------------------- checks and batch


def _resolve(cluster: ClusterSpec, workload: Workload, strategy: Strategy) -> tuple[Strategy, int]:
    """Fill dp, check the world size and batch divisibility; return (strategy, gradient-accumulation
    steps = global_batch / (micro_batch * dp))."""
    s = strategy.with_dp(cluster.num_gpus)
    problems = mesh_problems(cluster, workload, s)  # the layouts spine's model-independent rules
    if problems:
        raise InvalidStrategyError(problems)
    return s, workload.global_batch // (s.micro_batch * s.dp)


def _gpus_per_node(cluster: ClusterSpec) -> int:
    return min(cluster.node_size, cluster.num_gpus)


# --------------------------------------------------------------------------- Megatron-LM


def _megatron_model_args(model: ModelSpec, workload: Workload) -> list[str]:
    """Architecture arguments (network size, attention, MoE, MLA) for Megatron-Core GPT models."""
    a = [
        f"--num-layers {model.layers}",
        f"--hidden-size {model.hidden}",
        f"--ffn-hidden-size {model.ffn_hidden}",
        f"--num-attention-heads {model.heads}",
    ]
    if model.kv != model.heads and not model.is_mla:
        a += ["--group-query-attention", f"--num-query-groups {model.kv}"]
    if model.head_dim and model.head_dim != model.hidden // model.heads and not model.is_mla:
        a.append(f"--kv-channels {model.head_dim}")
    a += [
        f"--seq-length {workload.seq_len}",
        f"--max-position-embeddings {workload.seq_len}",
        "--position-embedding-type rope",
    ]
    if model.norm == "rmsnorm":
        a.append("--normalization RMSNorm")
    if model.activation == "swiglu":
        a.append("--swiglu")
    if not model.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    a.append("--disable-bias-linear")
    if model.qkv_bias:
        a.append("--add-qkv-bias")
    if model.is_mla:
        a.append("--multi-latent-attention")
        if model.q_lora_rank:
            a.append(f"--q-lora-rank {model.q_lora_rank}")
        a += [
            f"--kv-lora-rank {model.kv_lora_rank}",
            f"--qk-head-dim {model.qk_nope_head_dim}",
            f"--qk-pos-emb-head-dim {model.qk_rope_head_dim}",
            f"--v-head-dim {model.v_head_dim}",
        ]
    if model.is_moe:
        a += [
            f"--num-experts {model.experts}",
            f"--moe-router-topk {model.topk}",
            f"--moe-ffn-hidden-size {model.moe_ffn_hidden}",
        ]
        if model.shared_experts:
            a.append(f"--moe-shared-expert-intermediate-size {model.shared_experts * model.shared_ffn}")
        if model.dense_layers:
            d, m = model.dense_layers, model.moe_layers
            a.append(f"--moe-layer-freq '([0]*{d}+[1]*{m})'")
        a += ["--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm"]
    return a


def _megatron_parallel_args(model: ModelSpec, workload: Workload, s: Strategy) -> tuple[list[str], list[str]]:
    """Parallelism, recompute, batch and precision arguments, plus notes."""
    a = [f"--tensor-model-parallel-size {s.tp}", f"--pipeline-model-parallel-size {s.pp}"]
    notes: list[str] = []
    if s.vpp > 1:
        if model.layers % (s.pp * s.vpp) == 0:
            a.append(f"--num-layers-per-virtual-pipeline-stage {model.layers // (s.pp * s.vpp)}")
        else:
            a.append(f"--num-virtual-stages-per-pipeline-rank {s.vpp}")
            notes.append(
                f"layers={model.layers} is not a multiple of pp*vpp={s.pp * s.vpp}: "
                "Megatron splits the stages unevenly (needs a recent Megatron-LM)"
            )
    if s.cp > 1:
        a.append(f"--context-parallel-size {s.cp}")
    if model.is_moe:
        a += [f"--expert-model-parallel-size {s.ep}", f"--expert-tensor-parallel-size {s.expert_tp}"]
    if s.sp and s.tp > 1:
        a.append("--sequence-parallel")
        if workload.tp_comm_overlap:
            a.append("--tp-comm-overlap")  # Transformer Engine userbuffers; needs --sequence-parallel
    if s.zero == 1:
        a += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif s.zero in (2, 3):
        strat = {2: "optim_grads", 3: "optim_grads_params"}[s.zero]
        a += [
            "--use-megatron-fsdp",
            f"--data-parallel-sharding-strategy {strat}",
            "--ckpt-format fsdp_dtensor",
            "--overlap-grad-reduce",
            "--overlap-param-gather",
        ]
    else:
        a.append("--overlap-grad-reduce")
    if s.recompute == "selective":
        a.append("--recompute-granularity selective")
    elif s.recompute == "full":
        a += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    a += [f"--micro-batch-size {s.micro_batch}", f"--global-batch-size {workload.global_batch}", "--bf16"]
    if workload.precision == "fp8":
        a.append("--fp8-format hybrid")
        notes.append("--fp8-recipe defaults to delayed scaling; on Blackwell add --fp8-recipe mxfp8")
    if s.pp > 1 and model.layers % s.pp:
        notes.append(
            f"layers={model.layers} is not a multiple of pp={s.pp}: add "
            "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers"
        )
    return a, notes


def _megatron_env(model: ModelSpec, s: Strategy) -> dict[str, str]:
    """Environment Megatron's validate_args requires or its guides recommend."""
    env: dict[str, str] = {}
    if (s.tp > 1 or s.cp > 1) and s.zero < 2:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # asserted for TP/CP before Blackwell (validate_args)
    if model.is_moe:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # MoE README recommendation
    return env


def _continued(lines: list[str], indent: str = "") -> str:
    """Join shell words one per line with backslash continuations."""
    return " \\\n".join(indent + x for x in lines)


# --------------------------------------------------------------------------- torchtitan


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _torchtitan(model: ModelSpec, workload: Workload, s: Strategy, header: str) -> tuple[str, list[str]]:
    """torchtitan TOML job config for the strategy, plus notes on approximations."""
    notes: list[str] = []
    shard, replicate, reshard = s.dp, 1, "default"
    if s.zero in (1, 2):
        reshard = "never"
        if s.zero == 1:
            notes.append(
                "torchtitan has no ZeRO-1; FSDP2 with reshard_after_forward=never "
                "(ZeRO-2-like) is the nearest setting"
            )
    elif s.zero == 0:
        if s.tp * s.pp * s.cp == 1:
            shard, replicate = 1, s.dp
        else:
            reshard = "never"
            notes.append(
                "torchtitan's DDP path supports a 1-D mesh only; with TP/PP/CP the "
                "config uses FSDP2 with reshard_after_forward=never instead of DDP"
            )
    if s.tp > 1 and not s.sp:
        notes.append("torchtitan always applies sequence parallelism together with TP")
    training: dict[str, object] = {"seq_len": workload.seq_len, "global_batch_size": workload.global_batch}
    if s.pp > 1:
        training = {"local_batch_size": workload.global_batch // s.dp, **training}
    else:
        training = {"local_batch_size": s.micro_batch, **training}
    training["mixed_precision_param"] = "bfloat16"
    par: dict[str, object] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
        "tensor_parallel_degree": s.tp,
        "pipeline_parallel_degree": s.pp,
        "context_parallel_degree": s.cp,
    }
    if workload.tp_comm_overlap and s.tp > 1:
        par["enable_async_tensor_parallel"] = True  # only effective with [compile] enabled (added below)
    if s.pp > 1:
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if s.vpp > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = s.micro_batch
        if s.vpp > 1 and model.layers % (s.pp * s.vpp) == 0:
            par["pipeline_parallel_layers_per_stage"] = model.layers // (s.pp * s.vpp)
    if model.is_moe:
        par["expert_parallel_degree"] = s.ep
        par["expert_tensor_parallel_degree"] = s.expert_tp if s.ep > 1 else 1
    ac: dict[str, object] = {"mode": s.recompute}
    if s.recompute == "selective":
        ac["selective_ac_option"] = "op"
    sections: list[tuple[str, dict[str, object]]] = [
        ("job", {"description": header}),
        ("model", {"converters": ["quantize.linear.float8"]} if workload.precision == "fp8" else {}),
        ("training", training),
        ("parallelism", par),
        ("activation_checkpoint", ac),
    ]
    if workload.tp_comm_overlap and s.tp > 1 and workload.precision != "fp8":
        sections.append(("compile", {"enable": True, "components": ["model", "loss"]}))
    if workload.precision == "fp8":
        sections.append(("compile", {"enable": True, "components": ["model", "loss"]}))
    out = [
        f"# torchtitan job config generated by autopar: {header}",
        "# Field names: pytorch/torchtitan torchtitan/config/job_config.py (TOML JobConfig)",
    ]
    for name, body in sections:
        out.append(f"\n[{name}]")
        if name == "model":
            out.append(f"# name/flavor: the torchtitan model matching {model.name}")
        out += [f"{k} = {_toml_value(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n", notes


# --------------------------------------------------------------------------- DeepSpeed


def _deepspeed(workload: Workload, s: Strategy, microbatches: int) -> tuple[str | None, str, list[str]]:
    """DeepSpeed config JSON where the strategy is expressible; else None and the reason."""
    unsupported = [f"{name}={v}" for name, v in (("pp", s.pp), ("cp", s.cp), ("ep", s.ep)) if v > 1]
    if unsupported:
        return (
            None,
            (
                "not expressible as a DeepSpeed config: "
                + ", ".join(unsupported)
                + " need model-side code (PipelineModule, Ulysses, DeepSpeed-MoE)"
            ),
            [],
        )
    notes: list[str] = []
    cfg: dict[str, object] = {
        "train_batch_size": workload.global_batch,
        "train_micro_batch_size_per_gpu": s.micro_batch,
        "gradient_accumulation_steps": microbatches,
        "bf16": {"enabled": True},
        "zero_optimization": (
            {"stage": s.zero, "overlap_comm": True, "contiguous_gradients": True}
            if s.zero >= 2
            else {"stage": s.zero}
        ),
        "gradient_clipping": 1.0,
    }
    if s.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": s.tp}
        notes.append(
            "DeepSpeed AutoTP (tensor_parallel.autotp_size) shards linear layers of "
            "Hugging Face style models; it has no Megatron-style sequence parallelism"
        )
    if s.recompute != "none":
        notes.append(
            "DeepSpeed activation checkpointing is enabled in the model code "
            "(e.g. gradient_checkpointing_enable()), not in this JSON"
        )
    if workload.precision == "fp8":
        notes.append("FP8 GEMMs need Transformer Engine in the model; the DeepSpeed config keeps bf16")
    return json.dumps(cfg, indent=2) + "\n", "; ".join(notes), notes


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
        f"--rdzv-endpoint $MASTER_ADDR:{MASTER_PORT}",
    ]


def _slurm(name: str, header: str, nodes: int, gpn: int, env: dict[str, str], args: list[str]) -> str:
    """An sbatch script that starts one torchrun per node running Megatron's pretrain_gpt.py."""
    job = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-").lower() or "run"
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=autopar-{job}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpn}",
        "#SBATCH --exclusive",
        f"# autopar: {header}",
        "set -euo pipefail",
        "",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"export MASTER_PORT={MASTER_PORT}",
    ]
    lines += [f"export {k}={v}" for k, v in env.items()]
    lines += ["", "MEGATRON_ARGS=("] + [f"  {x}" for x in args] + [")"]
    lines += [
        "# Fill in your data and tokenizer:",
        "DATA_ARGS=(--data-path /path/to/dataset_text_document --split 99,1,0",
        "  --tokenizer-type HuggingFaceTokenizer --tokenizer-model /path/to/tokenizer)",
        "",
        "srun torchrun \\",
        '  --nnodes "$SLURM_NNODES" \\',
        f"  --nproc-per-node {gpn} \\",
        '  --rdzv-id "$SLURM_JOB_ID" \\',
        "  --rdzv-backend c10d \\",
        '  --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\',
        f'  {MEGATRON_ENTRYPOINT} "${{MEGATRON_ARGS[@]}}" "${{DATA_ARGS[@]}}"',
        "",
        "# torchtitan instead of Megatron-LM (same allocation):",
        f'# srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {gpn} --rdzv-id "$SLURM_JOB_ID" \\',
        '#   --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\',
        f"#   -m {TORCHTITAN_MODULE} --job.config_file {TORCHTITAN_CONFIG}",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- public API


def launch_settings(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy
) -> LaunchSettings:
    """Framework settings for a strategy, so a recommendation can be launched without re-typing it."""
    s, microbatches = _resolve(cluster, workload, strategy)
    header = f"{model.name} on {cluster.num_gpus} x {cluster.gpu.name}, {s.label()}, {workload.precision}"
    margs = _megatron_model_args(model, workload)
    pargs, notes = _megatron_parallel_args(model, workload, s)
    args = margs + pargs
    env = _megatron_env(model, s)
    nodes, gpn = cluster.nodes, _gpus_per_node(cluster)
    tt, tt_notes = _torchtitan(model, workload, s, header)
    ds, ds_reason, ds_notes = _deepspeed(workload, s, microbatches)
    prefix = [f"{k}={v}" for k, v in env.items()]
    launch = _torchrun_prefix(nodes, gpn) + [MEGATRON_ENTRYPOINT] + args
    torchrun = _continued(launch)
    if prefix:
        torchrun = " ".join(prefix) + " " + torchrun
    return LaunchSettings(
        megatron_args=tuple(args),
        megatron=_continued(args),
        torchtitan=tt,
        deepspeed=ds,
        deepspeed_reason=ds_reason,
        torchrun=torchrun,
        slurm=_slurm(model.name, header, nodes, gpn, env, args),
        env=env,
        notes=tuple(notes + tt_notes + ds_notes),
        nodes=nodes,
        gpus_per_node=gpn,
    )


_LABEL_TOKENS = [
    (re.compile(r"^TP(\d+)(\+SP)?$"), "tp"),
    (re.compile(r"^PP(\d+)(?:v(\d+))?$"), "pp"),
    (re.compile(r"^CP(\d+)$"), "cp"),
    (re.compile(r"^EP(\d+)$"), "ep"),
    (re.compile(r"^DP(\d+)(?:/Z(\d))?$"), "dp"),
    (re.compile(r"^mb(\d+)$"), "mb"),
    (re.compile(r"^(sel|full)-AC$"), "ac"),
]


def parse_strategy_label(label: str) -> Strategy:
    """Parse a `Strategy.label()` string ('TP4+SP PP2v2 DP8/Z1 mb1 sel-AC') back into a Strategy."""
    fields: dict[str, object] = {"zero": 0}
    for tok in label.split():
        for rx, key in _LABEL_TOKENS:
            m = rx.match(tok)
            if not m:
                continue
            if key == "tp":
                fields["tp"], fields["sp"] = int(m[1]), bool(m[2])
            elif key == "pp":
                fields["pp"] = int(m[1])
                if m[2]:
                    fields["vpp"], fields["pp_schedule"] = int(m[2]), "interleaved"
            elif key == "dp":
                fields["dp"], fields["zero"] = int(m[1]), int(m[2] or 0)
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
