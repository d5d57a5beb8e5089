"""How far a layout lies from the measured runs the calibration rests on, and how that widens its band.

**Novelty** of a configuration = the distance to its nearest measured run, counted in *steps*:

- one step per doubling (log2 difference) of each knob that moves a cost the analytical model
  cannot check without measurements: TP degree, PP depth, CP degree, tokens per CP rank (seq / cp:
  the length of the attention chunk and of each KV exchange), EP degree, tokens per expert per
  micro-batch (routed tokens one expert's grouped GEMM sees; for a dense model the FFN is one expert
  that sees every token), and NVLink domains spanned by the cluster (log2 of GPUs / domain size:
  the fabric a collective crosses). Micro-batch is left out, and ZeRO sharding and recompute are carried
  but priced 0 steps (bench/novelty.py --categories finds no gain from pricing them): each moves
  a term the model derives from first principles (FLOPs, bytes) rather than a measured efficiency.
- a categorical mismatch costs CATEGORY_STEPS: another GPU family (its kernels' efficiencies are
  fitted per family) 2 steps, another software stack 1, another precision 1, another CP exchange 1.

The distance is L1 (the steps add up), so "2 steps away" reads "CP 2 -> 4 and twice the GPUs per
domain", which is what the report prints for the nearest run. The nearest run is searched among the
published runs (autopar/data/published_runs.csv) that the shipped calibration trains on, plus the runs a
user's calibration was fitted on (`calibrate fit` keeps their layouts: CalibrationMeta.layouts), so a
team's own runs narrow the bands near their layouts.

**Band widening**: a corrector band calibrated on left-out sources holds for layouts like those
sources' runs. Beyond KNEE_STEPS from every measured run the band's log half-width grows by
SLOPE_PER_STEP per step. KNEE_STEPS and SLOPE_PER_STEP are not chosen by hand: `bench/novelty.py`
fits them as the nominal-coverage (80%) quantile of how far the existing band misses each left-out run
(leave-one-source-out predictions of the public runs, and the dev and Ascend runs the shipped model
never saw), as a hinge function of novelty (pinball loss, every source weighted equally), and checks
the fit by leaving each source out of it. Where the existing band already covers (dense evidence) the
quantile of the miss is 0 and nothing widens.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from autopar.perf.types import Estimate
    from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

# The knobs (LayoutPoint.knobs order, log2 units) as the nearest run's differences name them.
KNOBS: tuple[str, ...] = (
    "TP",
    "PP",
    "CP",
    "tokens per CP rank",
    "EP",
    "tokens per expert",
    "NVLink domains spanned",
)
# Steps a categorical mismatch costs: a GPU family two doublings (every efficiency the model uses is
# fitted per family), a stack or a precision one (the same kernels, other defaults/recipes), and so is
# another context-parallel exchange (ring, all-to-all, all-gather: another collective and overlap; ''
# without CP). ZeRO sharding (what it shards) and the recompute level cost nothing. Scored by
# bench/novelty.py's left-out-source pinball loss (`python bench/novelty.py --categories`, model of issue 21's
# second session): family 2/3/4 steps give 0.524/0.551/0.562 whatever the CP exchange costs (0 or 1: equal;
# 1 is kept, it prices the CP exchanges no measured run uses); sharding and recompute at 0/1/2 steps each
# give 0.551-0.564 against 0.551 at 0/0 (0.550 at sharding 2 is noise with 10 sources), so the measured
# band misses do not grow with either and they stay unpriced (LayoutPoint carries them for the report).
CATEGORY_STEPS: dict[str, float] = {
    "family": 2.0,
    "stack": 1.0,
    "precision": 1.0,
    "cp_variant": 1.0,
    "sharding": 0.0,
    "recompute": 0.0,
}
# Categories a run may leave unknown (a record that does not state its ZeRO stage or recompute): '' there
# matches anything, so an unstated knob never counts as a difference.
OPTIONAL_CATEGORIES = ("sharding", "recompute")

# Fitted by `python bench/novelty.py` (see the module docstring; regenerate after the published runs
# or the model change): within KNEE_STEPS of a measured run the calibrated band holds; beyond it, its log
# half-width grows by SLOPE_PER_STEP per step.
KNEE_STEPS = 3.5
SLOPE_PER_STEP = 0.03


@dataclass(frozen=True)
class LayoutPoint:
    """A configuration as novelty sees it: log2 knob values (KNOBS order) and its categories."""

    knobs: tuple[float, ...]
    family: str
    stack: str
    precision: str
    cp_variant: str = ""  # the CP exchange (Strategy.cp_comm) when cp > 1, else ''
    label: str = ""  # what to call it in a sentence (a run id and layout)
    sharding: str = ""  # what ZeRO shards: sharding_class(zero); '' unknown
    recompute: str = ""  # recompute level: none, selective (any module set) or full; '' unknown


@dataclass(frozen=True)
class Evidence:
    """A layout's novelty (steps to the nearest measured run), that run, and how the two differ."""

    steps: float
    nearest: LayoutPoint | None
    point: LayoutPoint | None = None  # the layout itself (None: only its distance is known)

    @property
    def differences(self) -> tuple[str, ...]:
        """How the layout differs from its nearest run ('CP 1 → 4', ...); () when either is unknown."""
        if self.point is None or self.nearest is None:
            return ()
        return differences(self.point, self.nearest)

    @property
    def beyond(self) -> bool:
        """True when the layout lies beyond what the measured runs cover (its band widens)."""
        return self.steps > KNEE_STEPS

    def sentence(self) -> str:
        """'No published run resembles this layout: the nearest, ID (...), differs in ...' (or '')."""
        if not self.beyond or self.nearest is None:
            return ""
        return (
            f"No published run resembles this layout: the nearest, {self.nearest.label}, is "
            f"{self.steps:.1f} steps away ({'; '.join(self.differences)}); the band is widened to "
            f"±{100 * math.expm1(widening(self.steps)):.0f}% more for it."
        )


