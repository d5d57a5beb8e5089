"""Training-log parsers (Megatron-LM, torchtitan): the per-step samples of a log and its format.

Formats (checked against the frameworks' source):
- Megatron-LM ``training_log`` (megatron/training/training.py) prints, every ``--log-interval``
  iterations, `` [2025-08-01 07:19:37] iteration       10/     100 | consumed samples: ... |
  elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 400.1 | learning rate:
  ... | global batch size:   512 | lm loss: ... |``; the timestamp and throughput fields are optional
  (older versions, ``--log-throughput`` off). ``report_memory`` prints
  ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... |
  max reserved: ...`` (MB = 2**20 bytes), sometimes two ranks' lines run together on one line.
- torchtitan ``MetricsProcessor.log`` (torchtitan/components/metrics.py) prints, through the
  ``[titan] <time> - root - INFO - `` logger and with ANSI colours unless disabled,
  ``step: 10  loss:  7.9  grad_norm:  1.2  memory: 45.12GiB(47.49%)  tps: 5,762  tflops: 334.10
  mfu: 33.78%`` (memory = max reserved, GiB; tps = tokens/s per GPU). Older versions print ``wps``.

The run's config a log prints: ingest/log_config.py; one record from the samples: ingest/log_record.py.
Real excerpts these parsers are checked on: tests/fixtures/logs/PROVENANCE.md.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

from autopar.errors import DataError
from autopar.text import excerpt

LOG_FORMATS = ("megatron-log", "torchtitan-log")


# What a log record cannot do without (besides the model): the throughput needs the GPU, the GPU count
# and the tokens per step; neither framework prints the GPU's catalog name, so it comes from flags.
LOG_REQUIRED = ("gpu", "num_gpus", "seq_len", "global_batch")


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


_NUM = r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


_MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")


_MEG_MEM = re.compile(
    rf"\[Rank (\d+)\] \(after (\d+) iterations\) memory \((MB|GB)\) \| allocated: ({_NUM}) \| "
    rf"max allocated: ({_NUM}) \| reserved: ({_NUM}) \| max reserved: ({_NUM})"
)


_TT_STEP = re.compile(r"(?<![\w])step:\s*(\d+)\s+(.*)$")


_TT_MEM = re.compile(rf"memory:\s*({_NUM})\s*GiB\(({_NUM})%\)")


_TT_FIELD = re.compile(rf"\b(loss|grad_norm|tps|wps|tflops|mfu):\s*({_NUM})")


def _num(text: str) -> float:
    """A logged number ('1,234.5'); a non-finite one is a damaged line (ValueError, reported by parse_log)."""
    x = float(text.replace(",", ""))
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {text!r}")
    return x


@dataclass
class LogSamples:
    """Per-logged-step measurements read from one log, in log order."""

    framework: str
    steps: list[int] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # Megatron: elapsed time per iteration
    tokens_per_s_per_gpu: list[float] = field(default_factory=list)  # torchtitan tps
    tflops: list[float] = field(default_factory=list)
    mfu: list[float] = field(default_factory=list)  # fraction
    mem_gib: list[float] = field(default_factory=list)  # per step (torchtitan) or per rank report
    global_batch: int | None = None
    train_iters: int | None = None

    def __len__(self) -> int:
        return len(self.steps)


def sniff_log_format(text: str) -> str | None:
    """'megatron-log' or 'torchtitan-log' if the text holds that framework's step lines, else None."""
    clean = ANSI.sub("", text)
    if re.search(r"iteration\s+\d+\s*/\s*\d+\s*\|.*elapsed time per iteration \(ms\)", clean):
        return "megatron-log"
    if re.search(r"step:\s*\d+\s.*\b(tps|wps):\s*[\d,]+", clean):
        return "torchtitan-log"
    return None


def _fields(rest: str) -> dict[str, str]:
    """'| key: value |' pairs of a Megatron line."""
    out: dict[str, str] = {}
    for part in rest.split("|"):
        if ":" in part:
            k, _, v = part.rpartition(":")
            out[k.strip()] = v.strip()
    return out


def _count(value: str | None, iteration: str) -> float:
    """A count field of an iteration line (0 when absent); not a number is a one-line DataError (int() of an
    'inf' a fuzzed log held overflowed)."""
    try:
        return float(value or 0)
    except ValueError:
        raise DataError(
            f"megatron-log: iteration {iteration}: number of nan iterations={excerpt(value or '')!r} is not a number"
        ) from None


