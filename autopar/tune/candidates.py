"""The candidates `autopar tune` may run: where they come from, and the prior belief about each.

Three sources, one result (a list of `Candidate`, each with its specs and its prior):
- `from_search`: the full search space, searched as `autopar optimize` does; the candidates are the
  feasible strategies that could still be the fastest (predicted tokens/s at or above the 80% band's low
  end of the fastest of its cluster), at most `pool` of them (shared among the clusters), fastest first.
- `from_labels`: strategy labels (as `optimize` prints them) on one problem.
- `from_records`: a run-record file (the batch-estimate schema); each row is one candidate of its own
  problem (rows may differ in global batch), its `id` the candidate id, every measured column ignored.
A candidate that is invalid for its problem is rejected before any run, naming it (`SpecError`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np

from autopar.errors import SpecError
from autopar.knobs import CpComm, Schedule
from autopar.layouts import Axis
from autopar.text import one_line
from autopar.units import GiB

_DEGREES = tuple(a.value for a in (Axis.TP, Axis.PP, Axis.CP, Axis.DP, Axis.EP, Axis.VPP))
DEFAULT_POOL = 24  # candidates taken from a search: enough for a front's near-ties, few enough to reason on
_RECOMPUTE_LEVEL = {"none": 0.0, "full": 2.0}  # anything else (selective, sel:*) recomputes a part: 1


@dataclass(frozen=True)
class Candidate:
    """One runnable configuration and the prior belief about it (tokens/s per GPU, peak memory GiB)."""

    key: str  # unique within the set: the candidate id, else the label (with its hardware when several)
    label: str
    candidate_id: str | None
    model: Any
    cluster: Any
    workload: Any
    strategy: Any
    predicted: float  # tokens/s per GPU, corrected by the calibration (= analytical without one)
    lo: float  # 80% band (NaN without a calibration)
    hi: float
    analytical: float
    mem_gib: float
    mem_lo: float
    mem_hi: float
    capacity_gib: float
    verdict: str  # fits / uncertain / oom (autopar.calibration.evaluation.verdict)
    usd_per_gpu_hour: float
    mfu: float = math.nan  # model FLOPs / dense peak at `predicted` (a measurement implies its own)

    @property
    def num_gpus(self) -> int:
        return int(self.cluster.num_gpus)

    @property
    def hardware(self) -> str:
        return f"{self.num_gpus}x {self.cluster.gpu.name} {self.workload.precision}"

    def knobs(self) -> dict[str, Any]:
        """The candidate's knobs under the knob registry's names (AUTOPAR_STRATEGY_JSON), plus its problem."""
        s = self.strategy.model_dump(mode="json")
        return {
            **s,
            "label": self.label,
            "candidate_id": self.candidate_id,
            "model": self.model.name,
            "gpu": self.cluster.gpu.name,
            "num_gpus": self.num_gpus,
            "gpus_per_node": self.cluster.host_size,
            "seq_len": self.workload.seq_len,
            "global_batch": self.workload.global_batch,
            "precision": self.workload.precision,
            "framework": self.workload.framework,
        }


def _log2(v: Any) -> float:
    return math.log2(float(v)) if v else 0.0


def _one_hot(value: Any, domain: Sequence[Any]) -> list[float]:
    """A categorical knob: two different values are one step apart."""
    return [(1.0 if value == d else 0.0) / math.sqrt(2) for d in domain]


def knob_vector(c: Candidate) -> list[float]:
    """The candidate's position in knob steps (a doubling of a degree or of the micro-batch = one step)."""
    s = c.strategy
    rec = _RECOMPUTE_LEVEL.get(str(s.recompute), 1.0)
    return [
        *(_log2(getattr(s, k)) for k in (*_DEGREES, "micro_batch")),
        _log2(s.etp or s.tp),
        float(s.zero or 0),
        rec,
        float(bool(s.sp)),
        _log2(1 + (s.activation_offload_layers or 0)),
        _log2(c.num_gpus),
        _log2(c.workload.global_batch),
        1.0 if c.workload.precision == "fp8" else 0.0,
        *_one_hot(s.cp_comm, get_args(CpComm)),
        *_one_hot(s.pp_schedule, get_args(Schedule)),
    ]


def knob_matrix(cands: Sequence[Candidate]) -> np.ndarray:
    """knob_vector of every candidate, plus a GPU-type one-hot when the set holds several GPU types."""
    rows = np.array([knob_vector(c) for c in cands], float)
    gpus = sorted({c.cluster.gpu.name for c in cands})
    if len(gpus) > 1:
        rows = np.hstack([rows, np.array([_one_hot(c.cluster.gpu.name, gpus) for c in cands])])
    return rows