def sharding_class(zero: int | None) -> str:
    """What a ZeRO stage shards, as novelty compares it: optimizer states (0-1: the gradients and weights
    stay whole), gradients (2) or parameters (3); '' when unset."""
    if zero is None:
        return ""
    return {0: "states", 1: "states", 2: "grads"}.get(int(zero), "params")


def recompute_class(recompute: str | None) -> str:
    """The recompute level novelty compares: none, selective (Megatron's module sets included) or full."""
    if not recompute:
        return ""
    return recompute if recompute in ("none", "full") else "selective"


def point(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, label: str = ""
) -> LayoutPoint:
    """The LayoutPoint of one configuration (unset knobs as 1, a micro-batch of 1 when unset)."""
    s = strategy
    cp, ep, mb = max(s.cp or 1, 1), max(s.ep or 1, 1), max(s.micro_batch or 1, 1)
    per_rank = workload.seq_len / cp
    routed = per_rank * mb * (max(model.topk, 1) * ep / model.experts if model.is_moe else 1.0)
    domain = int(getattr(cluster, "nvlink_domain", None) or cluster.node_size)
    knobs = (s.tp or 1, s.pp or 1, cp, per_rank, ep, max(routed, 1.0), max(cluster.num_gpus / domain, 1.0))
    return LayoutPoint(
        knobs=tuple(math.log2(v) for v in knobs),
        family=cluster.gpu.family.lower(),
        stack=workload.stack or workload.framework,
        precision=workload.precision,
        cp_variant=str(s.cp_comm) if cp > 1 else "",
        label=label,
        sharding=sharding_class(s.zero),
        recompute=recompute_class(s.recompute),
    )


