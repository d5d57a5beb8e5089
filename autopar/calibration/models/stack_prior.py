"""The unprofiled-stack prior: what a stack autopar has no kernel profile for is expected to deliver.

A run on a stack autopar does not profile (knobs.UNPROFILED_STACKS: MaxText, InternEvo, Colossal-AI, ...) is
estimated with the surrogate profile's mechanics (knobs.SURROGATE_PROFILE, Megatron-Core: the most general
stack) and then, wherever a calibration is applied (Calibration.bands), moved by this prior:

- centre x exp(offset): `offset` is the median, over the measured sources autopar holds whose stack is *not*
  Megatron (torchtitan, PyTorch FSDP / Composer, NeMo AutoModel, DeepSpeed), of each source's median log
  ratio measured / predicted when its runs are estimated as an unprofiled stack (the surrogate, no stack
  profile of their own): how far a stack that is not NVIDIA's tuned Megatron lands from the tuned model;
- band: its log half-widths grow, in quadrature, by z_80 x `sd`, `sd` the between-source standard deviation
  of those medians: a new stack is one more draw from the stacks measured.

The numbers are not hand-set: `python bench/stack_prior.py --export` computes them from the run records
(published and dev) and writes autopar/data/stack_prior.json; the same script checks them by leaving each
source out (coverage and bias of the prior on the source it never saw).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from autopar.errors import DataError
from autopar.knobs import SURROGATE_PROFILE, UNPROFILED_STACKS

PRIOR_FILE = Path(__file__).resolve().parents[2] / "data" / "stack_prior.json"  # autopar/data
Z80 = 1.2815515655446004  # standard normal 90% quantile: an 80% two-sided band
REGENERATE = "python bench/stack_prior.py --export"


@dataclass(frozen=True)
class StackPrior:
    """Log offset and between-source sd of an unprofiled stack's throughput against the surrogate."""

    offset: float
    sd: float
    sources: tuple[str, ...]  # the measured sources it rests on

    @property
    def factor(self) -> float:
        """The multiplicative throughput factor exp(offset)."""
        return math.exp(self.offset)

    @property
    def halfwidth(self) -> float:
        """The log half-width the prior adds (in quadrature) to an 80% band."""
        return Z80 * self.sd

    def sentence(self, stack: str) -> str:
        """One line naming the stack and the prior used for it."""
        what = UNPROFILED_STACKS.get(stack, stack)
        return (
            f"stack {stack} ({what}): no kernel profile, estimated as {SURROGATE_PROFILE} x{self.factor:.2f} "
            f"with its band widened ±{100 * math.expm1(self.halfwidth):.0f}% (the spread of "
            f"{len(self.sources)} measured non-Megatron sources)"
        )

    def apply(
        self, f: np.ndarray, lo: np.ndarray, hi: np.ndarray, on: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(factor, low, high) with the prior applied on rows `on` (bool mask): centre x exp(offset), each
        log half-width combined in quadrature with `halfwidth`."""
        if not np.any(on):
            return f, lo, hi
        c = np.log(f)
        below = np.log(np.maximum(f, 1e-300) / np.maximum(lo, 1e-300))
        above = np.log(np.maximum(hi, 1e-300) / np.maximum(f, 1e-300))
        h2 = self.halfwidth**2
        c2 = c + self.offset
        lo2 = np.exp(c2 - np.sqrt(below**2 + h2))
        hi2 = np.exp(c2 + np.sqrt(above**2 + h2))
        return (np.where(on, np.exp(c2), f), np.where(on, lo2, lo), np.where(on, hi2, hi))


def parse_prior(doc: object, where: str) -> StackPrior:
    """A StackPrior from its JSON document (DataError naming the field on anything malformed)."""
    if not isinstance(doc, dict):
        raise DataError(f"{where}: expected a JSON object")
    out = {}
    for key in ("offset", "sd"):
        v = doc.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise DataError(f"{where}: field {key!r} must be a finite number, got {v!r}")
        out[key] = float(v)
    if out["sd"] < 0 or abs(out["offset"]) > 2:
        raise DataError(f"{where}: offset={out['offset']} or sd={out['sd']} out of range")
    units = doc.get("units")
    if not isinstance(units, list) or not all(isinstance(u, dict) and "source" in u for u in units):
        raise DataError(f"{where}: field 'units' must be a list of objects with a 'source'")
    return StackPrior(out["offset"], out["sd"], tuple(sorted({str(u["source"]) for u in units})))


@cache
def stack_prior() -> StackPrior:
    """The shipped prior (autopar/data/stack_prior.json; regenerate with REGENERATE)."""
    try:
        doc = json.loads(PRIOR_FILE.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"{PRIOR_FILE.name}: unreadable ({err}); regenerate with {REGENERATE}") from err
    return parse_prior(doc, PRIOR_FILE.name)


def unprofiled_mask(stacks: str | Sequence[str] | None, n: int) -> np.ndarray:
    """Rows (of n) whose stack is unprofiled: one name for all rows or one per row ('' = profiled)."""
    if stacks is None:
        return np.zeros(n, dtype=bool)
    if isinstance(stacks, str):
        return np.full(n, bool(stacks))
    return np.array([bool(s) for s in stacks], dtype=bool)
