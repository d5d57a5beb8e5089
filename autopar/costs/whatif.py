"""Procurement what-ifs: best strategy, time and cost to train per hardware option, ranked.

`run_whatif` optimizes each hardware option (GPU type x count) with `autopar.search.optimize`,
keeps the strategy that trains the token budget fastest while fitting in memory, turns it into
money and time with `cost_figures`, ranks the options and runs a small sensitivity analysis.

The dataclasses below are rendered by `autopar.reports.write_whatif_report` and serialised by
`autopar whatif --json`; their fields are a stable interface (add, never rename or remove).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from autopar.costs.figures import CostFigures, check_goodput, cost_figures, parse_tokens
from autopar.costs.options import HardwareOption, parse_options
from autopar.costs.pricebook import PriceBook, normalize_tier
from autopar.costs.pricefile import default_price_book
from autopar.costs.ranking import Candidate, headline, pareto, rank
from autopar.errors import AutoparError, SpecError
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, GPUSpec, ModelSpec, Strategy, Workload

GiB = 2**30


@dataclass
class OptionResult:
    """The outcome for one hardware option: chosen strategy, speed, money, time, rank.

    Fields that need a feasible strategy (strategy, estimate, tokens_per_s, mfu, headroom_gib,
    figures) are None when the search found nothing that fits; `reason` then says why.
    """

    label: str  # "H100-SXM:512"
    gpu: str  # canonical GPU name
    count: int  # GPUs
    tier: str  # price tier used, e.g. "on_demand"
    usd_per_gpu_hour: float  # price used
    price_source: str  # where the price came from (price book entry or user file)
    feasible: bool  # a strategy that fits was found
    strategy: Strategy | None = None  # recommended strategy (max tokens/s among fitting ones)
    strategy_label: str = ""  # Strategy.label(), e.g. "TP8+SP PP4 DP16/Z1 mb1"
    precision: str = ""  # GEMM precision of the chosen trial (bf16/fp8)
    estimate: Estimate | None = None  # estimate of the chosen strategy (calibrated when a corrector ran)
    tokens_per_s: float | None = None  # cluster tokens/s used for the figures (calibrated if a corrector ran)
    mfu: float | None = None  # model FLOPs utilisation of the chosen strategy (0..1)
    headroom_gib: float | None = None  # free memory per GPU at peak, GiB
    figures: CostFigures | None = None  # $/h, $/Mtoken, time and cost to train, GPU-hours
    meets_deadline: bool | None = None  # None when no deadline was given (or infeasible)
    within_cost_cap: bool | None = None  # None when no --max-cost was given (or infeasible)
    rank: int | None = None  # 1 = best; None when infeasible
    on_pareto: bool = False  # on the cost-vs-time Pareto front across options
    n_trials: int = 0  # strategies evaluated by the search for this option
    n_feasible: int = 0  # of which fit and broke no rule
    search_wall_s: float = 0.0  # search time for this option
    reason: str = ""  # why infeasible, or other caveat
    search: Any = None  # the SearchResult (kept for the report; not serialised)
    cluster: ClusterSpec | None = None  # the cluster searched (price set on it)

    @property
    def time_to_train_s(self) -> float | None:
        """Wall-clock seconds to train the token budget (goodput applied)."""
        return self.figures.time_to_train_s if self.figures else None

    @property
    def total_cost_usd(self) -> float | None:
        """USD to train the token budget (goodput applied)."""
        return self.figures.total_cost_usd if self.figures else None

    @property
    def usd_per_mtoken(self) -> float | None:
        """USD per million trained tokens (goodput applied)."""
        return self.figures.usd_per_mtoken if self.figures else None

    @property
    def usd_per_hour(self) -> float | None:
        """Cluster USD per wall-clock hour."""
        return self.figures.usd_per_hour if self.figures else None

    @property
    def gpu_hours(self) -> float | None:
        """GPU-hours to train the token budget."""
        return self.figures.gpu_hours if self.figures else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the `options` entries of `autopar whatif --json`)."""
        return {
            "label": self.label,
            "gpu": self.gpu,
            "count": self.count,
            "tier": self.tier,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "price_source": self.price_source,
            "feasible": self.feasible,
            "strategy": self.strategy_label or None,
            "strategy_params": self.strategy.model_dump() if self.strategy else None,
            "precision": self.precision or None,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "time_to_train_s": self.time_to_train_s,
            "time_to_train_days": (self.time_to_train_s / 86400 if self.time_to_train_s is not None
                                   else None),
            "total_cost_usd": self.total_cost_usd,
            "usd_per_mtoken": self.usd_per_mtoken,
            "usd_per_hour": self.usd_per_hour,
            "gpu_hours": self.gpu_hours,
            "headroom_gib": self.headroom_gib,
            "meets_deadline": self.meets_deadline,
            "within_cost_cap": self.within_cost_cap,
            "rank": self.rank,
            "on_pareto": self.on_pareto,
            "n_trials": self.n_trials,
            "n_feasible": self.n_feasible,
            "reason": self.reason or None,
        }


