"""`optimize`: build the space, run a search loop, assemble the SearchResult (Pareto set, notes, stats).

See autopar/search/loops.py for the NSGA-II and exhaustive loops and what the budget counts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autopar.catalog.pricefile import default_price_book
from autopar.errors import AutoparError
from autopar.layouts import Axis
from autopar.objectives import MAX_OBJECTIVES, RATIO_SCALE, REGISTRY, Objective, parse_objectives
from autopar.problem import SAMPLERS, SearchSettings, settings_with
from autopar.search.evaluate import EstimateFn, Evaluator, resolve_price
from autopar.search.evidence import evidence_of, recipe_beside, widen_records
from autopar.search.hybrid import EXACT_LIMIT, choose_method, run_auto, run_hybrid
from autopar.search.jsontypes import JSONDict
from autopar.search.loops import Run, fingerprint, run_exhaustive
from autopar.search.margin import search_margin
from autopar.search.nsga2 import run_nsga2
from autopar.search.pareto import (
    near_front,
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

if TYPE_CHECKING:
    from autopar.catalog.prices import PriceBook

__all__ = ["SAMPLERS", "SearchSettings", "optimize"]
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
    """What the reader should know about the search: constraints, prices, the budget, how it stopped."""
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
    return notes + _run_notes(run)


def _run_notes(run: Run) -> list[str]:
    """How the run went: stopped early, how the sweep worked, failed trials of a stored study."""
    notes = []
    if run.timed_out:
        notes.append(f"stopped by --timeout after {run.n_evaluated} evaluations")
    if run.waited_out is not None:
        notes.append(
            f"stopped short of the budget: the study's last trials were held RUNNING by other clients and "
            f"none finished in {run.waited_out:.0f} s (their heartbeats were alive, so they are not stale); "
            "resume later, or fail them with Optuna"
        )
    sw = run.sweep
    if sw is not None and sw.get("method") == "hybrid":
        notes.append(
            f"hybrid search: NSGA-II over {sw['layouts'][0]:,} of {sw['layouts'][1]:,} layouts (hardware, "
            f"tp/pp/cp/ep), every other knob solved exactly on arrays ({sw['evaluated']:,} strategies); "
            f"the trial list keeps the front and a sample ({sw['kept']:,} records)"
        )
    elif sw is not None:
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
    settings: SearchSettings | None = None,
    *,
    calibration: Any = None,
    price_book: PriceBook | None = None,
    progress: bool = False,
    estimate_fn: EstimateFn | None = None,
    search: bool = True,
    stored_inputs: JSONDict | None = None,
    **fields: Any,
) -> SearchResult:
    """Search parallelism strategies and return every trial, the Pareto set and recommendations.

    How the search runs is `settings` (autopar.problem.SearchSettings: budget, objectives, seed, sampler,
    storage, constraints, ...), or its fields as keywords (`budget=300, seed=0`), which go on top of it.
    `budget` counts COMPLETE trials (distinct strategies with an estimate) in the study: with a shared
    `storage` that is every worker's trials together. `search=False` only reads a stored study;
    `stored_inputs` (JSON) is kept in the study so `autopar study report` can rebuild the problem.
    `calibration` corrects the analytical model; `price_book` prices $/Mtoken (default: the built-in
    book); `estimate_fn` replaces the analytical model (tests only).
    """
    t0 = time.perf_counter()
    s = settings_with(settings, fields)
    if not search and s.storage is None:
        raise AutoparError("search=False needs a storage to read the study from")
    s.check()
    objs = parse_objectives(s.objectives)
    space = build_space(model, clusters, workload, s.precisions, s.constraints)
    if space.size == 0:
        raise AutoparError(
            f"no parallel layout of {model.name} fits these GPU counts and global_batch="
            f"{workload.global_batch} (dp must divide it); change --global-batch or --gpus"
        )
    book = price_book if price_book is not None else default_price_book()
    prices = [resolve_price(h.cluster, book, s.tier) for h in space.hardware]
    ev = Evaluator(
        model,
        space.hardware,
        prices=[p for p, _ in prices],
        max_cost=s.max_cost,
        calibration=calibration,
        estimate_fn=estimate_fn,
        space_points=True,
        memory_margin=search_margin(
            calibration, s.min_headroom_gib, s.memory_band, workload.framework, model
        ),
    )
    ctx = _Context(model, workload, s, space, ev, objs, prices)
    t_search = time.perf_counter()
    run, sampler = _search(ctx, progress, search, stored_inputs)
    result = _result(ctx, run, sampler, time.perf_counter() - t_search, calibration)
    result.wall_s = time.perf_counter() - t0
    return result


@dataclass(frozen=True)
class _Context:
    """One search's inputs once the space is built: what every step after it reads."""

    model: ModelSpec
    workload: Workload
    settings: SearchSettings
    space: Space
    ev: Evaluator
    objs: Sequence[Objective]
    prices: list[tuple[float, str]]

    @property
    def fingerprint(self) -> str:
        s = self.settings
        return fingerprint(
            self.space, self.workload, self.objs, s.min_headroom_gib, s.max_cost, self.ev.margin
        )


