"""Features of a (model, cluster, workload, strategy, analytical estimate) for the correctors.

Few and physical on purpose (issue 12): where the analytical model says the step time goes
(compute, recompute, exposed communication, pipeline bubble), how big the GEMMs are, how thinly an
MoE spreads tokens over experts, how far the cluster spans beyond one NVLink domain, the predicted
MFU, FP8 and the GPU generation. Never a source id: a corrector must transfer to a cluster it has
not seen. Breakdown terms are read through `as_dict()` so fields added to the time or memory
breakdown later fall into the "other" share instead of breaking the feature schema.

The same function serves training (from run records) and application (inside the search), so a
model never sees features computed two different ways. Every feature is a plain float.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autopar.calibration.records.stack_columns import stated_true
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
from autopar.errors import AutoparError
from autopar.perf.arith import log2, maximum, where
from autopar.perf.estimate import estimate
from autopar.perf.types import STEP_PARTS, Estimate, step_total
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import GiB

GPU_FAMILIES = ("ampere", "hopper", "blackwell")

FEATURE_NAMES: tuple[str, ...] = (
    "share_compute",  # forward+backward GEMM/attention time without recompute, of the step
    "share_recompute",
    "share_comm",  # every exposed *_comm term of the time breakdown
    "share_bubble",
    "log2_gemm_tokens",  # tokens per micro-batch per rank: micro_batch * seq / cp
    "log2_hidden_per_tp",  # GEMM width per rank
    "log2_expert_dilution",  # log2(experts / (topk * ep)): how thinly routed tokens spread (0 dense)
    "log2_domains_spanned",  # log2(num_gpus / NVLink-domain size), >= 0
    "pred_mfu",
    "fp8",
    *(f"family_{f}" for f in GPU_FAMILIES),
)
FEATURE_SCHEMA_VERSION = "2"


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def breakdown(obj: Any) -> dict[str, float]:
    """A time/memory breakdown's terms by name (what `as_dict()` gives without the total, without the
    cost of `dataclasses.asdict`, which dominated the search's calibration time); fields added to the
    breakdown later appear here too."""
    return {k: getattr(obj, k) for k in _field_names(type(obj))}


def _time_shares(f: Figures) -> list[Any]:
    """Compute (without recompute), recompute, exposed comm and bubble shares of the step time."""
    t = f.time
    total = step_total([t[k] for k in STEP_PARTS])
    total = where(total != 0, total, where(f.step_time_s != 0, f.step_time_s, 1.0))
    comm = sum(v for k, v in t.items() if k.endswith("_comm"))
    rc = t["recompute"]
    return [(t["compute"] - rc) / total, rc / total, comm / total, t["bubble"] / total]


def _domain_size(cluster: ClusterSpec) -> int:
    """GPUs sharing one NVLink fabric (ClusterSpec.nvlink_domain where the spec has it, else the node)."""
    return int(getattr(cluster, "nvlink_domain", None) or cluster.node_size)


def _domains_spanned(cluster: ClusterSpec) -> float:
    """log2 of how many NVLink domains the cluster spans (0 inside one)."""
    return max(math.log2(cluster.num_gpus / _domain_size(cluster)), 0.0)


STATE_PARTS = ("weights", "grads", "optimizer")  # memory terms of the model states
ACTIVATION_PARTS = ("activations", "logits")  # memory terms of the activations


@dataclass(slots=True)  # not frozen: built once per corrected estimate on the search's hot path
class Figures:
    """What the features read of one estimate (floats) or of a block of n estimates (arrays of n): the
    knobs as the estimate completed them, its time and memory terms and headline figures. The feature
    formulas below are written once over these and run on either."""

    tp: Any
    cp: Any
    ep: Any
    micro_batch: Any
    time: Mapping[str, Any]  # every TimeBreakdown term
    step_time_s: Any
    mfu: Any
    mem: Mapping[str, Any]  # every MemoryBreakdown term
    peak_memory_bytes: Any
    capacity_bytes: float

    @staticmethod
    def of_estimate(cluster: ClusterSpec, strategy: Strategy, est: Estimate) -> Figures:
        s = (est.strategy or strategy).with_dp(cluster.num_gpus)  # unset knobs as the estimate completed them
        m = est.memory
        return Figures(
            s.tp, s.cp, s.ep, s.micro_batch, breakdown(est.time), est.step_time_s, est.mfu,
            breakdown(m), m.total, est.capacity_bytes,
        )  # fmt: skip

    @staticmethod
    def of_columns(cols: Any, vest: Any) -> Figures:
        """A block: perf/vector.StrategyColumns (complete) and its VectorEstimates."""
        return Figures(
            cols.tp, cols.cp, cols.ep, cols.micro_batch, vest.time, vest.step_time_s, vest.mfu,
            vest.mem, vest.peak_memory_bytes, vest.capacity_bytes,
        )  # fmt: skip


def throughput_terms(model: ModelSpec, cluster: ClusterSpec, workload: Workload, f: Figures) -> list[Any]:
    """The throughput features (FEATURE_NAMES order) of one estimate or of a block, floats or arrays."""
    dilution = (
        maximum(log2(model.experts / (max(model.topk, 1) * maximum(f.ep, 1))), 0.0) if model.is_moe else 0.0
    )
    fam = cluster.gpu.family.lower()
    return [
        *_time_shares(f),
        log2(f.micro_batch * workload.seq_len / f.cp),  # tokens per GEMM per rank
        log2(model.hidden / f.tp),
        dilution,
        _domains_spanned(cluster),
        f.mfu,
        1.0 if workload.precision == "fp8" else 0.0,
        *(1.0 if fam == g else 0.0 for g in GPU_FAMILIES),
    ]


def memory_terms(model: ModelSpec, cluster: ClusterSpec, workload: Workload, f: Figures) -> list[Any]:
    """The memory features (MEMORY_FEATURE_NAMES order) of one estimate or of a block, floats or arrays."""
    m, total = f.mem, f.peak_memory_bytes
    total = where(total != 0, total, 1.0)
    return [
        sum(m[k] for k in STATE_PARTS) / total,
        sum(m[k] for k in ACTIVATION_PARTS) / total,
        total / f.capacity_bytes,
        log2(f.micro_batch * workload.seq_len / f.cp),
        _time_shares(f)[1],
        _domains_spanned(cluster),
    ]


def _row(terms: list[Any]) -> np.ndarray:
    return np.array(terms, dtype=float)


def _rows(terms: list[Any], n: int) -> np.ndarray:
    return np.column_stack([np.broadcast_to(np.asarray(x, dtype=float), (n,)) for x in terms])


def features(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, est: Estimate
) -> np.ndarray:
    """The feature vector (FEATURE_NAMES order) of one configuration and its analytical estimate."""
    return _row(throughput_terms(model, cluster, workload, Figures.of_estimate(cluster, strategy, est)))


def features_columns(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cols: Any, vest: Any
) -> np.ndarray:
    """`features` of n strategies at once (rows of perf/vector.StrategyColumns and their VectorEstimates)."""
    return _rows(throughput_terms(model, cluster, workload, Figures.of_columns(cols, vest)), len(cols))


def memory_features_columns(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cols: Any, vest: Any
) -> np.ndarray:
    """`memory_features` of n strategies at once (see features_columns)."""
    return _rows(memory_terms(model, cluster, workload, Figures.of_columns(cols, vest)), len(cols))


MEMORY_FEATURE_NAMES: tuple[str, ...] = (
    "mem_share_states",  # weights + grads + optimizer
    "mem_share_activations",  # layer activations + logits
    "pred_mem_fraction",  # predicted peak / usable capacity
    "log2_gemm_tokens",
    "share_recompute",
    "log2_domains_spanned",
)


def memory_features(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, est: Estimate
) -> np.ndarray:
    """Memory-breakdown shares and size features (MEMORY_FEATURE_NAMES order)."""
    return _row(memory_terms(model, cluster, workload, Figures.of_estimate(cluster, strategy, est)))


@dataclass
class TrainingSet:
    """Features X, target y = log(measured/predicted), and per-row context; target is
    'throughput' (tokens/s per GPU) or 'memory' (peak GiB per GPU)."""

    X: np.ndarray
    y: np.ndarray
    ids: list[str]
    sources: list[str]
    groups: list[str]  # the cluster a run belongs to: its `cluster` cell, else its source
    cohorts: list[str]  # comparable configurations (same model and GPU count) for rank correlations
    gpus: list[str]
    families: list[str]
    measured: np.ndarray  # tokens/s per GPU, or GiB per GPU
    predicted: np.ndarray  # the analytical model's figure in the same unit
    how: list[str]  # how the measurement was obtained (measured, step time, TFLOP/s)
    skipped: list[tuple[str, str]]  # (id, reason) of records that could not be used
    target: str = "throughput"
    stacks: list[str] = field(default_factory=list)  # the software stack (Workload.framework) of each run

    def __len__(self) -> int:
        return len(self.y)


def group_of(rec: Mapping[str, Any]) -> str:
    """The group a run adapts: the record's `cluster` id when given, else its source."""
    for key in ("cluster", "source"):
        v = rec.get(key)
        if v is not None and str(v).strip() not in ("", "nan", "None"):
            return str(v).strip()
    return "unknown"


