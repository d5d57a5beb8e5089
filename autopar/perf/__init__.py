"""The analytical performance model: pure functions from specs to an Estimate."""

from autopar.perf.estimate import estimate, usable_memory_bytes
from autopar.perf.flops import forward_flops_per_token, hardware_flops_per_step, model_flops_per_step
from autopar.perf.params import ParamCounts, count_params
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.perf.validate import validate_strategy

__all__ = [
    "Estimate",
    "MemoryBreakdown",
    "ParamCounts",
    "TimeBreakdown",
    "count_params",
    "estimate",
    "forward_flops_per_token",
    "hardware_flops_per_step",
    "model_flops_per_step",
    "usable_memory_bytes",
    "validate_strategy",
]
