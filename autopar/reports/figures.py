"""Data functions behind every figure of the search report (checked by tests without rendering).

Optuna's pattern: each `*_info(result)` returns a frozen dataclass holding exactly what will be
drawn; `autopar.reports.plots` turns it into a plotly figure. Units are the display units named in
the dataclass (GiB, seconds, objective units).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from autopar.knobs import RECOMPUTE_BY_FRUGALITY
from autopar.reports.common import cluster_label, fmt_value, pareto_trials
from autopar.reports.decision import recommendation_cards
from autopar.search.result import ObjectiveInfo, SearchResult, TrialRecord
from autopar.units import GiB, format_duration

MAX_PARCOORDS_LINES = 1500
# The Pareto figure draws every front point but at most this many dominated and infeasible points (each
# drawn once per objective pair, with its hover text): a 20,000-trial study made a 32 MB page. Beyond the
# bound an even, deterministic sample by trial number is drawn and the report says how many of how many.
MAX_DOMINATED_POINTS = 1000
MAX_INFEASIBLE_POINTS = 300


def even_sample(trials: list[TrialRecord], limit: int) -> list[TrialRecord]:
    """At most `limit` trials, evenly spaced in trial-number order (first and last kept): the same input
    gives the same sample, and a thinned cloud keeps the shape of the whole."""
    ordered = sorted(trials, key=lambda t: t.number)
    n = len(ordered)
    if n <= limit:
        return ordered
    if limit <= 1:
        return ordered[:limit]
    return [ordered[round(i * (n - 1) / (limit - 1))] for i in range(limit)]


# --------------------------------------------------------------------------- hover text


def strategy_fields(t: TrialRecord) -> str:
    """Every strategy field of a trial on one line (hover text, table tooltips)."""
    s = t.strategy
    etp = f" etp={s.etp}" if s.etp else ""
    return (
        f"tp={s.tp} pp={s.pp} dp={s.dp} cp={s.cp} ep={s.ep}{etp} vpp={s.vpp} sp={s.sp} "
        f"zero={s.zero} mb={s.micro_batch} recompute={s.recompute} schedule={s.pp_schedule}"
    )


def hover_text(t: TrialRecord, objectives: list[ObjectiveInfo]) -> str:
    """Full description of a trial for a plotly hover box (HTML subset plotly understands)."""
    lines = [
        f"<b>{t.strategy.label()}</b>  (trial {t.number})",
        f"{cluster_label(t.gpu, t.num_gpus)} · {t.precision}",
        strategy_fields(t),
    ]
    for o in objectives:
        if o.name in t.values:
            lines.append(f"{o.label}: {fmt_value(t.values[o.name], o.unit)}")
    e = t.estimate
    if e is not None:
        lines.append(
            f"peak memory {e.memory.total / GiB:.1f} / {e.capacity_bytes / GiB:.1f} GiB · "
            f"step {format_duration(e.step_time_s)} · MFU {100 * e.mfu:.1f} % · bottleneck {e.bottleneck}"
        )
    if not t.feasible and t.reason:
        lines.append(f"<i>infeasible: {t.reason}</i>")
    return "<br>".join(lines)


def brief_hover(t: TrialRecord, objectives: list[ObjectiveInfo]) -> str:
    """Two lines for the dominated and infeasible cloud (drawn once per objective pair, so its hover text
    is most of the page): the label, which names every knob, the hardware and the objective values."""
    values = " · ".join(
        f"{o.name} {fmt_value(t.values[o.name], o.unit)}" for o in objectives if o.name in t.values
    )
    reason = f"<br><i>infeasible: {t.reason}</i>" if not t.feasible and t.reason else ""
    return (
        f"<b>{t.strategy.label()}</b> (trial {t.number}) · {cluster_label(t.gpu, t.num_gpus)} {t.precision}"
        f"<br>{values}{reason}"
    )


# --------------------------------------------------------------------------- Pareto scatter


@dataclass(frozen=True)
class PointSet:
    """Points of one kind (Pareto, dominated, infeasible, recommended) on one objective pair."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    numbers: tuple[int, ...]  # trial numbers, to match points to trials
    hover: tuple[str, ...]
    text: tuple[str, ...] = ()  # visible labels (recommended points only)
    group: tuple[str, ...] = ()  # cluster label per point (colouring when several clusters)


