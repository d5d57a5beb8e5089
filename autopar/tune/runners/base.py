"""What every `autopar tune` runner shares: the job it is given, the outcome it returns, and how a run's
result file or training log becomes a measurement (with its warm-up steps left out).

A runner has three calls (`Runner`): `start(job)` launches the run and returns a JSON-able handle (a process
id, a SLURM job id) that the tune stores in the Optuna trial before it waits; `wait(job, handle)` blocks
until the run ends (or `job.timeout_s` passes: the run is stopped and FAILs) and returns its `Outcome`;
`attach(job, handle)` is `wait` for a run launched by an earlier `tune` that crashed or was interrupted: it
waits for the run if it is still going, reads its result if it ended, and returns None when neither is
possible (the run is stale; it is never launched again).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autopar.text import excerpt, one_line

STATUSES = ("ok", "oom", "failed")
# A measurement more than this factor away from the prediction is no layout effect (the model's 80% bands span
# less than x2): a unit slip (tokens/s of the cluster for per GPU), a wrong --global-batch or GPU, a broken
# timer. Such a run FAILs with both numbers named rather than teaching the belief a wrong cluster offset.
PLAUSIBLE_FACTOR = 10.0
_OOM_TEXT = re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory|oom-kill", re.IGNORECASE)


@dataclass(frozen=True)
class Job:
    """One run of one candidate."""

    number: int  # the run's number in the tune (1-based)
    candidate: Any  # autopar.tune.candidates.Candidate
    run_dir: Path
    steps: int  # steps the run should take (warm-up included)
    warmup: int  # leading steps left out of the measurement
    timeout_s: float | None

    @property
    def result_path(self) -> Path:
        return self.run_dir / "result.json"

    @property
    def strategy_path(self) -> Path:
        return self.run_dir / "strategy.json"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "output.log"


@dataclass(frozen=True)
class Outcome:
    """What a run showed: status, tokens/s per GPU (after warm-up) and peak memory (GiB) when it ran."""

    status: str  # one of STATUSES
    tokens_per_s_per_gpu: float | None = None
    peak_mem_gib: float | None = None
    reason: str = ""  # why it failed (one line), or how it was measured
    record: dict[str, Any] = field(default_factory=dict)  # run-record columns read from its log
    smoke: bool = False  # measured on a stand-in (a CPU dry-run): not comparable with the prediction

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "peak_mem_gib": self.peak_mem_gib,
            "reason": self.reason,
            "smoke": self.smoke,
        }


def failed(reason: str) -> Outcome:
    return Outcome("failed", reason=one_line(reason))


class Runner(Protocol):
    """Launches candidates somewhere and reads what they measured."""

    name: str

    def start(self, job: Job) -> dict[str, Any]: ...

    def wait(self, job: Job, handle: dict[str, Any]) -> Outcome: ...

    def attach(self, job: Job, handle: dict[str, Any]) -> Outcome | None: ...


def write_job_files(job: Job) -> None:
    """The candidate's knobs as JSON (AUTOPAR_STRATEGY_JSON) in a fresh run folder."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    job.strategy_path.write_text(json.dumps(job.candidate.knobs(), indent=2) + "\n", encoding="utf-8")


def _positive(doc: dict[str, Any], key: str, required: bool) -> float | None:
    v = doc.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{key}={v!r} is not a positive number")
    return float(v)


