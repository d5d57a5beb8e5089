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
    by = {o.label: o for o in feasible}
    baseline = ranking[0]
    gpus: list[str] = []
    for label in ranking[:2]:
        g = by[label].gpu
        if g not in gpus:
            gpus.append(g)
    if len(gpus) == 1:  # winner and runner-up share a GPU type: also move the best other GPU type
        other = next((by[label].gpu for label in ranking if by[label].gpu != gpus[0]), None)
        if other is not None:
            gpus.append(other)
    rows = []
    for gpu in gpus:
        for f in PRICE_FACTORS:
            cands = [
                Candidate(o.label, _time_cost(o)[0], _time_cost(o)[1] * (f if o.gpu == gpu else 1.0))
                for o in feasible
            ]
            rows.append(
                _row(
                    f"{gpu} price {'+' if f > 1 else '-'}{abs(f - 1) * 100:.0f}%",
                    "price",
                    gpu,
                    f,
                    cands,
                    baseline,
                    deadline_s,
                    max_cost_usd,
                )
            )
    if estimate_fn is None:
        from autopar.perf import estimate

        estimate_fn = estimate
    cands = []
    slowdowns = []
    for o in feasible:
        r = bandwidth_ratio(model, o, workload, estimate_fn)
        r = r if r > 0 else 1.0
        slowdowns.append(f"{o.label} x{1 / r:.2f} time")
        # time scales by 1/r; cost is proportional to time at a fixed cluster price
        time_s, cost = _time_cost(o)
        cands.append(Candidate(o.label, time_s / r, cost / r))
    rows.append(
        _row(
            "inter-node bandwidth halved",
            "internode_bw",
            None,
            BANDWIDTH_FACTOR,
            cands,
            baseline,
            deadline_s,
            max_cost_usd,
            note="chosen strategies re-estimated, not re-searched (" + ", ".join(slowdowns) + ")",
        )
    )
    return rows
