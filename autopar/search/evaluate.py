"""Evaluate one point of the space: rules, analytical estimate, calibration, objectives, constraints.

Infeasibility (a broken rule, out of memory, below --min-headroom, above --max-cost) is an outcome,
never an exception. A strategy with an estimate carries its real objective values and named Optuna
constraints (<= 0 feasible): `memory_gib` = GiB short of fitting with the memory margin (search/margin.py:
peak x the memory band's upper end + --min-headroom - usable; > 0 when short of memory) and, with a cost cap, `cost_excess` = (cost - cap) / cap. A strategy that breaks a rule has no
estimate, so no objective values and no constraints: the search records it as a PRUNED trial with
its reason, never with made-up values. `violation` (the sum of the positive constraint parts, or
RULE_PENALTY per broken rule) orders infeasible outcomes for messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from autopar.catalog import prices
from autopar.catalog.pricefile import default_price_book
from autopar.catalog.prices import PriceBook
from autopar.objectives import REGISTRY, Objective
from autopar.perf.types import Estimate
from autopar.search.margin import MemoryMargin
from autopar.search.space import Hardware, Point
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import GiB

if TYPE_CHECKING:
    from autopar.calibration.apply import Calibration

RULE_PENALTY = 1000.0

EstimateFn = Callable[[ModelSpec, ClusterSpec, Workload, Strategy], Estimate]
ValidateFn = Callable[[ModelSpec, ClusterSpec, Workload, Strategy], list[str]]

MEMORY_CONSTRAINT = "memory_gib"  # Optuna constraint names (trial.constraints in a stored study)
COST_CONSTRAINT = "cost_excess"


class ThroughputFactor(Protocol):
    """A duck-typed corrector (tests, plug-ins): a throughput factor and its band for one estimate."""

    def throughput_factor(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, est: Estimate
    ) -> tuple[float, float, float]: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of evaluating one point."""

    estimate: Estimate | None
    values: dict[str, float]  # every registered objective (display units); empty when a rule broke
    feasible: bool
    reason: str
    violation: float  # > 0 infeasible: sum of the positive constraint parts (RULE_PENALTY per broken rule)
    constraints: dict[str, float] = field(default_factory=dict)  # Optuna constraints; {} when a rule broke

    @property
    def evaluated(self) -> bool:
        """True when the model ran (the strategy has objective values); False when a rule broke."""
        return self.estimate is not None

    def vector(self, objectives: Sequence[Objective]) -> list[float]:
        """Values of the chosen objectives in order; only for evaluated outcomes (no made-up values)."""
        if not self.values:
            raise ValueError(f"no objective values: {self.reason}")
        return [self.values[o.name] for o in objectives]


def resolve_price(cluster: ClusterSpec, price_book: PriceBook | None, tier: str) -> tuple[float, str]:
    """USD per GPU-hour for a cluster and its source, via `autopar.catalog.prices.resolve_price`."""
    book = price_book if price_book is not None else default_price_book()
    r = prices.resolve_price(cluster.gpu, book, tier, cluster.price_usd_per_gpu_hour)
    return r.usd_per_gpu_hour, r.source