class Reference:
    """Measured runs as novelty searches them: their log2 knobs as one matrix, categories as arrays."""

    def __init__(self, points: Sequence[LayoutPoint]):
        self.points = tuple(points)
        self.knobs = np.array([r.knobs for r in self.points], dtype=float).reshape(
            len(self.points), len(KNOBS)
        )
        # each category's values as small integer codes (comparing object arrays is several times slower)
        self.codes: dict[str, dict[str, int]] = {}
        self.cats: dict[str, np.ndarray] = {}
        for c in CATEGORY_STEPS:
            values = [getattr(r, c) for r in self.points]
            self.codes[c] = {v: i for i, v in enumerate(dict.fromkeys(values))}
            self.cats[c] = np.array([self.codes[c][v] for v in values], dtype=int)

    def distances(self, p: LayoutPoint) -> np.ndarray:
        """Steps from p to each run (L1 over the log2 knobs + categorical mismatches)."""
        d = np.abs(self.knobs - np.array(p.knobs)).sum(axis=1)
        for cat, cost in CATEGORY_STEPS.items():
            if cost == 0:  # carried, not priced
                continue
            value = getattr(p, cat)
            differ = self.cats[cat] != self.codes[cat].get(value, -1)
            if cat in OPTIONAL_CATEGORIES:  # unknown on either side matches
                differ &= self.cats[cat] != self.codes[cat].get("", -2)
                differ &= value != ""
            d += cost * differ
        return d

    def evidence(self, p: LayoutPoint) -> Evidence:
        """Novelty of p: the nearest run (ties: the first in the reference's fixed order)."""
        if not self.points:
            return Evidence(math.inf, None, p)
        d = self.distances(p)
        i = int(np.argmin(d))
        return Evidence(float(d[i]), self.points[i], p)


def differences(p: LayoutPoint, ref: LayoutPoint) -> tuple[str, ...]:
    """How p differs from ref, knob by knob ('CP 1 → 4'), then categories ('GPU family hopper → ampere')."""
    out = [
        f"{name} {2**b:,.0f} → {2**a:,.0f}"
        for name, a, b in zip(KNOBS, p.knobs, ref.knobs, strict=True)
        if abs(a - b) > 1e-9
    ]
    words = {
        "family": "GPU family",
        "stack": "stack",
        "precision": "precision",
        "cp_variant": "CP exchange",
        "sharding": "ZeRO shards",
        "recompute": "recompute",
    }
    out += [
        f"{words[c]} {getattr(ref, c) or 'none'} → {getattr(p, c) or 'none'}"
        for c in CATEGORY_STEPS
        if getattr(p, c) != getattr(ref, c)
        and CATEGORY_STEPS[c] > 0
        and not (c in OPTIONAL_CATEGORIES and "" in (getattr(p, c), getattr(ref, c)))
    ]
    return tuple(out) or ("same knobs",)


def evidence(p: LayoutPoint, refs: Sequence[LayoutPoint]) -> Evidence:
    """Novelty of p against the runs refs (see Reference.evidence)."""
    return Reference(refs).evidence(p)


def widening(steps: float) -> float:
    """Log half-width added to a band at this novelty: SLOPE_PER_STEP per step beyond KNEE_STEPS."""
    if not math.isfinite(steps):
        return 0.0
    return SLOPE_PER_STEP * max(steps - KNEE_STEPS, 0.0)


def widen(est: Estimate, ev: Evidence) -> Estimate:
    """The estimate with its throughput band widened for its novelty (unchanged without a band)."""
    w = widening(ev.steps)
    if est.tokens_per_s_band is None or w <= 0:
        return est
    lo, hi = est.tokens_per_s_band
    near = f", {ev.nearest.label}" if ev.nearest is not None and ev.nearest.label else ""
    note = (
        f"band widened x{math.exp(w):.3f} each way: {ev.steps:.1f} steps from the nearest published run{near}"
    )
    return replace(est, tokens_per_s_band=(lo * math.exp(-w), hi * math.exp(w)), notes=(*est.notes, note))


