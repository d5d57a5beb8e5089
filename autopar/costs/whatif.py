"""Procurement what-ifs: best strategy, time and cost to train per hardware option, ranked.

`run_whatif` optimizes each hardware option (GPU type x count) with `autopar.search.optimize`,
keeps the strategy that trains the token budget fastest while fitting in memory, turns it into
money and time with `cost_figures`, ranks the options and runs a small sensitivity analysis.

The result dataclasses live in `autopar.costs.whatif_types` and are re-exported here.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from autopar.catalog.pricefile import default_price_book
from autopar.catalog.prices import PriceBook, ResolvedPrice, normalize_tier, resolve_price
from autopar.costs.bands import BAND_NAME, Banded, Tie, figure_band, find_ties, relative_band
from autopar.costs.figures import check_goodput, cost_figures, format_duration, parse_tokens
from autopar.costs.options import HardwareOption, parse_options, scaled_workload
from autopar.costs.ranking import Candidate, headline, pareto, rank
from autopar.costs.whatif_types import (
    OptionResult,
    ScenarioOption,
    SensitivityRow,
    WhatIfResult,
    WhatIfSettings,
)
from autopar.errors import AutoparError, SpecError
from autopar.specs import ClusterSpec, GPUSpec, ModelSpec, Workload

__all__ = [
    "HardwareOption",
    "OptionResult",
    "ScenarioOption",
    "SensitivityRow",
    "WhatIfResult",
    "WhatIfSettings",
    "choose_trial",
    "run_whatif",
]

from autopar.units import GiB

# ---------------------------------------------------------------------------------------------
# Running the what-if
# ---------------------------------------------------------------------------------------------


def _cluster(
    gpu: GPUSpec,
    opt: HardwareOption,
    gpus_per_node: int | None = None,
    internode_bw: float | None = None,
    nvlink_domain: int | None = None,
    transport: str | None = None,
) -> ClusterSpec:
    """The cluster for one option; SpecError naming the option if invalid. Its price is not set on it: the
    search resolves the same price from the same book and tier, keeping the price's source (not "override")."""
    try:
        return ClusterSpec(
            gpu=gpu,
            num_gpus=opt.count,
            gpus_per_node=gpus_per_node,
            nvlink_domain=nvlink_domain,
            internode_bw=internode_bw,
            **({} if transport is None else {"transport": transport}),
        )
    except ValidationError as e:
        msg = "; ".join(err.get("msg", "invalid").removeprefix("Value error, ") for err in e.errors())
        raise SpecError(f"option={opt.label}: {msg}") from None


def choose_trial(search: Any, min_tps: float | None = None) -> Any:
    """The feasible trial that trains fastest (max tokens/s; ties -> more headroom), or None; within the
    near-tie tolerance of it, a recipe-style layout instead (costs/recipe_style.py) when the search states
    its model and clusters. `min_tps` (the throughput a deadline needs): met by the fastest, the preferred
    layout must meet it too."""
    feasible = [t for t in search.trials if t.feasible and t.estimate is not None]
    if not feasible:
        return None
    fastest = max(feasible, key=lambda t: (_speed(t), t.estimate.headroom_bytes, -t.number))
    model = getattr(search, "model", None)
    if model is None:
        return fastest
    from autopar.costs.recipe_style import prefer_recipe_style

    by_hw = {(c.gpu.name, c.num_gpus): c for c in getattr(search, "clusters", ())}

    def gaps(t: Any) -> tuple[str, ...]:
        cluster = by_hw.get((t.gpu, t.num_gpus))
        return () if cluster is None else _gaps(model, cluster, t)

    ranked = sorted(feasible, key=lambda t: (-_speed(t), -t.estimate.headroom_bytes, t.number))
    return prefer_recipe_style(fastest, ranked, _speed, gaps, min_tps)


def _speed(t: Any) -> float:
    """A trial's cluster tokens/s: the search's throughput objective, else its estimate's."""
    return float(t.values.get("throughput", t.estimate.tokens_per_s))


def _layout_of(t: Any) -> Any:
    """The trial's strategy as its estimate completed it (unset knobs filled), else as searched."""
    est = t.estimate
    return est.strategy if est is not None and getattr(est, "strategy", None) is not None else t.strategy


def _gaps(model: ModelSpec, cluster: ClusterSpec, t: Any) -> tuple[str, ...]:
    from autopar.costs.recipe_style import recipe_style_gaps

    return recipe_style_gaps(model, cluster, _layout_of(t))


