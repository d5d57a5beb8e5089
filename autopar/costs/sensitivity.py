"""Sensitivity of a what-if ranking: GPU prices ±20% and inter-node bandwidth halved.

Price scenarios rescale each option's cost (time is unchanged). The bandwidth scenario re-estimates
each option's chosen strategy on a cluster whose inter-node bandwidth is halved and scales the
option's throughput by the analytical ratio (so any calibration factor carries over); strategies
are held fixed, not re-searched, so the slowdown shown is an upper bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autopar.costs.ranking import Candidate, qualifies, rank
from autopar.costs.whatif_types import ScenarioOption, SensitivityRow
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

if TYPE_CHECKING:
    from autopar.costs.whatif_types import OptionResult, SensitivityRow
    from autopar.perf.types import Estimate

EstimateFn = Callable[[ModelSpec, ClusterSpec, Workload, Strategy], "Estimate"]

PRICE_FACTORS = (1.2, 0.8)
BANDWIDTH_FACTOR = 0.5


def _time_cost(o: OptionResult) -> tuple[float, float]:
    """(time to train, total cost) of a feasible option: one with figures under a token budget (so priced)."""
    f = o.figures
    if f is None or f.time_to_train_s is None or f.total_cost_usd is None:
        raise ValueError(f"option {o.label} has no time to train or cost")
    return f.time_to_train_s, f.total_cost_usd


def _row(
    scenario: str,
    kind: str,
    gpu: str | None,
    factor: float,
    cands: list[Candidate],
    baseline_winner: str | None,
    deadline_s: float | None,
    max_cost_usd: float | None,
    note: str = "",
) -> SensitivityRow:

    order = rank(cands, deadline_s, max_cost_usd)
    pos = {label: i + 1 for i, label in enumerate(order)}
    opts = []
    for c in cands:
        ok_t, _ = qualifies(c, deadline_s, max_cost_usd)
        opts.append(
            ScenarioOption(
                label=c.label,
                time_to_train_s=c.time_s,
                total_cost_usd=c.cost_usd,
                meets_deadline=None if deadline_s is None else ok_t,
                rank=pos[c.label],
            )
        )
    winner = order[0] if order else None
    return SensitivityRow(
        scenario=scenario,
        kind=kind,
        gpu=gpu,
        factor=factor,
        winner=winner,
        runner_up=order[1] if len(order) > 1 else None,
        winner_changed=winner != baseline_winner,
        options=opts,
        note=note,
    )


def bandwidth_ratio(
    model: ModelSpec,
    opt: OptionResult,
    workload: Workload,
    estimate_fn: EstimateFn,
    factor: float = BANDWIDTH_FACTOR,
) -> float:
    """tokens/s with inter-node bandwidth x factor over tokens/s as searched (same strategy)."""
    cluster = opt.cluster
    if cluster is None or opt.strategy is None or opt.estimate is None:
        return 1.0
    if cluster.num_gpus <= cluster.node_size:
        return 1.0  # one node: no inter-node traffic
    update: dict = {"precision": opt.precision} if opt.precision else {}
    if opt.global_batch is not None:  # the batch searched at this count (--batch-tokens-per-gpu scales it)
        update["global_batch"] = opt.global_batch
    wl = workload.model_copy(update=update) if update else workload
    base = estimate_fn(model, cluster, wl, opt.strategy)
    slow = estimate_fn(
        model, cluster.model_copy(update={"internode_bw": cluster.nic_bw * factor}), wl, opt.strategy
    )
    if base.tokens_per_s <= 0:
        return 1.0
    return slow.tokens_per_s / base.tokens_per_s


def run_sensitivity(
    model: ModelSpec,
    workload: Workload,
    options: Sequence[OptionResult],
    ranking: Sequence[str],
    deadline_s: float | None,
    max_cost_usd: float | None,
    estimate_fn: EstimateFn | None = None,
) -> list[SensitivityRow]:
    """Rows for each price move (±20%) of the winner's and runner-up's GPU types (plus the best other
    type when those two share one), and one row for inter-node bandwidth halved."""
    feasible = [o for o in options if o.figures is not None and o.figures.time_to_train_s is not None]
    if not feasible or not ranking:
        return []
    limits = (deadline_s, max_cost_usd)
    rows = [
        _price_row(feasible, gpu, f, ranking[0], limits)
        for gpu in _moved_gpus(feasible, ranking)
        for f in PRICE_FACTORS
    ]
    if estimate_fn is None:
        from autopar.perf import estimate

        estimate_fn = estimate
    rows.append(_bandwidth_row(model, workload, feasible, ranking[0], limits, estimate_fn))
    return rows


def _moved_gpus(feasible: Sequence[OptionResult], ranking: Sequence[str]) -> list[str]:
    """The winner's and runner-up's GPU types; when they share one, also the best other type."""
    by = {o.label: o for o in feasible}
    gpus: list[str] = []
    for label in ranking[:2]:
        if by[label].gpu not in gpus:
            gpus.append(by[label].gpu)
    if len(gpus) == 1:
        other = next((by[label].gpu for label in ranking if by[label].gpu != gpus[0]), None)
        if other is not None:
            gpus.append(other)
    return gpus


def _price_row(
    feasible: Sequence[OptionResult],
    gpu: str,
    factor: float,
    baseline: str,
    limits: tuple[float | None, float | None],
) -> SensitivityRow:
    """The ranking when every option on `gpu` costs `factor` times its price."""
    cands = [
        Candidate(o.label, _time_cost(o)[0], _time_cost(o)[1] * (factor if o.gpu == gpu else 1.0))
        for o in feasible
    ]
    name = f"{gpu} price {'+' if factor > 1 else '-'}{abs(factor - 1) * 100:.0f}%"
    return _row(name, "price", gpu, factor, cands, baseline, *limits)


def _bandwidth_row(
    model: ModelSpec,
    workload: Workload,
    feasible: Sequence[OptionResult],
    baseline: str,
    limits: tuple[float | None, float | None],
    estimate_fn: EstimateFn,
) -> SensitivityRow:
    """The ranking with inter-node bandwidth halved: each chosen strategy re-estimated, not re-searched."""
    cands = []
    slowdowns = []
    for o in feasible:
        r = bandwidth_ratio(model, o, workload, estimate_fn)
        r = r if r > 0 else 1.0
        slowdowns.append(f"{o.label} x{1 / r:.2f} time")
        # time scales by 1/r; cost is proportional to time at a fixed cluster price
        time_s, cost = _time_cost(o)
        cands.append(Candidate(o.label, time_s / r, cost / r))
    note = "chosen strategies re-estimated, not re-searched (" + ", ".join(slowdowns) + ")"
    return _row(
        "inter-node bandwidth halved",
        "internode_bw",
        None,
        BANDWIDTH_FACTOR,
        cands,
        baseline,
        *limits,
        note=note,
    )
