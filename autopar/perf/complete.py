"""Completing a partial strategy: unset knobs take the best feasible value, as the search would pick it.

A run record or a CLI call may leave the completable knobs (knobs.COMPLETABLE_KNOBS: vpp, micro_batch,
recompute, etp, pp_schedule, zero, activation_offload_layers) unset (None).
Each unset knob gets its candidate values (those the framework offers and the layout rules allow); the
completion keeps the candidate that fits in memory and is fastest (ties: more headroom); if nothing fits,
the one with the most headroom, so the estimate still says by how much it does not fit. An explicit value
is never changed. Small candidate products are searched exhaustively; larger ones by coordinate descent
from the most memory-frugal point (each move keeps feasibility and never slows the step).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from autopar import knobs
from autopar.errors import InvalidStrategyError
from autopar.layouts import ACT_OFFLOAD_FRAMEWORKS, STACKS, Axis, candidate_layers
from autopar.perf import pipeline
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

RECOMPUTE_MODES: tuple[str, ...] = tuple(reversed(knobs.RECOMPUTE_LEVELS))  # most memory-frugal first
MAX_MICRO_BATCH = 64
FULL_SEARCH_LIMIT = 256  # candidate products up to this size are searched exhaustively

# Candidate estimates shared by the completions of one batch (`shared_candidates`), by problem.
_SHARED: ContextVar[dict[tuple[Any, ...], dict[Strategy, Estimate | InvalidStrategyError]] | None] = (
    ContextVar("autopar_shared_candidates", default=None)
)


@contextlib.contextmanager
def shared_candidates() -> Iterator[None]:
    """Inside the block, completions of the same (model, cluster, workload) share their candidates'
    estimates: a batch of run records repeats a configuration with other knobs set (estimate --batch),
    and most candidate strategies recur. The estimator is pure, so results are unchanged."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _divisors(n: int, limit: int | None = None) -> list[int]:
    """Divisors of n (up to `limit`), ascending; bounded work so a huge batch cell cannot stall completion."""
    if limit is not None:
        return [k for k in range(1, min(n, limit) + 1) if n % k == 0]
    small = [k for k in range(1, math.isqrt(max(n, 1)) + 1) if n % k == 0]
    out = sorted({*small, *(n // k for k in small)})
    return [k for k in out if limit is None or k <= limit]


def _schedule_pairs(model: ModelSpec, s: Strategy, framework: str) -> list[tuple[str, int]]:
    """(pp_schedule, vpp) candidates for the unset ones among the two."""
    p = s.pp
    if p == 1:
        return [(s.pp_schedule or "1f1b", s.vpp or 1)]
    names = [s.pp_schedule] if s.pp_schedule else list(pipeline.schedules_for(framework))
    vpps = [v for v in _divisors(model.layers // p) if v > 1] if model.layers >= p else []
    pairs = []
    for name in names:
        rule = pipeline.SCHEDULES[name]
        vs = [s.vpp] if s.vpp else [v for v in (1, *vpps) if rule.takes_vpp(v)]
        pairs += [(name, v) for v in vs]
    return pairs or [(s.pp_schedule or "1f1b", s.vpp or 1)]


def candidate_values(model: ModelSpec, w: Workload, s: Strategy) -> dict[str, list[Any]]:
    """Candidate values of every unset knob, most memory-frugal first ("sched" stands for pp_schedule+vpp)."""
    out: dict[str, list[Any]] = {}
    unset = s.unset_knobs(model.is_moe)
    if "micro_batch" in unset:
        per_rank = w.global_batch // max(1, s.dp)
        out["micro_batch"] = _divisors(per_rank, MAX_MICRO_BATCH) or [1]
    if "recompute" in unset:
        out["recompute"] = list(RECOMPUTE_MODES)
    if "zero" in unset:
        out["zero"] = sorted(STACKS[w.framework].zero, reverse=True)  # the stack capability table
    if Axis.ETP in unset:
        ff = model.moe_ffn_hidden or 1
        out[Axis.ETP] = sorted({k for k in _divisors(s.tp) if ff % k == 0} | {1}, reverse=True)
    if Axis.VPP in unset or "pp_schedule" in unset:
        out["sched"] = _schedule_pairs(model, s, w.framework)
    if "activation_offload_layers" in unset:
        out["activation_offload_layers"] = _offload_layers(model, w, s)
    return out


def _offload_layers(model: ModelSpec, w: Workload, s: Strategy) -> list[int]:
    """Activation-offload candidates: only where the stack has it (layouts.ACT_OFFLOAD_FRAMEWORKS) and the
    workload lets the search use it (Workload.memory_savers "act_offload"), as optimizer offload is gated;
    Megatron allows it only without PP (layouts.offload_rules). Otherwise off."""
    if "act_offload" not in w.memory_savers or w.framework not in ACT_OFFLOAD_FRAMEWORKS or s.pp > 1:
        return [0]
    return [*candidate_layers(model.layers), 0]


def _apply(s: Strategy, choice: dict[str, Any]) -> Strategy:
    upd = {k: v for k, v in choice.items() if k != "sched"}
    if "sched" in choice:
        upd["pp_schedule"], upd[Axis.VPP] = choice["sched"]
    return s.model_copy(update=upd)


def _key(e: Estimate | None) -> tuple[int, float, float]:
    """Ranking: fits, then throughput, then headroom (invalid candidates last)."""
    if e is None:
        return (-1, 0.0, float("-inf"))
    return (1, e.tokens_per_s, e.headroom_bytes) if e.fits else (0, e.headroom_bytes, 0.0)


def complete(
    model: ModelSpec,
    cluster: ClusterSpec,
    w: Workload,
    s: Strategy,
    *,
    estimate: Callable[..., Estimate],
    strict: bool = True,
    check: bool = True,
) -> Estimate:
    """The estimate of `s` with its unset knobs completed; Estimate.assumed lists them.

    `estimate` is perf.estimate.estimate, passed in so this module sits below the composition (no cycle).

    Candidates that break a rule are skipped. If none is valid: with check, the first candidate's violations
    are raised; without (the caller validated the layout), the most frugal candidate is estimated unchecked."""
    cands = candidate_values(model, w, s)
    cache: dict[tuple[Any, ...], Estimate | None] = {}
    errors: list[InvalidStrategyError] = []
    shared = _SHARED.get()
    common = None if shared is None else shared.setdefault((model, cluster, w, strict), {})

    def run(choice: dict[str, Any]) -> Estimate | None:
        key = tuple(sorted((k, str(v)) for k, v in choice.items()))
        if key not in cache:
            got = _candidate(model, cluster, w, _apply(s, choice), strict, estimate, common)
            if isinstance(got, InvalidStrategyError):
                errors.append(got)
            cache[key] = None if isinstance(got, InvalidStrategyError) else got
        return cache[key]

    unchecked: dict[tuple[Any, ...], Estimate | None] = {}

    def run_unchecked(choice: dict[str, Any]) -> Estimate | None:
        """The candidate estimated without the rules (the caller vouches for the layout itself)."""
        key = tuple(sorted((k, str(v)) for k, v in choice.items()))
        if key not in unchecked:
            try:
                unchecked[key] = estimate(model, cluster, w, _apply(s, choice), strict=strict, check=False)
            except InvalidStrategyError:
                unchecked[key] = None
        return unchecked[key]

    size = math.prod(len(v) for v in cands.values())
    best = _best_choice(cands, size, run)
    est = run(best)
    if est is None and not check:
        # No candidate passes the rules (e.g. a published layout the rules do not cover, such as DeepSeek-V3's
        # 61 layers over PP2 x VP8 with Megatron's custom --pipeline-model-parallel-layout): rank the
        # candidates estimated unchecked the same way (fits, then fastest), rather than taking the most
        # frugal one, which made such recipes look up to a third slower (full recompute, ZeRO-3).
        best = _best_choice(cands, size, run_unchecked)
        est = run_unchecked(best)
        if est is None:
            best = {k: v[0] for k, v in cands.items()}
            est = estimate(model, cluster, w, _apply(s, best), strict=strict, check=False)
    if est is None:  # no completion is valid: the layout itself breaks a rule; say which (first candidate)
        raise errors[0] if errors else InvalidStrategyError([f"no valid value for {', '.join(cands)}"])
    return _with_assumed(est, best, size, s.unset_knobs(model.is_moe))


def _best_choice(
    cands: dict[str, list[Any]], size: int, run: Callable[[dict[str, Any]], Estimate | None]
) -> dict[str, Any]:
    """The candidate ranked first by `_key`: all of them when few, else coordinate descent."""
    if size <= FULL_SEARCH_LIMIT:
        names = list(cands)
        choices = [dict(zip(names, vals, strict=True)) for vals in itertools.product(*cands.values())]
        return max(choices, key=lambda c: _key(run(c)))
    return _descend(cands, run)


def _candidate(
    model: ModelSpec,
    cluster: ClusterSpec,
    w: Workload,
    cand: Strategy,
    strict: bool,
    estimate: Callable[..., Estimate],
    common: dict[Strategy, Estimate | InvalidStrategyError] | None,
) -> Estimate | InvalidStrategyError:
    """One candidate's estimate, or the rules it breaks (looked up in `common` when a batch shares them)."""
    if common is not None and cand in common:
        return common[cand]
    try:
        got: Estimate | InvalidStrategyError = estimate(model, cluster, w, cand, strict=strict)
    except InvalidStrategyError as e:
        got = e
    if common is not None:
        common[cand] = got
    return got


def _descend(cands: dict[str, list[Any]], run: Callable[[dict[str, Any]], Estimate | None]) -> dict[str, Any]:
    """Coordinate descent from the most frugal point: best value of one knob at a time, until stable."""
    cur = {k: v[0] for k, v in cands.items()}
    for _ in range(4):
        changed = False
        for k, values in cands.items():
            best = max(values, key=lambda v: _key(run({**cur, k: v})))
            if _key(run({**cur, k: best})) > _key(run(cur)):
                cur[k], changed = best, True
        if not changed:
            break
    return cur


def _with_assumed(est: Estimate, choice: dict[str, Any], n: int, unset: tuple[str, ...]) -> Estimate:
    from dataclasses import replace

    flat = {k: v for k, v in choice.items() if k != "sched"}
    if "sched" in choice:
        flat["pp_schedule"], flat[Axis.VPP] = choice["sched"]
    parts = [f"{k}={flat[k]}" for k in unset]
    assumed = tuple(f"{p} (unset; best feasible of {n} candidates)" for p in parts)
    return replace(est, assumed=assumed, notes=(*est.notes, "completed unset knobs: " + ", ".join(parts)))