def record_features(
    rec: Mapping[str, Any], target: str = "throughput"
) -> tuple[np.ndarray, Estimate, str, str]:
    """Features, analytical estimate, GPU family and software stack (Workload.framework) of one run record
    (raises AutoparError if unusable). Memory: the estimate's memory is the stage the record's peak was
    measured on, where its notes state one (records/estimate.py stage_estimate)."""
    from autopar.calibration.records.estimate import stage_estimate
    from autopar.calibration.records.specs import row_to_specs  # pandas: loaded only when read

    sp = row_to_specs(rec)
    est = estimate(sp.model, sp.cluster, sp.workload, sp.strategy, strict=False)
    if target == "memory":
        est = stage_estimate(rec, sp, est)
    fn = memory_features if target == "memory" else features
    x = fn(sp.model, sp.cluster, sp.workload, sp.strategy, est)
    return x, est, sp.cluster.gpu.family, str(sp.workload.framework)


def _measured(rec: Mapping[str, Any], target: str) -> tuple[float | None, str]:
    """The measurement a target learns from: tokens/s per GPU, or peak memory in GiB per GPU (a run that ran
    out of memory, `measured_oom`: how = "oom", its value the usable memory, filled in by the caller)."""
    if target == "throughput":
        return measured_tokens_per_s_per_gpu(rec)
    try:
        v = float(rec.get("measured_mem_gb_per_gpu") or "nan")
    except (TypeError, ValueError):
        return None, "none"
    if v > 0:
        return v, "measured"
    return (math.nan, OOM_EVIDENCE) if stated_true(rec.get("measured_oom")) else (None, "none")