@dataclass
class ScenarioOption:
    """One option's figures under a sensitivity scenario."""

    label: str
    time_to_train_s: float
    total_cost_usd: float
    meets_deadline: bool | None
    rank: int | None


@dataclass
class SensitivityRow:
    """One what-if perturbation (a GPU's price ±20%, inter-node bandwidth halved) and its effect."""

    scenario: str  # human label, e.g. "H100-SXM price +20%"
    kind: str  # "price" | "internode_bw"
    gpu: str | None  # GPU whose price moved (None for bandwidth)
    factor: float  # multiplier applied (1.2, 0.8, 0.5)
    winner: str | None  # label of the rank-1 option under the scenario
    runner_up: str | None  # label of the rank-2 option under the scenario
    winner_changed: bool  # winner differs from the baseline winner
    options: list[ScenarioOption] = field(default_factory=list)
    note: str = ""  # how it was computed (e.g. "chosen strategies re-estimated, not re-searched")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "scenario": self.scenario,
            "kind": self.kind,
            "gpu": self.gpu,
            "factor": self.factor,
            "winner": self.winner,
            "runner_up": self.runner_up,
            "winner_changed": self.winner_changed,
            "options": [o.__dict__.copy() for o in self.options],
            "note": self.note,
        }


@dataclass
class WhatIfResult:
    """Everything `run_whatif` found: per-option results, ranking, Pareto set, sensitivity."""

    model: ModelSpec
    workload: Workload  # token_budget set
    token_budget: float  # tokens to train
    tier: str
    goodput: float  # fraction of wall-clock time doing useful training (restarts, failures)
    deadline_s: float | None  # wall-clock deadline, seconds
    max_cost_usd: float | None  # spending cap, USD
    options: list[OptionResult]  # in the order given
    ranking: list[str]  # option labels, best first (feasible options only)
    pareto: list[str]  # labels on the cost-vs-time Pareto front, by increasing time
    sensitivity: list[SensitivityRow]
    message: str  # headline sentence (winner, or "no option meets the deadline; fastest is ...")
    seed: int
    search_budget: int  # trials per option
    wall_s: float
    prices_file: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def winner(self) -> OptionResult | None:
        """The rank-1 option (None if nothing is feasible)."""
        return self.by_label(self.ranking[0]) if self.ranking else None

    @property
    def runner_up(self) -> OptionResult | None:
        """The rank-2 option (None if fewer than two are feasible)."""
        return self.by_label(self.ranking[1]) if len(self.ranking) > 1 else None

    @property
    def fastest(self) -> OptionResult | None:
        """The feasible option with the shortest time to train."""
        ok = [o for o in self.options if o.figures]
        return min(ok, key=lambda o: o.figures.time_to_train_s) if ok else None  # type: ignore[union-attr]

    @property
    def deadline_met(self) -> bool | None:
        """Whether any option meets the deadline (None without a deadline)."""
        if self.deadline_s is None:
            return None
        return any(o.meets_deadline for o in self.options)

    def by_label(self, label: str) -> OptionResult:
        """The option with this label."""
        for o in self.options:
            if o.label == label:
                return o
        raise KeyError(label)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (`autopar whatif --json`)."""
        return {
            "model": self.model.name,
            "tokens": self.token_budget,
            "seq_len": self.workload.seq_len,
            "global_batch": self.workload.global_batch,
            "precision": self.workload.precision,
            "tier": self.tier,
            "goodput": self.goodput,
            "deadline_s": self.deadline_s,
            "max_cost_usd": self.max_cost_usd,
            "deadline_met": self.deadline_met,
            "message": self.message,
            "options": [o.to_dict() for o in self.options],
            "ranking": list(self.ranking),
            "pareto": list(self.pareto),
            "sensitivity": [s.to_dict() for s in self.sensitivity],
            "seed": self.seed,
            "search_budget": self.search_budget,
            "wall_s": self.wall_s,
            "prices_file": self.prices_file,
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------
# Running the what-if
# ---------------------------------------------------------------------------------------------


def _cluster(gpu: GPUSpec, opt: HardwareOption, price: float, gpus_per_node: int | None = None,
             internode_bw: float | None = None) -> ClusterSpec:
    """The cluster for one option, with its price set; SpecError naming the option if invalid."""
    try:
        return ClusterSpec(gpu=gpu, num_gpus=opt.count, price_usd_per_gpu_hour=price, gpus_per_node=gpus_per_node,
                           internode_bw=internode_bw)
    except ValidationError as e:
        msg = "; ".join(err.get("msg", "invalid").removeprefix("Value error, ") for err in e.errors())
        raise SpecError(f"option={opt.label}: {msg}") from None


def choose_trial(search: Any) -> Any:
    """The feasible trial that trains fastest (max tokens/s; ties -> more headroom), or None."""
    best, best_key = None, None
    for t in search.trials:
        if not t.feasible or t.estimate is None:
            continue
        key = (t.values.get("throughput", t.estimate.tokens_per_s), t.estimate.headroom_bytes, -t.number)
        if best_key is None or key > best_key:
            best, best_key = t, key
    return best


def _infeasible_reason(search: Any) -> str:
    """Why nothing fit: the reason of the evaluated trial that came closest to fitting."""
    with_est = [t for t in search.trials if t.estimate is not None]
    if with_est:
        t = max(with_est, key=lambda t: t.estimate.headroom_bytes)
        return f"no strategy fits in {len(search.trials)} trials; closest: {t.strategy.label()}: {t.reason}"
    reasons = [t.reason for t in search.trials if t.reason]
    return f"no valid strategy in {len(search.trials)} trials" + (f"; e.g. {reasons[0]}" if reasons else "")


def _search_option(model: ModelSpec, cluster: ClusterSpec, workload: Workload, opt: HardwareOption, *,
                   tier: str, price: float, source: str, token_budget: float, goodput: float,
                   deadline_s: float | None, max_cost_usd: float | None, optimize_fn: Callable[..., Any],
                   search_kwargs: dict[str, Any]) -> OptionResult:
    """Optimize one hardware option and turn its fastest fitting strategy into money and time."""
    base = OptionResult(label=opt.label, gpu=opt.gpu, count=opt.count, tier=tier, usd_per_gpu_hour=price,
                        price_source=source, feasible=False, cluster=cluster)
    t0 = _time.perf_counter()
    try:
        search = optimize_fn(model, cluster, workload, **search_kwargs)
    except AutoparError as e:  # e.g. NoFeasibleStrategyError, or no layout divides the global batch
        base.reason = str(e)
        base.search_wall_s = _time.perf_counter() - t0
        return base
    base.search = search
    base.search_wall_s = _time.perf_counter() - t0
    base.n_trials = len(search.trials)
    base.n_feasible = sum(t.feasible for t in search.trials)
    trial = choose_trial(search)
    if trial is None:
        base.reason = _infeasible_reason(search)
        return base
    est = trial.estimate
    tps = float(trial.values.get("throughput", est.tokens_per_s))
    figs = cost_figures(tps, opt.count, price, token_budget, goodput)
    base.feasible = True
    base.strategy = trial.strategy
    base.strategy_label = trial.strategy.label()
    base.precision = trial.precision
    base.estimate = est
    base.tokens_per_s = tps
    base.mfu = est.mfu
    base.headroom_gib = est.headroom_bytes / GiB
    base.figures = figs
    if deadline_s is not None:
        base.meets_deadline = figs.time_to_train_s <= deadline_s  # type: ignore[operator]
    if max_cost_usd is not None:
        base.within_cost_cap = figs.total_cost_usd <= max_cost_usd  # type: ignore[operator]
    return base


def _notes(prepared: list[tuple[HardwareOption, ClusterSpec, Any]], results: list[OptionResult], tier: str,
           goodput: float, calibration: Any) -> list[str]:
    """Plain-language notes: the price used per GPU and its source, goodput, assumptions, failures."""
    notes = []
    seen = set()
    for opt, _, entry in prepared:
        if opt.gpu not in seen:
            seen.add(opt.gpu)
            notes.append(f"price {opt.gpu} {tier}: ${entry.usd_per_gpu_hour:.2f}/GPU-h ({entry.source})")
    if goodput < 1:
        notes.append(f"goodput {goodput:g}: times and costs include {100 * (1 - goodput):.0f}% of wall-clock "
                     "time lost to restarts, failures and checkpointing")
    notes.append("time and cost assume the whole token budget runs at the chosen strategy's estimated "
                 "throughput" + (" (calibrated)" if calibration is not None else " (analytical, uncalibrated)"))
    notes.extend(f"{o.label}: {o.reason}" for o in results if not o.feasible)
    return notes


def run_whatif(model: ModelSpec, options: Sequence[str | HardwareOption | tuple[str, int]], workload: Workload,
               *, token_budget: float | None = None, tier: str = "on_demand", price_book: PriceBook | None = None,
               goodput: float = 1.0, deadline_s: float | None = None, max_cost_usd: float | None = None,
               budget: int = 300, seed: int = 0, min_headroom_gib: float = 0.0,
               precisions: list[str] | None = None, calibration: Any = None, sampler: str = "nsga2",
               timeout: float | None = None, gpus_per_node: int | None = None, internode_bw: float | None = None,
               sensitivity: bool = True, prices_file: str | None = None,
               optimize_fn: Callable[..., Any] | None = None, estimate_fn: Callable[..., Any] | None = None,
               progress: Callable[[str], None] | None = None) -> WhatIfResult:
    """Optimize every hardware option, price the fastest fitting strategy, rank, and test sensitivity.

    `deadline_s` is wall-clock seconds, `max_cost_usd` a spending cap in USD; `budget` is search trials
    per option; `gpus_per_node` / `internode_bw` (bytes/s per GPU) override the GPU's defaults.
    Raises SpecError/AutoparError for bad inputs (before any search runs); an option on which nothing
    fits is reported as infeasible, not raised.
    """
    t_start = _time.perf_counter()
    tokens = token_budget if token_budget is not None else workload.token_budget
    if tokens is None:
        raise SpecError("tokens: give the token budget to train (e.g. --tokens 1T)")
    tokens = parse_tokens(tokens)
    goodput = check_goodput(goodput)
    tier = normalize_tier(tier)
    if deadline_s is not None and not deadline_s > 0:
        raise SpecError(f"deadline={deadline_s!r} must be a positive duration")
    if max_cost_usd is not None and not max_cost_usd > 0:
        raise SpecError(f"max_cost={max_cost_usd!r} must be a positive amount of USD")
    if budget < 1:
        raise SpecError(f"budget={budget!r} must be at least 1 trial per option")
    opts = parse_options(options)
    book = price_book if price_book is not None else default_price_book()
    workload = workload.model_copy(update={"token_budget": tokens})

    from autopar.catalog import get_gpu

    prepared = []  # validate every option and price before searching anything
    for opt in opts:
        gpu = get_gpu(opt.gpu)
        entry = book.entry(gpu.name, tier)
        cluster = _cluster(gpu, opt, entry.usd_per_gpu_hour, gpus_per_node, internode_bw)
        prepared.append((opt, cluster, entry))

    if optimize_fn is None:
        from autopar.search import optimize as optimize_fn
    search_kwargs: dict[str, Any] = dict(
        budget=budget, objectives=("throughput", "headroom", "cost"), seed=seed, sampler=sampler,
        min_headroom_gib=min_headroom_gib, precisions=precisions, price_book=book, tier=tier,
        calibration=calibration, timeout=timeout)

    results: list[OptionResult] = []
    for i, (opt, cluster, entry) in enumerate(prepared, 1):
        if progress is not None:
            progress(f"[{i}/{len(prepared)}] optimizing {opt.label} ({budget} trials)")
        results.append(_search_option(
            model, cluster, workload, opt, tier=tier, price=entry.usd_per_gpu_hour, source=entry.source,
            token_budget=tokens, goodput=goodput, deadline_s=deadline_s, max_cost_usd=max_cost_usd,
            optimize_fn=optimize_fn, search_kwargs=search_kwargs))

    cands = [Candidate(o.label, o.time_to_train_s, o.total_cost_usd)  # type: ignore[arg-type]
             for o in results if o.figures is not None]
    ranking = rank(cands, deadline_s, max_cost_usd)
    front = pareto(cands)
    for o in results:
        if o.label in ranking:
            o.rank = ranking.index(o.label) + 1
        o.on_pareto = o.label in front
    message = headline(cands, ranking, deadline_s, max_cost_usd, [o.label for o in results if not o.feasible])

    rows: list[SensitivityRow] = []
    if sensitivity and cands:
        if progress is not None:
            progress("sensitivity: prices ±20%, inter-node bandwidth halved")
        from autopar.costs.sensitivity import run_sensitivity

        rows = run_sensitivity(model, workload, results, ranking, deadline_s, max_cost_usd, estimate_fn)

    notes = _notes(prepared, results, tier, goodput, calibration)
    return WhatIfResult(model=model, workload=workload, token_budget=tokens, tier=tier, goodput=goodput,
                        deadline_s=deadline_s, max_cost_usd=max_cost_usd, options=results, ranking=ranking,
                        pareto=front, sensitivity=rows, message=message, seed=seed, search_budget=budget,
                        wall_s=_time.perf_counter() - t_start, prices_file=prices_file, notes=notes)
