"""One rank of a dry-run: `python -m autopar.dryrun.worker FOLDER`, started by launch.run_ranks with the
torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). It reads FOLDER/job.json, runs its tasks
in order (each a numerical check or a measurement of one plan, all plans of the same world size) and writes
FOLDER/rank{RANK}.json (one result per task), or FOLDER/rank{RANK}.error (one line) and exits 1."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autopar.dryrun.check import check_layers
from autopar.dryrun.plan import plan_from_json
from autopar.dryrun.train import measure, rank_groups


def run_job(job: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    """Join the process group, run the tasks on this rank, leave the group."""
    tasks = [(t["mode"], plan_from_json(t["plan"])) for t in job["tasks"]]
    plan = tasks[0][1]
    cuda = plan.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # the ranks share the host's cores
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    world = plan.degrees.world
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=job["timeout_s"]))
    try:
        out = []
        for mode, p in tasks:
            g = rank_groups(rank, world, p)
            out.append(
                check_layers(p, g, device)
                if mode == "check"
                else measure(p, g, device, job["steps"], job["warmup"])
            )
        return out
    finally:
        dist.destroy_process_group()


def main(folder: str) -> int:
    rank = int(os.environ["RANK"])
    try:
        job = json.loads(Path(folder, "job.json").read_text(encoding="utf-8"))
        out = run_job(job, rank)
    except Exception as e:  # noqa: BLE001 - the parent reports it in one line
        text = " ".join(f"{type(e).__name__}: {e}".split())
        Path(folder, f"rank{rank}.error").write_text(text, encoding="utf-8")
        return 1
    Path(folder, f"rank{rank}.json").write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
