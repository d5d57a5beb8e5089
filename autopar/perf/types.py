"""Result types of the analytical model: memory and time breakdowns and the Estimate.

Plain slotted dataclasses (not pydantic) because the search evaluates tens of thousands per second.
Units: bytes and seconds; FLOP/s where named.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from operator import add, attrgetter
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from autopar.specs import Strategy

from autopar.units import GiB

# What an Estimate's model/hardware FLOPs count, by Workload.finetune (rules and sources: perf/flops.py).
FLOPS_BASIS = {
    "full": "3 x forward (forward, dgrad, wgrad)",
    "lora": "LoRA: frozen weight GEMMs 2 x forward (forward, dgrad), core attention 3 x forward, "
    "adapters not counted (Megatron-Bridge's LoRA model FLOPs)",
}


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Peak memory of the most loaded GPU, in bytes, by category."""

    weights: float
    grads: float
    optimizer: float
    activations: float  # transformer-layer activations kept for backward, all in-flight micro-batches
    logits: float  # embedding/output-layer activations and fp32 logits on the stage that holds them
    buffers: float  # communication buffers, FSDP gathered units, gradient buckets
    overhead: float  # CUDA context, NCCL, allocator fragmentation

    @property
    def total(self) -> float:
        return (
            self.weights
            + self.grads
            + self.optimizer
            + self.activations
            + self.logits
            + self.buffers
            + self.overhead
        )

    @property
    def other(self) -> float:
        """Everything that is not model state or layer activations (logits + buffers + overhead)."""
        return self.logits + self.buffers + self.overhead

    def as_dict(self) -> dict[str, float]:
        d = {k: getattr(self, k) for k in self.__slots__}  # the fields in order (asdict, ~10x faster)
        d["total"] = self.total
        return d


# The terms of TimeBreakdown that add up to the step time, in the order they are added (the sum is not
# associative in floating point: every path adds them in this order). `recompute` is inside `compute`.
STEP_PARTS: tuple[str, ...] = (
    "act_offload",
    "compute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "optimizer",
)
_T = TypeVar("_T")


def step_total(terms: Sequence[_T]) -> _T:
    """The step time from its terms in STEP_PARTS order (floats or numpy arrays alike), added left to right:
    the one place the step-time total is spelled out."""
    return reduce(add, terms)


_STEP_TERMS = attrgetter(*STEP_PARTS)


@dataclass(frozen=True, slots=True)
class TimeBreakdown:
    """Time of one optimizer step, in seconds, split into compute, exposed comm and bubble."""

    compute: float  # forward + backward (+ recompute) kernels on the busiest stage
    recompute: float  # part of `compute` spent re-running forward (0 without activation recompute)
    tp_comm: float  # exposed tensor/sequence-parallel collectives
    cp_comm: float  # exposed context-parallel KV exchange
    ep_comm: float  # exposed expert-parallel all-to-all
    pp_comm: float  # exposed pipeline point-to-point
    dp_comm: float  # exposed data-parallel gradient reduction / FSDP gathers
    bubble: float  # pipeline idle time
    optimizer: float  # optimizer step (memory bound)
    act_offload: float = 0.0  # activation CPU offload/reload not hidden by compute (perf/act_offload.py)

    @property
    def total(self) -> float:
        total: float = step_total(_STEP_TERMS(self))
        return total

    @property
    def comm(self) -> float:
        return self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.dp_comm

    def as_dict(self) -> dict[str, float]:
        d = {k: getattr(self, k) for k in self.__slots__}  # the fields in order (asdict, ~10x faster)
        d["total"] = self.total
        return d


