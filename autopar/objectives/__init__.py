"""Objective registry: what the search optimizes, each computed from an Estimate (and a price).

Every objective is a pure function of ``(Estimate, ClusterSpec, usd_per_gpu_hour)`` returning a value
in display units (tokens/s, GiB, $/Mtoken, s, %), plus a direction for Optuna.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autopar.defaults import DEFAULT_OBJECTIVES
from autopar.errors import AutoparError, UnknownNameError
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec
from autopar.units import GiB, usd_per_mtoken

ObjectiveFn = Callable[[Estimate, ClusterSpec, float], float]

# Objectives on a ratio scale (positive, compared as ratios): a near-tie on them is a fraction of the value
# (search/pareto.py near_front). Free GiB is not: 1 GiB free against 2 GiB is no "50%" tie.
RATIO_SCALE: frozenset[str] = frozenset({"throughput", "cost", "step_time", "mfu"})
MIN_OBJECTIVES, MAX_OBJECTIVES = 2, 4


@dataclass(frozen=True)
class ObjectiveInfo:
    """How an objective is named, which way is better and its display unit."""

    name: str  # "throughput", "headroom", "cost", "step_time", "mfu"
    direction: str  # "maximize" | "minimize"
    unit: str  # "tokens/s", "GiB", "$/Mtoken", "s", "%"
    label: str  # axis label incl. unit, e.g. "Throughput (tokens/s, cluster)"


@dataclass(frozen=True)
class Objective:
    """One registered objective: its display info and how to compute it."""

    info: ObjectiveInfo
    fn: ObjectiveFn

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def maximize(self) -> bool:
        return self.info.direction == "maximize"

    def value(self, est: Estimate, cluster: ClusterSpec, price: float) -> float:
        """The objective's value for one estimate, in display units."""
        return float(self.fn(est, cluster, price))

    def to_min(self, value: float) -> float:
        """The value as a quantity to minimize (negated when the objective is maximized)."""
        return -value if self.maximize else value


def _obj(name: str, direction: str, unit: str, label: str, fn: ObjectiveFn) -> Objective:
    return Objective(ObjectiveInfo(name, direction, unit, label), fn)


REGISTRY: dict[str, Objective] = {
    o.name: o
    for o in (
        _obj(
            "throughput",
            "maximize",
            "tokens/s",
            "Throughput (tokens/s, cluster)",
            lambda e, c, p: e.tokens_per_s,
        ),
        _obj(
            "headroom",
            "maximize",
            "GiB",
            "Memory headroom (GiB free, most loaded GPU)",
            lambda e, c, p: e.headroom_bytes / GiB,
        ),
        _obj(
            "cost",
            "minimize",
            "$/Mtoken",
            "Cost ($ per million tokens)",
            lambda e, c, p: usd_per_mtoken(e.tokens_per_s, c.num_gpus, p),
        ),
        _obj("step_time", "minimize", "s", "Step time (s)", lambda e, c, p: e.step_time_s),
        _obj("mfu", "maximize", "%", "MFU (%)", lambda e, c, p: 100.0 * e.mfu),
    )
}


def get_objective(name: str) -> Objective:
    """Look an objective up by name (case-insensitive; '$' and 'tokens' accepted as aliases)."""
    key = name.strip().lower().replace("-", "_")
    key = {
        "tput": "throughput",
        "tokens": "throughput",
        "memory": "headroom",
        "$": "cost",
        "price": "cost",
        "step": "step_time",
        "time": "step_time",
    }.get(key, key)
    if key not in REGISTRY:
        raise UnknownNameError("objective", name, REGISTRY)
    return REGISTRY[key]


def parse_objectives(spec: str | Sequence[str] | None) -> list[Objective]:
    """Resolve a comma list (or sequence) of 2-4 distinct objective names, in the order given."""
    if spec is None:
        names: list[str] = list(DEFAULT_OBJECTIVES)
    elif isinstance(spec, str):
        names = [s for s in (x.strip() for x in spec.split(",")) if s]
    else:
        names = [str(s) for s in spec]
    objs = [get_objective(n) for n in names]
    seen = [o.name for o in objs]
    if len(set(seen)) != len(seen):
        raise AutoparError(f"objectives={','.join(names)}: each objective may appear once")
    if not MIN_OBJECTIVES <= len(objs) <= MAX_OBJECTIVES:
        raise AutoparError(
            f"objectives={','.join(names)}: pick {MIN_OBJECTIVES} to {MAX_OBJECTIVES} "
            f"of {', '.join(REGISTRY)}"
        )
    return objs


def all_values(est: Estimate, cluster: ClusterSpec, price: float) -> dict[str, float]:
    """Every registered objective's value for one estimate (the report shows them all)."""
    return {name: o.value(est, cluster, price) for name, o in REGISTRY.items()}


__all__ = [
    "DEFAULT_OBJECTIVES",
    "REGISTRY",
    "Objective",
    "all_values",
    "get_objective",
    "parse_objectives",
    "usd_per_mtoken",
]
