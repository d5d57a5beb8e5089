"""Hardware options for what-ifs: `GPU:COUNT`, with count lists and doubling ranges; the workload at a count."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from autopar.errors import SpecError
from autopar.specs import Workload


@dataclass(frozen=True)
class HardwareOption:
    """One hardware option to price: a GPU type and a GPU count (one `--option GPU:COUNT`)."""

    gpu: str  # catalog name as resolved (e.g. "H100-SXM")
    count: int  # number of GPUs

    @property
    def label(self) -> str:
        """'H100-SXM:512' — the option's name everywhere (tables, JSON, report)."""
        return f"{self.gpu}:{self.count}"


_COUNT_RE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")


def parse_counts(text: str, field: str = "option") -> list[int]:
    """GPU counts: '512', '256,512', or '256..2048' (doubling from the low end up to the high end)."""
    counts: list[int] = []
    for part in [p.strip() for p in str(text).split(",") if p.strip()]:
        m = _COUNT_RE.match(part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo <= 0 or hi < lo:
                raise SpecError(f"{field}: count range {part!r} needs 0 < low <= high")
            n = lo
            while n <= hi:
                counts.append(n)
                n *= 2
        elif part.isascii() and part.isdigit() and int(part) > 0:
            counts.append(int(part))
        else:
            raise SpecError(
                f"{field}: GPU count {part!r} must be a positive integer, a list (256,512) or a "
                "doubling range (256..2048)"
            )
    if not counts:
        raise SpecError(f"{field}: no GPU count given")
    return list(dict.fromkeys(counts))


def parse_option(text: str) -> list[HardwareOption]:
    """Parse one `--option GPU:COUNT` (COUNT may be a list or a doubling range) into options."""
    if not isinstance(text, str) or ":" not in text:
        raise SpecError(
            f"option={text!r} must be GPU:COUNT, e.g. H100-SXM:512, H200:256 or H100-SXM:256..2048"
        )
    name, _, counts = text.rpartition(":")
    if not name.strip():
        raise SpecError(f"option={text!r}: missing GPU name before ':'")
    from autopar.catalog import get_gpu

    gpu = get_gpu(name.strip()).name
    return [HardwareOption(gpu, n) for n in parse_counts(counts, field=f"option={text!r}")]


def parse_options(texts: Sequence[str | HardwareOption | tuple[str, int]]) -> list[HardwareOption]:
    """Parse several options, keeping their order and dropping repeats."""
    out: list[HardwareOption] = []
    for t in texts:
        if isinstance(t, HardwareOption):
            opts = [t]
        elif isinstance(t, tuple):
            opts = parse_option(f"{t[0]}:{t[1]}")
        else:
            opts = parse_option(t)
        out.extend(o for o in opts if o not in out)
    if not out:
        raise SpecError("option: give at least one hardware option, e.g. --option H100-SXM:512")
    return out


def scaled_workload(workload: Workload, count: int, batch_tokens_per_gpu: float | None) -> Workload:
    """The workload at `count` GPUs: the global batch grows to count x tokens per GPU (whole sequences)."""
    if batch_tokens_per_gpu is None:
        return workload
    gb = int(count * batch_tokens_per_gpu // workload.seq_len)
    if gb < 1:
        raise SpecError(
            f"batch-tokens-per-gpu={batch_tokens_per_gpu:g}: {count} GPUs x {batch_tokens_per_gpu:g} tokens is "
            f"less than one sequence of {workload.seq_len}; give at least {math.ceil(workload.seq_len / count)}"
        )
    return workload.model_copy(update={"global_batch": gb})