def _search(ctx: _Context, progress: bool, search: bool, stored_inputs: JSONDict | None) -> tuple[Run, str]:
    """Run the method the settings (or, for auto, the space's size) call for; (the run, the method)."""
    s, space, ev, objs = ctx.settings, ctx.space, ctx.ev, ctx.objs
    sampler = choose_method(space, ev, s.storage) if s.sampler == "auto" else s.sampler
    if sampler == "hybrid" or (s.sampler == "auto" and sampler == "exhaustive"):
        if s.storage is not None:
            raise AutoparError("storage: --sampler hybrid does not use a study; drop --storage")
        if not sweepable(space, ev):
            raise AutoparError("sampler=hybrid: needs the analytical model and rules (use nsga2)")
        fn = run_auto if s.sampler == "auto" else run_hybrid
        return fn(
            space, ev, objs, budget=s.budget, seed=s.seed, timeout=s.timeout, progress=progress
        ), sampler
    if sampler == "exhaustive":
        if s.storage is not None:
            raise AutoparError("storage: --sampler exhaustive does not use a study; drop --storage")
        sweep = can_sweep(space, ev)  # large spaces: on arrays, records for the front and a sample
        return (run_sweep if sweep else run_exhaustive)(space, ev, objs, s.timeout, progress), sampler
    inputs = None if s.storage is None else _stored_inputs(ctx, stored_inputs or {})
    run = run_nsga2(
        space,
        ev,
        sampler_objectives(objs, space),
        budget=s.budget,
        seed=s.seed,
        timeout=s.timeout,
        progress=progress,
        storage=s.storage,
        study_name=s.study_name,
        fp=ctx.fingerprint,
        local_search=s.local_search,
        inputs=inputs,
        heartbeat_s=s.heartbeat_s,
        search=search,
    )
    return run, sampler


def sampler_objectives(objs: Sequence[Objective], space: Space) -> list[Objective]:
    """What NSGA-II optimises: the objectives, plus free memory as a helper objective when they all follow
    throughput on the space's one hardware option. There the objectives are one axis and NSGA-II's crowding
    has nothing to spread along (a 2-objective search of the default problem ends 4.8% below the best
    throughput at budget 300, 2.3% with the helper); a helper objective that trades against the real one
    keeps the population diverse (multi-objectivization: Knowles, Watson & Corne 2001). The front, the
    near-ties and the recommendations are still taken on `objs` alone."""
    one_hardware = len({(h.gpu, h.num_gpus, h.precision) for h in space.hardware}) == 1
    if not one_hardware or any(o.name not in RATIO_SCALE for o in objs) or len(objs) >= MAX_OBJECTIVES:
        return list(objs)
    return [*objs, REGISTRY["headroom"]]


def _headroom_role(objs: Sequence[Objective]) -> str:
    """What free memory is in this search: a constraint (the default) or also an objective."""
    if any(o.name == "headroom" for o in objs):
        return "; free memory beyond it is also an objective"
    return "; free memory is a constraint, not an objective (--objectives throughput,headroom,cost trades it)"


def _result(ctx: _Context, run: Run, sampler: str, search_s: float, calibration: Any) -> SearchResult:
    """The SearchResult of a finished run: records, front, notes, stats, recommendations."""
    s, space, objs, workload = ctx.settings, ctx.space, ctx.objs, ctx.workload
    if sampler == "exhaustive" and run.sweep is None and not run.timed_out:
        valid, exact = sum(not o.reason.startswith("rule:") for o in run.outcomes.values()), True
    else:
        valid, exact = count_valid(space, ctx.ev, random.Random(s.seed))
    records = _records(run, space)
    evidence = evidence_of(
        ctx.model, space.hardware, calibration
    )  # bands widened away from the measured runs (issue 21)
    widen_records(records, evidence)
    front = pareto_records(records, objs)
    shown = front + near_front(records, front, objs)  # the front and what the model cannot tell from it
    notes = [f"memory margin: a strategy fits at {ctx.ev.margin.describe()}" + _headroom_role(objs)]
    notes += _notes(space, objs, ctx.prices, s.budget, sampler, run)
    if sampler == "nsga2" and len(sampler_objectives(objs, space)) > len(objs):
        notes.append(
            "nsga2: free memory was searched as a helper objective (every objective follows throughput on "
            "one hardware option); the front and the recommendations use the objectives asked for"
        )
    if s.sampler == "auto" and sampler == "exhaustive":
        notes.append(
            f"auto: the whole space ({space.size:,} points, at most {EXACT_LIMIT:,}) was swept exactly, so "
            f"the budget ({s.budget:,}) did not limit it; --sampler nsga2 searches by budget"
        )
    stats = _stats(ctx, run, records, search_s, valid, exact)
    if front:
        stats.update(_hypervolume(run, records, front, objs))
    else:
        notes.append(no_fit_message(ctx.model, space, records + _leanest(space, ctx.ev)))
    feasible = [r for r in records if r.feasible]
    return SearchResult(
        model=ctx.model,
        clusters=list({(h.gpu, h.num_gpus): h.cluster for h in space.hardware}.values()),
        workload=workload,
        objectives=[o.info for o in objs],
        space_size=space.size,
        trials=records,
        pareto_rows=_with_training(pareto_rows(shown, objs), workload.token_budget),
        recommended=recommend(shown, objs, feasible, workload.framework, evidence=evidence, model=ctx.model)
        if front
        else [],
        seed=s.seed,
        budget=s.budget,
        sampler=sampler,
        wall_s=0.0,
        inputs=_inputs(ctx, run),
        notes=notes,
        calibration=_calibration_info(calibration),
        space_valid=valid,
        stats=stats,
        recipe=recipe_beside(ctx.model, space.hardware, calibration) if front else None,
    )


