"""Vectorized estimator benchmark: strategies/s of the scalar exhaustive path vs the vector path (issue 15).

For each problem: space size; (a) the scalar path, `Evaluator.evaluate_many` (rules -> estimate ->
objectives, no calibration) over `Space` iteration in batches of --chunk points; (b) the vector path,
`perf.vector.estimate_columns` over `Space.column_blocks(--chunk)` (column generation included); their
ratio; and the vector pass's peak traced memory (tracemalloc, a separate untimed pass) at --chunk and at 8x
--chunk, to show that memory follows the chunk, not the space. Both timed passes start from a cold
per-layer-cost cache (perf_context cleared). Space building is timed separately and excluded.

Target (reported, not asserted): >= 100,000 strategies/s on the 70B/64 and Mixtral problems.

Run: .venv/bin/python bench/vector.py [--chunk 8192] [--scalar-max N] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autopar.catalog import get_gpu, get_model  # noqa: E402
from autopar.perf.context import clear_perf_contexts  # noqa: E402
from autopar.perf.vector import estimate_columns  # noqa: E402
from autopar.search import build_space  # noqa: E402
from autopar.search.evaluate import Evaluator  # noqa: E402
from autopar.search.space import Space  # noqa: E402
from autopar.specs import ClusterSpec, ModelSpec, Workload  # noqa: E402

PROBLEMS: list[dict[str, Any]] = [
    {"name": "Llama-3.1-70B / 64x H100-SXM", "model": "Llama-3.1-70B", "gpu": "H100-SXM", "gpus": 64,
     "workload": {"seq_len": 8192, "global_batch": 512}},
    {"name": "Mixtral-8x7B / 256x H100-SXM", "model": "Mixtral-8x7B", "gpu": "H100-SXM", "gpus": 256,
     "workload": {"seq_len": 4096, "global_batch": 1024}},
    {"name": "DeepSeek-V3 / 256x H100-SXM", "model": "DeepSeek-V3", "gpu": "H100-SXM", "gpus": 256,
     "workload": {"seq_len": 4096, "global_batch": 1024}},
    {"name": "Llama-3.1-8B seq 128k / 64x H100-SXM", "model": "Llama-3.1-8B", "gpu": "H100-SXM", "gpus": 64,
     "workload": {"seq_len": 131072, "global_batch": 64}},
    {"name": "Llama-3.1-70B fp8 / 64x B200", "model": "Llama-3.1-70B", "gpu": "B200", "gpus": 64,
     "workload": {"seq_len": 8192, "global_batch": 512, "precision": "fp8"}},
]  # fmt: skip


def _problem(p: dict[str, Any]) -> tuple[ModelSpec, Space, float]:
    """The model, its space and the seconds the space took to build."""
    m = get_model(p["model"])
    c = ClusterSpec(gpu=get_gpu(p["gpu"]), num_gpus=p["gpus"])
    t0 = time.perf_counter()
    space = build_space(m, c, Workload(**p["workload"]))
    return m, space, time.perf_counter() - t0


def scalar_rate(m: ModelSpec, space: Space, chunk: int, limit: int | None) -> tuple[float, int]:
    """(strategies/s, points) of Evaluator.evaluate_many over the space's iteration (the first `limit` points
    of an evenly strided walk when limit < size)."""
    clear_perf_contexts()
    ev = Evaluator(m, space.hardware, prices=[2.0] * len(space.hardware))
    step = max(1, space.size // limit) if limit else 1
    points = itertools.islice(space, 0, None, step)
    done = 0
    t0 = time.perf_counter()
    while batch := list(itertools.islice(points, chunk)):
        done += len(ev.evaluate_many(batch))
    return done / (time.perf_counter() - t0), done


def vector_pass(m: ModelSpec, space: Space, chunk: int) -> tuple[int, int]:
    """(rows estimated, rows that fell back to the scalar estimate) over the whole space."""
    rows = fallback = 0
    for blk in space.column_blocks(chunk):
        hw = space.hardware[blk.hw]
        v = estimate_columns(m, hw.cluster, hw.workload, blk.columns)
        rows, fallback = rows + len(v), fallback + v.n_fallback
    return rows, fallback


def vector_rate(m: ModelSpec, space: Space, chunk: int) -> tuple[float, int]:
    """(strategies/s, fallback rows) of the vector path, from a cold per-layer-cost cache."""
    clear_perf_contexts()
    t0 = time.perf_counter()
    rows, fallback = vector_pass(m, space, chunk)
    return rows / (time.perf_counter() - t0), fallback


def vector_peak_mib(m: ModelSpec, space: Space, chunk: int) -> float:
    """Peak traced allocation (MiB) above the start of a vector pass (untimed: tracemalloc slows Python)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    vector_pass(m, space, chunk)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak - base) / 2**20


def run(p: dict[str, Any], chunk: int, scalar_max: int | None) -> dict[str, Any]:
    m, space, build_s = _problem(p)
    limit = scalar_max if scalar_max and scalar_max < space.size else None
    s_rate, s_points = scalar_rate(m, space, chunk, limit)
    v_rate, fallback = vector_rate(m, space, chunk)
    return {
        "problem": p["name"],
        "space": space.size,
        "build_s": build_s,
        "scalar_per_s": s_rate,
        "scalar_points": s_points,
        "vector_per_s": v_rate,
        "ratio": v_rate / s_rate,
        "fallback": fallback,
        "peak_mib": vector_peak_mib(m, space, chunk),
        "peak_mib_8x": vector_peak_mib(m, space, 8 * chunk),
    }


def print_table(rows: list[dict[str, Any]], chunk: int) -> None:
    head = (
        f"{'problem':40} {'space':>8} {'build s':>7} {'scalar/s':>9} {'(points)':>9} {'vector/s':>10} "
        f"{'ratio':>6} {'fallbk':>6} {f'MiB@{chunk}':>9} {f'MiB@{8 * chunk}':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['problem']:40} {r['space']:>8,} {r['build_s']:>7.2f} {r['scalar_per_s']:>9,.0f} "
            f"{r['scalar_points']:>9,} {r['vector_per_s']:>10,.0f} {r['ratio']:>5.1f}x {r['fallback']:>6} "
            f"{r['peak_mib']:>9.1f} {r['peak_mib_8x']:>10.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=8192, help="rows per block (and points per scalar batch)")
    ap.add_argument("--scalar-max", type=int, default=None, help="time the scalar path on at most N points")
    ap.add_argument("--quick", action="store_true", help="first two problems, scalar on <= 20,000 points")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    problems = PROBLEMS[:2] if args.quick else PROBLEMS
    scalar_max = 20_000 if args.quick and args.scalar_max is None else args.scalar_max
    rows = []
    for p in problems:
        rows.append(run(p, args.chunk, scalar_max))
        print(f"done: {p['name']}", file=sys.stderr, flush=True)
    print_table(rows, args.chunk)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