def _infeasible_reason(search: Any) -> str:
    """Why nothing fit: the reason of the evaluated trial that came closest to fitting."""
    with_est = [t for t in search.trials if t.estimate is not None]
    if with_est:
        t = max(with_est, key=lambda t: t.estimate.headroom_bytes)
        return f"no strategy fits in {len(search.trials)} trials; closest: {t.strategy.label()}: {t.reason}"
    reasons = [t.reason for t in search.trials if t.reason]
    return f"no valid strategy in {len(search.trials)} trials" + (f"; e.g. {reasons[0]}" if reasons else "")


def _search_option(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    opt: HardwareOption,
    *,
    price: ResolvedPrice,
    token_budget: float,
    goodput: float,
    deadline_s: float | None,
    max_cost_usd: float | None,
    optimize_fn: Callable[..., Any],
    search_kwargs: dict[str, Any],
) -> OptionResult:
    """Optimize one hardware option and turn its fastest fitting strategy into money and time."""
    base = OptionResult(
        label=opt.label,
        gpu=opt.gpu,
        count=opt.count,
        tier=price.tier,
        usd_per_gpu_hour=price.usd_per_gpu_hour,
        price_source=price.source,
        feasible=False,
        cluster=cluster,
        price_provenance=price.provenance,
        price_borrowed_from=price.borrowed_from,
        global_batch=workload.global_batch,
    )
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
    terms = Terms(model, token_budget, goodput, deadline_s, max_cost_usd)
    trial = choose_trial(search, terms.needed_tokens_per_s)
    if trial is None:
        base.reason = _infeasible_reason(search)
        return base
    price_trial(base, trial, terms)
    return base


@dataclass(frozen=True)
class Terms:
    """What turns a trial into money and time: the model, the token budget, goodput and the limits."""

    model: ModelSpec
    token_budget: float
    goodput: float
    deadline_s: float | None = None
    max_cost_usd: float | None = None

    @property
    def needed_tokens_per_s(self) -> float | None:
        """The cluster throughput that meets the deadline (None without one)."""
        return None if self.deadline_s is None else self.token_budget / (self.deadline_s * self.goodput)


def price_trial(o: OptionResult, trial: Any, terms: Terms) -> None:
    """Set the option's strategy, figures, band, recipe-style gaps and limits from one feasible trial."""
    est = trial.estimate
    tps = _speed(trial)
    figs = cost_figures(tps, o.count, o.usd_per_gpu_hour, terms.token_budget, terms.goodput)
    o.band = figure_band(figs, relative_band(est))
    o.verify = _gaps(terms.model, o.cluster, trial) if o.cluster is not None else ()
    o.feasible = True
    o.strategy = trial.strategy
    o.strategy_label = trial.strategy.label()
    o.precision = trial.precision
    o.estimate = est
    o.tokens_per_s = tps
    o.mfu = est.mfu
    o.headroom_gib = est.headroom_bytes / GiB
    o.figures = figs
    if terms.deadline_s is not None:
        o.meets_deadline = figs.time_to_train_s <= terms.deadline_s  # type: ignore[operator]  # a what-if always has a token budget: time is set
    if terms.max_cost_usd is not None:
        o.within_cost_cap = figs.total_cost_usd <= terms.max_cost_usd  # type: ignore[operator]  # a what-if always has a token budget: cost is set


def recipe_style_option(o: OptionResult, terms: Terms) -> OptionResult | None:
    """The option at its fastest recipe-style layout among those its search found (costs/recipe_style.py),
    priced like the option; None when the search found none (or the option is already recipe-style)."""
    search, cluster = o.search, o.cluster
    if search is None or cluster is None or not o.verify:
        return None
    usual = [
        t
        for t in search.trials
        if t.feasible and t.estimate is not None and not _gaps(terms.model, cluster, t)
    ]
    if not usual:
        return None
    best = max(usual, key=lambda t: (_speed(t), t.estimate.headroom_bytes, -t.number))
    alt = replace(o, ties=[], evidence=None, meets_deadline=None, within_cost_cap=None, rank=None)
    price_trial(alt, best, terms)
    return alt


def _calibrated_by(calibration: Any) -> str:
    """'corrected by calibration 'NAME' (N runs from ...)', naming the model actually used."""
    named = getattr(calibration, "provenance", None)
    return f"corrected by {named()}" if callable(named) else "calibrated"


