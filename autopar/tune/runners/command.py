"""`--runner "cmd:TEMPLATE"`: any command the team already uses, run by the shell once per candidate.

The command sees AUTOPAR_STRATEGY (the label), AUTOPAR_STRATEGY_JSON (a file with the candidate's knobs under
the knob registry's names and its problem), AUTOPAR_CANDIDATE_ID (the `id` of a `--candidates` row, else
empty), AUTOPAR_RUN_DIR (a fresh folder, also its working directory), AUTOPAR_RESULT (where it may write
{"status": "ok"|"oom"|"failed", "tokens_per_s_per_gpu": ..., "peak_mem_gib": ...}), AUTOPAR_STEPS and
AUTOPAR_WARMUP_STEPS. It writes that result, or prints a Megatron-LM or torchtitan training log (read with
the warm-up steps left out); a non-zero exit with neither is a failed run.
"""

from __future__ import annotations

import os
from typing import Any

from autopar.tune.runners.base import (
    Job,
    Outcome,
    failed,
    outcome_of,
    read_tail,
    timeout_reason,
    write_handle,
    write_job_files,
)
from autopar.tune.runners.local import Processes, alive, stop_leftovers


def job_env(job: Job) -> dict[str, str]:
    """The environment a run's command sees (module docstring)."""
    c = job.candidate
    return {
        "AUTOPAR_STRATEGY": c.label,
        "AUTOPAR_STRATEGY_JSON": str(job.strategy_path),
        "AUTOPAR_CANDIDATE_ID": c.candidate_id or "",
        "AUTOPAR_RUN_DIR": str(job.run_dir),
        "AUTOPAR_RESULT": str(job.result_path),
        "AUTOPAR_STEPS": str(job.steps),
        "AUTOPAR_WARMUP_STEPS": str(job.warmup),
    }


def _log_text(job: Job) -> str:
    """The tail of the run's log (base.read_tail: bounded, whatever the run wrote or put there)."""
    return read_tail(job.log_path)


class CommandRunner:
    """Runs `template` with `sh -c` in the run folder."""

    name = "cmd"

    def __init__(self, template: str) -> None:
        self.template = template
        self._procs = Processes()

    def start(self, job: Job) -> dict[str, Any]:
        write_job_files(job)
        handle = self._procs.start(["/bin/sh", "-c", self.template], job_env(job), job.run_dir, job.log_path)
        write_handle(job, handle)
        return handle

    def wait(self, job: Job, handle: dict[str, Any]) -> Outcome:
        code, timed_out = self._procs.wait(handle, job.timeout_s)
        if timed_out:
            return failed(timeout_reason(job))
        return outcome_of(job, code, _log_text(job))

    def attach(self, job: Job, handle: dict[str, Any]) -> Outcome | None:
        if alive(handle):
            return self.wait(job, handle)
        stop_leftovers(handle)  # it ended while no tune watched: what it left must not hold a GPU
        if os.path.lexists(job.result_path) or _log_text(job).strip():
            return outcome_of(job, None, _log_text(job))
        return None
