"""Every measured run of a tune goes into the calibration store (autopar/calibration/store/run_store.py), tagged with
the cluster (`cluster` column: the group whose offset `calibrate fit` learns), so `autopar calibrate fit`
and the next `optimize --calibration` on that cluster start from what the tune learned. Records are written
as a run-record file in the run's folder and ingested through the same validation as `calibrate ingest`
(atomic, idempotent: a resumed tune adds nothing twice)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autopar.calibration.records.columns import arch_columns
from autopar.layouts import Axis
from autopar.tune.candidates import Candidate
from autopar.tune.runners.base import Outcome

SOURCE = "autopar-tune"
_DEGREES = tuple(a.value for a in (Axis.TP, Axis.PP, Axis.DP, Axis.CP, Axis.EP, Axis.VPP))


def run_record(c: Candidate, o: Outcome, run_id: str, cluster_tag: str) -> dict[str, Any]:
    """The run record of a measured run (schema of autopar/calibration/records/columns.py)."""
    s = c.strategy
    return {
        "id": run_id,
        "source": SOURCE,
        "cluster": cluster_tag,
        "model": c.model.name,
        **arch_columns(c.model),
        "seq_len": c.workload.seq_len,
        "gpu": c.cluster.gpu.name,
        "num_gpus": c.num_gpus,
        "gpus_per_node": c.cluster.host_size,
        **{k: getattr(s, k) for k in (*_DEGREES, "zero", "micro_batch")},
        Axis.ETP.value: s.etp if c.model.is_moe else None,
        "sp": int(bool(s.sp)),
        "recompute": s.recompute,
        "global_batch": c.workload.global_batch,
        "precision": c.workload.precision,
        "framework": c.workload.framework,
        "measured_tokens_per_s_per_gpu": o.tokens_per_s_per_gpu if o.status == "ok" else None,
        "measured_mem_gb_per_gpu": o.peak_mem_gib if o.status == "ok" else None,
        # an OOM is memory evidence too: the peak was over usable memory (calibration/models/features.py OOM_EVIDENCE)
        "measured_oom": "true" if o.status == "oom" else None,
        "notes": f"autopar tune run of '{c.label}'; {o.reason}",
    }


def store_run(
    store: str | None, c: Candidate, o: Outcome, run_dir: Path, run_id: str, cluster_tag: str
) -> int:
    """Ingest one measured run into the store; the number of records added (0 if it was there already). A
    dry-run ingests the record it wrote itself (a CPU one is a smoke record, never learned from)."""
    from autopar.calibration.ingest.ingest import ingest
    from autopar.calibration.store.run_store import RunStore

    if not (o.status == "ok" and o.tokens_per_s_per_gpu or o.status == "oom"):
        return 0
    own = run_dir / "record.jsonl"
    path = own if own.exists() and o.status == "ok" else run_dir / "tune-record.jsonl"
    if path != own:
        path.write_text(
            json.dumps(run_record(c, o, run_id, cluster_tag), default=str) + "\n", encoding="utf-8"
        )
    return ingest([path], RunStore(store), source=None).added
