"""`optimize`: build the space, run a search loop, assemble the SearchResult (Pareto set, notes, stats).

See autopar/search/loops.py for the NSGA-II and exhaustive loops and what the budget counts.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from typing import Any

from autopar.defaults import DEFAULT_BUDGET, DEFAULT_MIN_HEADROOM_GIB, DEFAULT_SAMPLER
from autopar.errors import AutoparError
from autopar.layouts import Axis
from autopar.objectives import Objective, parse_objectives
from autopar.search.constraints import Constraint
from autopar.search.evaluate import Evaluator, default_price_book, resolve_price
from autopar.search.evidence import evidence_of, recipe_beside, widen_records
from autopar.search.hybrid import EXACT_LIMIT, choose_method, run_auto, run_hybrid
from autopar.search.loops import LOCAL_SEARCH_SHARE, Run, fingerprint, run_exhaustive
from autopar.search.nsga2 import run_nsga2
from autopar.search.pareto import (
    normalized_hypervolume,
    pareto_records,
    pareto_rows,
    reference_bounds,
    to_min_matrix,
)
from autopar.search.recommend import no_fit_message, recommend
from autopar.search.result import SearchResult, TrialRecord
from autopar.search.space import Point, Space, build_space, make_strategy
from autopar.search.storage import mask
from autopar.search.sweep import can_sweep, run_sweep, sweepable
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import SECONDS_PER_DAY

SAMPLERS = ("auto", "nsga2", "exhaustive", "hybrid")  # auto: search/hybrid.py choose_method
EXACT_VALID_COUNT_LIMIT = 10_000  # above this the count of rule-valid points is estimated by sampling
VALID_COUNT_SAMPLES = 2_000


def count_valid(space: Space, ev: Evaluator, rng: random.Random) -> tuple[int, bool]:
    """How many points pass validate_strategy: all of them with the default rules (a Space holds only
    valid points); with other rules exact up to EXACT_VALID_COUNT_LIMIT, else sampled."""
    if ev.trusts_space:
        return space.size, True
    if space.size <= EXACT_VALID_COUNT_LIMIT:
        return sum(not ev.rules(pt) for pt in space), True
    n = VALID_COUNT_SAMPLES
    ok = sum(not ev.rules(space.sample(rng)) for _ in range(n))
    return round(space.size * ok / n), False


def _records(run: Run, space: Space) -> list[TrialRecord]:
    """One TrialRecord per distinct point (numbered by its first trial), invalid grids included."""
    recs = []
    for key, out in run.outcomes.items():
        pt, hw = run.points[key], space.hardware[run.points[key].hw]
        recs.append(
            TrialRecord(
                run.first_trial.get(key, -1),
                pt.strategy,
                hw.num_gpus,
                hw.gpu,
                hw.precision,
                out.estimate,
                dict(out.values),
                out.feasible,
                out.reason,
            )
        )
    h0, lay0 = space.hardware[0], space.layouts[0]
    for number, params, reason in run.invalid.values():
        knobs = {k: params.get(k, getattr(lay0, k)) for k in (Axis.TP, Axis.PP, Axis.CP, Axis.EP, Axis.ETP)}
        n = params.get("num_gpus", h0.num_gpus)
        knobs[Axis.DP] = max(1, n // (knobs[Axis.TP] * knobs[Axis.PP] * knobs[Axis.CP]))
        s = Strategy(
            **knobs, **{k: params[k] for k in ("sp", "zero", "micro_batch", "recompute") if k in params}
        )
        recs.append(
            TrialRecord(
                number,
                s,
                n,
                params.get("gpu", h0.gpu),
                params.get("precision", h0.precision),
                None,
                {},
                False,
                reason,
            )
        )
    recs.sort(key=lambda r: r.number)
    return recs


def _leanest(space: Space, ev: Evaluator) -> list[TrialRecord]:
    """Per layout, the least memory-hungry strategy (full recompute, ZeRO-3, smallest micro-batch, SP)."""
    out = []
    for lay in space.layouts:
        mb = min(m for m, _ in lay.mb_vpp)
        # its own pipeline split (uneven layouts have no even one) and its leanest memory savers
        s = make_strategy(
            lay, mb, 1, "1f1b", lay.sp[-1], 3, None, "full", lay.cp_comm[0], lay.split[0], lay.savers[-1]
        )
        o, hw = ev(Point(lay.hw, s)), space.hardware[lay.hw]
        out.append(
            TrialRecord(
                -1, s, hw.num_gpus, hw.gpu, hw.precision, o.estimate, dict(o.values), o.feasible, o.reason
            )
        )
    return out


def _notes(
    space: Space,
    objectives: Sequence[Objective],
    prices: list[tuple[float, str]],
    budget: int,
    sampler: str,
    run: Run,
) -> list[str]:
    names = [o.name for o in objectives]
    notes = list(space.skipped)
    if space.excluded:
        notes.append(
            f"search constrained by {space.excluded}: the space and its front hold only what they allow"
        )
    clusters = {(h.gpu, h.num_gpus) for h in space.hardware}
    if "cost" in names and len(clusters) == 1 and len({p for p, _ in prices}) == 1:
        gpu, n = next(iter(clusters))
        notes.append(
            f"cost collapses onto throughput: on one fixed cluster ({n}x {gpu} at "
            f"${prices[0][0]:.2f}/GPU-h) $/Mtoken = price x GPUs / throughput, so the cheapest "
            "point is the fastest; search GPU counts (--gpus 64..512) or types (--gpu A,B) "
            "to make cost a real trade-off"
        )
    for (_price, src), h in zip(prices, space.hardware, strict=True):
        if src.startswith("flat default"):
            notes.append(f"no price known for {h.gpu}: using the {src}")
    if sampler == "nsga2" and budget > space.size:
        seen = len(run.outcomes)  # distinct points of the space, as counted, never assumed
        what = "every point was evaluated" if seen >= space.size else f"{seen:,} of them were evaluated"
        notes.append(
            f"budget {budget:,} exceeds the space size {space.size:,}: {what}; --sampler exhaustive "
            "evaluates them all faster"
        )
    if run.timed_out:
        notes.append(f"stopped by --timeout after {run.n_evaluated} evaluations")
    if run.waited_out is not None:
        notes.append(
            f"stopped short of the budget: the study's last trials were held RUNNING by other clients and "
            f"none finished in {run.waited_out:.0f} s (their heartbeats were alive, so they are not stale); "
            "resume later, or fail them with Optuna"
        )
    if run.sweep is not None and run.sweep.get("method") == "hybrid":
        sw = run.sweep
        notes.append(
            f"hybrid search: NSGA-II over {sw['layouts'][0]:,} of {sw['layouts'][1]:,} layouts (hardware, "
            f"tp/pp/cp/ep), every other knob solved exactly on arrays ({sw['evaluated']:,} strategies); "
            f"the trial list keeps the front and a sample ({sw['kept']:,} records)"
        )
    elif run.sweep is not None:
        sw = run.sweep
        notes.append(
            f"exhaustive: {sw['evaluated']:,} strategies estimated on arrays; the trial list keeps the "
            f"front and one point in {sw['stride']} ({sw['kept']:,} records)"
        )
    failed = run.states.get("FAIL", 0)
    if failed:
        notes.append(
            f"{failed} trial(s) FAILED in the stored study (a worker stopped mid-trial); they hold no "
            "values and do not count toward the budget"
        )
    return notes


def optimize(
    model: ModelSpec,
    clusters: ClusterSpec | list[ClusterSpec],
    workload: Workload,
    *,
    budget: int = DEFAULT_BUDGET,
    objectives: Sequence[str] | str = ("throughput", "headroom", "cost"),
    seed: int = 0,
    sampler: str = DEFAULT_SAMPLER,
    storage: Any = None,
    study_name: str | None = None,
    timeout: float | None = None,
    min_headroom_gib: float = DEFAULT_MIN_HEADROOM_GIB,
    max_cost: float | None = None,
    precisions: list[str] | None = None,
    price_book: Any = None,
    tier: str = "on_demand",
    calibration: Any = None,
    progress: bool = False,
    local_search: float = LOCAL_SEARCH_SHARE,
    estimate_fn: Any = None,
    heartbeat_s: int | None = None,
    search: bool = True,
    stored_inputs: dict[str, Any] | None = None,
    constraints: Sequence[Constraint] = (),
) -> SearchResult:
    """Search parallelism strategies and return every trial, the Pareto set and recommendations.

    `budget` counts COMPLETE trials (distinct strategies with an estimate) in the study: with a
    shared `storage` that is every worker's trials together. `local_search` is the share of
    post-exploration trials spent on one-knob moves from the front (0 = plain NSGA-II).
    `heartbeat_s` sets the worker heartbeat on a database server; `search=False` only reads a
    stored study; `stored_inputs` (JSON) is kept in the study so `autopar study report` can rebuild
    the problem. `constraints` (autopar.search.constraints) filter the space's knob values (--fix/--forbid).
    `estimate_fn` replaces the analytical model (tests only).
    """
    t0 = time.perf_counter()
    if not search and storage is None:
        raise AutoparError("search=False needs a storage to read the study from")
    if sampler not in SAMPLERS:
        raise AutoparError(f"sampler={sampler!r}: allowed values are {', '.join(SAMPLERS)}")
    if not 0.0 <= local_search <= 1.0:
        raise AutoparError(f"local_search={local_search}: must be in [0, 1]")
    if budget < 1:
        raise AutoparError(f"budget={budget}: must be at least 1")
    if timeout is not None and timeout <= 0:
        raise AutoparError(f"timeout={timeout}: must be positive (seconds)")
    if max_cost is not None and not 0 < max_cost < math.inf:  # also rejects NaN
        raise AutoparError(f"max-cost={max_cost}: must be positive ($/Mtoken)")
    objs = parse_objectives(objectives)
    space = build_space(model, clusters, workload, precisions, constraints)
    if space.size == 0:
        raise AutoparError(
            f"no parallel layout of {model.name} fits these GPU counts and global_batch="
            f"{workload.global_batch} (dp must divide it); change --global-batch or --gpus"
        )
    book = price_book if price_book is not None else default_price_book()
    prices = [resolve_price(h.cluster, book, tier) for h in space.hardware]
    ev = Evaluator(
        model,
        space.hardware,
        prices=[p for p, _ in prices],
        min_headroom_gib=min_headroom_gib,
        max_cost=max_cost,
        calibration=calibration,
        estimate_fn=estimate_fn,
        space_points=True,
    )
    fp = fingerprint(space, workload, objs, min_headroom_gib, max_cost)
    t_search = time.perf_counter()
    requested = sampler
    if sampler == "auto":  # the method the space's size calls for (search/hybrid.py)
        sampler = choose_method(space, ev, storage)
    if sampler == "hybrid" or (requested == "auto" and sampler == "exhaustive"):
        if storage is not None:
            raise AutoparError("storage: --sampler hybrid does not use a study; drop --storage")
        if not sweepable(space, ev):
            raise AutoparError("sampler=hybrid: needs the analytical model and rules (use nsga2)")
        fn = run_auto if requested == "auto" else run_hybrid
        run = fn(space, ev, objs, budget=budget, seed=seed, timeout=timeout, progress=progress)
    elif sampler == "exhaustive":
        if storage is not None:
            raise AutoparError("storage: --sampler exhaustive does not use a study; drop --storage")
        sweep = can_sweep(space, ev)  # large spaces: on arrays, records for the front and a sample
        run = (run_sweep if sweep else run_exhaustive)(space, ev, objs, timeout, progress)
    else:
        run = run_nsga2(
            space,
            ev,
            objs,
            budget=budget,
            seed=seed,
            storage=storage,
            study_name=study_name,
            timeout=timeout,
            progress=progress,
            fp=fp,
            local_search=local_search,
            inputs=None
            if storage is None
            else _stored_inputs(
                model,
                space,
                workload,
                objs,
                prices,
                {
                    "precisions": precisions,
                    "min_headroom_gib": min_headroom_gib,
                    "max_cost": max_cost,
                    "tier": tier,
                    **(stored_inputs or {}),
                },
            ),
            heartbeat_s=heartbeat_s,
            search=search,
        )
    search_s = time.perf_counter() - t_search
    if sampler == "exhaustive" and run.sweep is None and not run.timed_out:
        valid, exact = sum(not o.reason.startswith("rule:") for o in run.outcomes.values()), True
    else:
        valid, exact = count_valid(space, ev, random.Random(seed))
    records = _records(run, space)
    evidence = evidence_of(model, space.hardware)  # bands widened away from the measured runs (issue 21)
    widen_records(records, evidence)
    front = pareto_records(records, objs)
    notes = _notes(space, objs, prices, budget, sampler, run)
    if requested == "auto" and sampler == "exhaustive":
        notes.append(
            f"auto: the whole space ({space.size:,} points, at most {EXACT_LIMIT:,}) was swept exactly, so "
            f"the budget ({budget:,}) did not limit it; --sampler nsga2 searches by budget"
        )
    stats: dict[str, Any] = {
        "space_valid": valid,
        "space_valid_exact": exact,
        "optuna_trials": run.n_trials,
        "evaluated": sum(r.estimate is not None for r in records),
        "evaluated_here": run.n_evaluated,
        "invalid": sum(r.estimate is None for r in records),
        "duplicates": run.n_duplicates,
        "study_name": run.study_name,
        "study_states": dict(run.states),
        "search_s": search_s,
        "evals_per_s": run.n_evaluated / search_s if search_s > 0 else 0.0,
        "prices": {
            h.label(): {"usd_per_gpu_hour": p, "source": s}
            for h, (p, s) in zip(space.hardware, prices, strict=True)
        },
        "fingerprint": fp,
    }
    if run.sweep is not None:  # totals over the whole space; `trials` holds the front and a sample
        stats["evaluated"] = run.sweep["evaluated"]
        stats["sweep"] = {k: run.sweep[k] for k in ("evaluated", "feasible", "kept", "stride")}
        stats["sweep"].update(
            {k: run.sweep[k] for k in ("method", "layouts", "outer_trials") if k in run.sweep}
        )
    if front:
        F = to_min_matrix(front, objs)
        all_feas = [r for r in records if r.feasible]
        swept = run.sweep["bounds"] if run.sweep else None  # every feasible point's, not the sample's
        ideal, nadir = swept if swept is not None else reference_bounds(to_min_matrix(all_feas, objs))
        stats["hypervolume"] = normalized_hypervolume(F, ideal, nadir)
        stats["hypervolume_reference"] = (
            "objectives scaled so the best feasible value seen -> 0 and the worst -> 1 (maximised ones "
            "negated); reference point 1.1 in each"
        )
    else:
        notes.append(no_fit_message(model, space, records + _leanest(space, ev)))
    result = SearchResult(
        model=model,
        clusters=list({(h.gpu, h.num_gpus): h.cluster for h in space.hardware}.values()),
        workload=workload,
        objectives=[o.info for o in objs],
        space_size=space.size,
        trials=records,
        pareto_rows=_with_training(pareto_rows(front, objs), workload.token_budget),
        recommended=(
            recommend(front, objs, [r for r in records if r.feasible], workload.framework, evidence=evidence)
            if front
            else []
        ),
        seed=seed,
        budget=budget,
        sampler=sampler,
        wall_s=0.0,
        inputs={
            "model": model.name,
            "gpus": sorted({h.num_gpus for h in space.hardware}),
            "gpu": list(dict.fromkeys(h.gpu for h in space.hardware)),
            "precision": list(dict.fromkeys(h.precision for h in space.hardware)),
            "seq_len": workload.seq_len,
            "global_batch": workload.global_batch,
            "token_budget": workload.token_budget,
            "objectives": [o.name for o in objs],
            "budget": budget,
            "seed": seed,
            "sampler": requested,
            "storage": None if storage is None else mask(str(storage)),
            "study_name": run.study_name,
            "min_headroom_gib": min_headroom_gib,
            "max_cost": max_cost,
            "tier": tier,
        },
        notes=notes,
        calibration=_calibration_info(calibration),
        space_valid=valid,
        stats=stats,
        recipe=recipe_beside(model, space.hardware, calibration) if front else None,
    )
    result.wall_s = time.perf_counter() - t0
    return result


def _stored_inputs(
    model: ModelSpec,
    space: Space,
    workload: Workload,
    objs: Sequence[Objective],
    prices: list[tuple[float, str]],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """What a stored study needs to be rebuilt without the original command (`autopar study report`)."""
    clusters = list({(h.gpu, h.num_gpus): h.cluster for h in space.hardware}.values())
    return {
        "model": model.model_dump(mode="json"),
        "clusters": [c.model_dump(mode="json") for c in clusters],
        "workload": workload.model_dump(mode="json"),
        "objectives": [o.name for o in objs],
        "prices": {h.gpu: list(p) for h, p in zip(space.hardware, prices, strict=True)},
        **extra,
    }


def _with_training(rows: list[dict[str, Any]], tokens: float | None) -> list[dict[str, Any]]:
    """Add days and dollars to train the token budget (when one is given) to the Pareto rows."""
    if tokens:
        for row in rows:
            row["train_days"] = tokens / row["throughput"] / SECONDS_PER_DAY
            row["train_cost_usd"] = row["cost"] * tokens / 1e6
    return rows


def _calibration_info(calibration: Any) -> dict[str, Any] | None:
    """What the report says about the corrector (None = uncalibrated)."""
    if calibration is None:
        return None
    meta = getattr(calibration, "meta", None)
    info: dict[str, Any] = {"name": getattr(meta, "name", type(calibration).__name__)}
    for attr in ("info", "describe", "as_dict"):
        fn = getattr(calibration, attr, None)
        value = fn() if callable(fn) else fn
        if isinstance(value, dict):
            info.update(value)
        elif isinstance(value, str):
            info["description"] = value
    return info
