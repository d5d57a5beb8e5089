"""Sizing for a deadline: the fewest GPUs of each type that train the token budget in time.

For each GPU type, candidate counts (whole hosts, or a system's racks/nodes, up to a maximum; or the counts
the option lists) are searched in increasing order with the what-if's own search (`--sampler auto` sweeps
small spaces exactly), and the first count whose fastest fitting strategy meets the deadline is the answer.
Throughput is not monotone in the count (the global batch must split evenly over data-parallel ranks, and
layouts come and go), so there is no bisection; the one shortcut is a proven lower bound:

    tokens/s at N GPUs  <=  N x peak FLOP/s / model FLOPs per token    (MFU <= 1 at the highest peak searched)

so a count N with  N x peak x goodput x deadline < tokens x FLOPs per token  cannot meet the deadline and is
not searched. Every estimate is checked against that bound; one above it (a calibration that claims more than
the peak) turns the shortcut off for that GPU and says so.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autopar.costs.bands import Tie
from autopar.costs.figures import format_duration, format_tokens
from autopar.costs.options import HardwareOption, parse_counts, scaled_workload
from autopar.costs.whatif_types import OptionResult
from autopar.defaults import (
    DEFAULT_MIN_HEADROOM_GIB,
    DEFAULT_SAMPLER,
    DEFAULT_SIZING_MAX_GPUS,
    DEFAULT_WHATIF_BUDGET,
)
from autopar.errors import SpecError
from autopar.specs import ClusterSpec, GPUSpec, ModelSpec, Workload

PROGRESS_EVERY = 10  # a progress line every this many counts searched (a sizing can search hundreds)


@dataclass(frozen=True)
class SizingOption:
    """A GPU type to size: its candidate counts are multiples of `unit` up to the maximum, or `counts`."""

    gpu: str  # catalog name
    unit: int  # GPUs per candidate step (a host, or a system's rack/node)
    unit_name: str  # "node", "rack", "host"
    counts: tuple[int, ...] = ()  # explicit candidates (GPU:256,512 or GPU:64..1024); () = every unit
    gpus_per_node: int | None = None  # a system's host size (None: the run's --gpus-per-node or the GPU's)
    nvlink_domain: int | None = None  # a system's NVLink domain (None: the run's or the GPU's)
    name: str = ""  # the system's name when sized as one (gb200-nvl72); "" = the GPU's

    @property
    def label(self) -> str:
        """The option's name in tables and JSON: the system's, else the GPU's."""
        return self.name or self.gpu

    def candidates(self, max_gpus: int) -> list[int]:
        """Counts to try, increasing: the listed ones, else every whole unit up to max_gpus."""
        if self.counts:
            return sorted(set(self.counts))
        return list(range(self.unit, max_gpus + 1, self.unit))


def parse_sizing_option(text: str, gpus_per_node: int | None) -> SizingOption:
    """`GPU` (every whole host), `GPU:COUNTS` (those counts) or a system shorthand such as `gb200-nvl72`
    (every whole rack or node of it; `autopar clusters`) for --deadline sizing. A name that is both a
    system and a GPU alias (dgx-h100) is the system; with counts it is the GPU."""
    from autopar.catalog import get_gpu
    from autopar.catalog.clusters import system_catalog
    from autopar.catalog.names import exact_key

    name, sep, counts = str(text).rpartition(":") if ":" in str(text) else (str(text), "", "")
    if not name.strip():
        raise SpecError(f"option={text!r}: missing GPU name")
    if not sep and exact_key(name) in system_catalog().exact:  # with counts, a name is read as a GPU's
        if gpus_per_node is not None:
            raise SpecError(f"option={text!r}: the system sets GPUs per host; drop --gpus-per-node")
        return system_sizing_option(name)
    gpu = get_gpu(name.strip())
    listed = tuple(parse_counts(counts, field=f"option={text!r}")) if sep else ()
    host = gpus_per_node or gpu.host_size or gpu.scaleup_domain
    return SizingOption(gpu.name, host, "host", listed)


def system_sizing_option(name: str) -> SizingOption:
    """`--cluster NAME` without a count: every whole unit (rack or node) of that system."""
    from autopar.catalog.clusters import system_catalog

    sys_ = system_catalog().get(name.strip())
    return SizingOption(
        sys_.gpu, sys_.unit_gpus, sys_.unit, (), sys_.gpus_per_node, sys_.nvlink_domain, sys_.name
    )