def parse_megatron_log(text: str) -> LogSamples:
    """Every iteration line (and the memory report lines) of a Megatron-LM log."""
    s = LogSamples(framework="Megatron-LM")
    for m in _MEG_MEM.finditer(text):
        scale = 1 / 1024 if m.group(3) == "MB" else 1.0  # MB here means MiB
        s.mem_gib.append(_num(m.group(7)) * scale)
    for line in ANSI.sub("", text).splitlines():
        m = _MEG_ITER.search(line)
        if not m:
            continue
        f = _fields(m.group(3))
        ms = f.get("elapsed time per iteration (ms)")
        if ms is None:
            continue
        if _count(f.get("number of nan iterations"), m.group(1)) > 0:
            continue  # a step that produced NaN is not a timing sample
        if _num(ms) <= 0:
            raise DataError(
                f"megatron-log: iteration {m.group(1)}: elapsed time per iteration (ms)={ms!r}: must be > 0"
            )
        s.steps.append(int(m.group(1)))
        s.train_iters = int(m.group(2))
        s.step_s.append(_num(ms) / 1000.0)
        if "throughput per GPU (TFLOP/s/GPU)" in f:
            s.tflops.append(_num(f["throughput per GPU (TFLOP/s/GPU)"]))
        for key in ("tokens per GPU (tokens/s/GPU)", "Tokens per second per GPU (Tok/s/GPU)"):
            if key in f:
                s.tokens_per_s_per_gpu.append(_num(f[key]))
        if "global batch size" in f:
            gb = int(_num(f["global batch size"]))
            if s.global_batch is not None and gb != s.global_batch:
                raise DataError(
                    f"Megatron log changes global batch size ({s.global_batch} -> {gb}) at "
                    f"iteration {s.steps[-1]}: batch ramp-up logs cannot be one record"
                )
            s.global_batch = gb
    return s


def parse_torchtitan_log(text: str) -> LogSamples:
    """Every training step line of a torchtitan log (validation lines skipped, colours stripped)."""
    s = LogSamples(framework="torchtitan")
    by_step: dict[int, dict[str, list[float]]] = {}
    for raw in text.splitlines():
        line = ANSI.sub("", raw)
        m = _TT_STEP.search(line)
        if not m or "validate step:" in line:
            continue
        rest = m.group(2)
        vals = {k: _num(v) for k, v in _TT_FIELD.findall(rest)}
        tps = vals.get("tps", vals.get("wps"))
        if tps is None:
            continue
        d = by_step.setdefault(int(m.group(1)), {"tps": [], "tflops": [], "mfu": [], "mem": []})
        d["tps"].append(tps)
        if "tflops" in vals:
            d["tflops"].append(vals["tflops"])
        if "mfu" in vals:
            d["mfu"].append(vals["mfu"] / 100.0)
        mm = _TT_MEM.search(rest)
        if mm:
            d["mem"].append(_num(mm.group(1)))
    for step in sorted(by_step):  # several ranks may log the same step: mean rate, max memory
        d = by_step[step]
        s.steps.append(step)
        s.tokens_per_s_per_gpu.append(statistics.fmean(d["tps"]))
        if d["tflops"]:
            s.tflops.append(statistics.fmean(d["tflops"]))
        if d["mfu"]:
            s.mfu.append(statistics.fmean(d["mfu"]))
        if d["mem"]:
            s.mem_gib.append(max(d["mem"]))
    return s


def parse_log(text: str, fmt: str) -> LogSamples:
    """Dispatch to the parser of `fmt` ('megatron-log' or 'torchtitan-log')."""
    parsers = {"megatron-log": parse_megatron_log, "torchtitan-log": parse_torchtitan_log}
    if fmt in parsers:
        try:
            return parsers[fmt](text)
        except ValueError as e:  # a damaged or truncated line: one line naming it, not a traceback
            if isinstance(e, DataError):
                raise
            raise DataError(f"{fmt}: a logged value could not be read ({e})") from None
    raise DataError(f"unknown log format '{fmt}' (allowed: {', '.join(LOG_FORMATS)})")