class Evaluator:
    """Evaluates points of a space against fixed objectives, prices, constraints and calibration."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: Sequence[Hardware],
        *,
        prices: Sequence[float],
        min_headroom_gib: float = 0.0,
        max_cost: float | None = None,
        calibration: Any = None,  # a Calibration, a duck-typed ThroughputFactor or None: dispatched on hasattr
        estimate_fn: EstimateFn | None = None,
        validate_fn: ValidateFn | None = None,
        space_points: bool = False,
        memory_margin: MemoryMargin | None = None,
    ):
        """space_points=True: every point comes from a Space, which holds only strategies that pass
        validate_strategy (tests/search/test_space.py enumerates whole spaces against it), so the
        default rules are not checked again per point. `memory_margin`: what a fit must leave (default: no
        band, `min_headroom_gib` free); optimize passes the memory band's (search/margin.py)."""
        from autopar.perf import estimate, validate_strategy

        self.model = model
        self.hardware = list(hardware)
        self.prices = list(prices)
        self.margin = memory_margin or MemoryMargin(extra_gib=min_headroom_gib)
        self.min_headroom_gib = self.margin.extra_gib
        self.max_cost = max_cost
        self.calibration = calibration
        self.estimate_fn = estimate_fn or _unchecked(estimate)
        self.validate_fn = validate_fn or validate_strategy
        self.trusts_space = space_points and validate_fn is None
        self.default_model = estimate_fn is None  # the analytical model (search/sweep.py runs it on arrays)
        self.n_estimates = 0

    def rules(self, point: Point) -> list[str]:
        """Rules the point breaks ([] = valid)."""
        hw = self.hardware[point.hw]
        return self.validate_fn(self.model, hw.cluster, hw.workload, point.strategy)

    def __call__(self, point: Point) -> Outcome:
        """Evaluate a point: rules first, then the estimate, objectives and constraints."""
        first = self._analytical(point)
        if isinstance(first, Outcome):
            return first
        if self.calibration is not None:
            first = apply_calibration(
                first, self.calibration, self.model, self.hardware[point.hw], point.strategy
            )
        return self._finish(point, first)

    def evaluate_many(self, points: Sequence[Point]) -> list[Outcome]:
        """Evaluate many points; the calibration runs once on the stacked features (fast exhaustive mode)."""
        outs: list[Outcome | None] = [None] * len(points)
        pending: list[tuple[int, Estimate]] = []
        for i, pt in enumerate(points):
            first = self._analytical(pt)
            if isinstance(first, Outcome):
                outs[i] = first
            else:
                pending.append((i, first))
        if self.calibration is not None and pending:
            pending = self._calibrate_batch(points, pending)
        for i, est in pending:
            outs[i] = self._finish(points[i], est)
        return [o for o in outs if o is not None]

    def _calibrate_batch(
        self, points: Sequence[Point], pending: list[tuple[int, Estimate]]
    ) -> list[tuple[int, Estimate]]:
        """Apply the corrector to a batch of estimates with one prediction call when it supports it."""
        cal = self.calibration
        if not hasattr(cal, "bands"):  # a duck-typed corrector (tests, plug-ins): one estimate at a time
            return [
                (i, apply_calibration(e, cal, self.model, self.hardware[points[i].hw], points[i].strategy))
                for i, e in pending
            ]
        import numpy as np

        from autopar.calibration.apply.model import scale_memory
        from autopar.calibration.models.features import features, memory_features

        def stacked(fn: Callable[..., np.ndarray]) -> np.ndarray:
            return np.vstack([fn(self.model, *self._specs(points[i]), e) for i, e in pending])

        stacks = [self._specs(points[i])[1].stack for i, _ in pending]
        f, lo, hi = cal.bands("throughput", stacked(features), None, stacks)
        name = cal.meta.name
        out = [
            (i, e.calibrated(float(f[j]), float(lo[j]), float(hi[j]), name))
            for j, (i, e) in enumerate(pending)
        ]
        if not cal.memory_moves():
            return out
        mf = cal.bands("memory", stacked(memory_features))[0]
        return [(i, scale_memory(c, float(mf[j]))) for j, (i, c) in enumerate(out)]

    def _specs(self, point: Point) -> tuple[ClusterSpec, Workload, Strategy]:
        hw = self.hardware[point.hw]
        return hw.cluster, hw.workload, point.strategy

    def _analytical(self, point: Point) -> Estimate | Outcome:
        """The uncalibrated estimate of a point, or its rule-violation outcome."""
        hw = self.hardware[point.hw]
        broken = (
            [] if self.trusts_space else self.validate_fn(self.model, hw.cluster, hw.workload, point.strategy)
        )
        if broken:
            return Outcome(None, {}, False, "rule: " + "; ".join(broken), RULE_PENALTY * len(broken))
        self.n_estimates += 1
        return self.estimate_fn(self.model, hw.cluster, hw.workload, point.strategy)

    def _finish(self, point: Point, est: Estimate) -> Outcome:
        """Objectives and constraints of an estimate."""
        hw = self.hardware[point.hw]
        values = {name: o.value(est, hw.cluster, self.prices[point.hw]) for name, o in REGISTRY.items()}
        reasons = []
        need = self.margin.need_gib(values["headroom"], est.peak_memory_bytes / GiB)
        if not est.fits:
            need = max(need, -values["headroom"], 1e-3)
            reasons.append(
                f"out of memory: needs {est.peak_memory_bytes / GiB:.1f} GiB of "
                f"{est.capacity_bytes / GiB:.1f} GiB"
            )
        elif need > 0:
            want = self.margin.required_free_gib(est.peak_memory_bytes / GiB)
            reasons.append(f"headroom {values['headroom']:.1f} GiB < min {want:.3g} GiB (memory margin)")
        cons = {MEMORY_CONSTRAINT: need}
        if self.max_cost is not None:
            cons[COST_CONSTRAINT] = (values["cost"] - self.max_cost) / self.max_cost
            if cons[COST_CONSTRAINT] > 0:
                reasons.append(f"cost ${values['cost']:.3f}/Mtoken > max ${self.max_cost:g}")
        violation = sum(max(c, 0.0) for c in cons.values())
        return Outcome(est, values, not reasons, "; ".join(reasons), violation, cons)


def _unchecked(estimate: EstimateFn) -> EstimateFn:
    """The estimator without its own rule check (the evaluator has just validated the strategy)."""
    import inspect

    if "check" in inspect.signature(estimate).parameters:
        return lambda m, c, w, s: estimate(m, c, w, s, check=False)  # type: ignore[call-arg]  # the signature check above: this estimator takes check
    return estimate


def apply_calibration(
    est: Estimate,
    calibration: Calibration | ThroughputFactor,
    model: ModelSpec,
    hw: Hardware,
    strategy: Strategy,
) -> Estimate:
    """Scale throughput-like figures of an estimate by the corrector's factor (and record the band)."""
    if hasattr(calibration, "apply"):  # throughput and memory correctors (autopar.calibration.apply)
        return calibration.apply(model, hw.cluster, hw.workload, strategy, est)
    factor, lo, hi = calibration.throughput_factor(model, hw.cluster, hw.workload, strategy, est)
    name = getattr(getattr(calibration, "meta", None), "name", "")
    return est.calibrated(factor, lo, hi, name)