def read_result_file(path: Path) -> Outcome:
    """A result JSON object {"status", "tokens_per_s_per_gpu", "peak_mem_gib"?}; a malformed one FAILs."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return failed(f"result file {path.name} is not JSON: {e}")
    if not isinstance(doc, dict):
        return failed(f"result file {path.name} holds {type(doc).__name__}, not a JSON object")
    status = doc.get("status")
    if status not in STATUSES:
        return failed(f"result status={excerpt(str(status))!r}: expected one of {', '.join(STATUSES)}")
    try:
        tps = _positive(doc, "tokens_per_s_per_gpu", required=status == "ok")
        mem = _positive(doc, "peak_mem_gib", required=False)
    except ValueError as e:
        return failed(f"result file: {e}")
    if status == "failed":
        return failed(str(doc.get("reason") or "the runner reported a failed run"))
    return Outcome(status, tps if status == "ok" else None, mem, reason="result file")


def read_log(text: str, job: Job) -> Outcome | None:
    """A Megatron-LM or torchtitan training log as a measurement (warm-up left out); None if it is neither.
    An out-of-memory message with no step after it is an OOM."""
    from autopar.calibration.logs import aggregate, parse_log, sniff_log_format
    from autopar.errors import AutoparError

    fmt = sniff_log_format(text)
    if fmt is None:
        return Outcome("oom", reason="out of memory (log)") if _OOM_TEXT.search(text) else None
    c = job.candidate
    config = {
        "gpu": c.cluster.gpu.name,
        "num_gpus": c.num_gpus,
        "seq_len": c.workload.seq_len,
        "global_batch": c.workload.global_batch,
    }
    try:
        samples = parse_log(text, fmt)
        skip = sum(1 for step in samples.steps if step <= job.warmup)  # logged lines of warm-up iterations
        if skip >= len(samples):
            if _OOM_TEXT.search(text):
                return Outcome("oom", reason="out of memory (log)")
            return failed(f"{fmt}: no step logged after the {job.warmup} warm-up steps")
        rec = aggregate(samples, config, warmup=skip)
    except AutoparError as e:
        return failed(f"{fmt}: {e}")
    tps = rec.get("measured_tokens_per_s_per_gpu")
    if not tps:
        return failed(f"{fmt}: no throughput in the log's step lines")
    mem = rec.get("measured_mem_gb_per_gpu")
    how = f"{fmt}: median of {rec['log_steps_used']} steps after {rec['log_warmup_skipped']} warm-up"
    return Outcome("ok", float(tps), float(mem) if mem else None, reason=how, record=rec)


def outcome_of(job: Job, exit_code: int | None, log_text: str) -> Outcome:
    """The run's outcome from its result file, else its log; a non-zero exit with neither FAILs."""
    if job.result_path.exists():
        return read_result_file(job.result_path)
    parsed = read_log(log_text, job)
    if parsed is not None and (parsed.status != "failed" or exit_code in (0, None)):
        return parsed
    if exit_code not in (0, None):
        last = next((ln for ln in reversed(log_text.splitlines()) if ln.strip()), "")
        tail = f" (last line: {excerpt(last)})" if last else ""
        return failed(f"exit code {exit_code} and no result{tail}")
    if parsed is not None:
        return parsed
    return failed(f"no {job.result_path.name} and no training log it could parse")


def checked(outcome: Outcome, predicted: float, predicted_mfu: float = math.nan) -> Outcome:
    """FAIL a measurement that is not a number a layout could give: PLAUSIBLE_FACTOR from the prediction, or
    more model FLOPs than the GPU's dense peak (MFU over 100%, from the predicted MFU at the predicted speed)."""
    x = outcome.tokens_per_s_per_gpu
    if outcome.status != "ok" or outcome.smoke or x is None or not (predicted > 0):
        return outcome
    ratio = x / predicted
    if not (1 / PLAUSIBLE_FACTOR <= ratio <= PLAUSIBLE_FACTOR):
        return failed(
            f"measured {x:,.4g} tokens/s per GPU is x{ratio:.3g} the prediction {predicted:,.4g}: no layout "
            "does that; check the runner's units (per GPU, after warm-up) and the problem flags (GPU, batch)"
        )
    if math.isfinite(predicted_mfu) and predicted_mfu * ratio > 1:
        return failed(
            f"measured {x:,.4g} tokens/s per GPU implies MFU {predicted_mfu * ratio:.0%} of the GPU's dense peak "
            "(at most 100% is possible); check the runner's units and the problem flags"
        )
    return outcome