def predict(
    key: str, cid: str | None, specs: tuple[Any, Any, Any, Any], calib: Any, strict: bool
) -> Candidate:
    """Estimate one configuration and wrap it as a Candidate (SpecError naming `key` if it is invalid)."""
    from autopar.costs.evaluation import evaluate
    from autopar.errors import AutoparError

    model, cluster, workload, strategy = specs
    try:
        ev = evaluate(model, cluster, workload, strategy, calib, strict=strict)
    except (AutoparError, ValueError) as e:
        raise SpecError(f"candidate {key!r}: {one_line(str(e))}") from None
    est, n = ev.est, cluster.num_gpus
    lo, hi = est.tokens_per_s_band or (math.nan, math.nan)
    mlo, mhi = ev.mem_band or (math.nan, math.nan)
    return Candidate(
        key=key,
        label=ev.strategy.label(),
        candidate_id=cid,
        model=model,
        cluster=cluster,
        workload=workload,
        strategy=ev.strategy,
        predicted=est.tokens_per_s_per_gpu,
        lo=lo / n,
        hi=hi / n,
        analytical=ev.analytical.tokens_per_s_per_gpu,
        mem_gib=est.memory.total / GiB,
        mem_lo=mlo,
        mem_hi=mhi,
        capacity_gib=est.capacity_bytes / GiB,
        verdict=ev.verdict,
        usd_per_gpu_hour=ev.price[0],
        mfu=est.mfu,
    )


def from_labels(
    model: Any, cluster: Any, workload: Any, labels: Sequence[str], calib: Any
) -> list[Candidate]:
    """One candidate per strategy label on one problem (a duplicate label is an error)."""
    from autopar.launch.labels import parse_strategy_label
    from autopar.layouts import Axis

    out: list[Candidate] = []
    for label in labels:
        try:
            s = parse_strategy_label(label)
        except (SpecError, ValueError) as e:
            raise SpecError(f"candidate {label!r}: {one_line(str(e))}") from None
        if model.is_moe and s.etp is None:
            s = s.model_copy(update={Axis.ETP.value: s.tp})
        out.append(predict(label, None, (model, cluster, workload, s), calib, strict=True))
    return _unique(out)


def from_records(path: Path, calib: Any) -> list[Candidate]:
    """One candidate per row of a run-record file, keyed by its `id` (measured columns ignored)."""
    from autopar.calibration.ingest.tables import read_run_records
    from autopar.calibration.records.specs import row_to_specs
    from autopar.errors import AutoparError

    df = read_run_records(path)
    out: list[Candidate] = []
    for i, row in enumerate(df.to_dict("records")):
        cid = str(row.get("id") or f"row{i + 1}")
        try:
            sp = row_to_specs({str(k): v for k, v in row.items()})
        except AutoparError as e:
            raise SpecError(f"candidates={path}: row {cid!r}: {one_line(str(e))}") from None
        out.append(predict(cid, cid, (sp.model, sp.cluster, sp.workload, sp.strategy), calib, strict=False))
    if not out:
        raise SpecError(f"candidates={path}: the file has no rows")
    return _unique(out)


def from_search(result: Any, calib: Any, pool: int = DEFAULT_POOL) -> list[Candidate]:
    """The feasible strategies of a search that could still be the fastest, at most `pool`, fastest first."""
    feasible = [t for t in result.trials if t.feasible and t.estimate is not None]
    feasible.sort(key=lambda t: -t.estimate.tokens_per_s_per_gpu)
    several = len({(t.gpu, t.num_gpus, t.precision) for t in feasible}) > 1
    out: list[Candidate] = []
    seen: set[str] = set()
    for t in feasible:
        cluster = next(c for c in result.clusters if c.gpu.name == t.gpu and c.num_gpus == t.num_gpus)
        workload = result.workload.model_copy(update={"precision": t.precision})
        label = t.strategy.label()
        key = f"{t.num_gpus}x {t.gpu} {t.precision} {label}" if several else label
        if key in seen:
            continue
        seen.add(key)
        out.append(predict(key, None, (result.model, cluster, workload, t.strategy), calib, strict=False))
        if len(out) >= 4 * pool:  # enough to choose from; the rest are slower still
            break
    return _within_reach(out, pool)


def _within_reach(cands: list[Candidate], pool: int) -> list[Candidate]:
    """The candidates whose predicted total tokens/s reaches the 80% band's low end of the fastest (per
    cluster when several), fastest first, at most `pool`."""
    keep: list[Candidate] = []
    hardware = list(dict.fromkeys(c.hardware for c in cands))
    share = max(2, pool // len(hardware)) if hardware else pool
    for hw in hardware:
        group = sorted((c for c in cands if c.hardware == hw), key=lambda c: -c.predicted)
        floor = group[0].lo if math.isfinite(group[0].lo) else group[0].predicted * 0.9
        keep += [c for c in group if c.predicted >= floor][:share]
    keep.sort(key=lambda c: -c.predicted * c.num_gpus)
    return keep[:pool]


def _unique(cands: list[Candidate]) -> list[Candidate]:
    seen: dict[str, int] = {}
    for c in cands:
        if c.key in seen:
            raise SpecError(f"candidate {c.key!r} is given twice")
        seen[c.key] = 1
    return cands