@dataclass(frozen=True)
class ParetoPanel:
    """One 2-D view of the front: objective `y` against objective `x` (or trial number)."""

    x_title: str
    y_title: str
    x_name: str  # objective name, or "trial" when there is one objective only
    y_name: str
    pareto: PointSet
    dominated: PointSet
    infeasible: PointSet
    recommended: PointSet
    x_log: bool = False  # log-scaled axis (positive values spanning more than LOG_RATIO)
    y_log: bool = False


# An axis whose feasible values are all positive and span more than this factor is drawn log-scaled,
# so that the decision region (the front) is not squashed into a few pixels by far-off points.
# Only ratio-like objectives qualify: headroom near 0 GiB and MFU (bounded) read better linearly.
LOG_RATIO = 10.0
LOG_OBJECTIVES = ("cost", "step_time", "throughput")


def log_scale(*sets: PointSet, axis: str, name: str) -> bool:
    """Whether the axis ('x' or 'y', objective `name`) of these point sets should be log-scaled."""
    if name not in LOG_OBJECTIVES:
        return False
    vals = [v for s in sets for v in getattr(s, axis)]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > LOG_RATIO


@dataclass(frozen=True)
class ParetoPlotInfo:
    """Everything the Pareto figure draws."""

    panels: tuple[ParetoPanel, ...]
    pareto_numbers: tuple[int, ...]
    groups: tuple[str, ...]  # cluster labels among Pareto points (legend entries)
    n_dominated: int  # all of them, drawn or not
    n_infeasible: int
    n_dominated_drawn: int = 0
    n_infeasible_drawn: int = 0

    @property
    def thinned(self) -> bool:
        """Whether only a sample of the dominated or infeasible points is drawn."""
        return self.n_dominated_drawn < self.n_dominated or self.n_infeasible_drawn < self.n_infeasible


def axis_title(o: ObjectiveInfo) -> str:
    """Axis label with unit and which way is better."""
    label = o.label if (not o.unit or o.unit in o.label or "(" in o.label) else f"{o.label} ({o.unit})"
    return f"{label} {'↑' if o.direction == 'maximize' else '↓'} better"


def _points(
    trials: list[TrialRecord],
    xk: str,
    yk: str,
    objectives: list[ObjectiveInfo],
    text: dict[int, str] | None = None,
    brief: bool = False,
) -> PointSet:
    sel = [t for t in trials if (xk == "trial" or xk in t.values) and yk in t.values]
    xs = tuple(float(t.number) if xk == "trial" else float(t.values[xk]) for t in sel)
    return PointSet(
        x=xs,
        y=tuple(float(t.values[yk]) for t in sel),
        numbers=tuple(t.number for t in sel),
        hover=tuple((brief_hover if brief else hover_text)(t, objectives) for t in sel),
        text=tuple((text or {}).get(t.number, "") for t in sel) if text is not None else (),
        group=tuple(cluster_label(t.gpu, t.num_gpus) for t in sel),
    )


def _panel(xk, yk, xt, yt, front, dominated, infeasible, rec_trials, objs, rec_labels) -> ParetoPanel:  # noqa: ANN001
    pareto, dom = _points(front, xk, yk, objs), _points(dominated, xk, yk, objs, brief=True)
    rec = _points(rec_trials, xk, yk, objs, rec_labels)
    return ParetoPanel(
        x_title=xt,
        y_title=yt,
        x_name=xk,
        y_name=yk,
        pareto=pareto,
        dominated=dom,
        infeasible=_points(infeasible, xk, yk, objs, brief=True),
        recommended=rec,
        # the scale follows the front (the decision), not the dominated cloud around it
        x_log=log_scale(pareto, rec, axis="x", name=xk),
        y_log=log_scale(pareto, rec, axis="y", name=yk),
    )