def peak_tokens_per_gpu(
    model: ModelSpec, workload: Workload, gpu: GPUSpec, precisions: Sequence[str]
) -> float:
    """Tokens/s one GPU would train at 100% MFU of its highest searched peak (an upper bound, see module doc)."""
    from autopar.perf.finetune import weight_grad_gemms
    from autopar.perf.flops import model_flops_per_step

    per_token = (
        model_flops_per_step(model, workload.seq_len, 1, True, weight_grad_gemms(workload)) / workload.seq_len
    )
    peak = max(gpu.peak_flops(p) for p in (precisions or [workload.precision]))
    return peak / per_token


def lower_bound_count(tokens: float, deadline_s: float, goodput: float, peak_per_gpu: float) -> int:
    """The fewest GPUs that could meet the deadline even at the peak: ceil(tokens / (deadline x goodput x peak))."""
    return max(1, math.ceil(tokens / (deadline_s * goodput * peak_per_gpu) * (1 - 1e-12)))


@dataclass
class SizingResult:
    """The answer for one GPU type: the fewest GPUs that meet the deadline, or why none in range does."""

    gpu: str
    unit: int
    unit_name: str
    max_gpus: int  # the largest candidate count
    answer: OptionResult | None  # the minimum count that meets the deadline (None: cannot)
    searched: list[OptionResult] = field(default_factory=list)  # every count searched, increasing
    lower_bound: int = 1  # fewer GPUs cannot meet the deadline even at 100% MFU
    reason: str = ""  # why no count meets the deadline
    notes: list[str] = field(default_factory=list)
    option: str = ""  # the option as named: the GPU, or the system (gb200-nvl72)
    # When the answer's layout is not recipe-style (costs/recipe_style.py): the fewest GPUs, up to
    # RECIPE_STYLE_REACH x the answer's, whose fastest recipe-style layout meets the deadline (None: none)
    recipe_style: OptionResult | None = None
    recipe_style_searched: list[int] = field(
        default_factory=list
    )  # the counts searched for it past the answer

    @property
    def fastest(self) -> OptionResult | None:
        """The fastest count searched (for an option that cannot meet the deadline)."""
        ok = [o for o in self.searched if o.figures is not None]
        return min(ok, key=lambda o: o.time_to_train_s) if ok else None  # type: ignore[arg-type,return-value]  # ok: searched with figures under the token budget, so timed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (one `sizing` entry of `autopar whatif --deadline --json`)."""
        a = self.answer
        return {
            "option": self.option or self.gpu,
            "gpu": self.gpu,
            "meets_deadline": a is not None,
            "min_count": a.count if a else None,
            "unit": self.unit,
            "unit_name": self.unit_name,
            "max_count": self.max_gpus,
            "lower_bound": self.lower_bound,
            "counts_searched": [o.count for o in self.searched],
            "recipe_style_counts_searched": list(self.recipe_style_searched),
            "answer": a.to_dict() if a else None,
            "fastest": self.fastest.to_dict() if (a is None and self.fastest) else None,
            "recipe_style_answer": self.recipe_style.to_dict() if self.recipe_style else None,
            "reason": self.reason or None,
            "notes": list(self.notes),
        }


@dataclass
class SizingContext:
    """What every count's search shares: the problem, the prices, the search settings, the host shape."""

    model: ModelSpec
    workload: Workload  # token_budget set
    tokens: float
    goodput: float
    deadline_s: float
    precisions: Sequence[str]
    batch_tokens_per_gpu: float | None
    prices: dict[str, Any]  # GPU -> ResolvedPrice, resolved before any search
    search_kwargs: dict[str, Any]  # for optimize_fn (budget, seed, sampler, price book, tier, ...)
    optimize_fn: Callable[..., Any]
    gpus_per_node: int | None = None  # the run's --gpus-per-node (a system's own wins)
    internode_bw: float | None = None
    nvlink_domain: int | None = None
    progress: Callable[[str], None] | None = None
    transport: str | None = None

    def cluster(self, gpu: GPUSpec, ho: HardwareOption, opt: SizingOption) -> ClusterSpec:
        """The cluster of one candidate count (a system's host and NVLink domain, else the run's)."""
        from autopar.costs.whatif import _cluster

        per_node = opt.gpus_per_node or self.gpus_per_node
        domain = opt.nvlink_domain or self.nvlink_domain
        return _cluster(gpu, ho, per_node, self.internode_bw, domain, self.transport)

    @property
    def terms(self) -> Any:
        """What prices a trial (costs.whatif.Terms): the model, tokens, goodput and the deadline."""
        from autopar.costs.whatif import Terms

        return Terms(self.model, self.tokens, self.goodput, self.deadline_s)

    def search(self, cluster: ClusterSpec, wl: Workload, ho: HardwareOption) -> OptionResult:
        """The what-if's search of one count: its fastest fitting strategy, priced."""
        from autopar.costs.whatif import _search_option

        return _search_option(
            self.model,
            cluster,
            wl,
            ho,
            price=self.prices[ho.gpu],
            token_budget=self.tokens,
            goodput=self.goodput,
            deadline_s=self.deadline_s,
            max_cost_usd=None,
            optimize_fn=self.optimize_fn,
            search_kwargs=self.search_kwargs,
        )