@dataclass(frozen=True, slots=True)
class Estimate:
    """Everything the analytical model predicts for one (model, cluster, workload, strategy)."""

    memory: MemoryBreakdown
    time: TimeBreakdown
    step_time_s: float
    tokens_per_s: float  # whole cluster
    tokens_per_s_per_gpu: float
    model_flops_per_step: float  # model FLOPs: 3x forward (LoRA: flops_basis), causal-halved attention
    model_flops_per_step_full_attn: (
        float  # same, attention counted without the causal discount (Megatron papers)
    )
    hw_flops_per_step: float  # executed FLOPs incl. recompute, full attention count
    model_tflops_per_gpu: float  # model_flops_per_step_full_attn / step / GPUs / 1e12
    hw_tflops_per_gpu: float
    mfu: float  # model FLOPs (full attention count, no recompute) / (step * GPUs * dense peak of the precision)
    mfu_causal: float  # same with the causal-halved attention count
    hfu: float
    peak_flops: float  # dense peak per GPU used for MFU (FLOP/s)
    capacity_bytes: float  # usable memory per GPU
    headroom_bytes: float  # capacity - peak memory (negative = does not fit)
    fits: bool
    bottleneck: str  # the largest time component, e.g. "compute", "tp_comm", "bubble"
    notes: tuple[str, ...] = field(default_factory=tuple)
    calibration_factor: float = 1.0  # throughput multiplier applied by a calibration model (1 = analytical)
    tokens_per_s_band: tuple[float, float] | None = None  # (low, high) cluster tokens/s from the corrector
    strategy: Strategy | None = None  # the strategy estimated, with unset knobs completed
    assumed: tuple[str, ...] = ()  # knobs the estimate completed, e.g. "vpp=4 (unset; best feasible)"
    flops_basis: str = FLOPS_BASIS["full"]  # what model_flops_* / hw_flops_per_step count (perf/flops.py)

    def calibrated(self, factor: float, low: float, high: float, label: str = "") -> Estimate:
        """This estimate with throughput scaled by a corrector's factor; every time term shrinks alike.

        The breakdown keeps its proportions (the corrector says the level is off, not which term), so it
        still adds up to the step time. `low`/`high` are the corrector's band as factors.
        """
        if factor <= 0 or not math.isfinite(factor):
            return self
        t = self.time
        inv = 1.0 / factor
        time = TimeBreakdown(*(getattr(t, f) * inv for f in t.__slots__))
        by = f" by calibration '{label}'" if label else ""
        note = f"calibrated throughput x{factor:.3f} (80% band x{low:.3f}-x{high:.3f}){by}"
        return replace(
            self,
            time=time,
            step_time_s=self.step_time_s * inv,
            tokens_per_s=self.tokens_per_s * factor,
            tokens_per_s_per_gpu=self.tokens_per_s_per_gpu * factor,
            model_tflops_per_gpu=self.model_tflops_per_gpu * factor,
            hw_tflops_per_gpu=self.hw_tflops_per_gpu * factor,
            mfu=self.mfu * factor,
            mfu_causal=self.mfu_causal * factor,
            hfu=self.hfu * factor,
            notes=(*self.notes, note),
            calibration_factor=self.calibration_factor * factor,
            tokens_per_s_band=(
                self.tokens_per_s / self.calibration_factor * low,
                self.tokens_per_s / self.calibration_factor * high,
            ),
        )

    @property
    def peak_memory_bytes(self) -> float:
        return self.memory.total

    @property
    def headroom_gib(self) -> float:
        return self.headroom_bytes / GiB

    def summary(self) -> dict[str, float | bool | str]:
        """Flat dict of the headline figures plus every breakdown term (edge units labelled)."""
        out: dict[str, float | bool | str] = {
            "step_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hw_tflops_per_gpu": self.hw_tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_causal": self.mfu_causal,
            "hfu": self.hfu,
            "mem_gib": self.memory.total / GiB,
            "capacity_gib": self.capacity_bytes / GiB,
            "headroom_gib": self.headroom_gib,
            "fits": self.fits,
            "bottleneck": self.bottleneck,
            "calibration_factor": self.calibration_factor,
            "flops_basis": self.flops_basis,
        }
        if self.tokens_per_s_band is not None:
            out["tokens_per_s_low"], out["tokens_per_s_high"] = self.tokens_per_s_band
        for k, v in self.memory.as_dict().items():
            if k != "total":
                out[f"mem_{k}_gib"] = v / GiB
        for k, v in self.time.as_dict().items():
            if k != "total":
                out[f"time_{k}_s"] = v
        return out