def _reference_pairs(objs: list[ObjectiveInfo]) -> list[tuple[str, str, str, str]]:
    """Free memory against throughput when free memory is a constraint, not an objective (the default): the
    room each point leaves is what a user weighs next, and on one fixed cluster the objectives' own panel is
    a single curve ($/Mtoken = price x GPUs / throughput)."""
    names = [o.name for o in objs]
    if "headroom" in names or "throughput" not in names:
        return []
    tps = objs[names.index("throughput")]
    return [("throughput", "headroom", axis_title(tps), "Free GiB per GPU (a constraint, not an objective)")]


def pareto_plot_info(result: SearchResult) -> ParetoPlotInfo:
    """Split trials into Pareto / dominated / infeasible / recommended for each objective pair."""
    objs = list(result.objectives)
    front = pareto_trials(result)
    front_ids = {t.number for t in front}
    dominated = [t for t in result.trials if t.feasible and t.number not in front_ids]
    # evaluated but infeasible (out of memory, over a constraint); rule violations have no values
    infeasible = [t for t in result.trials if not t.feasible and t.estimate is not None]
    cards = recommendation_cards(result.recommended, objs)
    # the first card is the pick, which a near-tie rule may place left of the fastest centre: say so on its label
    rec_labels = {c.trial.number: ("Pick · " if i == 0 else "") + c.title for i, c in enumerate(cards)}
    rec_trials = [c.trial for c in cards]
    drawn_dom = even_sample(dominated, MAX_DOMINATED_POINTS)
    drawn_inf = even_sample(infeasible, MAX_INFEASIBLE_POINTS)
    if len(objs) >= 2:
        pairs = [(objs[i], objs[j]) for i, j in itertools.combinations(range(len(objs)), 2)]
        keyed = [(a.name, b.name, axis_title(a), axis_title(b)) for a, b in pairs] + _reference_pairs(objs)
    else:
        keyed = [("trial", objs[0].name, "Trial number", axis_title(objs[0]))]
    panels = tuple(
        _panel(xk, yk, xt, yt, front, drawn_dom, drawn_inf, rec_trials, objs, rec_labels)
        for xk, yk, xt, yt in keyed
    )
    # every cluster of the comparison, dominated or not: a GPU with no point on the front still has its entry
    groups = tuple(
        dict.fromkeys(
            [cluster_label(t.gpu, t.num_gpus) for t in front]
            + [cluster_label(c.gpu.name, c.num_gpus) for c in result.clusters]
        )
    )
    return ParetoPlotInfo(
        panels=panels,
        pareto_numbers=tuple(t.number for t in front),
        groups=groups,
        n_dominated=len(dominated),
        n_infeasible=len(infeasible),
        n_dominated_drawn=len(drawn_dom),
        n_infeasible_drawn=len(drawn_inf),
    )


# --------------------------------------------------------------------------- parallel coordinates


@dataclass(frozen=True)
class Dimension:
    """One axis of the parallel-coordinates view."""

    label: str
    values: tuple[float, ...]
    tickvals: tuple[float, ...] | None = None
    ticktext: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ParallelCoordsInfo:
    """Knobs then objectives for the feasible trials; colour 1 = Pareto, 0 = dominated."""

    dimensions: tuple[Dimension, ...]
    is_pareto: tuple[int, ...]
    numbers: tuple[int, ...]


_RECOMPUTE = {r: float(i) for i, r in enumerate(RECOMPUTE_BY_FRUGALITY)}  # axis position, least frugal first


