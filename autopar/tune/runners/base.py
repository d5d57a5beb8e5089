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
import os
import re
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autopar.calibration.ingest.log_record import OOM_TEXT
from autopar.text import excerpt, one_line

STATUSES = ("ok", "oom", "failed")
# A measurement more than this factor away from the prediction is no layout effect (the model's 80% bands span
# less than x2): a unit slip (tokens/s of the cluster for per GPU), a wrong --global-batch or GPU, a broken
# timer. Such a run FAILs with both numbers named rather than teaching the belief a wrong cluster offset.
PLAUSIBLE_FACTOR = 10.0
# A run's peak memory over this many times its GPU's memory is a unit slip (MiB for GiB), not a measurement.
DEVICE_MEMORY_FACTOR = 2.0
# What the tune reads of what a run leaves (the run is the user's command: it may write anything, of any size,
# or put a FIFO or a device where a file was expected). A result is a small JSON object; of a log only the
# tail is read (the measured steps are the last ones), each line cut to LINE_CHARS (a training log's step
# lines are a few hundred characters; a longer one is noise, and the log parsers' regular expressions are
# quadratic in a line that repeats a step line's start).
RESULT_MAX_BYTES = 1 << 20
LOG_TAIL_BYTES = 4 << 20
LINE_CHARS = 4096
REASON_CHARS = 400  # a FAIL reason is one line of at most this many characters
_STEP_START = re.compile(r"iteration\s+\d+\s*/|(?<![\w])step:\s*\d+\s")


@dataclass(frozen=True)
class Job:
    """One run of one candidate."""

    number: int  # the run's number in the tune (1-based)
    candidate: Any  # autopar.tune.candidates.Candidate
    run_dir: Path
    steps: int  # steps the run should take (warm-up included)
    warmup: int  # leading steps left out of the measurement
    timeout_s: float | None
    timeout_why: str = "--run-timeout"  # what set timeout_s (the flag, or the default rule and its figures)

    @property
    def result_path(self) -> Path:
        return self.run_dir / "result.json"

    @property
    def strategy_path(self) -> Path:
        return self.run_dir / "strategy.json"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "output.log"


HANDLE_FILE = "handle.json"  # the run's handle in its folder, written the moment it is launched
# Without --run-timeout a run is stopped after STARTUP_ALLOWANCE_S plus SLOW_RUN_FACTOR times the time its
# steps take at the low end of the candidate's 80% band: a run still going then is hung (a deadlocked
# collective, a stuck data loader), not slow. The allowance covers what a step count does not: container and
# environment start, NCCL initialisation, checkpoint loading, torch.compile (tens of minutes at most on the
# stacks autopar launches). Without a timeout a hung run would be waited for forever (issue 45).
STARTUP_ALLOWANCE_S = 1800.0
SLOW_RUN_FACTOR = 10.0


def default_timeout(candidate: Any, steps: int) -> tuple[float, str]:
    """(seconds, why) a run of `steps` steps of `candidate` may take before it is stopped as hung."""
    tps = candidate.lo if candidate.lo > 0 and math.isfinite(candidate.lo) else candidate.predicted / 2
    step_s = candidate.workload.tokens_per_step / max(tps * candidate.num_gpus, 1e-9)
    run_s = steps * step_s
    total = STARTUP_ALLOWANCE_S + SLOW_RUN_FACTOR * run_s
    why = (
        f"default: {STARTUP_ALLOWANCE_S / 60:g} min to start + {SLOW_RUN_FACTOR:g} x the {run_s:,.0f} s its "
        f"{steps} steps take at the band's low end; --run-timeout sets it"
    )
    return total, why


def timeout_reason(job: Job, what: str = "stopped") -> str:
    """The one-line reason of a run stopped at its timeout."""
    t = job.timeout_s or 0.0
    return f"timeout: {what} after {f'{t:,.0f}' if t >= 100 else f'{t:g}'} s ({job.timeout_why})"


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
    """A FAILed run with `reason` as one printable line of at most REASON_CHARS characters."""
    return Outcome("failed", reason=excerpt(one_line(excerpt(str(reason), REASON_CHARS)), REASON_CHARS))


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