# A measured OOM is a censored observation: the run's whole peak was over usable memory, so log(peak / predicted)
# is at least log(usable / predicted). The memory corrector takes that bound as the observation where the model
# said the run fits (the bound is then positive and pulls the factor up, never past what the OOM proves); where
# the model already called it out of memory the bound says nothing new and the row is skipped.
OOM_EVIDENCE = "oom (lower bound: usable memory)"


def _row_context(rec: Mapping[str, Any], rid: str, family: str, stack: str) -> dict[str, str]:
    """The per-run context a TrainingSet keeps beside its features (TrainingSet fields)."""
    return {
        "ids": rid,
        "sources": str(rec.get("source") or "unknown"),
        "groups": group_of(rec),
        "cohorts": f"{rec.get('model')}|{rec.get('num_gpus')}",
        "gpus": str(rec.get("gpu")),
        "families": family,
        "stacks": stack,
    }


def build_training_set(records: Sequence[Mapping[str, Any]], target: str = "throughput") -> TrainingSet:
    """Features and log-ratio targets of every usable record (records without the measurement skipped).

    Memory: measured_mem_gb_per_gpu is read as GiB (what torchtitan and autopar's log parsers report).
    """
    if target not in ("throughput", "memory"):
        raise ValueError(f"target={target!r} must be 'throughput' or 'memory'")
    xs: list[np.ndarray] = []
    ys: list[float] = []
    meta: dict[str, list[Any]] = {
        k: []
        for k in ("ids", "sources", "groups", "cohorts", "gpus", "families", "meas", "pred", "how", "stacks")
    }
    skipped: list[tuple[str, str]] = []
    for rec in records:
        rid = str(rec.get("id") or "")
        meas, how = _measured(rec, target)
        if meas is None:
            if target == "throughput":
                skipped.append((rid, "no tokens/s, step time or TFLOP/s with a known FLOP convention"))
            continue
        try:
            x, est, family, stack = record_features(rec, target)
        except (AutoparError, ValueError, ZeroDivisionError) as e:
            skipped.append((rid, " ".join(str(e).split())[:200]))
            continue
        pred = est.tokens_per_s_per_gpu if target == "throughput" else est.memory.total / GiB
        if not pred > 0:
            skipped.append((rid, f"the analytical model predicts no {target}"))
            continue
        if how == OOM_EVIDENCE:
            meas = est.capacity_bytes / GiB
            if meas <= pred:
                skipped.append((rid, "ran out of memory, as the model predicts: nothing to learn"))
                continue
        xs.append(x)
        ys.append(math.log(meas / pred))
        for k, v in _row_context(rec, rid, family, stack).items():
            meta[k].append(v)
        meta["meas"].append(meas)
        meta["pred"].append(pred)
        meta["how"].append(how)
    names = MEMORY_FEATURE_NAMES if target == "memory" else FEATURE_NAMES
    X = np.vstack(xs) if xs else np.empty((0, len(names)))
    return TrainingSet(
        X=X,
        y=np.array(ys, dtype=float),
        ids=meta["ids"],
        sources=meta["sources"],
        groups=meta["groups"],
        cohorts=meta["cohorts"],
        gpus=meta["gpus"],
        families=meta["families"],
        measured=np.array(meta["meas"], dtype=float),
        predicted=np.array(meta["pred"], dtype=float),
        how=meta["how"],
        skipped=skipped,
        target=target,
        stacks=meta["stacks"],
    )