def size_option(opt: SizingOption, max_gpus: int, ctx: SizingContext) -> SizingResult:
    """Search candidate counts of one GPU type in increasing order; stop at the first that meets the deadline.
    Counts under the peak bound are skipped, unless an estimate breaks the bound: then every count is searched."""
    from autopar.catalog import get_gpu

    gpu = get_gpu(opt.gpu)
    peak = peak_tokens_per_gpu(ctx.model, ctx.workload, gpu, ctx.precisions)
    bound = lower_bound_count(ctx.tokens, ctx.deadline_s, ctx.goodput, peak)
    cands = opt.candidates(max_gpus)
    out = SizingResult(
        opt.gpu,
        opt.unit,
        opt.unit_name,
        max(cands) if cands else max_gpus,
        None,
        lower_bound=bound,
        option=opt.label,
    )
    out.searched = _scan(opt, gpu, [n for n in cands if n >= bound], ctx)
    above = [
        o for o in out.searched if o.tokens_per_s is not None and o.tokens_per_s > o.count * peak * (1 + 1e-9)
    ]
    if above and any(n < bound for n in cands):
        out.notes.append(
            f"{opt.label}: {above[0].label} is estimated above 100% MFU of its peak, so the lower bound of "
            f"{bound} GPUs does not hold for these estimates: every count was searched"
        )
        out.searched = _scan(opt, gpu, cands, ctx)
    last = out.searched[-1] if out.searched else None
    if last is not None and last.meets_deadline:
        out.answer = last
        if last.verify:
            out.recipe_style, out.recipe_style_searched = _recipe_style_answer(opt, gpu, cands, last, ctx)
            if out.recipe_style is None:
                out.notes.append(
                    f"{opt.label}: no count from {last.count} to {RECIPE_STYLE_REACH * last.count} GPUs has a "
                    "recipe-style layout that meets the deadline (searched: "
                    f"{', '.join(str(n) for n in out.recipe_style_searched) or 'none'})"
                )
    else:
        out.reason = _why_not(opt, out, cands, ctx.deadline_s)
    return out


RECIPE_STYLE_REACH = 2  # a recipe-style answer is looked for up to this many times the answer's GPU count


def _recipe_style_answer(
    opt: SizingOption, gpu: GPUSpec, cands: list[int], answer: OptionResult, ctx: SizingContext
) -> tuple[OptionResult | None, list[int]]:
    """The fewest GPUs from the answer's count up to RECIPE_STYLE_REACH x it whose fastest recipe-style
    layout meets the deadline (the answer's own search first, then each larger candidate count), and the
    counts past the answer searched for it."""
    from autopar.costs.whatif import recipe_style_option

    counts = [n for n in cands if answer.count <= n <= RECIPE_STYLE_REACH * answer.count]
    if ctx.progress is not None:
        ctx.progress(f"sizing {opt.label}: a recipe-style layout from {answer.count} GPUs up")
    searched: list[int] = []
    for n in counts:
        if n == answer.count:
            res = answer
        else:
            searched.append(n)
            ho = HardwareOption(opt.gpu, n)
            res = ctx.search(
                ctx.cluster(gpu, ho, opt), scaled_workload(ctx.workload, n, ctx.batch_tokens_per_gpu), ho
            )
        alt = res if res.feasible and not res.verify else recipe_style_option(res, ctx.terms)
        if alt is not None and alt.time_to_train_s is not None and alt.time_to_train_s <= ctx.deadline_s:
            alt.meets_deadline = True
            return alt, searched
    return None, searched


def _scan(opt: SizingOption, gpu: GPUSpec, counts: list[int], ctx: SizingContext) -> list[OptionResult]:
    """Search `counts` in increasing order until one meets the deadline; every result, in order."""
    done: list[OptionResult] = []
    for i, n in enumerate(counts):
        ho = HardwareOption(opt.gpu, n)
        wl = scaled_workload(ctx.workload, n, ctx.batch_tokens_per_gpu)
        if ctx.progress is not None and i % PROGRESS_EVERY == 0:
            ctx.progress(f"sizing {opt.label}: {n} GPUs ({i + 1} of at most {len(counts)} counts)")
        res = ctx.search(ctx.cluster(gpu, ho, opt), wl, ho)
        res.meets_deadline = None if res.figures is None else res.time_to_train_s <= ctx.deadline_s  # type: ignore[operator]  # figures under the token budget: time is set
        done.append(res)
        if res.meets_deadline:
            break
    return done


