"""The evidence behind the search's points: how far each lies from the measured runs (its band widened
for that, autopar/calibration/evaluation/novelty.py), the value it can defend, and the published recipe beside the pick.

- `evidence_of(model, hardware, calibration)`: a function TrialRecord -> novelty.Evidence (cached per point)
  against the published runs and those the calibration was fitted on.
- `widen_records`: every feasible trial's throughput band widened by its novelty.
- `defensible(r, name, ev)`: the objective value at the pessimistic end of the point's 80% throughput band
  (the band's low end for throughput and MFU, its high end for cost and step time). Without a corrector
  band the analytical value is taken at the novelty widening alone, so an uncalibrated search is also
  ranked by what the measured runs support.
- `recipe_beside`: the published recipe matching the problem (calibration/planning/recipes.py), estimated like the
  searched points (same calibration, same widening); the recipe carries the measured run of its problem
  family that ran faster, if any (Recipe.support: then it is not the measured best).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autopar.calibration.evaluation import novelty
from autopar.calibration.planning.recipes import Recipe, match
from autopar.perf.types import Estimate
from autopar.search.result import TrialRecord
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

if TYPE_CHECKING:
    from autopar.calibration.apply import Calibration
    from autopar.search.space import Hardware

EvidenceFn = Callable[[TrialRecord], novelty.Evidence]

# How an objective moves with a throughput factor f: value ∝ f**power (search/recommend.py's _POWER).
POWER = {"throughput": 1, "mfu": 1, "cost": -1, "step_time": -1}


def reference_for(calibration: object = None) -> novelty.Reference:
    """The measured runs novelty counts: the published ones plus those `calibration` was fitted on."""
    layouts = getattr(getattr(calibration, "meta", None), "layouts", None) or ()
    return novelty.reference_with(layouts)


def evidence_of(model: ModelSpec, hardware: Sequence[Hardware], calibration: object = None) -> EvidenceFn:
    """TrialRecord -> its Evidence against the measured runs (reference_for); `hardware` are the search's
    Hardware options (cluster, precision, workload), matched to a trial by GPU, count and precision."""
    by_hw = {(h.gpu, h.num_gpus, h.precision): h for h in hardware}
    ref = reference_for(calibration)
    cache: dict[tuple[str, str, int, str], novelty.Evidence] = {}

    def ev(t: TrialRecord) -> novelty.Evidence:
        s = t.estimate.strategy if t.estimate is not None and t.estimate.strategy is not None else t.strategy
        key = (s.label(), t.gpu, t.num_gpus, t.precision)
        if key not in cache:
            h = by_hw[(t.gpu, t.num_gpus, t.precision)]
            cache[key] = ref.evidence(novelty.point(model, h.cluster, h.workload, s))
        return cache[key]

    return ev


def widen_for_novelty(
    est: Estimate,
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    strategy: Strategy,
    calibration: object = None,
) -> Estimate:
    """One estimate's band widened for its novelty against the measured runs (`estimate`, `compare`)."""
    ev = reference_for(calibration).evidence(novelty.point(model, cluster, workload, strategy))
    return novelty.widen(est, ev)


def widen_records(records: Sequence[TrialRecord], ev: EvidenceFn) -> None:
    """Widen every feasible trial's throughput band for its novelty (in place)."""
    for r in records:
        if r.feasible and r.estimate is not None:
            r.estimate = novelty.widen(r.estimate, ev(r))


def low_factor(r: TrialRecord, ev: EvidenceFn) -> float:
    """The band's low end over its centre (<= 1): the corrector's (already widened) band, else the
    novelty widening alone."""
    e = r.estimate
    if e is not None and e.tokens_per_s_band is not None and e.tokens_per_s > 0:
        return min(e.tokens_per_s_band[0] / e.tokens_per_s, 1.0)
    return math.exp(-novelty.widening(ev(r).steps))


def defensible(r: TrialRecord, name: str, ev: EvidenceFn | None) -> float:
    """Objective `name` of r at the pessimistic end of its band (the value itself without `ev` or for an
    objective the throughput band does not move, e.g. headroom)."""
    v = r.values[name]
    if ev is None or name not in POWER:
        return v
    return v * low_factor(r, ev) ** POWER[name]


@dataclass(frozen=True)
class RecipeBeside:
    """The published recipe for the problem and its estimate on the problem's hardware (None: the
    model could not evaluate it; `reason` says why)."""

    recipe: Recipe
    estimate: Estimate | None
    evidence: novelty.Evidence | None
    reason: str = ""


def recipe_beside(
    model: ModelSpec, hardware: Sequence[Hardware], calibration: Calibration | None = None
) -> RecipeBeside | None:
    """The recipe matching the problem on its first hardware option that has one, estimated (and
    calibrated, band widened) like the searched points; None when no published recipe matches."""
    from autopar.errors import AutoparError
    from autopar.perf.estimate import estimate

    for h in hardware:
        rec = match(model, h.cluster, h.workload)
        if rec is None:
            continue
        try:
            est = estimate(model, h.cluster, h.workload, rec.strategy(model), check=False)
        except (AutoparError, ValueError) as err:
            return RecipeBeside(rec, None, None, str(err))
        if calibration is not None:
            est = calibration.apply(model, h.cluster, h.workload, rec.strategy(model), est)
        s = est.strategy or rec.strategy(model)
        ev = reference_for(calibration).evidence(novelty.point(model, h.cluster, h.workload, s))
        return RecipeBeside(rec, novelty.widen(est, ev), ev)
    return None
