"""One run record from a training log: the post-warm-up steps' median (p10/p90 spread) with the log's
config, or a record of a run that ran out of memory before its first logged step.
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from autopar.calibration.ingest.log_steps import LogSamples
from autopar.errors import DataError


def warmup_count(n: int, warmup: int | None) -> int:
    """How many leading logged steps to drop: `warmup` if given, else 10% (at least 1 of 2+)."""
    if warmup is not None:
        if warmup < 0:
            raise DataError(f"--warmup={warmup} must be >= 0")
        return warmup
    return 0 if n < 2 else max(1, math.ceil(0.1 * n))


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of a non-empty list."""
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _summary(prefix: str, xs: list[float]) -> dict[str, float]:
    """Median plus p10/p90 of a series under `prefix`, `prefix`_p10, `prefix`_p90."""
    if not xs:
        return {}
    return {
        prefix: statistics.median(xs),
        f"{prefix}_p10": _quantile(xs, 0.1),
        f"{prefix}_p90": _quantile(xs, 0.9),
    }


# What a training log prints when a GPU runs out of memory: PyTorch's torch.OutOfMemoryError ("CUDA out of
# memory. Tried to allocate ..."), the CUDA runtime's own error, the kernel's OOM killer. One pattern for log
# ingest and `tune`'s runners.
OOM_TEXT = re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory|oom-kill", re.IGNORECASE)


def oom_record(samples: LogSamples, config: dict[str, Any], text: str) -> dict[str, Any] | None:
    """A run that ran out of memory before its first logged step, as a record (issue 44: a measured OOM is
    evidence the memory model learns from): its configuration and measured_oom; None when the log has step
    lines or no out-of-memory error."""
    if len(samples) or not OOM_TEXT.search(text):
        return None
    rec: dict[str, Any] = dict(config)
    rec.setdefault("framework", samples.framework)
    rec["measured_oom"] = True
    note = f"parsed from {samples.framework} log: out of memory before its first logged step"
    rec["notes"] = f"{rec['notes']}; {note}" if rec.get("notes") else note
    return rec


def aggregate(samples: LogSamples, config: dict[str, Any], *, warmup: int | None = None) -> dict[str, Any]:
    """One run record from a log: config columns + median (p10/p90) of the post-warm-up steps."""
    n = len(samples)
    if n == 0:
        raise DataError(f"no {samples.framework} step lines found in the log")
    skip = warmup_count(n, warmup)
    if skip >= n:
        raise DataError(f"--warmup={skip} skips all {n} logged steps of the {samples.framework} log")
    rec: dict[str, Any] = dict(config)
    if samples.global_batch is not None:
        given = rec.get("global_batch")
        if given not in (None, "") and int(given) != samples.global_batch:
            raise DataError(
                f"global_batch={given} but the Megatron log says global batch size {samples.global_batch}"
            )
        rec["global_batch"] = samples.global_batch
    rec.setdefault("framework", samples.framework)
    step_s = samples.step_s[skip:]
    tflops = samples.tflops[skip:] if len(samples.tflops) == n else []
    tps = samples.tokens_per_s_per_gpu[skip:] if len(samples.tokens_per_s_per_gpu) == n else []
    mfu = samples.mfu[skip:] if len(samples.mfu) == n else []
    rec.update(_summary("measured_step_s", step_s))
    if not tps and step_s:
        tps = _derived_tps(rec, step_s)
    rec.update(_summary("measured_tokens_per_s_per_gpu", tps))
    if tflops:
        rec["measured_tflops_per_gpu"] = statistics.median(tflops)
    if mfu:
        rec["measured_mfu"] = statistics.median(mfu)
    if samples.framework == "torchtitan":
        mem = samples.mem_gib[skip:] if len(samples.mem_gib) == n else samples.mem_gib
    else:
        mem = samples.mem_gib
    if mem:
        rec["measured_mem_gb_per_gpu"] = max(mem)  # GiB, max reserved, as torchtitan reports it
        rec["memory_metric"] = (
            "max_memory_reserved"  # both logs' figure is the caching allocator's reserved peak
        )
    rec["log_steps_used"] = n - skip
    rec["log_warmup_skipped"] = skip
    rec["log_first_step"] = samples.steps[skip]
    rec["log_last_step"] = samples.steps[-1]
    how = "median of post-warm-up steps; spread in *_p10/*_p90"
    if samples.framework == "torchtitan":
        how += "; memory = max reserved GiB (torchtitan)"
    elif mem:
        how += "; memory = max 'max reserved' over ranks, GiB"
    note = f"parsed from {samples.framework} log: {n - skip} of {n} steps after {skip} warm-up; {how}"
    rec["notes"] = f"{rec['notes']}; {note}" if rec.get("notes") else note
    return rec


def _derived_tps(rec: dict[str, Any], step_s: list[float]) -> list[float]:
    """Tokens/s per GPU from step times and the config (empty when a needed value is missing or not > 0;
    the row validation then names the field)."""
    try:
        tokens = float(rec["global_batch"]) * float(rec["seq_len"])
        gpus = float(rec["num_gpus"])
    except (KeyError, TypeError, ValueError):
        return []
    if not (tokens > 0 and gpus > 0 and math.isfinite(tokens * gpus)):
        return []
    return [tokens / t / gpus for t in step_s]