def _why_not(opt: SizingOption, out: SizingResult, cands: list[int], deadline_s: float) -> str:
    """One sentence: why no candidate count of this GPU meets the deadline."""
    top = max(cands) if cands else 0
    limit = f"{top} GPUs" + ("" if opt.counts else f" (--max-gpus; whole {opt.unit_name}s of {opt.unit})")
    if out.lower_bound > top:
        return (
            f"cannot meet the {format_duration(deadline_s)} deadline within {limit}: even at 100% MFU it "
            f"needs at least {out.lower_bound} GPUs"
        )
    f = out.fastest
    best = f" (fastest searched: {f.label} in {format_duration(f.time_to_train_s)})" if f else ""  # type: ignore[arg-type]  # fastest is one of the timed options
    return f"cannot meet the {format_duration(deadline_s)} deadline within {limit}{best}"


@dataclass
class DeadlineResult:
    """`autopar whatif --deadline` sizing: per GPU type, the fewest GPUs that meet the deadline."""

    model: ModelSpec
    workload: Workload
    token_budget: float
    tier: str
    goodput: float
    deadline_s: float
    rows: list[SizingResult]
    seed: int
    search_budget: int
    wall_s: float
    batch_tokens_per_gpu: float | None = None
    notes: list[str] = field(default_factory=list)
    message: str = ""  # the verdict line: the cheapest answer, and the ties the model's band cannot rank
    ties: list[Tie] = field(default_factory=list)

    @property
    def answers(self) -> list[OptionResult]:
        """Each GPU type's answer (the fewest GPUs that meet the deadline), in the rows' order."""
        return [r.answer for r in self.rows if r.answer is not None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (`autopar whatif --deadline D --option GPU --json`)."""
        return {
            "mode": "sizing",
            "model": self.model.name,
            "tokens": self.token_budget,
            "seq_len": self.workload.seq_len,
            "global_batch": None if self.batch_tokens_per_gpu else self.workload.global_batch,
            "batch_tokens_per_gpu": self.batch_tokens_per_gpu,
            "precision": self.workload.precision,
            "tier": self.tier,
            "goodput": self.goodput,
            "deadline_s": self.deadline_s,
            "message": self.message,
            "ties": [t.to_dict() for t in self.ties],
            "sizing": [r.to_dict() for r in self.rows],
            "seed": self.seed,
            "search_budget": self.search_budget,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
        }


def run_sizing(
    model: ModelSpec,
    options: Sequence[SizingOption],
    workload: Workload,
    *,
    token_budget: float | str,
    deadline_s: float,
    max_gpus: int = DEFAULT_SIZING_MAX_GPUS,
    batch_tokens_per_gpu: float | None = None,
    tier: str = "on_demand",
    price_book: Any = None,
    goodput: float = 1.0,
    budget: int = DEFAULT_WHATIF_BUDGET,
    seed: int = 0,
    min_headroom_gib: float = DEFAULT_MIN_HEADROOM_GIB,
    precisions: list[str] | None = None,
    calibration: Any = None,
    sampler: str = DEFAULT_SAMPLER,
    gpus_per_node: int | None = None,
    internode_bw: float | None = None,
    nvlink_domain: int | None = None,
    transport: str | None = None,
    optimize_fn: Callable[..., Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> DeadlineResult:
    """For each GPU type, the fewest GPUs (candidates in increasing order) whose best fitting strategy trains
    `token_budget` tokens within `deadline_s` seconds, priced like `run_whatif`; SpecError for bad inputs."""
    from autopar.catalog import get_gpu
    from autopar.catalog.pricefile import default_price_book
    from autopar.catalog.prices import normalize_tier, resolve_price
    from autopar.costs.figures import check_goodput, parse_tokens

    t0 = _time.perf_counter()
    tokens, goodput, tier = parse_tokens(token_budget), check_goodput(goodput), normalize_tier(tier)
    _check(deadline_s, max_gpus, budget)
    book = price_book if price_book is not None else default_price_book()
    prices = {o.gpu: resolve_price(get_gpu(o.gpu), book, tier) for o in options}  # all before any search
    if optimize_fn is None:
        from autopar.search import optimize

        optimize_fn = optimize
    search_kwargs: dict[str, Any] = dict(
        budget=budget, objectives=("throughput", "headroom", "cost"), seed=seed, sampler=sampler,
        min_headroom_gib=min_headroom_gib, precisions=precisions, price_book=book, tier=tier,
        calibration=calibration,
    )  # fmt: skip
    wl = workload.model_copy(update={"token_budget": tokens})
    ctx = SizingContext(
        model, wl, tokens, goodput, deadline_s, precisions or [wl.precision], batch_tokens_per_gpu, prices,
        search_kwargs, optimize_fn, gpus_per_node, internode_bw, nvlink_domain, progress, transport,
    )  # fmt: skip
    rows = [size_option(o, max_gpus, ctx) for o in options]
    result = DeadlineResult(
        model, wl, tokens, tier, goodput, deadline_s, rows, seed, budget, _time.perf_counter() - t0,
        batch_tokens_per_gpu, _sizing_notes(options, rows, ctx, tier),
    )  # fmt: skip
    _verdict(result, calibration)
    return result


def _verdict(result: DeadlineResult, calibration: Any) -> None:
    """The answers' evidence, their ties within the model's band and the verdict line (the cheapest answer),
    and the notes on answers whose band reaches past the deadline."""
    from autopar.costs.evidence import attach_evidence
    from autopar.costs.ranking import Candidate, headline, rank
    from autopar.costs.whatif import deadline_band_notes, mark_ties, with_ties

    shown = [r.answer or r.fastest for r in result.rows] + [r.recipe_style for r in result.rows]
    attach_evidence([o for o in shown if o is not None], result.model, result.workload, calibration)
    answers = result.answers
    cands = [Candidate(o.label, o.time_to_train_s, o.total_cost_usd) for o in answers]  # type: ignore[arg-type]  # answers are timed and priced
    if not cands:
        result.message = (
            f"No option meets the {format_duration(result.deadline_s)} deadline within the counts searched; "
            "see each option's reason."
        )
        return
    ranking = rank(cands, result.deadline_s)
    result.ties = mark_ties(
        answers, ranking[0], on=("cost",)
    )  # every answer meets the deadline: cost decides
    cannot = [r.option or r.gpu for r in result.rows if r.answer is None]
    result.message = with_ties(headline(cands, ranking, result.deadline_s, None), result.ties)
    if cannot:
        result.message += f" {', '.join(cannot)}: cannot meet it within the counts searched."
    result.message += "".join(_cheaper_recipe_style(r) for r in result.rows)
    result.notes[:0] = deadline_band_notes(answers, result.deadline_s)


def _check(deadline_s: float, max_gpus: int, budget: int) -> None:
    """SpecError naming the field for a deadline, maximum count or budget out of range."""
    if not (deadline_s > 0 and math.isfinite(deadline_s)):
        raise SpecError(f"deadline={deadline_s!r} must be a positive duration")
    if not (isinstance(max_gpus, int) and max_gpus >= 1):
        raise SpecError(f"max-gpus={max_gpus!r} must be a positive whole number of GPUs")
    if budget < 1:
        raise SpecError(f"budget={budget!r} must be at least 1 trial per count")


def _cheaper_recipe_style(r: SizingResult) -> str:
    """' B200:512 (a recipe-style layout on more GPUs) costs less than B200:384: $1.29M against $1.46M.'
    when a row's recipe-style answer is the cheaper one, else ''."""
    a, alt = r.answer, r.recipe_style
    if a is None or alt is None or a.total_cost_usd is None or alt.total_cost_usd is None:
        return ""
    if alt.total_cost_usd >= a.total_cost_usd:
        return ""
    from autopar.costs.figures import format_usd

    return (
        f" {alt.label} (a recipe-style layout on more GPUs) costs less than {a.label}: "
        f"{format_usd(alt.total_cost_usd)} against {format_usd(a.total_cost_usd)}."
    )


def _sizing_notes(
    options: Sequence[SizingOption], rows: Sequence[SizingResult], ctx: SizingContext, tier: str
) -> list[str]:
    """Prices and their sources, each GPU's own notes, the batch cap (fixed batch only), the bound."""
    from autopar.costs.whatif import batch_cap_note, price_notes

    notes = price_notes([(o.gpu, ctx.prices[o.gpu]) for o in options], tier)
    for o, r in zip(options, rows, strict=True):
        notes.extend(r.notes)
        fixed = ctx.batch_tokens_per_gpu is None
        cap = batch_cap_note(o.label, r.searched, ctx.workload.global_batch) if fixed else None
        if cap:
            notes.append(cap)
    notes.append(
        f"counts below each GPU's lower bound were not searched: fewer GPUs cannot train "
        f"{format_tokens(ctx.tokens)} tokens in time even at 100% MFU of the highest peak searched"
    )
    return notes