def record_point(row: Any) -> LayoutPoint:
    """The LayoutPoint of a run record (raises AutoparError when the record is unusable)."""
    from autopar.calibration.records.specs import row_to_specs  # pandas: loaded only when records are read

    sp = row_to_specs(row)
    s = sp.strategy
    layout = f"TP{s.tp} PP{s.pp}" + (f" CP{s.cp}" if s.cp > 1 else "") + (f" EP{s.ep}" if s.ep > 1 else "")
    label = f"{row.get('id')} ({row.get('model')}, {sp.cluster.num_gpus} {sp.cluster.gpu.name}, {layout})"
    return point(sp.model, sp.cluster, sp.workload, s, label)


def record_points(rows: Sequence[Any]) -> tuple[LayoutPoint, ...]:
    """LayoutPoints of the usable run records, in their order (unusable ones skipped)."""
    from autopar.errors import AutoparError

    out = []
    for row in rows:
        try:
            out.append(record_point(row))
        except (AutoparError, ValueError, ZeroDivisionError):
            continue
    return tuple(out)


@functools.cache
def published_reference() -> Reference:
    """The published runs the shipped calibration trains on, as a Reference (read once per process)."""
    return Reference(published_points())


# The published runs' LayoutPoints, shipped beside them (written by `python -m autopar.calibration.build_default`,
# checked by its --check): reading them from the records needs pandas and the records' parser (~0.4 s), which
# every optimize and estimate would otherwise pay to find the nearest run.
REFERENCE_FILE = "published_layouts.json"
REFERENCE_SCHEMA = 2


@functools.cache
def published_points() -> tuple[LayoutPoint, ...]:
    """LayoutPoints of the published runs the shipped calibration trains on (the shipped table when it
    is current for these KNOBS and the published runs' bytes, else read from the records)."""
    from autopar.data import data_path

    try:
        doc = json.loads(data_path(REFERENCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and doc == reference_document(doc.get("points_raw", ()), check_only=True):
        return tuple(_point_of(p) for p in doc["points_raw"])
    return published_points_from_records()


def published_points_from_records() -> tuple[LayoutPoint, ...]:
    """LayoutPoints of the published runs, read from autopar/data/published_runs.csv (needs pandas)."""
    from autopar.calibration.ingest.tables import read_run_records
    from autopar.data import published_runs_path

    return record_points(read_run_records(published_runs_path()).fillna("").to_dict("records"))


def reference_document(points_raw: Any, *, check_only: bool = False) -> dict[str, Any]:
    """The shipped table's JSON: schema, KNOBS, the published runs' digest and the points as plain rows.
    With check_only, `points_raw` is taken as given (the header is what must match)."""
    from autopar.data import published_runs_path

    rows = list(points_raw) if check_only else [asdict(p) for p in points_raw]
    digest = hashlib.sha256(published_runs_path().read_bytes()).hexdigest()
    return {
        "schema": REFERENCE_SCHEMA,
        "knobs": list(KNOBS),
        "published_runs_sha256": digest,
        "points_raw": rows,
    }


def reference_with(raw_points: Sequence[dict[str, Any]]) -> Reference:
    """The published runs plus other measured runs (a calibration's own, CalibrationMeta.layouts, as plain
    dicts); the published reference itself when there are none."""
    if not raw_points:
        return published_reference()
    return _reference_with(json.dumps(list(raw_points), sort_keys=True))


@functools.lru_cache(maxsize=8)
def _reference_with(raw_json: str) -> Reference:
    extra = tuple(_point_of(p) for p in json.loads(raw_json))
    return Reference(published_points() + extra)


def _point_of(raw: dict[str, Any]) -> LayoutPoint:
    return LayoutPoint(**{**raw, "knobs": tuple(float(x) for x in raw["knobs"])})
