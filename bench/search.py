"""Search benchmark: NSGA-II front quality vs the exhaustive oracle, and speed.

For each problem: space size, exhaustive front (size, hypervolume, wall time), NSGA-II hypervolume
ratio at budgets 100/300/1000 (mean and min over 5 seeds) with wall time, and raw estimator speed.
Hypervolumes use the exhaustive front's ideal/nadir to scale each objective to [0, 1] (maximised
objectives negated) and the reference point 1.1 in every objective.

Targets (reported, not asserted): estimator >= 20,000 strategies/s; exhaustive 100k space < 10 s;
`autopar optimize --budget 1000` for a 70B model on 1024 GPUs < 10 s end to end; HV ratio >= 0.98 at
budget 300 on the 70B problem.

Run: .venv/bin/python bench/search.py [--quick] [--seeds 5] [--json out.json]
Quality: .venv/bin/python bench/search.py --quality [--before] [--json out.json]
  (at default settings, per problem including the two procurement ones: hypervolume ratio to the exact
  front, or to the stored reference front where exhaustive is infeasible, gap of the best point per
  objective, wall time and peak memory; --before adds the old default, NSGA-II at budget 600)
Speed: .venv/bin/python bench/search.py --speed [--baseline-ref REF] [--repeat 3] [--json out.json]
  (issue 15: start-up, trials/s, exhaustive strategies/s, batch rows/s and the time split, before -> after;
  bench/speed.py)
Workers: .venv/bin/python bench/search.py --workers-only [--workers-budget 2000] [--postgres auto|URL]
  (trials/s of a calibrated search on memory, journal, SQLite and PostgreSQL with 1, 2 and 4 workers)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autopar.catalog import get_gpu, get_model  # noqa: E402
from autopar.objectives import parse_objectives  # noqa: E402
from autopar.perf import estimate, validate_strategy  # noqa: E402
from autopar.search import build_space, optimize  # noqa: E402
from autopar.search.pareto import normalized_hypervolume, pareto_records, reference_bounds, to_min_matrix  # noqa: E402
from autopar.specs import ClusterSpec, Workload  # noqa: E402

PROBLEMS: list[dict[str, Any]] = [
    {
        "name": "Llama-3.1-8B / 8x H100-SXM",
        "model": "Llama-3.1-8B",
        "gpu": "H100-SXM",
        "gpus": 8,
        "seq": 8192,
        "batch": 128,
    },
    {
        "name": "Llama-3.1-70B / 64x H100-SXM",
        "model": "Llama-3.1-70B",
        "gpu": "H100-SXM",
        "gpus": 64,
        "seq": 8192,
        "batch": 512,
    },
    {
        "name": "Mixtral-8x7B / 256x H100-SXM",
        "model": "Mixtral-8x7B",
        "gpu": "H100-SXM",
        "gpus": 256,
        "seq": 4096,
        "batch": 1024,
    },
    {
        "name": "Llama-3.1-70B / 64..512x H100-SXM,H200 (hardware searched)",
        "model": "Llama-3.1-70B",
        "gpu": ["H100-SXM", "H200"],
        "gpus": [64, 128, 256, 512],
        "seq": 8192,
        "batch": 512,
    },
]
PROCUREMENT_GPUS = ["H100-SXM", "H200", "B200", "GB200", "MI300X"]
PROCUREMENT_COUNTS = [64, 128, 256, 512, 1024, 2048, 4096]
# Procurement what-ifs: too large for an exhaustive run per benchmark, so they are compared with a front
# computed once offline (bench/reference.py, stored in bench/data/ with the command that made it).
PROCUREMENT: list[dict[str, Any]] = [
    {
        "name": "Llama-3.1-405B / 64..4096x 5 GPU types (procurement)",
        "model": "Llama-3.1-405B",
        "gpu": PROCUREMENT_GPUS,
        "gpus": PROCUREMENT_COUNTS,
        "seq": 8192,
        "batch": 2048,
        "reference": "reference_llama405b.json",
    },
    {
        "name": "DeepSeek-V3 / 64..4096x 5 GPU types (procurement)",
        "model": "DeepSeek-V3",
        "gpu": PROCUREMENT_GPUS,
        "gpus": PROCUREMENT_COUNTS,
        "seq": 4096,
        "batch": 2048,
        "reference": "reference_deepseek_v3.json",
    },
]
OBJECTIVES = ("throughput", "headroom", "cost")


def _problem(p: dict[str, Any]) -> tuple[Any, list[ClusterSpec], Workload]:
    gpus = p["gpu"] if isinstance(p["gpu"], list) else [p["gpu"]]
    counts = p["gpus"] if isinstance(p["gpus"], list) else [p["gpus"]]
    clusters = [ClusterSpec(gpu=get_gpu(g), num_gpus=n) for g in gpus for n in counts]
    return get_model(p["model"]), clusters, Workload(seq_len=p["seq"], global_batch=p["batch"])


def estimator_speed(model: Any, clusters: list[ClusterSpec], wl: Workload, n: int = 5000) -> float:
    """Raw validate+estimate calls per second over the first n points of the space."""
    space = build_space(model, clusters, wl)
    pts = []
    for pt in space:
        pts.append(pt)
        if len(pts) >= n:
            break
    t = time.perf_counter()
    for pt in pts:
        hw = space.hardware[pt.hw]
        if not validate_strategy(model, hw.cluster, hw.workload, pt.strategy):
            estimate(model, hw.cluster, hw.workload, pt.strategy, check=False)
    return len(pts) / (time.perf_counter() - t)


def run_problem(p: dict[str, Any], budgets: list[int], seeds: int) -> dict[str, Any]:
    """Exhaustive oracle, then NSGA-II at each budget over `seeds` seeds."""
    model, clusters, wl = _problem(p)
    objs = parse_objectives(list(OBJECTIVES))
    t = time.perf_counter()
    ex = optimize(model, clusters, wl, sampler="exhaustive", objectives=OBJECTIVES)
    ex_s = time.perf_counter() - t
    ex_front = pareto_records(ex.trials, objs)
    F = to_min_matrix(ex_front, objs)
    ideal, nadir = reference_bounds(F)
    hv_ex = normalized_hypervolume(F, ideal, nadir)
    out: dict[str, Any] = {
        "problem": p["name"],
        "space_size": ex.space_size,
        "space_valid": ex.space_valid,
        "feasible": ex.n_feasible,
        "exhaustive_front": len(ex_front),
        "exhaustive_hv": hv_ex,
        "exhaustive_s": ex_s,
        "exhaustive_evals_per_s": ex.stats["evals_per_s"],
        "estimator_per_s": estimator_speed(model, clusters, wl),
        "nsga2": {},
    }
    for b in budgets:
        ratios, walls, fronts = [], [], []
        for seed in range(seeds):
            t = time.perf_counter()
            r = optimize(model, clusters, wl, budget=b, seed=seed, objectives=OBJECTIVES, sampler="nsga2")
            walls.append(time.perf_counter() - t)
            front = pareto_records(r.trials, objs)
            ratios.append(
                normalized_hypervolume(to_min_matrix(front, objs), ideal, nadir) / hv_ex if hv_ex else 0.0
            )
            fronts.append(len(front))
        out["nsga2"][b] = {
            "hv_ratio_mean": statistics.mean(ratios),
            "hv_ratio_min": min(ratios),
            "wall_s_mean": statistics.mean(walls),
            "front_mean": statistics.mean(fronts),
        }
    # Ablation: plain NSGA-II (no Pareto local search) at budget 300.
    plain = []
    for seed in range(seeds):
        r = optimize(
            model,
            clusters,
            wl,
            budget=300,
            seed=seed,
            objectives=OBJECTIVES,
            local_search=0.0,
            sampler="nsga2",
        )
        front = pareto_records(r.trials, objs)
        plain.append(
            normalized_hypervolume(to_min_matrix(front, objs), ideal, nadir) / hv_ex if hv_ex else 0.0
        )
    out["plain_nsga2_300"] = statistics.mean(plain)
    return out


def storage_speed(budget: int = 150) -> dict[str, float]:
    """Optuna trials per second on the 8B problem: in memory, journal file, SQLite."""
    model, clusters, wl = _problem(PROBLEMS[0])
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, storage in (
            ("memory", None),
            ("journal", f"{d}/s.journal"),
            ("sqlite", f"sqlite:///{d}/s.db"),
        ):
            t = time.perf_counter()
            r = optimize(model, clusters, wl, budget=budget, seed=0, storage=storage, sampler="nsga2")
            out[name] = r.stats["optuna_trials"] / (time.perf_counter() - t)
    return out


def stored_run_overhead(budget: int = 300) -> dict[str, float]:
    """Seconds for one calibrated 300-trial search of the 70B/64-GPU problem, by storage (issue 13)."""
    from autopar.calibration.apply import load_default_calibration

    model, clusters, wl = _problem(PROBLEMS[1])
    cal = load_default_calibration()
    optimize(model, clusters, wl, budget=20, calibration=cal, sampler="nsga2")  # warm caches and imports
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, storage in (
            ("memory", None),
            ("journal", f"{d}/s.journal"),
            ("sqlite", f"sqlite:///{d}/s.db"),
        ):
            t = time.perf_counter()
            optimize(
                model,
                clusters,
                wl,
                budget=budget,
                seed=0,
                storage=storage,
                sampler="nsga2",
                calibration=cal,
                min_headroom_gib=2.0,
            )
            out[name] = time.perf_counter() - t
    return out


def workers_speed(budget: int, postgres: str | None, kinds: set[str] | None = None) -> list[dict[str, Any]]:
    """Trials/s of a `budget`-trial calibrated search (70B, hardware searched) by storage and workers.

    Every configuration starts a fresh study and ends when it holds `budget` COMPLETE trials (the
    wall time includes worker start-up and reading the study back); HV is the front's normalized
    hypervolume on common bounds (all configurations' feasible trials).
    """
    from autopar.calibration.apply import load_default_calibration
    from autopar.search.workers import run_workers

    model, clusters, wl = _problem(PROBLEMS[3])
    cal = load_default_calibration()
    objs = parse_objectives(list(OBJECTIVES))
    configs: list[tuple[str, Any, int]] = [("memory", None, 1)]
    with tempfile.TemporaryDirectory() as d:
        configs += [("journal", f"{d}/j{k}.journal", k) for k in (1, 2, 4)]
        configs += [("sqlite", f"sqlite:///{d}/s{k}.db", k) for k in (1, 2, 4)]
        pg_ctx: Any = contextlib.nullcontext(postgres)
        if postgres == "auto":
            sys.path.insert(0, str(ROOT / "tests"))
            from pgserver import postgres_server

            pg_ctx = postgres_server()
        with pg_ctx as url:
            if url:
                configs += [("postgresql", url, k) for k in (1, 2, 4)]
            rows, results = [], []
            configs = [c for c in configs if kinds is None or c[0] in kinds]
            for i, (kind, storage, k) in enumerate(configs):
                kw = dict(
                    model=model,
                    clusters=clusters,
                    workload=wl,
                    budget=budget,
                    seed=0,
                    calibration=cal,
                    sampler="nsga2",
                )
                kw.update(storage=storage, min_headroom_gib=2.0)
                if storage is not None:
                    kw["study_name"] = f"bench-{i}"
                t = time.perf_counter()
                r = run_workers(k, kw)
                wall = time.perf_counter() - t
                complete = r.stats.get("study_states", {}).get("COMPLETE", r.stats["evaluated"])
                rows.append({"storage": kind, "workers": k, "complete": complete, "wall_s": wall,
                             "trials_per_s": complete / wall})  # fmt: skip
                results.append(r)
                print(
                    f"  {kind:>10} x{k}: {complete} COMPLETE in {wall:.1f} s = {complete / wall:.1f} trials/s",
                    flush=True,
                )
    feas = [t for r in results for t in r.trials if t.feasible]
    ideal, nadir = reference_bounds(to_min_matrix(feas, objs))
    for row, r in zip(rows, results, strict=True):
        row["hv"] = normalized_hypervolume(to_min_matrix(pareto_records(r.trials, objs), objs), ideal, nadir)
    return rows


def cli_end_to_end() -> float:
    """Wall time of `autopar optimize --budget 1000` for Llama-3.1-70B on 1024 H100s, start-up included."""
    cmd = [
        sys.executable,
        "-m",
        "autopar",
        "optimize",
        "--model",
        "Llama-3.1-70B",
        "--gpu",
        "H100-SXM",
        "--gpus",
        "1024",
        "--seq-len",
        "8192",
        "--global-batch",
        "512",
        "--budget",
        "1000",
        "--json",
    ]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t


def _one_search(p: dict[str, Any], kw: dict[str, Any], out: Any) -> None:
    """In a fresh process: one search of a problem; its front (minimised), wall time and peak RSS."""
    import resource

    model, clusters, wl = _problem(p)
    objs = parse_objectives(list(OBJECTIVES))
    t = time.perf_counter()
    r = optimize(model, clusters, wl, objectives=OBJECTIVES, **kw)
    wall = time.perf_counter() - t
    F = to_min_matrix(pareto_records(r.trials, objs), objs)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    out.put({"F": F.tolist(), "wall_s": wall, "peak_mib": rss, "sampler": r.sampler, "size": r.space_size})


def _isolated(p: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """`_one_search` in a spawned process, so peak memory is that search's alone (imports included)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_one_search, args=(p, kw, q))
    proc.start()
    res = q.get()
    proc.join()
    return res


def _exact_front(p: dict[str, Any]) -> tuple[Any, str]:
    """The exact front of a problem (minimised rows): swept now, or the stored offline reference."""
    import numpy as np

    if "reference" in p:
        ref = json.loads((ROOT / "bench" / "data" / p["reference"]).read_text())
        return np.array(ref["front_min"]), f"reference ({ref['command']})"
    model, clusters, wl = _problem(p)
    objs = parse_objectives(list(OBJECTIVES))
    ex = optimize(model, clusters, wl, sampler="exhaustive", objectives=OBJECTIVES)
    return to_min_matrix(pareto_records(ex.trials, objs), objs), "exhaustive"


def quality_row(p: dict[str, Any], kw: dict[str, Any], exact: Any) -> dict[str, Any]:
    """HV ratio to the exact front, gap of the best point per objective (% worse), wall s, peak MiB."""
    import numpy as np

    res = _isolated(p, kw)
    F = np.array(res["F"]).reshape(-1, len(OBJECTIVES))
    ideal, nadir = reference_bounds(exact)
    hv = normalized_hypervolume(exact, ideal, nadir)
    best, got = exact.min(axis=0), F.min(axis=0) if len(F) else np.full(len(OBJECTIVES), np.inf)
    gaps = {o: float(100 * (g - b) / abs(b)) for o, b, g in zip(OBJECTIVES, best, got, strict=True)}
    return {"problem": p["name"], "points": res["size"], "method": res["sampler"],
            "hv_ratio": normalized_hypervolume(F, ideal, nadir) / hv, "gap_pct": gaps,
            "wall_s": res["wall_s"], "peak_mib": res["peak_mib"]}  # fmt: skip


def quality(before: bool) -> list[dict[str, Any]]:
    """The quality table at default settings (and, with `before`, at the old default NSGA-II/600)."""
    rows = []
    print(
        "| problem | points | search | HV ratio | best gap: throughput / headroom / cost | wall s | peak MiB |"
    )
    print("|---|---:|---|---:|---|---:|---:|")
    for p in [*PROBLEMS, *PROCUREMENT]:
        if "reference" in p and not (ROOT / "bench" / "data" / p["reference"]).exists():
            print(f"| {p['name']} | reference front missing: run bench/reference.py |")
            continue
        exact, source = _exact_front(p)
        runs = [("default", {})] + ([("nsga2-600 (old default)", {"sampler": "nsga2"})] if before else [])
        for label, kw in runs:
            r = quality_row(p, kw, exact)
            r.update(setting=label, exact=source)
            rows.append(r)
            g = r["gap_pct"]
            print(
                f"| {p['name']} | {r['points']:,} | {label}: {r['method']} | {r['hv_ratio']:.4f} | "
                f"{g['throughput']:.2f}% / {g['headroom']:.2f}% / {g['cost']:.2f}% | {r['wall_s']:.1f} | "
                f"{r['peak_mib']:.0f} |",
                flush=True,
            )
    return rows


def main() -> None:
    """Run the benchmark and print a table (optionally write JSON)."""
    if "--speed" in sys.argv[1:]:  # issue 15: the speed table before -> after (bench/speed.py)
        sys.path.insert(0, str(ROOT / "bench"))
        import speed

        speed.main([a for a in sys.argv[1:] if a != "--speed"])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 seeds, budgets 100/300, first two problems")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--workers-only",
        action="store_true",
        help="only the storage/worker table: trials/s of a --workers-budget calibrated search",
    )
    ap.add_argument("--workers-budget", type=int, default=2000)
    ap.add_argument("--storages", default=None, help="comma list of memory,journal,sqlite,postgresql (all)")
    ap.add_argument(
        "--postgres",
        default=None,
        help="postgresql:// URL for the worker table, or 'auto' to start a throw-away local server",
    )
    ap.add_argument("--quality", action="store_true", help="only the quality table at default settings")
    ap.add_argument("--before", action="store_true", help="with --quality: also the old default (NSGA-II)")
    args = ap.parse_args()
    if args.quality:
        rows = quality(args.before)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
        return
    if args.workers_only:
        if not args.storages:
            print(f"stored 300-trial calibrated search (70B, 64 GPUs), seconds: {stored_run_overhead()}")
        print(
            f"{args.workers_budget}-trial calibrated search (70B, 64..512 H100/H200), by storage and workers:"
        )
        kinds = set(args.storages.split(",")) if args.storages else None
        rows = workers_speed(args.workers_budget, args.postgres, kinds)
        print("| storage | workers | COMPLETE | wall s | trials/s | HV |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['storage']} | {r['workers']} | {r['complete']} | {r['wall_s']:.1f} | "
                f"{r['trials_per_s']:.1f} | {r['hv']:.4f} |"
            )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
        return
    budgets = [100, 300] if args.quick else [100, 300, 1000]
    seeds = 2 if args.quick else args.seeds
    problems = PROBLEMS[:2] if args.quick else PROBLEMS
    results = []
    for p in problems:
        r = run_problem(p, budgets, seeds)
        results.append(r)
        print(f"\n== {r['problem']}")
        print(
            f"space {r['space_size']:,} combinations, {r['space_valid']:,} valid, {r['feasible']:,} feasible; "
            f"exhaustive front {r['exhaustive_front']} points, HV {r['exhaustive_hv']:.4f}, "
            f"{r['exhaustive_s']:.2f} s ({r['exhaustive_evals_per_s']:,.0f} points/s); "
            f"estimator {r['estimator_per_s']:,.0f} strategies/s"
        )
        for b, v in r["nsga2"].items():
            print(
                f"  NSGA-II budget {b:>5}: HV ratio mean {v['hv_ratio_mean']:.4f} (min {v['hv_ratio_min']:.4f}) "
                f"over {seeds} seeds, front {v['front_mean']:.1f}, {v['wall_s_mean']:.2f} s"
            )
        print(f"  plain NSGA-II (no local search), budget 300: HV ratio mean {r['plain_nsga2_300']:.4f}")
    e2e = cli_end_to_end()
    print(f"\nCLI end to end, 70B on 1024 GPUs, budget 1000: {e2e:.2f} s (target < 10 s)")
    store = storage_speed()
    print(
        "Optuna trials/s by storage (8B problem, budget 150): "
        + ", ".join(f"{k} {v:,.0f}" for k, v in store.items())
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"problems": results, "cli_e2e_s": e2e, "storage_trials_per_s": store}, indent=2, default=str
            )
        )


if __name__ == "__main__":
    main()
