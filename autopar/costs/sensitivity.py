"""Sensitivity of a what-if ranking: GPU prices ±20%, inter-node bandwidth halved, and the model's error.

Price scenarios rescale each option's cost (time is unchanged). The bandwidth scenario re-estimates
each option's chosen strategy on a cluster whose inter-node bandwidth is halved and scales the
option's throughput by the analytical ratio (so any calibration factor carries over); strategies
are held fixed, not re-searched, so the slowdown shown is an upper bound. The model-error scenario
("model error (80% band)") shows each option's time and cost from its band's low to high end
(costs/bands.py) and ranks the winner at its band's slow end against every other option at its fast
end: the winner changes exactly when another option's band overlaps it (a tie).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autopar.costs.bands import BAND_NAME, duration_span, usd_span
from autopar.costs.figures import format_duration_short, format_usd_short
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
    error = model_error_row(feasible, ranking[0], limits)
    return rows + ([error] if error is not None else [])


MODEL_ERROR = f"model error ({BAND_NAME})"


def model_error_row(
    feasible: Sequence[OptionResult], baseline: str, limits: tuple[float | None, float | None]
) -> SensitivityRow | None:
    """The model's error as a scenario (module doc); None when no option has a band (uncalibrated)."""
    banded = [o for o in feasible if o.band is not None and o.band.time_to_train_s is not None]
    if not banded:
        return None
    cands = []
    for o in feasible:
        end = 1 if o.label == baseline else 0  # the winner slow and dear, every other option fast and cheap
        b = o.band
        t, c = _time_cost(o)
        if b is not None and b.time_to_train_s is not None and b.total_cost_usd is not None:
            t, c = b.time_to_train_s[end], b.total_cost_usd[end]
        cands.append(Candidate(o.label, t, c))
    note = "each option from its band's fast to slow end; ranked with the winner at its slow end and the others at their fast end"
    row = _row(MODEL_ERROR, "model_error", None, 1.0, cands, baseline, *limits, note=note)
    by = {o.label: o for o in feasible}
    for so in row.options:
        o = by[so.label]
        so.time_to_train_s, so.total_cost_usd = _time_cost(o)
        if o.band is not None and o.band.time_to_train_s is not None and o.band.total_cost_usd is not None:
            so.time_to_train_s_low, so.time_to_train_s_high = o.band.time_to_train_s
            so.total_cost_usd_low, so.total_cost_usd_high = o.band.total_cost_usd
    return row


def winner_swing(row: SensitivityRow, baseline: OptionResult) -> str:
    """The baseline winner's time and cost under the scenario, in the table's units: '$1.24M → $1.48M'
    (a price), '134 d → 137 d, $1.24M → $1.27M' (bandwidth), '120–165 d, $1.1–1.5M' (model error)."""
    so = next((x for x in row.options if x.label == baseline.label), None)
    if so is None:
        return ""
    if so.time_to_train_s_low is not None and so.total_cost_usd_low is not None:
        return (
            f"{duration_span((so.time_to_train_s_low, so.time_to_train_s_high))}, "  # type: ignore[arg-type]  # both ends set together
            f"{usd_span((so.total_cost_usd_low, so.total_cost_usd_high))}"  # type: ignore[arg-type]  # both ends set together
        )
    t0, c0 = _time_cost(baseline)
    parts = []
    if abs(so.time_to_train_s - t0) > 1e-9 * t0:
        parts.append(f"{format_duration_short(t0)} → {format_duration_short(so.time_to_train_s)}")
    if abs(so.total_cost_usd - c0) > 1e-9 * c0:
        parts.append(f"{format_usd_short(c0)} → {format_usd_short(so.total_cost_usd)}")
    return ", ".join(parts) or "unchanged"


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
