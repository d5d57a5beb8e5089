"""`--runner slurm`: each candidate as a short SLURM job, the sbatch script `autopar launch` writes.

The script runs Megatron-LM for `job.steps` iterations (its token budget sets --train-iters) with every
iteration logged (--log-interval 1); the data, tokenizer and checkpoint placeholders it names come from the
environment `tune` runs in (as with `autopar launch`). `sbatch --parsable` submits it with its output in the
run folder; `squeue` tells when the job has left the queue; `sacct`, when the cluster has it, gives the final
state (OUT_OF_MEMORY, TIMEOUT, FAILED); the job's log is read by the Megatron-LM (or torchtitan) parser with
the warm-up steps left out. A job past its timeout (counted from when it first runs, not from its submission)
is cancelled (`scancel`). Every SLURM call is bounded in time and output. The tune stores the job id in
its trial before waiting, so a `tune` started again re-attaches to a job still queued or running.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

from autopar.errors import AutoparError
from autopar.tune.runners.base import (
    Job,
    Outcome,
    failed,
    read_handle,
    read_log,
    read_tail,
    timeout_reason,
    write_handle,
    write_job_files,
)
from autopar.tune.runners.local import bounded_output

POLL_S = 10.0  # squeue is asked this often (a scheduler is not to be hammered)
# squeue states of a job that has not started: its timeout does not run yet (SLURM's squeue(1) state codes).
WAITING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED"}
)
SHORT_RUN_ARGS = ("--log-interval 1",)  # every iteration logged, so the warm-up can be told apart
_SACCT_FAILED = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "failed", "FAILED": "failed", "CANCELLED": "failed"}


COMMAND_TIMEOUT_S = 120.0  # one sbatch / squeue / sacct / scancel call
# What a SLURM call may print: a job id, a state, a few sacct lines. More is not SLURM's answer (a wrapper that
# floods, a site script gone wrong): the call is stopped and fails rather than filling memory (issue 45).
OUTPUT_MAX_BYTES = 64 << 10


def _run(argv: list[str], what: str) -> str:
    """Run a SLURM command; its standard output (at most OUTPUT_MAX_BYTES, within COMMAND_TIMEOUT_S), or
    AutoparError naming the command and its error."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # noqa: S603
    except OSError as e:
        raise AutoparError(f"runner=slurm: {what} failed: {e}") from None
    out, err, why = bounded_output(proc, OUTPUT_MAX_BYTES, COMMAND_TIMEOUT_S)
    if why:
        raise AutoparError(f"runner=slurm: {what} {why}")
    if proc.returncode != 0:
        text = err.decode(errors="replace").strip()[:300]
        raise AutoparError(f"runner=slurm: {what} exited {proc.returncode}: {text}")
    return out.decode(errors="replace")


def short_run_settings(job: Job) -> Any:
    """The launch settings of a short run of the job's candidate: `job.steps` iterations, each logged."""
    from autopar.launch.settings import launch_settings

    c = job.candidate
    w = c.workload.model_copy(update={"token_budget": job.steps * c.workload.tokens_per_step})
    return launch_settings(c.model, c.cluster, w, c.strategy, extra_megatron_args=SHORT_RUN_ARGS)


def job_script(job: Job) -> str:
    """The sbatch script of a short run of the job's candidate."""
    return str(short_run_settings(job).slurm)


class SlurmRunner:
    """sbatch / squeue / sacct / scancel on PATH."""

    name = "slurm"

    def __init__(self, poll_s: float = POLL_S) -> None:
        missing = [c for c in ("sbatch", "squeue", "scancel") if shutil.which(c) is None]
        if missing:
            raise AutoparError(
                f"runner=slurm: {', '.join(missing)} not found on PATH (run tune on a login node)"
            )
        self.poll_s = poll_s

    def start(self, job: Job) -> dict[str, Any]:
        write_job_files(job)
        script = job.run_dir / "job.sbatch"
        script.write_text(job_script(job), encoding="utf-8")
        out = _run(
            [
                "sbatch",
                "--parsable",
                f"--output={job.run_dir / 'slurm-%j.out'}",
                f"--chdir={job.run_dir}",
                str(script),
            ],
            "sbatch",
        )
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise AutoparError(f"runner=slurm: sbatch printed {out.strip()[:80]!r}, not a job id")
        handle = {"job_id": job_id, "submitted": time.time()}
        write_handle(job, handle)
        return handle

    def _queued(self, job_id: str) -> str:
        """The job's state while squeue lists it (PENDING, RUNNING, ...), '' once it has left the queue."""
        out = _run(["squeue", "-h", "-j", job_id, "-o", "%T"], "squeue").strip()
        return (out.split() or [""])[0]

    def _state(self, job_id: str) -> str:
        if shutil.which("sacct") is None:
            return ""
        try:
            out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], "sacct")
        except AutoparError:
            return ""
        return (out.strip().splitlines() or [""])[0].split()[0] if out.strip() else ""

    def wait(self, job: Job, handle: dict[str, Any]) -> Outcome:
        """Wait while the job is queued or running; its timeout counts from when it first ran (a queue
        wait is not the run's), kept in the handle so a re-attached tune counts from the same moment."""
        job_id = str(handle["job_id"])
        while state := self._queued(job_id):
            if state not in WAITING_STATES and not handle.get("running_since"):
                handle["running_since"] = time.time()
                write_handle(job, handle)
            since = handle.get("running_since")
            if job.timeout_s is not None and since and time.time() - float(since) > job.timeout_s:
                _run(["scancel", job_id], "scancel")
                return failed(timeout_reason(job, f"job {job_id} cancelled"))
            time.sleep(self.poll_s)
        return self._outcome(job, job_id)

    def _outcome(self, job: Job, job_id: str) -> Outcome:
        log = job.run_dir / f"slurm-{job_id}.out"
        text = read_tail(log)
        state = self._state(job_id)
        if state in _SACCT_FAILED and _SACCT_FAILED[state] == "oom":
            return Outcome("oom", reason=f"job {job_id}: {state}")
        parsed = read_log(text, job)
        if parsed is not None and parsed.status != "failed":
            return parsed
        if state in _SACCT_FAILED:
            return failed(f"job {job_id}: {state}" + (f"; {parsed.reason}" if parsed else ""))
        return parsed or failed(f"job {job_id}: no training log it could parse in {log.name}")

    def attach(self, job: Job, handle: dict[str, Any]) -> Outcome | None:
        handle = {**handle, **(read_handle(job.run_dir) or {})}  # the folder's copy knows when the job ran
        job_id = str(handle.get("job_id") or "")
        if not job_id:
            return None
        if self._queued(job_id):
            return self.wait(job, handle)  # the handle it was given keeps the moment the job first ran
        if (job.run_dir / f"slurm-{job_id}.out").exists():
            return self._outcome(job, job_id)
        return None
