"""The memory margin a strategy must leave to count as fitting: the memory band's upper end, plus --min-headroom.

A strategy fits when the upper end of its peak-memory band, plus the extra margin the user asks for, is within
usable memory: peak x factor + extra <= usable, with factor = exp(high end of the memory corrector's log band).
The band is the calibration's (the user's, else the shipped default's): a split-conformal band fitted on runs
that measured their peak, scored on runs left out of the fit (calibration/models/corrector.py). Its nominal coverage
is two-sided (0.8: 10th to 90th percentile of measured / predicted), so its upper end is a one-sided bound at
(1 + coverage) / 2 = 90%: about one strategy in ten admitted at the very edge would exceed usable memory.
The upper end alone is used because only an under-predicted peak makes a recommendation fail (OOM); an
over-predicted one only costs speed. The default calibration's memory corrector applies no correction
(shrink 0), so its band is the analytical model's own error, which is why the search uses it even without a
calibration (`optimize(calibration=None)`, `--no-calibration`). Replaces the fixed 2 GiB margin of earlier
versions (issue 21): a fixed margin is 2.5% of an 80 GiB GPU, an error the model makes on most runs.

`need_gib` is the Optuna constraint `memory_gib` (<= 0 feasible) and runs on floats and numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autopar.perf.arith import Num
from autopar.search.jsontypes import JSONDict
from autopar.specs import ModelSpec

# Free GiB a fit must leave on a stack whose peaks the memory band never saw (band_margin): the margin autopar
# used everywhere before the band (issue 21), about the memory model's median error on the runs that report
# memory at the time it was set.
FIXED_MARGIN_GIB = 2.0
# Routing whose peak memory no measured run of a stack outside the band's covers: the Megatron-Core peaks the
# project holds are dense (GPT, Zero Bubble's runs) and Mixtral's top-2 of 8 experts (bench/data/
# memory_runs_mcore.csv, predicted -2% to +6%); no peak of a finer-grained MoE (top-k above this) was ever
# published, and the two statements found both say the model falls short there: InternLM/xtuner's Qwen3-235B
# guide (256 H800) OOMs TP2 PP8 EP8 once virtual stages are on, which the model fits at 72-77 of 79 GiB
# (tests/perf/test_xtuner_memory_claims.py), and NVIDIA runs Qwen3-235B TP1 PP8 EP8 at micro-batch 2 on B300 but 1 on
# B200, where the model fits micro-batch 2 at 152 of 178 GiB. For such a layout the band's upper end, the one
# measured spread of the memory model's error, stands in for the fixed margin (issue 21's eighth session).
# Both statements are Megatron-Core's; on the PyTorch-FSDP stack NeMo AutoModel ran Qwen3-30B-A3B (top-8) where
# the model leaves 0.2 GiB free (NAM-003), so nothing says its peaks run above the point estimate: 2 GiB stays.
MEASURED_TOPK_MAX = 2
FINE_MOE_BAND_STACKS = ("megatron",)


@dataclass(frozen=True, slots=True)
class MemoryMargin:
    """How much memory a fit must leave: peak x `factor` + `extra_gib` <= usable."""

    factor: float = 1.0  # upper end of the memory band over the point estimate (>= 1; 1: no band)
    extra_gib: float = 0.0  # --min-headroom: free GiB asked on top of the band
    coverage: float = 0.0  # one-sided coverage of the upper end (0: no band)
    source: str = ""  # where the band comes from, in words

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ValueError(f"memory band factor {self.factor}: must be finite and >= 1")
        if not math.isfinite(self.extra_gib):
            raise ValueError(f"min headroom {self.extra_gib}: must be finite")

    def need_gib(self, headroom_gib: Num, peak_gib: Num) -> Num:
        """GiB short of fitting (> 0: does not fit with the margin), from the point estimate's free memory
        (usable - peak) and peak: peak x factor + extra - usable; floats or arrays. Written as extra - free +
        (factor - 1) x peak so that without a band it is exactly the old `min headroom - headroom`."""
        return self.extra_gib - headroom_gib + (self.factor - 1.0) * peak_gib

    def required_free_gib(self, peak_gib: float) -> float:
        """Free GiB a strategy with this point-estimate peak must leave: (factor - 1) x peak + extra."""
        return (self.factor - 1.0) * peak_gib + self.extra_gib

    def describe(self) -> str:
        """The margin in words, for reports and the CLI."""
        extra = f" + {self.extra_gib:g} GiB (--min-headroom)" if self.extra_gib else ""
        if self.factor == 1.0 and not self.coverage and self.source:  # a stack the band never saw
            return f"point estimate of peak memory + {self.extra_gib:g} GiB: {self.source}"
        if self.factor == 1.0 and not self.coverage:
            return f"point estimate of peak memory{extra or ' (no margin)'}"
        return (
            f"peak memory x{self.factor:.3f}, the {self.coverage:.0%} upper end of the memory band "
            f"({self.source}){extra}"
        )

    def to_json(self) -> JSONDict:
        """JSON-ready fields (stored studies, reports)."""
        return {
            "factor": self.factor,
            "extra_gib": self.extra_gib,
            "coverage": self.coverage,
            "source": self.source,
        }


def band_margin(
    calibration: Any, extra_gib: float, framework: str | None = None, model: Any = None
) -> MemoryMargin:
    """The margin from `calibration`'s memory band (its upper end), else from the shipped default's; a
    calibration with no memory model falls back to the default's band too (the analytical model's error).

    A band holds for the stacks whose measured peaks it was fitted on (CalibrationMeta.memory_stacks). For
    another `framework` nothing measured says how far its peaks sit from the model, so the fixed
    FIXED_MARGIN_GIB stands in for the band (plus `extra_gib`): a band learned on one stack's allocator and
    kernels is not another's, and the shipped one (torchtitan peaks) would refuse Megatron-Core layouts that
    ran (24 Megatron-Bridge runs, all three Llama-3 405B runs: see README "Memory margin"). A `model` whose
    routing no measured peak covers (MoE with top-k above MEASURED_TOPK_MAX) keeps the band there too."""
    corrector = getattr(calibration, "memory_corrector", None)
    if corrector is None:
        from autopar.calibration.apply import load_default_calibration

        calibration = load_default_calibration()
        corrector = calibration.memory_corrector
    if corrector is None:  # a default fitted without memory data: nothing measured to widen by
        return MemoryMargin(extra_gib=extra_gib)
    meta = calibration.meta
    stacks = list(getattr(meta, "memory_stacks", None) or ())
    unmeasured = (
        model is not None
        and framework in FINE_MOE_BAND_STACKS
        and model.is_moe
        and (model.topk or 0) > MEASURED_TOPK_MAX
    )
    if framework is not None and framework not in stacks and not unmeasured:
        return MemoryMargin(
            extra_gib=extra_gib + FIXED_MARGIN_GIB,
            source=f"no measured peak of a {framework} run (band fitted on {', '.join(stacks) or 'none'})",
        )
    hi = float(corrector.band_[1])
    source = f"{meta.memory_n_train} measured peaks: {', '.join(meta.memory_sources)}"
    if framework is not None and framework not in stacks:
        source += f"; kept on {framework} for top-{model.topk} MoE, whose peaks no measured run covers"
    return MemoryMargin(
        factor=math.exp(max(hi, 0.0)),
        extra_gib=extra_gib,
        coverage=(1.0 + float(corrector.coverage)) / 2.0,
        source=source,
    )


def search_margin(
    calibration: Any,
    extra_gib: float,
    use_band: bool,
    framework: str | None = None,
    model: ModelSpec | None = None,
) -> MemoryMargin:
    """The margin a search uses: the band's for `framework` and `model` (see band_margin) unless `use_band`
    is False, then `extra_gib` alone."""
    if not use_band:
        return MemoryMargin(extra_gib=extra_gib)
    return band_margin(calibration, extra_gib, framework, model)