def _stats(
    ctx: _Context, run: Run, records: list[TrialRecord], search_s: float, valid: int, exact: bool
) -> JSONDict:
    """The result's counts, timings, prices and fingerprint."""
    stats: JSONDict = {
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
            h.label(): {"usd_per_gpu_hour": p, "source": src}
            for h, (p, src) in zip(ctx.space.hardware, ctx.prices, strict=True)
        },
        "fingerprint": ctx.fingerprint,
    }
    if run.sweep is not None:  # totals over the whole space; `trials` holds the front and a sample
        stats["evaluated"] = run.sweep["evaluated"]
        stats["sweep"] = {k: run.sweep[k] for k in ("evaluated", "feasible", "kept", "stride")}
        stats["sweep"].update(
            {k: run.sweep[k] for k in ("method", "layouts", "outer_trials") if k in run.sweep}
        )
    return stats


def _hypervolume(
    run: Run, records: list[TrialRecord], front: list[TrialRecord], objs: Sequence[Objective]
) -> JSONDict:
    """The front's normalized hypervolume and how it was scaled."""
    F = to_min_matrix(front, objs)
    all_feas = [r for r in records if r.feasible]
    swept = run.sweep["bounds"] if run.sweep else None  # every feasible point's, not the sample's
    ideal, nadir = swept if swept is not None else reference_bounds(to_min_matrix(all_feas, objs))
    return {
        "hypervolume": normalized_hypervolume(F, ideal, nadir),
        "hypervolume_reference": (
            "objectives scaled so the best feasible value seen -> 0 and the worst -> 1 (maximised ones "
            "negated); reference point 1.1 in each"
        ),
    }


def _inputs(ctx: _Context, run: Run) -> JSONDict:
    """The result's `inputs`: what was searched, as the JSON output and the report show it."""
    s, hw, wl = ctx.settings, ctx.space.hardware, ctx.workload
    return {
        "model": ctx.model.name,
        "gpus": sorted({h.num_gpus for h in hw}),
        "gpu": list(dict.fromkeys(h.gpu for h in hw)),
        "precision": list(dict.fromkeys(h.precision for h in hw)),
        "seq_len": wl.seq_len,
        "global_batch": wl.global_batch,
        "token_budget": wl.token_budget,
        "objectives": [o.name for o in ctx.objs],
        "budget": s.budget,
        "seed": s.seed,
        "sampler": s.sampler,
        "storage": None if s.storage is None else mask(str(s.storage)),
        "study_name": run.study_name,
        "min_headroom_gib": s.min_headroom_gib,
        "memory_margin": ctx.ev.margin.describe(),
        "memory_band_factor": ctx.ev.margin.factor,
        "max_cost": s.max_cost,
        "tier": s.tier,
    }


def _stored_inputs(ctx: _Context, extra: JSONDict) -> JSONDict:
    """What a stored study needs to be rebuilt without the original command (`autopar study report`)."""
    hw = ctx.space.hardware
    clusters = list({(h.gpu, h.num_gpus): h.cluster for h in hw}.values())
    return {
        "model": ctx.model.model_dump(mode="json"),
        "clusters": [c.model_dump(mode="json") for c in clusters],
        "workload": ctx.workload.model_dump(mode="json"),
        "objectives": [o.name for o in ctx.objs],
        "prices": {h.gpu: list(p) for h, p in zip(hw, ctx.prices, strict=True)},
        **ctx.settings.stored(),
        "memory_margin": ctx.ev.margin.to_json(),
        **extra,
    }


def _with_training(rows: list[JSONDict], tokens: float | None) -> list[JSONDict]:
    """Add days and dollars to train the token budget (when one is given) to the Pareto rows."""
    if tokens:
        for row in rows:
            row["train_days"] = tokens / row["throughput"] / SECONDS_PER_DAY
            row["train_cost_usd"] = row["cost"] * tokens / 1e6
    return rows


def _calibration_info(calibration: object) -> JSONDict | None:
    """What the report says about the corrector (None = uncalibrated)."""
    if calibration is None:
        return None
    meta = getattr(calibration, "meta", None)
    info: JSONDict = {"name": getattr(meta, "name", type(calibration).__name__)}
    for attr in ("info", "describe", "as_dict"):
        fn = getattr(calibration, attr, None)
        value = fn() if callable(fn) else fn
        if isinstance(value, dict):
            info.update(value)
        elif isinstance(value, str):
            info["description"] = value
    return info