def write_handle(job: Job, handle: dict[str, Any]) -> None:
    """The run's handle in its folder (HANDLE_FILE), so a tune killed before its trial stored the handle
    still finds the run it launched. Best effort: a run that removed its own folder is launched all the
    same (and waited for)."""
    tmp = job.run_dir / f".{HANDLE_FILE}.tmp"
    try:
        tmp.write_text(json.dumps(handle), encoding="utf-8")
        os.replace(tmp, job.run_dir / HANDLE_FILE)
    except OSError:
        pass


def read_handle(run_dir: Path) -> dict[str, Any] | None:
    """The handle a run folder holds (write_handle), None when it holds none that reads."""
    try:
        doc = json.loads(_read_result_bytes(run_dir / HANDLE_FILE))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and doc else None


def open_regular(path: Path) -> Any:
    """`path` opened for reading if it is a regular file (after symlinks); ValueError naming what it is
    otherwise (a FIFO is opened without blocking, a device or a directory is never read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    f = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        f.close()
        kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}
        kind = kinds.get(stat.S_IFMT(mode), "a directory" if stat.S_ISDIR(mode) else "a socket")
        raise ValueError(f"{path.name} is {kind}, not a file")
    return f


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a run's log as text ("" when it is missing or not a regular file): bytes
    that are not UTF-8 replaced, each line cut to LINE_CHARS, and a line that repeats a step line's start
    (no training log does) blanked."""
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                f.seek(size - limit)
            data = f.read(limit)
    except (OSError, ValueError):
        return ""
    if size > limit and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # the first line is cut: drop it
    lines = data.decode("utf-8", errors="replace").splitlines()
    cut = (ln[:LINE_CHARS] for ln in lines)
    return "\n".join(ln if len(_STEP_START.findall(ln)) <= 1 else "" for ln in cut)


def _read_result_bytes(path: Path) -> bytes:
    """The result file's bytes; ValueError when it is not a regular file or over RESULT_MAX_BYTES."""
    with open_regular(path) as f:
        data = f.read(RESULT_MAX_BYTES + 1)
    if len(data) > RESULT_MAX_BYTES:
        raise ValueError(f"{path.name} is over {RESULT_MAX_BYTES >> 20} MiB: not a result")
    return data


def _shown(v: Any) -> str:
    """A JSON value as the result file spelled it, cut short: 900, "900", [900], Infinity."""
    try:
        return excerpt(json.dumps(v))
    except ValueError:  # an integer too long to spell
        return "a number of thousands of digits"


def _positive(doc: dict[str, Any], key: str, required: bool) -> float | None:
    """doc[key] as a finite positive float (None when absent and not required); ValueError otherwise."""
    v = doc.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        kind = {str: "a string", list: "a list", dict: "an object", bool: "a boolean"}.get(type(v), "missing")
        raise ValueError(f"{key}={_shown(v)} ({kind}) is not a positive number")
    try:
        x = float(v)
    except OverflowError:  # an integer of hundreds of digits
        x = math.inf
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{key}={_shown(v)} is not a positive number")
    return x


def read_result_file(path: Path) -> Outcome:
    """A result JSON object {"status", "tokens_per_s_per_gpu", "peak_mem_gib"?}; anything else (not a
    regular file, over RESULT_MAX_BYTES, not UTF-8 JSON, an object of the wrong types) FAILs with one line.
    Never raises."""
    try:
        raw = _read_result_bytes(path)
    except OSError as e:
        return failed(f"result file {path.name} could not be read: {e.strerror or e}")
    except ValueError as e:
        return failed(f"result file {e}")
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (ValueError, RecursionError) as e:  # JSON, UTF-8 and int-digit errors are ValueErrors
        return failed(f"result file {path.name} is not JSON: {e}")
    if not isinstance(doc, dict):
        return failed(f"result file {path.name} holds {type(doc).__name__}, not a JSON object")
    status = doc.get("status")
    if not isinstance(status, str) or status not in STATUSES:
        return failed(f"result status={_shown(status)}: expected one of {', '.join(STATUSES)}")
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
    from autopar.calibration.ingest.log_record import aggregate
    from autopar.calibration.ingest.log_steps import parse_log, sniff_log_format
    from autopar.errors import AutoparError

    fmt = sniff_log_format(text)
    if fmt is None:
        return Outcome("oom", reason="out of memory (log)") if OOM_TEXT.search(text) else None
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
            if OOM_TEXT.search(text):
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


