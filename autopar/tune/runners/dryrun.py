"""`--runner dryrun`: `autopar dryrun` on this host for each candidate (GPUs when PyTorch sees any, else the
CPU with gloo on a tiny model of the same shape).

What it measures is the candidate's slice (its most loaded pipeline stage, the degrees that fit the host's
ranks; autopar/dryrun/plan.py), so the tokens/s it reports are the slice's per rank. On a GPU host that is a
real measurement of the slice; on the CPU it is a smoke test of the whole loop (the tune runs, learns and
stops), marked `smoke`: its numbers are not compared with the GPU prediction and never calibrate the model.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from autopar.tune.runners.base import (
    RESULT_MAX_BYTES,
    Job,
    Outcome,
    failed,
    open_regular,
    read_tail,
    timeout_reason,
    write_handle,
    write_job_files,
)
from autopar.tune.runners.local import Processes, alive, stop_leftovers

DRYRUN_OUT = "dryrun.json"


def _doc_outcome(job: Job) -> Outcome:
    """The dry-run's --json document as an outcome."""
    path = job.run_dir / DRYRUN_OUT
    try:
        with open_regular(path) as f:
            doc = json.loads(f.read(16 * RESULT_MAX_BYTES))
        m = doc["measured"]
        tps = float(m["tokens_per_s_per_rank"])
    except (OSError, ValueError, KeyError, TypeError):
        tail = [ln for ln in read_tail(job.log_path).splitlines() if ln.strip()]
        if any("out of memory" in ln.lower() for ln in tail):
            return Outcome("oom", reason="out of memory (dry-run)")
        return failed("dry-run: " + (tail[-1] if tail else "no JSON document"))
    slice_pred = next(
        (r["predicted"] for r in doc.get("rows", []) if r.get("quantity") == "tokens/s per GPU"), None
    )
    record = {"device": doc.get("device"), "host": doc.get("host"), "slice_predicted": slice_pred}
    return Outcome(
        "ok",
        tps,
        m.get("max_reserved_gib"),
        reason=f"dry-run on {doc.get('host')}: the slice {doc.get('slice', {}).get('strategy')}",
        record=record,
        smoke=doc.get("device") == "cpu",
    )


class DryrunRunner:
    """`python -m autopar dryrun --strategy LABEL ... --json` in the run folder."""

    name = "dryrun"

    def __init__(self, model_arg: str | None = None, device: str = "auto", ranks: int | None = None) -> None:
        self.model_arg = model_arg
        self.device = device
        self.ranks = ranks
        self._procs = Processes()

    def argv(self, job: Job) -> list[str]:
        c = job.candidate
        w = c.workload
        args = [sys.executable, "-m", "autopar", "dryrun", "--strategy", c.label]
        args += ["--model", self.model_arg or c.model.name, "--gpu", c.cluster.gpu.name]
        args += [
            "--gpus",
            str(c.num_gpus),
            "--seq-len",
            str(w.seq_len),
            "--global-batch",
            str(w.global_batch),
        ]
        args += ["--precision", w.precision, "--framework", w.framework, "--device", self.device]
        args += ["--steps", str(max(1, job.steps - job.warmup)), "--warmup", str(max(1, job.warmup))]
        if self.ranks is not None:
            args += ["--ranks", str(self.ranks)]
        if job.timeout_s is not None:
            args += ["--timeout", f"{job.timeout_s:g}"]
        return [*args, "--record", str(job.run_dir / "record.jsonl"), "--json"]

    def start(self, job: Job) -> dict[str, Any]:
        write_job_files(job)
        handle = self._procs.start(
            self.argv(job), {}, job.run_dir, job.log_path, stdout=job.run_dir / DRYRUN_OUT
        )
        write_handle(job, handle)
        return handle

    def wait(self, job: Job, handle: dict[str, Any]) -> Outcome:
        timeout = None if job.timeout_s is None else job.timeout_s + 30  # the dry-run stops its ranks itself
        _, timed_out = self._procs.wait(handle, timeout)
        if timed_out:
            return failed(timeout_reason(job))
        return _doc_outcome(job)

    def attach(self, job: Job, handle: dict[str, Any]) -> Outcome | None:
        if alive(handle):
            return self.wait(job, handle)
        stop_leftovers(handle)  # it ended while no tune watched: what it left must not hold a GPU
        if (job.run_dir / DRYRUN_OUT).exists():
            return _doc_outcome(job)
        return None