def _notes(
    prepared: list[tuple[HardwareOption, ClusterSpec, Any]],
    results: list[OptionResult],
    tier: str,
    goodput: float,
    calibration: Any,
) -> list[str]:
    """Plain-language notes: the price used per GPU and its source, goodput, assumptions, failures."""
    notes = price_notes([(opt.gpu, entry) for opt, _, entry in prepared], tier)
    if goodput < 1:
        notes.append(
            f"goodput {goodput:g}: times and costs include {100 * (1 - goodput):.0f}% of wall-clock "
            "time lost to restarts, failures and checkpointing"
        )
    notes.append(
        "time and cost assume the whole token budget runs at the chosen strategy's estimated "
        "throughput"
        + (f" ({_calibrated_by(calibration)})" if calibration is not None else " (analytical, uncalibrated)")
    )
    fabrics = sorted({cl.transport for _, cl, _ in prepared if cl.transport != "infiniband"})
    notes.extend(
        f"scale-out transport {t}: it sets the flex (DeepEP/HybridEP) dispatcher's RDMA rate" for t in fabrics
    )
    notes.extend(f"{o.label}: {o.reason}" for o in results if not o.feasible)
    return notes


def _banded(o: OptionResult) -> Banded:
    """What a tie needs of a priced option (costs/bands.py)."""
    b = o.band
    spans = {"total_cost_usd": b.total_cost_usd, "time_to_train_s": b.time_to_train_s} if b else {}
    return Banded(
        o.label,
        {"total_cost_usd": o.total_cost_usd, "time_to_train_s": o.time_to_train_s},  # type: ignore[dict-item]  # timed and priced options only
        {k: v for k, v in spans.items() if v is not None},
        (o.meets_deadline, o.within_cost_cap),
    )


def mark_ties(
    options: Sequence[OptionResult], winner: str | None, on: Sequence[str] = ("cost", "time")
) -> list[Tie]:
    """The ties with the recommended option (cost) and the fastest (time) among the timed options (those of
    `on`); each tied option's `ties` names what it ties on."""
    timed = [o for o in options if o.figures is not None and o.time_to_train_s is not None]
    ties = find_ties([_banded(o) for o in timed], winner, on)
    by = {o.label: o for o in timed}
    for t in ties:
        for label in t.labels:
            by[label].ties.append(t.on)
    return ties


def with_ties(message: str, ties: Sequence[Tie]) -> str:
    """The verdict line with one sentence per tie after it."""
    return " ".join([message, *(t.sentence()[0].upper() + t.sentence()[1:] + "." for t in ties)])


def deadline_band_notes(options: Sequence[OptionResult], deadline_s: float | None) -> list[str]:
    """Options whose band straddles the deadline: met only at the central estimate, or missed there but met at
    the band's fast end."""
    if deadline_s is None:
        return []
    out = []
    for o in options:
        b = o.band.time_to_train_s if o.band is not None else None
        if b is None or o.meets_deadline is None or not b[0] <= deadline_s <= b[1]:
            continue
        if o.meets_deadline:
            out.append(
                f"{o.label} meets the {format_duration(deadline_s)} deadline at its central estimate only: the "
                f"slow end of its {BAND_NAME} is {format_duration(b[1])}"
            )
        else:
            out.append(
                f"{o.label} misses the {format_duration(deadline_s)} deadline at its central estimate, but the "
                f"fast end of its {BAND_NAME} ({format_duration(b[0])}) meets it"
            )
    return out


def price_notes(priced: Sequence[tuple[str, ResolvedPrice]], tier: str) -> list[str]:
    """One note per GPU: the price used, its kind (built-in book, catalog default, price file, override),
    its source, and, for a price borrowed from another GPU, whose it is."""
    notes, seen = [], set()
    for gpu, entry in priced:
        if gpu in seen:
            continue
        seen.add(gpu)
        kind = entry.provenance or entry.origin  # a borrowed price's source starts "borrowed from GPU"
        notes.append(f"price {gpu} {tier}: ${entry.usd_per_gpu_hour:.2f}/GPU-h ({kind}; {entry.source})")
    return notes


def batch_cap_note(label: str, results: Sequence[OptionResult], global_batch: int) -> str | None:
    """A note when a fixed global batch limited the scaling of these counts of one GPU: a strategy whose
    data-parallel ranks already take one micro-batch each (DP x micro-batch = the batch), or counts with
    no layout because no data-parallel size divides the batch (the search's "dp must divide" refusal)."""
    no_layout = [o.count for o in results if "dp must divide" in o.reason]
    saturated = [
        o.count
        for o in results
        if o.strategy is not None
        and (o.strategy.dp or 0) * (o.strategy.micro_batch or 1) >= (o.global_batch or global_batch)
    ]
    what = []
    if saturated:
        what.append(
            f"at {saturated[-1]} GPUs every data-parallel rank already takes one micro-batch per step"
        )
    if no_layout:
        what.append(
            f"{len(no_layout)} of the counts searched had no layout whose data-parallel size divides it "
            f"(e.g. {no_layout[0]} GPUs)"
        )
    if not what:
        return None
    return (
        f"{label}: the fixed global batch of {global_batch} sequences limits scaling: "
        + "; ".join(what)
        + "; --batch-tokens-per-gpu lets it grow with the count"
    )