def exit_text(code: int) -> str:
    """'exit code 3', 'killed by SIGKILL' (a negative code), 'exit code 139 (SIGSEGV)' (a shell's 128 + N)."""
    n = -code if code < 0 else code - 128 if 128 < code < 128 + signal.NSIG else 0
    try:
        name = signal.Signals(n).name if n else ""
    except ValueError:
        name = ""
    if code < 0:
        return f"killed by {name or f'signal {-code}'}"
    return f"exit code {code}" + (f" ({name})" if name else "")


def outcome_of(job: Job, exit_code: int | None, log_text: str) -> Outcome:
    """The run's outcome from its result file, else its log; a non-zero exit with neither FAILs. A path in
    place of the result file (even a dangling symlink or a FIFO) is read as the result."""
    if os.path.lexists(job.result_path):
        return read_result_file(job.result_path)
    parsed = read_log(log_text, job)
    if parsed is not None and (parsed.status != "failed" or exit_code in (0, None)):
        return parsed
    if exit_code not in (0, None):
        last = next((ln for ln in reversed(log_text.splitlines()) if ln.strip()), "")
        tail = f" (last line: {excerpt(last)})" if last else ""
        return failed(f"{exit_text(exit_code)} and no result{tail}")
    if parsed is not None:
        return parsed
    return failed(f"no {job.result_path.name} and no training log it could parse")


def checked(outcome: Outcome, c: Any) -> Outcome:
    """FAIL a measurement of candidate `c` that is not a number a layout could give: PLAUSIBLE_FACTOR from
    the prediction, more model FLOPs than the GPU's dense peak (MFU over 100%, from the predicted MFU at the
    predicted speed), or a peak memory no run of it can have (memory_nonsense)."""
    x, predicted, predicted_mfu = outcome.tokens_per_s_per_gpu, c.predicted, c.mfu
    if outcome.smoke or outcome.status == "failed":
        return outcome
    nonsense = memory_nonsense(outcome, c.mem_gib, c.cluster.gpu.memory_bytes / 2**30)
    if nonsense:
        return failed(nonsense)
    if outcome.status != "ok" or x is None or not (predicted > 0):
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


def memory_nonsense(outcome: Outcome, predicted_gib: float, device_gib: float) -> str | None:
    """Why the outcome's peak memory is no run's (over DEVICE_MEMORY_FACTOR x the GPU's memory; for a run that
    ran, under 1/PLAUSIBLE_FACTOR of the predicted peak, which counts weights the run must hold), else None.
    An OOM may report a small peak (it stopped at the allocation that failed)."""
    m = outcome.peak_mem_gib
    if m is None:
        return None
    if not (math.isfinite(m) and m > 0):  # a log's memory line can say anything
        return f"peak_mem_gib={m:.4g} is not a positive number; check the runner's memory report"
    if math.isfinite(device_gib) and m > DEVICE_MEMORY_FACTOR * device_gib:
        return (
            f"peak_mem_gib={m:.4g} is over {DEVICE_MEMORY_FACTOR:g}x the GPU's {device_gib:.0f} GiB: no run "
            "holds that; check the runner's units (GiB per GPU)"
        )
    if outcome.status == "ok" and predicted_gib > 0 and m < predicted_gib / PLAUSIBLE_FACTOR:
        return (
            f"peak_mem_gib={m:.4g} is under 1/{PLAUSIBLE_FACTOR:g} of the predicted {predicted_gib:.3g} GiB: no "
            "run of this layout holds less; check the runner's units (GiB per GPU)"
        )
    return None
