"""What the calibration has measured near each hardware option: runs of its GPU family, of its software
stack and at its scale, said before the options' figures so a procurement answer shows what backs it.

The measured runs are the ones novelty counts (calibration/evaluation/novelty.py, search/evidence.py reference_for):
the published runs the shipped calibration trains on plus the runs a user's calibration was fitted on. Each
run is a LayoutPoint: its GPU family (GPUSpec.family: hopper for H100/H200, blackwell for B200/GB200, cdna3
for MI300X, ...) and stack (Workload.stack or framework) are fields; its GPU and count are read from its
label, which novelty.record_point writes as 'ID (model, COUNT GPU, layout)'.

Whether the band widens is novelty's rule, reported as the estimate applied it: a layout more than
KNEE_STEPS from every measured run (another GPU family alone costs CATEGORY_STEPS['family'] = 2 steps) has
its band widened by SLOPE_PER_STEP per step beyond the knee.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autopar.calibration.evaluation import novelty

_COUNT_RE = re.compile(r", (\d+) ([^,()]+), [^,()]*\)$")  # '..., 64 H100-SXM, TP8 PP1)'


def _count_gpu(label: str) -> tuple[int, str] | None:
    """(GPU count, GPU name) of a measured run's label; None when the label does not state them."""
    m = _COUNT_RE.search(label)
    return (int(m.group(1)), m.group(2).strip()) if m else None


@dataclass(frozen=True)
class OptionEvidence:
    """The measured runs behind one option's figures (module doc)."""

    gpu: str
    family: str
    count: int
    stack: str
    calibrated: bool  # False: --no-calibration (the analytical model alone, no band)
    runs: int  # measured runs the calibration holds
    gpu_runs: int  # of them on this GPU
    family_runs: int  # on this GPU family
    stack_runs: int  # on this software stack (any GPU)
    family_stack_runs: int  # on this family and stack
    scale: tuple[int, int] | None  # GPU counts of the family's runs (of every run when the family has none)
    steps: float | None = None  # the chosen layout's distance to its nearest run (novelty steps)
    nearest: str = ""  # that run
    family_differs: bool = False  # the nearest run is on another GPU family
    widened_pct: float = 0.0  # how far the band was widened for that distance, % each way

    @property
    def within_scale(self) -> bool | None:
        """Whether the option's GPU count lies within the measured counts (None: no count known)."""
        return None if self.scale is None else self.scale[0] <= self.count <= self.scale[1]

    def sentence(self, name: str = "") -> str:
        """One line for the evidence list (module doc), about `name` (default: the GPU)."""
        name = name or self.gpu
        if not self.calibrated:
            return f"{name}: uncalibrated (--no-calibration): the analytical model's figures, with no band"
        if self.family_runs == 0:
            head = (
                f"{name}: no measured run of this GPU family ({self.family}) in the calibration — its "
                "figures are the analytical model's, corrected as fitted on other families"
            )
        else:
            on_gpu = f", {self.gpu_runs} on {self.gpu}" if self.gpu_runs != self.family_runs else ""
            head = f"{name}: {self.family_runs} measured runs of its family ({self.family}{on_gpu})"
        return head + "; " + "; ".join(p for p in (self._stack(), self._scale(), self._band()) if p)

    def _stack(self) -> str:
        if self.family_stack_runs:
            return f"{self.family_stack_runs} of them on {self.stack}"
        if self.family_runs:
            return f"none of them on {self.stack} ({self.stack_runs} on other families)"
        return f"{self.stack_runs} runs on {self.stack} on other families"

    def _scale(self) -> str:
        if self.scale is None:
            return ""
        lo, hi = self.scale
        of = "its family's runs" if self.family_runs else "the runs"
        where = "within" if self.within_scale else "outside"
        return f"{self.count} GPUs, {where} the {lo}–{hi} GPUs {of} used"

    def _band(self) -> str:
        if self.steps is None or not math.isfinite(self.steps):
            return ""
        if self.widened_pct <= 0:
            return (
                f"the chosen layout is {self.steps:.1f} steps from its nearest run: the band is not widened"
            )
        fam = (
            f", {novelty.CATEGORY_STEPS['family']:g} of them for another GPU family"
            if self.family_differs
            else ""
        )
        return (
            f"band widened ±{self.widened_pct:.1f}% for the chosen layout's distance ({self.steps:.1f} steps "
            f"to the nearest run{fam})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "calibrated": self.calibrated,
            "gpu_family": self.family,
            "stack": self.stack,
            "measured_runs": self.runs,
            "runs_on_gpu": self.gpu_runs,
            "runs_on_family": self.family_runs,
            "runs_on_stack": self.stack_runs,
            "runs_on_family_and_stack": self.family_stack_runs,
            "measured_gpu_counts": list(self.scale) if self.scale else None,
            "within_measured_scale": self.within_scale,
            "nearest_run": self.nearest or None,
            "novelty_steps": self.steps if self.steps is None or math.isfinite(self.steps) else None,
            "band_widened_pct": self.widened_pct,
            "sentence": self.sentence(),
        }


