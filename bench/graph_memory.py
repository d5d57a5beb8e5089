"""Full-iteration CUDA graphs on Megatron-Core MoE: which published fits and OOMs does autopar's memory model
reproduce, and which shapes of a graph-memory term could reproduce all of them?

Cited cases: Qwen3-30B-A3B, MXFP8, sequence 4096, global batch 512, EP8 ETP1, PP1, on 8 GPUs, run with
Megatron-Bridge's full-iteration helper (`_enable_hybridep_full_iteration_mxfp8`,
src/megatron/bridge/perf_recipes/qwen/common.py at Megatron-Bridge 067f987: cuda_graph_impl full_iteration,
HybridEP, MoE all-to-all overlap with delayed wgrad, paged stash with moe_expert_rank_capacity_factor 1.5 and
a CUDA stash at 1.2x, offload_modules = [], so no activation offload):
- OOM on 8x B200 (180 GB) at TP1/EP8 and TP2/EP8, micro-batch 4 and 2 (Megatron-Bridge PR #5356, commit
  9c0cd2575, "B200's 180 GB cannot hold the full-iteration graph ... OOMs at every workable config").
- Runs on 8x GB200 (186 GB) at TP1 mb4 (the same helper, perf_recipes/qwen/gb200/qwen3_moe.py; measured
  40,706 tokens/s/GPU, MBR-014), on 8x B300 at TP1 mb8 (perf_recipes/qwen/b300; MBR-015, and the reference
  run of Megatron-Bridge issue #4587 completes 50 steps) and on 8x GB300 at TP1 mb8 (MBR-013).

For each case: autopar's predicted free memory without any graph term. Then, for three shapes of an extra
term X, the interval of its one coefficient that every case allows (an OOM needs X > free, a run X < free):
  pool     X = k * (activations + logits)   (a second copy of the step's transients: a private pool that the
                                              eager allocator's cache cannot give back to)
  const    X = a                            (a fixed cost per GPU)
  step     X = t * tokens per GPU per step   (a cost each captured token leaves behind: blocks the capture
                                              cannot reuse, e.g. frees deferred by record_stream)
  per-mb   X = c * micro-batches per step    (a cost each captured micro-batch leaves behind)
An empty interval rules the shape out (given autopar's eager estimate). The key pair does not hang on that
estimate's per-token error: B200 (180 GB) OOMs at mb2 while GB200 (186 GB) runs mb4 at the same tokens per
step, so whatever the graph adds must grow when the micro-batch shrinks by more than the eager activations
and logits of 2 sequences shrink (autopar: 34 GiB; even the bf16 logits alone are 2.3 GiB per 2 sequences),
i.e. a cost per captured micro-batch, not per token. The Qwen3-235B full-iteration recipes that ran (OTHER_RUNS)
bound such a cost far lower (MBR-018 captures 256 micro-batches with 97 GiB free: under 0.4 GiB each), so it
could only be specific to PP=1 (Megatron's combined_1f1b_schedule_for_no_pipelining) or to B200. No mechanism
for it was found in the source read (full_cuda_graph.py, paged_stash.py, combined_1f1b.py at Megatron-LM
d98e8a6), so autopar models none.
Capacities are the catalog's (B300: 288 GB; Megatron-Bridge PR #5356 says 279 GB, which lowers its free by
about 8 GiB and binds nothing). Usage: python bench/graph_memory.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from recipes import load_problems  # noqa: E402

from autopar.perf import estimate  # noqa: E402

GiB = 2**30
PR_5356 = "Megatron-Bridge PR #5356 (commit 9c0cd2575)"


@dataclass(frozen=True)
class Case:
    """One published outcome of the full-iteration helper on Qwen3-30B-A3B, 8 GPUs."""

    row: str  # the recipe row whose problem (GPU, count, model, workload) the case runs on
    tp: int
    micro_batch: int
    fits: bool
    source: str


CASES = (
    Case("MBR-051", 1, 4, False, PR_5356),
    Case("MBR-051", 1, 2, False, PR_5356),
    Case("MBR-051", 2, 4, False, PR_5356),
    Case("MBR-051", 2, 2, False, PR_5356),
    Case("MBR-014", 1, 4, True, "MBR-014 (26.06, GB200, full_iteration preset), measured"),
    Case("MBR-015", 1, 8, True, "MBR-015 (26.06, B300, full_iteration preset), measured; Bridge issue #4587"),
    Case("MBR-013", 1, 8, True, "MBR-013 (26.06, GB300, full_iteration preset), measured"),
)

# Full-iteration recipes of another model that ran (Qwen3-235B-A22B, 26.06 container, records' notes:
# cuda_graph_impl=full_iteration): with pipelining they capture many more micro-batches per step.
OTHER_RUNS = ("MBR-017", "MBR-018")


def evaluate(case: Case) -> dict[str, float | str | bool]:
    """autopar's eager prediction for the case under the full-iteration helper's options."""
    (p,) = [q for q in load_problems(case.row) if q.row_id == case.row]
    wl = p.workload.model_copy(update={"cuda_graphs": True, "moe_ep_overlap": True, "moe_dispatcher": "flex"})
    dp = p.cluster.num_gpus // case.tp
    st = p.recipe.model_copy(
        update={
            "tp": case.tp,
            "sp": case.tp > 1,
            "dp": dp,
            "micro_batch": case.micro_batch,
            "activation_offload_layers": 0,
        }
    )
    e = estimate(p.model, p.cluster, wl, st, check=False)
    m = e.memory
    return {
        "case": f"{p.cluster.gpu.name} TP{case.tp} mb{case.micro_batch}",
        "fits": case.fits,
        "free": e.headroom_bytes / GiB,
        "act": (m.activations + m.logits) / GiB,
        "n_mb": wl.global_batch / (dp * case.micro_batch),
        "tok": wl.global_batch * wl.seq_len / dp / 1e6,
        "source": case.source,
    }


def recipe_run(row: str) -> dict[str, float | str | bool]:
    """A measured full-iteration recipe as published (its record's workload), for the bounds it sets."""
    (p,) = [q for q in load_problems(row) if q.row_id == row]
    e = estimate(p.model, p.cluster, p.workload, p.recipe, check=False)
    st = e.strategy or p.recipe
    m = e.memory
    return {
        "case": f"{p.model.name} {p.cluster.gpu.name} {st.label()}",
        "fits": True,
        "free": e.headroom_bytes / GiB,
        "act": (m.activations + m.logits) / GiB,
        "n_mb": p.workload.global_batch / (st.dp * (st.micro_batch or 1)),
        "source": f"{row}, measured",
    }


def interval(rows: list[dict], scale: str) -> tuple[float, float]:
    """The coefficient's allowed interval for X = coef * rows[scale] (scale 'one' is a constant)."""
    lo, hi = 0.0, float("inf")
    for r in rows:
        s = 1.0 if scale == "one" else float(r[scale])
        bound = float(r["free"]) / s
        if r["fits"]:
            hi = min(hi, bound)
        else:
            lo = max(lo, bound)
    return lo, hi


def main() -> int:
    rows = [evaluate(c) for c in CASES]
    print(
        f"{'case':22s} {'observed':8s} {'free GiB':>9s} {'act+logits':>10s} {'mb/step':>7s}  agrees  source"
    )
    for r in rows:
        agrees = (float(r["free"]) > 0) == r["fits"]
        obs = "runs" if r["fits"] else "OOM"
        print(
            f"{r['case']:22s} {obs:8s} {r['free']:9.1f} {r['act']:10.1f} {r['n_mb']:7.0f}  "
            f"{'yes' if agrees else 'NO':6s}  {r['source']}"
        )
    print("\nshape of a graph term X that every case allows (coefficient interval; empty = ruled out):")
    for name, scale, unit in (
        ("pool", "act", "x (act+logits)"),
        ("const", "one", "GiB"),
        ("step", "tok", "GiB per million tokens"),
        ("per-mb", "n_mb", "GiB"),
    ):
        lo, hi = interval(rows, scale)
        verdict = f"{lo:.2f} < coef < {hi:.2f} {unit}" if lo < hi else f"empty ({lo:.2f} > {hi:.2f})"
        print(f"  {name:7s} {verdict}")
    print(
        "\nfull-iteration recipes of Qwen3-235B-A22B that ran: the upper bound each sets on the coefficient"
    )
    for r in (recipe_run(x) for x in OTHER_RUNS):
        print(
            f"  {r['case']}: free {r['free']:.1f} GiB, {r['n_mb']:.0f} micro-batches per step -> "
            f"pool k < {float(r['free']) / float(r['act']):.2f}, per-mb c < {float(r['free']) / float(r['n_mb']):.2f} GiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
