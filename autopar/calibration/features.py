"""Features of a (model, cluster, workload, strategy, analytical estimate) for the throughput corrector.

The same function serves training (from run records) and application (inside the search), so a
model never sees features computed two different ways. Every feature is a plain float.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autopar.calibration.records import row_to_specs
from autopar.calibration.runs import measured_tokens_per_s_per_gpu
from autopar.errors import AutoparError
from autopar.perf.estimate import estimate
from autopar.perf.types import Estimate, GiB
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

TIME_PARTS = (
    "compute",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "optimizer",
)
GPU_FAMILIES = ("ampere", "hopper", "blackwell")

FEATURE_NAMES: tuple[str, ...] = (
    *(f"share_{p}" for p in TIME_PARTS),
    "log2_gemm_tokens",
    "log2_hidden_per_tp",
    *(f"family_{f}" for f in GPU_FAMILIES),
    "family_other",
    "log2_peak_tflops",
    "fp8",
    "recompute_selective",
    "recompute_full",
    "zero",
    "sp",
    "log2_tp",
    "log2_pp",
    "log2_dp",
    "log2_cp",
    "log2_ep",
    "log2_vpp",
    "log2_seq",
    "log2_micro_batch",
    "log10_params",
    "moe",
    "log2_num_gpus",
    "pred_mfu",
)
FEATURE_SCHEMA_VERSION = "1"


def features(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, est: Estimate
) -> np.ndarray:
    """The feature vector (FEATURE_NAMES order) of one configuration and its analytical estimate."""
    t = est.time
    total = t.total or 1.0
    shares = [getattr(t, p) / total for p in TIME_PARTS]
    shares[0] = (t.compute - t.recompute) / total  # compute share without the recompute part
    s = (est.strategy or strategy).with_dp(cluster.num_gpus)  # unset knobs as the estimate completed them
    fam = cluster.gpu.family.lower()
    fam_onehot = [1.0 if fam == f else 0.0 for f in GPU_FAMILIES]
    peak = cluster.gpu.peak_flops(workload.precision)
    gemm_tokens = s.micro_batch * workload.seq_len / s.cp
    return np.array(
        [
            *shares,
            math.log2(gemm_tokens),
            math.log2(model.hidden / s.tp),
            *fam_onehot,
            0.0 if any(fam_onehot) else 1.0,
            math.log2(peak / 1e12),
            1.0 if workload.precision == "fp8" else 0.0,
            1.0 if s.recompute == "selective" else 0.0,
            1.0 if s.recompute == "full" else 0.0,
            float(s.zero),
            1.0 if s.sp else 0.0,
            math.log2(s.tp),
            math.log2(s.pp),
            math.log2(max(s.dp, 1)),
            math.log2(s.cp),
            math.log2(s.ep),
            math.log2(s.vpp),
            math.log2(workload.seq_len),
            math.log2(s.micro_batch),
            math.log10(model.total_params),
            1.0 if model.is_moe else 0.0,
            math.log2(cluster.num_gpus),
            est.mfu,
        ],
        dtype=float,
    )


MEMORY_PARTS = ("weights", "grads", "optimizer", "activations", "logits", "buffers", "overhead")
MEMORY_FEATURE_NAMES: tuple[str, ...] = (
    *FEATURE_NAMES,
    *(f"mem_share_{p}" for p in MEMORY_PARTS),
    "log2_capacity_gib",
    "pred_mem_fraction",
)


def memory_features(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, strategy: Strategy, est: Estimate
) -> np.ndarray:
    """Throughput features plus the memory breakdown shares and capacity (MEMORY_FEATURE_NAMES order)."""
    mem = est.memory
    total = mem.total or 1.0
    extra = [getattr(mem, p) / total for p in MEMORY_PARTS]
    extra += [math.log2(est.capacity_bytes / GiB), mem.total / est.capacity_bytes]
    return np.concatenate([features(model, cluster, workload, strategy, est), np.array(extra, dtype=float)])


@dataclass
class TrainingSet:
    """Features X, target y = log(measured/predicted), and per-row context; target is
    'throughput' (tokens/s per GPU) or 'memory' (peak GiB per GPU)."""

    X: np.ndarray
    y: np.ndarray
    ids: list[str]
    sources: list[str]
    gpus: list[str]
    families: list[str]
    measured: np.ndarray  # tokens/s per GPU, or GiB per GPU
    predicted: np.ndarray  # the analytical model's figure in the same unit
    how: list[str]  # how the measurement was obtained (measured, step time, TFLOP/s)
    skipped: list[tuple[str, str]]  # (id, reason) of records that could not be used
    target: str = "throughput"

    def __len__(self) -> int:
        return len(self.y)


def record_features(rec: Mapping[str, Any], target: str = "throughput") -> tuple[np.ndarray, Estimate, str]:
    """Features, analytical estimate and GPU family of one run record (raises AutoparError if unusable)."""
    sp = row_to_specs(rec)
    est = estimate(sp.model, sp.cluster, sp.workload, sp.strategy, strict=False)
    fn = memory_features if target == "memory" else features
    return fn(sp.model, sp.cluster, sp.workload, sp.strategy, est), est, sp.cluster.gpu.family


def _measured(rec: Mapping[str, Any], target: str) -> tuple[float | None, str]:
    """The measurement a target learns from: tokens/s per GPU, or peak memory in GiB per GPU."""
    if target == "throughput":
        return measured_tokens_per_s_per_gpu(rec)
    try:
        v = float(rec.get("measured_mem_gb_per_gpu") or "nan")
    except (TypeError, ValueError):
        return None, "none"
    return (v, "measured") if v > 0 else (None, "none")


def build_training_set(records: Sequence[Mapping[str, Any]], target: str = "throughput") -> TrainingSet:
    """Features and log-ratio targets of every usable record (records without the measurement skipped).

    Memory: measured_mem_gb_per_gpu is read as GiB (what torchtitan and autopar's log parsers report).
    """
    if target not in ("throughput", "memory"):
        raise ValueError(f"target={target!r} must be 'throughput' or 'memory'")
    xs: list[np.ndarray] = []
    ys: list[float] = []
    meta: dict[str, list[Any]] = {
        k: [] for k in ("ids", "sources", "gpus", "families", "meas", "pred", "how")
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
            x, est, family = record_features(rec, target)
        except (AutoparError, ValueError, ZeroDivisionError) as e:
            skipped.append((rid, " ".join(str(e).split())[:200]))
            continue
        pred = est.tokens_per_s_per_gpu if target == "throughput" else est.memory.total / GiB
        if not pred > 0:
            skipped.append((rid, f"the analytical model predicts no {target}"))
            continue
        xs.append(x)
        ys.append(math.log(meas / pred))
        for k, v in (
            ("ids", rid),
            ("sources", str(rec.get("source") or "unknown")),
            ("gpus", str(rec.get("gpu"))),
            ("families", family),
            ("meas", meas),
            ("pred", pred),
            ("how", how),
        ):
            meta[k].append(v)
    names = MEMORY_FEATURE_NAMES if target == "memory" else FEATURE_NAMES
    X = np.vstack(xs) if xs else np.empty((0, len(names)))
    return TrainingSet(
        X=X,
        y=np.array(ys, dtype=float),
        ids=meta["ids"],
        sources=meta["sources"],
        gpus=meta["gpus"],
        families=meta["families"],
        measured=np.array(meta["meas"], dtype=float),
        predicted=np.array(meta["pred"], dtype=float),
        how=meta["how"],
        skipped=skipped,
        target=target,
    )