def parallel_coords_info(result: SearchResult) -> ParallelCoordsInfo:
    """Strategy knobs vs objectives for feasible trials (Pareto lines drawn last, on top)."""
    front = {t.number for t in pareto_trials(result)}
    rows = _parcoords_rows(result, front)

    def col(fn) -> tuple[float, ...]:  # noqa: ANN001
        return tuple(float(fn(t)) for t in rows)

    dims = _size_dimensions(col)
    zero = col(lambda t: t.strategy.zero)
    dims.insert(
        min(len(dims), 4),
        Dimension("ZeRO stage", zero, tuple(sorted(set(zero))), tuple(f"{v:g}" for v in sorted(set(zero)))),
    )
    dims.append(
        Dimension(
            "recompute",
            col(lambda t: _RECOMPUTE[t.strategy.recompute]),
            tuple(_RECOMPUTE.values()),
            RECOMPUTE_BY_FRUGALITY,
        )
    )
    if len({t.num_gpus for t in rows}) > 1:
        dims.append(Dimension("GPUs", col(lambda t: t.num_gpus)))
    gpus = sorted({t.gpu for t in rows})
    if len(gpus) > 1:
        idx = {g: float(i) for i, g in enumerate(gpus)}
        dims.append(Dimension("GPU type", col(lambda t: idx[t.gpu]), tuple(idx.values()), tuple(gpus)))
    for o in result.objectives:
        unit = f" ({o.unit})" if o.unit else ""
        dims.append(Dimension(f"{o.name}{unit}", col(lambda t, k=o.name: t.values.get(k, float("nan")))))
    return ParallelCoordsInfo(
        dimensions=tuple(dims),
        is_pareto=tuple(int(t.number in front) for t in rows),
        numbers=tuple(t.number for t in rows),
    )


def _parcoords_rows(result: SearchResult, front: set[int]) -> list:
    """The feasible trials drawn: every Pareto one, and the best dominated ones up to MAX_PARCOORDS_LINES
    (by the first objective), dominated first so that the front is drawn on top."""
    feas = [t for t in result.trials if t.feasible]
    dom = [t for t in feas if t.number not in front]
    keep = max(0, MAX_PARCOORDS_LINES - len(front))
    if len(dom) > keep and result.objectives:
        o = result.objectives[0]
        sign = -1.0 if o.direction == "maximize" else 1.0
        dom = sorted(dom, key=lambda t: sign * t.values.get(o.name, 0.0))[:keep]
    rows = sorted(dom, key=lambda t: t.number) + [t for t in feas if t.number in front]
    return sorted(rows, key=lambda t: (t.number in front, t.number))


_SIZE_KNOBS = (  # (axis title, value, shown even when constant)
    ("TP", lambda t: t.strategy.tp, True),
    ("PP", lambda t: t.strategy.pp, True),
    ("virtual stages", lambda t: t.strategy.vpp, False),
    ("DP", lambda t: t.strategy.dp, True),
    ("CP", lambda t: t.strategy.cp, False),
    ("EP", lambda t: t.strategy.ep, False),
    ("micro-batch", lambda t: t.strategy.micro_batch, True),
)


def _size_dimensions(col) -> list[Dimension]:  # noqa: ANN001
    """One log2 axis per size knob (sizes are mostly powers of two: 1, 2, 4, 8 evenly spaced, ticks show
    the sizes); a knob that never varies is left out unless it is one of the mesh's main axes."""
    dims = []
    for label, fn, always in _SIZE_KNOBS:
        values = col(fn)
        if always or len(set(values)) > 1:
            ticks = sorted(set(values))
            dims.append(
                Dimension(
                    label,
                    tuple(math.log2(v) for v in values),
                    tuple(math.log2(v) for v in ticks),
                    tuple(f"{v:g}" for v in ticks),
                )
            )
    return dims


# --------------------------------------------------------------------------- breakdown bars


@dataclass(frozen=True)
class Segment:
    """One stacked segment: a category's value for each bar."""

    name: str
    values: tuple[float, ...]
    color: str


@dataclass(frozen=True)
class StackedBarInfo:
    """Stacked bars, one per recommended point; segments sum to `totals`."""

    title: str
    y_title: str
    unit: str
    categories: tuple[str, ...]  # bar labels (role + strategy)
    numbers: tuple[int, ...]
    segments: tuple[Segment, ...]
    totals: tuple[float, ...]
    capacity: tuple[float, ...] | None = None  # per-bar limit line (GPU memory), same unit


def highlighted_trials(result: SearchResult) -> list[tuple[str, TrialRecord]]:
    """(title, trial) of each recommendation card's point with an estimate; Pareto points if none."""
    cards = recommendation_cards(result.recommended, result.objectives)
    out = [(c.title, c.trial) for c in cards if c.trial.estimate is not None]
    if not out:
        out = [(f"Pareto #{t.number}", t) for t in pareto_trials(result)[:4] if t.estimate is not None]
    return out