def run_whatif(
    model: ModelSpec,
    options: Sequence[str | HardwareOption | tuple[str, int]],
    workload: Workload,
    settings: WhatIfSettings | None = None,
    *,
    price_book: PriceBook | None = None,
    calibration: Any = None,
    optimize_fn: Callable[..., Any] | None = None,
    estimate_fn: Callable[..., Any] | None = None,
    progress: Callable[[str], None] | None = None,
    **fields: Any,
) -> WhatIfResult:
    """Optimize every hardware option, price the fastest fitting strategy, rank, and test sensitivity.

    How is `settings` (autopar.costs.whatif_types.WhatIfSettings), or its fields as keywords on top of it:
    `deadline_s` is wall-clock seconds, `max_cost_usd` a spending cap in USD; `budget` is search trials
    per option; `gpus_per_node` / `internode_bw` (bytes/s per GPU) override the GPU's defaults.
    With `storage`, each option is its own stored study (named `study_name`-OPTION, or after its
    inputs' fingerprint), so workers running the same what-if share the options and a re-run resumes:
    an option whose study already holds `budget` COMPLETE trials is only read back.
    With `batch_tokens_per_gpu`, each option's global batch is its count x that many tokens (whole sequences).
    Raises SpecError/AutoparError for bad inputs (before any search runs); an option on which nothing
    fits is reported as infeasible, not raised.
    """
    t_start = _time.perf_counter()
    s = _checked(settings or WhatIfSettings(), fields, workload)
    book = price_book if price_book is not None else default_price_book()
    workload = workload.model_copy(update={"token_budget": s.token_budget})
    prepared = _prepare(parse_options(options), book, s, workload)
    if optimize_fn is None:
        from autopar.search import optimize

        optimize_fn = optimize
    run = _Run(model, workload, s, book, calibration, optimize_fn, progress)
    results = [run.option(i, len(prepared), *p) for i, p in enumerate(prepared, 1)]
    return _assemble(run, prepared, results, estimate_fn, t_start)


def _checked(settings: WhatIfSettings, fields: dict[str, Any], workload: Workload) -> WhatIfSettings:
    """The settings with `fields` on top, validated: token budget (or the workload's), goodput, tier, caps."""
    s = WhatIfSettings.model_validate({**dict(settings), **fields}) if fields else settings
    tokens = s.token_budget if s.token_budget is not None else workload.token_budget
    if tokens is None:
        raise SpecError("tokens: give the token budget to train (e.g. --tokens 1T)")
    update: dict[str, Any] = {"token_budget": parse_tokens(tokens), "goodput": check_goodput(s.goodput)}
    update["tier"] = normalize_tier(s.tier)
    if s.deadline_s is not None and not s.deadline_s > 0:
        raise SpecError(f"deadline={s.deadline_s!r} must be a positive duration")
    if s.max_cost_usd is not None and not s.max_cost_usd > 0:
        raise SpecError(f"max_cost={s.max_cost_usd!r} must be a positive amount of USD")
    if s.budget < 1:
        raise SpecError(f"budget={s.budget!r} must be at least 1 trial per option")
    if s.storage is not None and s.sampler not in ("nsga2", "auto"):
        raise SpecError(f"storage: the {s.sampler} sampler does not use a study; drop --storage")
    return s.model_copy(update=update)


Prepared = tuple[HardwareOption, ClusterSpec, ResolvedPrice]


def _prepare(
    opts: Sequence[HardwareOption], book: PriceBook, s: WhatIfSettings, workload: Workload
) -> list[Prepared]:
    """Every option's cluster and price, validated before anything is searched."""
    from autopar.catalog import get_gpu

    prepared = []
    for opt in opts:
        gpu = get_gpu(opt.gpu)
        entry = resolve_price(gpu, book, s.tier)
        cluster = _cluster(gpu, opt, s.gpus_per_node, s.internode_bw, s.nvlink_domain, s.transport)
        scaled_workload(workload, opt.count, s.batch_tokens_per_gpu)  # a batch under one sequence: error now
        prepared.append((opt, cluster, entry))
    return prepared