UNCALIBRATED = (
    "uncalibrated (--no-calibration): every figure is the analytical model's, with no band (and so no tie "
    "can be called)"
)


def evidence_lines(items: Sequence[tuple[str, OptionEvidence | None]]) -> list[str]:
    """One line per named option's evidence, or the one UNCALIBRATED line when nothing is calibrated."""
    said = [(name, ev) for name, ev in items if ev is not None]
    if said and not any(ev.calibrated for _, ev in said):
        return [UNCALIBRATED]
    return [ev.sentence(name) for name, ev in said]


def _scale(points: Sequence[novelty.LayoutPoint]) -> tuple[int, int] | None:
    counts = [c[0] for c in (_count_gpu(p.label) for p in points) if c is not None]
    return (min(counts), max(counts)) if counts else None


def option_evidence(
    model: Any, cluster: Any, workload: Any, strategy: Any, calibration: Any
) -> OptionEvidence:
    """The evidence behind one option: the calibration's measured runs near its GPU, stack and count, and
    (with a strategy) how far its chosen layout lies from them and what that did to its band."""
    from autopar.search.evidence import reference_for

    ref = reference_for(calibration)
    pts = tuple(dict.fromkeys(ref.points))  # a calibration fitted with the public runs lists them again
    family, stack = cluster.gpu.family.lower(), workload.stack or workload.framework
    fam = [p for p in pts if p.family == family]
    on_gpu = [p for p in fam if (_count_gpu(p.label) or (0, ""))[1] == cluster.gpu.name]
    ev = None
    if strategy is not None:
        ev = ref.evidence(novelty.point(model, cluster, workload, strategy))
    return OptionEvidence(
        gpu=cluster.gpu.name,
        family=family,
        count=cluster.num_gpus,
        stack=stack,
        calibrated=calibration is not None,
        runs=len(pts),
        gpu_runs=len(on_gpu),
        family_runs=len(fam),
        stack_runs=sum(p.stack == stack for p in pts),
        family_stack_runs=sum(p.stack == stack for p in fam),
        scale=_scale(fam or pts),
        steps=ev.steps if ev is not None else None,
        nearest=ev.nearest.label if ev is not None and ev.nearest is not None else "",
        family_differs=ev is not None and ev.nearest is not None and ev.nearest.family != family,
        widened_pct=100 * math.expm1(novelty.widening(ev.steps)) if ev is not None and calibration else 0.0,
    )


def attach_evidence(options: Sequence[Any], model: Any, workload: Any, calibration: Any) -> None:
    """Set `evidence` on every option (OptionResult) that has a cluster, from its chosen strategy if any."""
    for o in options:
        if o.cluster is None:
            continue
        wl = workload.model_copy(update={"precision": o.precision}) if o.precision else workload
        o.evidence = option_evidence(model, o.cluster, wl, o.strategy, calibration)