def _wrap(text: str, width: int = 16) -> str:
    """Greedy word wrap with <br> (bar tick labels stay inside their slot)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _category(title: str, t: TrialRecord) -> str:
    return f"<b>{title}</b><br>{_wrap(t.strategy.label())}"


MEMORY_COLORS = {
    "weights": "#2563eb",
    "grads": "#0891b2",
    "optimizer": "#7c3aed",
    "activations": "#d97706",
    "other": "#94a3b8",
}


def memory_bar_info(result: SearchResult) -> StackedBarInfo:
    """Per-GPU peak memory of each recommended point by category (GiB), with the GPU capacity."""
    items = highlighted_trials(result)
    ests = [t.estimate for _, t in items if t.estimate is not None]  # all of them (highlighted_trials)
    parts = {
        "weights": [e.memory.weights for e in ests],
        "grads": [e.memory.grads for e in ests],
        "optimizer": [e.memory.optimizer for e in ests],
        "activations": [e.memory.activations for e in ests],
        "other": [e.memory.other for e in ests],
    }
    names = {
        "weights": "Weights",
        "grads": "Gradients",
        "optimizer": "Optimizer states",
        "activations": "Activations",
        "other": "Other (logits, buffers, overhead)",
    }
    segs = tuple(
        Segment(names[k], tuple(v / GiB for v in vals), MEMORY_COLORS[k]) for k, vals in parts.items()
    )
    return StackedBarInfo(
        title="Peak memory per GPU",
        y_title="Memory per GPU (GiB)",
        unit="GiB",
        categories=tuple(_category(ti, t) for ti, t in items),
        numbers=tuple(t.number for _, t in items),
        segments=segs,
        totals=tuple(e.memory.total / GiB for e in ests),
        capacity=tuple(e.capacity_bytes / GiB for e in ests),
    )


TIME_PARTS = [  # (label, function of TimeBreakdown, colour)
    ("Compute", lambda b: b.compute - b.recompute, "#2563eb"),
    ("Recompute", lambda b: b.recompute, "#60a5fa"),
    ("TP comm (exposed)", lambda b: b.tp_comm, "#db2777"),
    ("CP comm (exposed)", lambda b: b.cp_comm, "#f472b6"),
    ("EP comm (exposed)", lambda b: b.ep_comm, "#7c3aed"),
    ("PP comm (exposed)", lambda b: b.pp_comm, "#a78bfa"),
    ("DP comm (exposed)", lambda b: b.dp_comm, "#059669"),
    ("Pipeline bubble", lambda b: b.bubble, "#d97706"),
    ("Optimizer step", lambda b: b.optimizer, "#64748b"),
]


def time_bar_info(result: SearchResult) -> StackedBarInfo:
    """Step time of each recommended point split into compute, exposed comm, bubble, optimizer (s)."""
    items = highlighted_trials(result)
    ests = [t.estimate for _, t in items if t.estimate is not None]  # all of them (highlighted_trials)
    segs = []
    for label, fn, color in TIME_PARTS:
        vals = tuple(float(fn(e.time)) for e in ests)
        if any(v > 0 for v in vals):
            segs.append(Segment(label, vals, color))
    # Anything the step time holds beyond the itemised terms (kept so bars sum to the step time).
    rest = tuple(max(0.0, e.step_time_s - e.time.total) for e in ests)
    if any(r > 1e-9 * max(e.step_time_s, 1e-12) for r, e in zip(rest, ests, strict=True)):
        segs.append(Segment("Other", rest, "#cbd5e1"))
    return StackedBarInfo(
        title="Step time breakdown",
        y_title="Time per optimizer step (s)",
        unit="s",
        categories=tuple(_category(ti, t) for ti, t in items),
        numbers=tuple(t.number for _, t in items),
        segments=tuple(segs),
        totals=tuple(max(e.step_time_s, e.time.total) for e in ests),
    )