@dataclass(frozen=True)
class _Run:
    """One what-if's inputs, shared by the search of every option."""

    model: ModelSpec
    workload: Workload
    settings: WhatIfSettings
    book: PriceBook
    calibration: Any
    optimize_fn: Callable[..., Any]
    progress: Callable[[str], None] | None

    def search_kwargs(self, opt: HardwareOption) -> dict[str, Any]:
        """The search settings of one option (its own stored study with --storage)."""
        s = self.settings
        kw: dict[str, Any] = dict(
            budget=s.budget,
            objectives=("throughput", "headroom", "cost"),
            seed=s.seed,
            sampler=s.sampler,
            min_headroom_gib=s.min_headroom_gib,
            precisions=s.precisions,
            price_book=self.book,
            tier=s.tier,
            calibration=self.calibration,
            timeout=s.timeout,
        )
        if s.storage is not None:
            kw["storage"] = s.storage
            kw["study_name"] = f"{s.study_name}-{opt.label}" if s.study_name else None
        return kw

    def option(
        self, i: int, n: int, opt: HardwareOption, cluster: ClusterSpec, entry: ResolvedPrice
    ) -> OptionResult:
        """Search option `i` of `n` and price its fastest fitting strategy."""
        s = self.settings
        if self.progress is not None:
            self.progress(f"[{i}/{n}] optimizing {opt.label} ({s.budget} trials)")
        return _search_option(
            self.model,
            cluster,
            scaled_workload(self.workload, opt.count, s.batch_tokens_per_gpu),
            opt,
            price=entry,
            token_budget=s.token_budget,  # type: ignore[arg-type]  # _checked parsed it to a float
            goodput=s.goodput,
            deadline_s=s.deadline_s,
            max_cost_usd=s.max_cost_usd,
            optimize_fn=self.optimize_fn,
            search_kwargs=self.search_kwargs(opt),
        )


def _sensitivity(
    run: _Run, results: list[OptionResult], ranking: list[str], estimate_fn: Callable[..., Any] | None
) -> list[SensitivityRow]:
    """The sensitivity rows (costs/sensitivity.py): prices, bandwidth, the model's error."""
    from autopar.costs.sensitivity import run_sensitivity

    if run.progress is not None:
        run.progress("sensitivity: prices ±20%, inter-node bandwidth halved, the model's 80% band")
    s = run.settings
    return run_sensitivity(
        run.model, run.workload, results, ranking, s.deadline_s, s.max_cost_usd, estimate_fn
    )


def _assemble(
    run: _Run,
    prepared: list[Prepared],
    results: list[OptionResult],
    estimate_fn: Callable[..., Any] | None,
    t_start: float,
) -> WhatIfResult:
    """Rank the options, run the sensitivity analysis, write the notes: the WhatIfResult."""
    s, workload = run.settings, run.workload
    cands = [
        Candidate(o.label, o.time_to_train_s, o.total_cost_usd)  # type: ignore[arg-type]  # options with figures under the token budget: time and cost set
        for o in results
        if o.figures is not None
    ]
    ranking = rank(cands, s.deadline_s, s.max_cost_usd)
    front = pareto(cands)
    for o in results:
        if o.label in ranking:
            o.rank = ranking.index(o.label) + 1
        o.on_pareto = o.label in front
    infeasible = [o.label for o in results if not o.feasible]
    ties = mark_ties(results, ranking[0] if ranking else None)
    message = with_ties(headline(cands, ranking, s.deadline_s, s.max_cost_usd, infeasible), ties)
    from autopar.costs.evidence import attach_evidence

    attach_evidence(results, run.model, workload, run.calibration)
    rows = _sensitivity(run, results, ranking, estimate_fn) if s.sensitivity and cands else []
    notes = _notes(prepared, results, s.tier, s.goodput, run.calibration) + deadline_band_notes(
        results, s.deadline_s
    )
    if s.batch_tokens_per_gpu is None:
        for gpu in dict.fromkeys(o.gpu for o in results):
            cap = batch_cap_note(gpu, [o for o in results if o.gpu == gpu], workload.global_batch)
            notes.extend([cap] if cap else [])
    return WhatIfResult(
        model=run.model,
        workload=workload,
        token_budget=s.token_budget,  # type: ignore[arg-type]  # _checked parsed it to a float
        tier=s.tier,
        goodput=s.goodput,
        deadline_s=s.deadline_s,
        max_cost_usd=s.max_cost_usd,
        options=results,
        ranking=ranking,
        pareto=front,
        sensitivity=rows,
        message=message,
        seed=s.seed,
        search_budget=s.budget,
        wall_s=_time.perf_counter() - t_start,
        prices_file=s.prices_file,
        notes=notes,
        batch_tokens_per_gpu=s.batch_tokens_per_gpu,
        ties=ties,
    )
