"""A dry-run's measurement against autopar's predictions, and the run record `autopar calibrate ingest` reads.

Two predictions: the slice that ran (its model, degrees and GPU count, estimated as a one-stage strategy) —
the like-for-like comparison —, and the full strategy's most loaded GPU (its memory is what decides whether
the real run fits). A GPU run's record describes the configuration actually run, so it is an ordinary run
record. A CPU run's record is a smoke record (`device` = cpu, `gpu` = cpu): ingest stores it without the GPU
checks and `calibrate fit`/`report` never learn from it (autopar/calibration/records/checks.py SMOKE_DEVICE).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from autopar.calibration.records.checks import SMOKE_DEVICE
from autopar.calibration.records.columns import arch_columns
from autopar.dryrun.plan import SlicePlan
from autopar.perf.estimate import estimate
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, GPUSpec, ModelSpec, Strategy, Workload
from autopar.units import GiB

SOURCE = "autopar-dryrun"  # the `source` of every record a dry-run writes


@dataclass(frozen=True)
class Measured:
    """What the ranks measured: median step time (slowest rank), peak memory (largest rank), loss."""

    step_s: float
    tokens_per_s_per_rank: float
    max_allocated_gib: float | None
    max_reserved_gib: float | None
    cpu_peak_rss_gib: float | None
    loss: float


def summarize(plan: SlicePlan, ranks: list[dict[str, Any]]) -> Measured:
    """One figure per quantity from every rank's result."""
    step = max(statistics.median(r["step_times_s"]) for r in ranks)

    def peak(key: str) -> float | None:
        vals = [r[key] for r in ranks if r.get(key) is not None]
        return max(vals) if vals else None

    tokens = plan.tokens_per_step / step / plan.degrees.world
    rss = peak("cpu_peak_rss_gib")
    return Measured(step, tokens, peak("max_allocated_gib"), peak("max_reserved_gib"), rss, ranks[0]["loss"])


def slice_problem(
    plan: SlicePlan, gpu: GPUSpec, framework: str
) -> tuple[ModelSpec, ClusterSpec, Workload, Strategy]:
    """The slice at the model's real shapes as autopar's estimate sees it: one host of `world` GPUs, bf16, no
    TP overlap (what a GPU run builds; a CPU run's tiny model has no GPU figure to compare with)."""
    seq, mb = plan.stage_seq_len, plan.stage_micro_batch
    gb = mb * plan.degrees.dp * plan.degrees.micro_batches
    cluster = ClusterSpec(gpu=gpu, num_gpus=plan.degrees.world, gpus_per_node=plan.degrees.world)
    workload = Workload(seq_len=seq, global_batch=gb, precision="bf16", framework=framework)
    strategy = plan.strategy().model_copy(update={"micro_batch": mb})
    return plan.stage_model, cluster, workload, strategy


def predict_slice(plan: SlicePlan, gpu: GPUSpec, framework: str) -> Estimate:
    return estimate(*slice_problem(plan, gpu, framework), strict=False)


def comparison(plan: SlicePlan, m: Measured, pred: Estimate, full: Estimate) -> list[dict[str, Any]]:
    """Rows of the table: quantity, predicted for the slice, measured, measured / predicted."""
    gpu_run = plan.device == "cuda"

    def row(name: str, predicted: float | None, measured: float | None) -> dict[str, Any]:
        ratio = measured / predicted if gpu_run and measured and predicted else None
        return {"quantity": name, "predicted": predicted, "measured": measured, "ratio": ratio}

    return [
        row("step time (s)", pred.step_time_s, m.step_s),
        row("tokens/s per GPU", pred.tokens_per_s_per_gpu, m.tokens_per_s_per_rank),
        row("peak memory (GiB; measured: max allocated)", pred.memory.total / GiB, m.max_allocated_gib),
        row("peak memory (GiB; measured: max reserved)", pred.memory.total / GiB, m.max_reserved_gib),
        row("CPU peak RSS per process (GiB)", None, m.cpu_peak_rss_gib),
        row("full strategy: most loaded GPU memory (GiB)", full.memory.total / GiB, None),
    ]


def record_model_name(plan: SlicePlan, model: ModelSpec) -> str:
    """The record's model name. Ingest takes activation, norm, tied embeddings and (MoE) the leading dense layers
    from a catalog model of that name, and layers and widths from the record; a stage whose leading dense layers
    differ from the model's (or a tiny model) gets a name of its own, so its architecture is read from the
    columns alone."""
    same_mix = plan.stage_model.dense_layers == model.dense_layers
    return model.name if same_mix and not plan.tiny else f"{model.name} dryrun-slice"


def run_record(
    plan: SlicePlan,
    m: Measured,
    *,
    model: ModelSpec,
    gpu: str | None,
    framework: str,
    label: str,
    torch: str,
) -> dict[str, Any]:
    """One run record of what ran (schema of autopar/calibration/records/columns.py RECORD_COLUMNS, plus extras)."""
    d, world = plan.degrees, plan.degrees.world
    rec: dict[str, Any] = {
        "source": SOURCE,
        "model": record_model_name(plan, model),
        **arch_columns(plan.model),
        "seq_len": plan.seq_len,
        "gpu": gpu if not plan.tiny else SMOKE_DEVICE,
        "num_gpus": world,
        "gpus_per_node": world,
        **{"tp": d.tp, "pp": 1, "dp": d.dp, "cp": d.cp, "ep": d.ep, "vpp": 1, "sp": int(d.sp)},
        "etp": 1 if plan.model.is_moe else None,
        "zero": d.zero,
        "cpu_offloading_num_layers": 0,
        "recompute": d.recompute,
        "micro_batch": plan.micro_batch,
        "global_batch": plan.global_batch,
        "precision": "bf16",
        "framework": f"autopar-dryrun torch {torch} ({framework} profile)",
        "measured_tokens_per_s_per_gpu": m.tokens_per_s_per_rank,
        "measured_step_s": m.step_s,
        "measured_mem_gb_per_gpu": m.max_reserved_gib,  # GiB, max reserved: what ingest reads (as torchtitan's)
        "notes": f"dry-run slice of '{label}' (stage {plan.stage}); " + "; ".join(plan.notes),
    }
    if plan.tiny:
        rec["device"] = SMOKE_DEVICE
        rec["cpu_peak_rss_gib"] = m.cpu_peak_rss_gib
    return rec


RECORD_SUFFIXES = (".csv", ".jsonl", ".json")


def record_text(rec: dict[str, Any], suffix: str) -> str:
    """The record as a one-row CSV (header + row; text cells a spreadsheet will not run) or one JSON line."""
    import csv
    import io

    from autopar.errors import DataError
    from autopar.text import csv_cell, json_text

    if suffix in (".jsonl", ".json"):
        return json_text(rec) + "\n"
    if suffix != ".csv":
        raise DataError(f"--record: unsupported extension '{suffix}' (use {', '.join(RECORD_SUFFIXES)})")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rec), lineterminator="\n")
    w.writeheader()
    w.writerow({k: "" if v is None else csv_cell(v) for k, v in rec.items()})
    return buf.getvalue()
