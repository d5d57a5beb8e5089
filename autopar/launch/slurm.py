"""torchrun command lines and the SLURM sbatch script that start Megatron-LM (torchtitan commented beside it).

torchrun: pytorch/pytorch torch/distributed/run.py (`--nnodes`, `--nproc-per-node`, `--rdzv-backend`,
`--rdzv-endpoint`, `--rdzv-id`, `--standalone`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from autopar.launch.megatron import DATA_ARGS, MEGATRON_ENTRYPOINT, placeholder
from autopar.launch.schema import schema_source
from autopar.specs import ClusterSpec
from autopar.text import shell_comment

TORCHTITAN_MODULE = "torchtitan.train"
TORCHTITAN_CONFIG = "autopar_torchtitan.toml"
MASTER_PORT = 29500


def node_gpus(cluster: ClusterSpec) -> int:
    """GPUs (torchrun processes) per node."""
    return min(cluster.host_size, cluster.num_gpus)


def continued(lines: list[str], indent: str = "") -> str:
    """Join shell words one per line with backslash continuations."""
    return " \\\n".join(indent + x for x in lines)


def torchrun_prefix(nodes: int, gpn: int) -> list[str]:
    """The torchrun words that start `gpn` processes on each of `nodes` nodes (c10d rendezvous when several)."""
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


def slurm_script(
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
    nodes, gpn = cluster.nodes, node_gpus(cluster)
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
