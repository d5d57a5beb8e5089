"""The what-if report: per-option summary table, cost-vs-time chart, sensitivity table.

Renders `autopar.costs.whatif.WhatIfResult`. Data functions (`cost_time_info`,
`options_table_info`, `sensitivity_table_info`) are separate from drawing so tests can check them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from autopar.costs.bands import BAND_NAME, duration_span, usd_span
from autopar.errors import AutoparError
from autopar.launch.settings import launch_settings
from autopar.reports import theme
from autopar.reports.common import (
    FONT,
    autopar_version,
    base_layout,
    esc,
    figure_html,
    fmt_num,
    render_page,
    write_text,
)
from autopar.reports.figures import LOG_RATIO
from autopar.reports.labels import place_labels
from autopar.reports.plots import ASSUMED_WIDTH
from autopar.reports.table import Column, TableInfo, table_html
from autopar.units import SECONDS_PER_DAY, format_duration, format_duration_short, format_tokens

DAY = SECONDS_PER_DAY


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class CostTimeInfo:
    """Feasible options as (days to train, total USD) points; the cost-vs-time Pareto front in order."""

    labels: tuple[str, ...]
    days: tuple[float, ...]
    usd: tuple[float, ...]
    on_pareto: tuple[bool, ...]
    ranks: tuple[int | None, ...]
    hover: tuple[str, ...]
    front_labels: tuple[str, ...]  # result.pareto order (increasing time)
    front_days: tuple[float, ...]
    front_usd: tuple[float, ...]
    winner: str | None
    deadline_days: float | None
    max_cost_usd: float | None
    infeasible: tuple[str, ...]  # "label: reason"
    days_band: tuple[tuple[float, float] | None, ...] = ()  # per point: the 80% band of its days (None: none)
    usd_band: tuple[tuple[float, float] | None, ...] = ()  # per point: the 80% band of its total cost


def _hover(o: Any) -> str:
    f = o.figures
    band = getattr(o, "band", None)
    lines = [
        f"<b>{o.label}</b>" + (f" (rank {o.rank})" if o.rank else ""),
        o.strategy_label,
        f"{fmt_num(o.tokens_per_s)} tokens/s · MFU {100 * (o.mfu or 0):.1f} % · "
        f"headroom {o.headroom_gib or 0:.1f} GiB",
        f"time to train {format_duration(f.time_to_train_s)} · ${f.total_cost_usd:,.0f} · "
        f"${f.usd_per_mtoken:.3f}/Mtoken",
        f"${o.usd_per_gpu_hour:.2f}/GPU-h ({o.tier})",
    ]
    if band is not None and band.time_to_train_s is not None and band.total_cost_usd is not None:
        lines.append(f"{BAND_NAME}: {duration_span(band.time_to_train_s)} · {usd_span(band.total_cost_usd)}")
    return "<br>".join(lines)


def _days_band(o: Any) -> tuple[float, float] | None:
    b = getattr(o, "band", None)
    t = b.time_to_train_s if b is not None else None
    return None if t is None else (t[0] / DAY, t[1] / DAY)


def _usd_band(o: Any) -> tuple[float, float] | None:
    b = getattr(o, "band", None)
    return b.total_cost_usd if b is not None else None


def cost_time_info(result: Any) -> CostTimeInfo:
    """Points of the cost-vs-time chart: one per feasible option with a token budget."""
    return points_info(result.options, result.ranking, result.pareto, result.deadline_s, result.max_cost_usd)


def points_info(
    options: Sequence[Any],
    ranking: Sequence[str],
    front_order: Sequence[str],
    deadline_s: float | None,
    max_cost_usd: float | None,
) -> CostTimeInfo:
    """The chart's points for any timed options (a what-if's, or a sizing's answers), with their bands."""
    ok = [
        o for o in options if o.feasible and o.figures is not None and o.figures.time_to_train_s is not None
    ]
    by = {o.label: o for o in ok}
    front = [by[lbl] for lbl in front_order if lbl in by]
    winner = ranking[0] if ranking else None
    return CostTimeInfo(
        labels=tuple(o.label for o in ok),
        days=tuple(o.figures.time_to_train_s / DAY for o in ok),
        usd=tuple(o.figures.total_cost_usd for o in ok),
        on_pareto=tuple(bool(o.on_pareto) for o in ok),
        ranks=tuple(o.rank for o in ok),
        hover=tuple(_hover(o) for o in ok),
        front_labels=tuple(o.label for o in front),
        front_days=tuple(o.figures.time_to_train_s / DAY for o in front),
        front_usd=tuple(o.figures.total_cost_usd for o in front),
        winner=winner,
        deadline_days=deadline_s / DAY if deadline_s else None,
        max_cost_usd=max_cost_usd,
        infeasible=tuple(f"{o.label}: {o.reason}" for o in options if not o.feasible),
        days_band=tuple(_days_band(o) for o in ok),
        usd_band=tuple(_usd_band(o) for o in ok),
    )


def _price_text(o: Any) -> str:
    """'6.00', or '6.00 (B200's)' when the option is priced with another GPU's price (a price-book alias)."""
    borrowed = getattr(o, "price_borrowed_from", "")
    return f"{o.usd_per_gpu_hour:.2f}" + (f" ({borrowed}'s)" if borrowed else "")


def _with_band(text: str, band: tuple[float, float] | None, spec: str) -> str:
    """'28.9 (26.0–33.1)': a cell and its 80% band ('28.9' without one)."""
    return text if band is None else f"{text} ({spec.format(band[0])}–{spec.format(band[1])})"


def _note(o: Any) -> str:
    """The option's caveats: why it is infeasible, the layout to verify, the ties it is part of."""
    parts = [o.reason or "", getattr(o, "verify_text", "") if getattr(o, "verify", ()) else ""]
    ties = getattr(o, "ties", [])
    if ties:
        parts.append(f"tie on {' and '.join(ties)} within the {BAND_NAME}")
    return "; ".join(p for p in parts if p)


def _yes(v: bool | None) -> tuple[str, float | str]:
    return ("–", "") if v is None else (("yes", 1.0) if v else ("no", 0.0))


def options_table_info(result: Any) -> TableInfo:
    """One row per hardware option (feasible or not), ranked options first."""
    cols = [
        ("rank", "Rank", True),
        ("label", "Option", False),
        ("price", "Price ($/GPU-h)", True),
        ("strategy", "Strategy", False),
        ("tps", "Throughput (tokens/s)", True),
        ("mfu", "MFU (%)", True),
        ("headroom", "Headroom (GiB)", True),
        ("days", f"Time to train (days; {BAND_NAME})", True),
        ("cost", f"Total cost (USD; {BAND_NAME})", True),
        ("mtok", "Cost ($/Mtoken)", True),
        ("usdh", "Cluster $/h", True),
        ("gpuh", "GPU-hours", True),
        ("deadline", "Meets deadline", False),
        ("cap", "Within cost cap", False),
        ("pareto", "Cost-time Pareto", False),
        ("trials", "Trials (feasible)", True),
        ("note", "Note", False),
    ]
    order = sorted(result.options, key=lambda o: (o.rank is None, o.rank or 0))
    rows, roles = [], []
    for o in order:
        f = o.figures
        days = f.time_to_train_s / DAY if f and f.time_to_train_s is not None else None
        cells: list[tuple[str, float | str]] = [
            (str(o.rank), float(o.rank)) if o.rank else ("–", float("inf")),
            (o.label, o.label),
            (_price_text(o), o.usd_per_gpu_hour),
            (o.strategy_label or "–", o.strategy_label),
            (fmt_num(o.tokens_per_s), o.tokens_per_s) if o.tokens_per_s else ("–", float("-inf")),
            (f"{100 * o.mfu:.1f}", 100 * o.mfu) if o.mfu is not None else ("–", float("-inf")),
            (f"{o.headroom_gib:.1f}", o.headroom_gib) if o.headroom_gib is not None else ("–", float("-inf")),
            (_with_band(f"{days:,.1f}", _days_band(o), "{:,.1f}"), days)
            if days is not None
            else ("–", float("inf")),
            (_with_band(f"{f.total_cost_usd:,.0f}", _usd_band(o), "{:,.0f}"), f.total_cost_usd)
            if f and f.total_cost_usd is not None
            else ("–", float("inf")),
            (f"{f.usd_per_mtoken:.4g}", f.usd_per_mtoken) if f else ("–", float("inf")),
            (f"{f.usd_per_hour:,.0f}", f.usd_per_hour) if f else ("–", float("inf")),
            (f"{f.gpu_hours:,.0f}", f.gpu_hours) if f and f.gpu_hours is not None else ("–", float("inf")),
            _yes(o.meets_deadline),
            _yes(o.within_cost_cap),
            _yes(o.on_pareto if o.feasible else None),
            (f"{o.n_trials} ({o.n_feasible})", float(o.n_trials)),
            (_note(o), _note(o)),
        ]
        rows.append(tuple(cells))
        roles.append("Best" if o.rank == 1 else "")
    return TableInfo(
        columns=tuple(Column(k, lbl, num) for k, lbl, num in cols), rows=tuple(rows), roles=tuple(roles)
    )


def sensitivity_table_info(result: Any) -> TableInfo:
    """One row per scenario: winner, runner-up, whether the winner changed, each option's time and cost."""
    labels = [o.label for o in result.options]
    cols = [
        Column("scenario", "Scenario", False),
        Column("winner", "Winner", False),
        Column("runner_up", "Runner-up", False),
        Column("changed", "Winner changes", False),
    ]
    cols += [Column(lbl, f"{lbl} (days / USD)", True) for lbl in labels]
    rows, roles = [], []
    for s in result.sensitivity:
        per = {so.label: so for so in s.options}
        cells: list[tuple[str, float | str]] = [
            (s.scenario, s.scenario),
            (s.winner or "–", s.winner or ""),
            (s.runner_up or "–", s.runner_up or ""),
            ("yes" if s.winner_changed else "no", float(s.winner_changed)),
        ]
        for lbl in labels:
            so = per.get(lbl)
            if so is None or so.time_to_train_s is None:
                cells.append(("–", float("inf")))
            else:
                cells.append((_scenario_cell(so), so.time_to_train_s / DAY))
        rows.append(tuple(cells))
        roles.append("Winner changes" if s.winner_changed else "")
    return TableInfo(columns=tuple(cols), rows=tuple(rows), roles=tuple(roles))


def _scenario_cell(so: Any) -> str:
    """'28.9 d / $160,000', or for the model-error scenario each end of the band: '26–33 d / $1.8–2.4M'."""
    ends = [
        getattr(so, f"{k}_{e}", None) for k in ("time_to_train_s", "total_cost_usd") for e in ("low", "high")
    ]
    t_lo, t_hi, c_lo, c_hi = ends
    if t_lo is not None and t_hi is not None and c_lo is not None and c_hi is not None:
        return f"{duration_span((t_lo, t_hi))} / {usd_span((c_lo, c_hi))}"
    return f"{format_duration_short(so.time_to_train_s)} / ${so.total_cost_usd:,.0f}"


# --------------------------------------------------------------------------- figure


def plot_cost_time(info: CostTimeInfo) -> go.Figure:
    """Total cost against time to train, Pareto front joined, deadline and cost cap as dashed lines."""
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=info.front_days,
            y=info.front_usd,
            mode="lines",
            name="Cost-time Pareto front",
            line={"color": "#2563eb", "width": 2},
            hoverinfo="skip",
        )
    )
    fig.add_trace(_options_trace(info))
    if info.winner in info.labels:
        fig.add_trace(_winner_trace(info))
    _add_limits(fig, info)
    fig.update_layout(
        **base_layout(
            460, legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0}
        )
    )
    xs, ys = _extent(info.days, info.days_band), _extent(info.usd, info.usd_band)
    xlog, ylog = _spans(xs), _spans(ys)
    xr, yr = _range(xs, xlog), _range(ys, ylog)
    fig.update_xaxes(
        title_text="Time to train the token budget (days) ↓ better",
        type="log" if xlog else "linear",
        range=xr,
    )
    fig.update_yaxes(
        title_text="Total cost (USD) ↓ better",
        type="log" if ylog else "linear",
        range=yr,
        tickprefix="$",
        tickformat="~s",
    )
    _label_options(fig, info, (xr, yr), (xlog, ylog))
    return fig


def _options_trace(info: CostTimeInfo) -> go.Scatter:
    """Every option, blue on the cost-time front and grey off it."""
    colors = ["#2563eb" if p else "#94a3b8" for p in info.on_pareto]
    return go.Scatter(
        x=info.days,
        y=info.usd,
        error_x=_error_bars(info.days, info.days_band),
        error_y=_error_bars(info.usd, info.usd_band),
        mode="markers",
        cliponaxis=False,
        hovertext=info.hover,
        hovertemplate="%{hovertext}<extra></extra>",
        name="Options",
        marker={"size": 11, "color": colors, "line": {"width": 1, "color": "white"}},
        textfont={"family": FONT, "size": 12, "color": "#111827"},
    )


def _error_bars(
    centres: tuple[float, ...], bands: tuple[tuple[float, float] | None, ...]
) -> dict[str, Any] | None:
    """Asymmetric error bars from each point to the ends of its 80% band (none when no point has one)."""
    if not any(bands):
        return None
    plus = [b[1] - c if b else 0.0 for c, b in zip(centres, bands, strict=True)]
    minus = [c - b[0] if b else 0.0 for c, b in zip(centres, bands, strict=True)]
    return {"type": "data", "array": plus, "arrayminus": minus, "color": "#94a3b8", "thickness": 1.2}


def _winner_trace(info: CostTimeInfo) -> go.Scatter:
    """The best option as a star on top of its marker."""
    i = info.labels.index(info.winner)
    return go.Scatter(
        x=[info.days[i]],
        y=[info.usd[i]],
        mode="markers",
        name=f"Best: {info.winner}",
        hoverinfo="skip",
        marker={"size": 20, "symbol": "star", "color": "#f59e0b", "line": {"width": 1.2, "color": "#92400e"}},
    )


def _add_limits(fig: go.Figure, info: CostTimeInfo) -> None:
    """The deadline (vertical) and the cost cap (horizontal), dashed, where the user gave them."""
    if info.deadline_days:
        fig.add_vline(
            x=info.deadline_days,
            line={"color": "#dc2626", "dash": "dash", "width": 1.5},
            annotation_text="deadline",
            annotation_position="top right",
        )
    if info.max_cost_usd:
        fig.add_hline(
            y=info.max_cost_usd,
            line={"color": "#d97706", "dash": "dash", "width": 1.5},
            annotation_text="cost cap",
            annotation_position="bottom right",
        )


def _extent(vals: tuple[float, ...], bands: tuple[tuple[float, float] | None, ...]) -> tuple[float, ...]:
    """The values and their bands' ends: what an axis must show so no error bar is cut off."""
    return vals + tuple(x for b in bands if b for x in b)


def _spans(vals: tuple[float, ...]) -> bool:
    """Log-scale an axis whose positive values span more than LOG_RATIO (as in the search report)."""
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > LOG_RATIO


def _range(vals: tuple[float, ...], log: bool) -> list[float]:
    """Axis range: from 0 (linear) or a padded log range, with room above for labels."""
    if not vals:
        return [0.0, 1.0]
    if log:
        lo, hi = math.log10(min(vals)), math.log10(max(vals))
        pad = 0.12 * ((hi - lo) or 1.0)
        return [lo - pad, hi + pad]
    return [0.0, max(vals) * 1.15 or 1.0]


def _label_options(fig: go.Figure, info: CostTimeInfo, ranges, logs) -> None:  # noqa: ANN001
    """Option labels as annotations placed without overlap (autopar.reports.labels)."""
    width, height = ASSUMED_WIDTH - 140, 460 - 130
    tx = [math.log10(v) if logs[0] else v for v in info.days]
    ty = [math.log10(v) if logs[1] else v for v in info.usd]
    (x0, x1), (y0, y1) = ranges
    pts = [
        ((x - x0) / ((x1 - x0) or 1) * width, (1 - (y - y0) / ((y1 - y0) or 1)) * height)
        for x, y in zip(tx, ty, strict=True)
    ]
    offsets = place_labels(pts, list(info.labels), width, height)
    for x, y, text, (ax, ay) in zip(tx, ty, info.labels, offsets, strict=True):
        fig.add_annotation(
            x=x,
            y=y,
            text=text,
            ax=ax,
            ay=ay,
            showarrow=True,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor="#64748b",
            bgcolor="rgba(255,255,255,0.85)",
            font={"family": FONT, "size": 12, "color": "#111827"},
        )


# --------------------------------------------------------------------------- page


def _kv(pairs: list[tuple[str, str]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs) + "</dl>"


def _winner_card(result: Any) -> str:
    w = result.winner
    if w is None or w.strategy is None or w.figures is None:
        return ""
    launch = ""
    cluster = getattr(w, "cluster", None)
    if cluster is not None:
        try:
            wl = result.workload.model_copy(update={"precision": w.precision or result.workload.precision})
            ls = launch_settings(result.model, cluster, wl, w.strategy)
            launch = (
                f'<details class="launch"><summary>Launch settings ({ls.nodes} nodes × '
                f'{ls.gpus_per_node} GPUs)</summary><div class="tabpanel on" style="margin-top:8px">'
                f'<button class="copy" type="button">Copy</button><pre><code>{esc(ls.slurm)}</code></pre>'
                "</div></details>"
            )
        except AutoparError as err:
            launch = f'<p class="muted small">{esc(err)}</p>'
    f = w.figures
    band = getattr(w, "band", None)
    t_band = f" ({duration_span(band.time_to_train_s)})" if band and band.time_to_train_s else ""
    c_band = f" ({usd_span(band.total_cost_usd)})" if band and band.total_cost_usd else ""
    metrics = [
        ("Time to train" + (f"; {BAND_NAME}" if t_band else ""), format_duration(f.time_to_train_s) + t_band),
        ("Total cost" + (f"; {BAND_NAME}" if c_band else ""), f"${f.total_cost_usd:,.0f}" + c_band),
        ("Throughput", f"{fmt_num(w.tokens_per_s)} tokens/s"),
        ("Cost", f"${f.usd_per_mtoken:.3f}/Mtoken"),
    ]
    m = "".join(
        f'<div class="metric"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v in metrics
    )
    return (
        f'<div class="cards"><div class="card"><div class="role">Best option</div>'
        f'<div class="strategy" id="recommended-option">{esc(w.label)}</div><div class="where">{esc(w.strategy_label)} · '
        f"{esc(w.precision)} · {esc(w.price_label)}</div>"
        f'<div class="metrics">{m}</div>{launch}</div></div>'
    )


def whatif_report_html(result: Any, plotlyjs: str = "inline") -> str:
    """The complete what-if page as a string (see `write_whatif_report`): the answer (the best option
    and the planner's verdict) first, then the options, the chart and the sensitivity, inputs last."""
    title, top = _header(result)
    style = "note" if result.deadline_met is False or not result.ranking else "note ok"
    head_note = f'<div class="{style}"><b>{esc(result.message)}</b></div>' if result.message else ""
    sens = (
        table_html(sensitivity_table_info(result), "sensitivity-table")
        if result.sensitivity
        else '<p class="muted">Sensitivity analysis was not run.</p>'
    )
    body = (
        top
        + f'<section id="winner"><h2>Recommendation</h2>{head_note}{_winner_card(result)}</section>'
        + evidence_section([(o.label, getattr(o, "evidence", None)) for o in result.options])
        + '<section id="options"><h2>Options</h2><p class="lead">The fastest strategy that fits, per '
        "hardware option, priced at the chosen tier. Click a header to sort.</p>"
        + table_html(options_table_info(result), "options-table")
        + "</section>"
        + '<section id="cost-time"><h2>Cost vs time to train</h2><p class="lead">Each point is one option; '
        "the line joins the options no other option beats on both time and cost.</p>"
        + _chart(result)
        + "</section>"
        + '<section id="sensitivity"><h2>Sensitivity</h2><p class="lead">How the ranking moves when prices '
        f"change by ±20 %, the inter-node bandwidth halves, or the model errs within its {BAND_NAME} (the "
        "winner at its slow end, every other option at its fast end).</p>"
        + sens
        + "</section>"
        + _inputs_section(result)
        + theme.footer(
            "Times and costs follow from the estimated throughput; measure before signing a contract."
        )
    )
    return render_page(title, body, plotlyjs)


def evidence_section(items: Sequence[tuple[str, Any]]) -> str:
    """What the calibration measured near each option (costs/evidence.py), before the figures ('' if none)."""
    from autopar.costs.evidence import evidence_lines

    lines = evidence_lines(items)
    if not lines:
        return ""
    return theme.section(
        "Evidence",
        "Measured runs in the calibration behind each option's figures: of its GPU family, of its software "
        f"stack and at its scale; the {BAND_NAME} widens with the chosen layout's distance from them.",
        '<ul class="caveats" id="evidence-list">' + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>",
        "evidence",
    )


def _header(result: Any) -> tuple[str, str]:
    """The page title and its header (workload line and the search's key figures)."""
    w = result.workload
    tb = result.token_budget
    tokens = f"{tb / 1e12:.3g} T" if tb >= 1e12 else f"{tb / 1e9:.3g} B"
    title = f"What-if: training {result.model.name} on {tokens} tokens"
    kpis = [
        ("Options", str(len(result.options))),
        ("Feasible", str(sum(o.feasible for o in result.options))),
        ("Trials per option", str(result.search_budget)),
        ("Search time", format_duration(result.wall_s)),
    ]
    line = f"seq {w.seq_len:,} · global batch {w.global_batch:,} · {w.precision} · {result.tier} prices"
    return title, theme.header("what-if report", title, line, kpis)


def _chart(result: Any) -> str:
    """The cost-time chart and, below it, why the infeasible options have no point."""
    info = cost_time_info(result)
    chart = (
        f'<div class="panel">{figure_html(plot_cost_time(info), "fig-cost-time")}</div>'
        if info.labels
        else '<p class="muted">No option has a feasible strategy to plot.</p>'
    )
    infeasible = "".join(f"<li>{esc(x)}</li>" for x in info.infeasible)
    return chart + (f'<ul class="caveats">{infeasible}</ul>' if infeasible else "")


def _inputs_section(result: Any) -> str:
    """What the user asked for (model, budget, goodput, limits, prices, seed) and the run's notes."""
    inputs = _kv(
        [
            ("model", result.model.name),
            ("token budget", f"{result.token_budget:,.0f} tokens"),
            ("goodput", f"{100 * result.goodput:.0f} %"),
            ("deadline", format_duration(result.deadline_s) if result.deadline_s else "none"),
            ("cost cap", f"${result.max_cost_usd:,.0f}" if result.max_cost_usd else "none"),
            ("price file", result.prices_file or "built-in price book"),
            ("seed", str(result.seed)),
            ("autopar", autopar_version()),
        ]
    )
    return theme.section(
        "Inputs and notes",
        "",
        f'<div class="inputs"><div class="panel"><h3>Inputs</h3>{inputs}</div></div>'
        + f'<div class="notes">{theme.notes(result.notes)}</div>',
        "inputs",
    )


def write_whatif_report(result: Any, path: str | Path, *, plotlyjs: str = "inline") -> Path:
    """Write the what-if report as one self-contained HTML file (plotly.js inlined unless 'cdn')."""
    return write_text(path, whatif_report_html(result, plotlyjs))


# --------------------------------------------------------------------------- the sizing page


def sizing_table_info(result: Any) -> TableInfo:
    """One row per GPU type of a --deadline sizing: its fewest GPUs, time and cost with their bands, the
    strategy and its caveats (a layout to verify, a tie, why no count meets the deadline)."""
    cols = [
        ("option", "Option", False),
        ("count", "Fewest GPUs", True),
        ("days", f"Time to train (days; {BAND_NAME})", True),
        ("cost", f"Total cost (USD; {BAND_NAME})", True),
        ("mtok", "Cost ($/Mtoken)", True),
        ("price", "Price ($/GPU-h)", True),
        ("strategy", "Strategy", False),
        ("searched", "Counts searched", True),
        ("note", "Note", False),
    ]
    rows, roles = [], []
    winner = _cheapest(result)
    for r in result.rows:
        rows.append(_sizing_row(r, r.answer, r.option or r.gpu))
        roles.append("Best" if r.answer is not None and r.answer.label == winner else "")
        if r.recipe_style is not None:
            rows.append(_sizing_row(r, r.recipe_style, f"{r.option or r.gpu} (recipe-style)"))
            roles.append("Recipe-style alternative")
    return TableInfo(
        columns=tuple(Column(k, lbl, num) for k, lbl, num in cols), rows=tuple(rows), roles=tuple(roles)
    )


def _sizing_row(r: Any, a: Any, name: str) -> tuple[tuple[str, float | str], ...]:
    """The cells of one sizing row: the count `a` answers with (None: no count meets the deadline)."""
    searched = (str(len(r.searched)), float(len(r.searched)))
    if a is None or a.figures is None:
        inf = ("–", float("inf"))
        return ((name, name), inf, inf, inf, inf, inf, ("–", ""), searched, (r.reason, r.reason))
    f = a.figures
    days = f.time_to_train_s / DAY
    return (
        (name, name),
        (f"{a.count:,} ({a.count // r.unit} {r.unit_name}s)", float(a.count)),
        (_with_band(f"{days:,.1f}", _days_band(a), "{:,.1f}"), days),
        (_with_band(f"{f.total_cost_usd:,.0f}", _usd_band(a), "{:,.0f}"), f.total_cost_usd),
        (f"{f.usd_per_mtoken:.4g}", f.usd_per_mtoken),
        (_price_text(a), a.usd_per_gpu_hour),
        (f"{a.strategy_label} ({a.precision})", a.strategy_label),
        searched,
        (_note(a), _note(a)),
    )


def _cheapest(result: Any) -> str | None:
    answers = [a for a in result.answers if a.total_cost_usd is not None]
    return min(answers, key=lambda a: a.total_cost_usd).label if answers else None


def sizing_report_html(result: Any, plotlyjs: str = "inline") -> str:
    """The --deadline sizing page: the verdict, the evidence, per GPU type the fewest GPUs that meet the
    deadline (with bands and layouts to verify), the answers' cost against time, and the notes."""
    title = (
        f"Sizing: training {result.model.name} on {format_tokens(result.token_budget)} tokens in "
        + format_duration(result.deadline_s)
    )
    w = result.workload
    line = f"seq {w.seq_len:,} · global batch {w.global_batch:,} · {w.precision} · {result.tier} prices"
    kpis = [
        ("GPU types", str(len(result.rows))),
        ("Meet the deadline", str(len(result.answers))),
        ("Counts searched", str(sum(len(r.searched) for r in result.rows))),
        ("Search time", format_duration(result.wall_s)),
    ]
    ok = "note ok" if result.answers else "note"
    cheapest = _cheapest(result)
    shown_points = result.answers + [r.recipe_style for r in result.rows if r.recipe_style is not None]
    info = points_info(shown_points, [cheapest] if cheapest else [], [], result.deadline_s, None)
    chart = (
        f'<div class="panel">{figure_html(plot_cost_time(info), "fig-cost-time")}</div>'
        if info.labels
        else '<p class="muted">No option meets the deadline: nothing to plot.</p>'
    )
    shown = [(r.option or r.gpu, getattr(r.answer or r.fastest, "evidence", None)) for r in result.rows]
    body = (
        theme.header("sizing report", title, line, kpis)
        + f'<section id="winner"><h2>Answer</h2><div class="{ok}"><b>{esc(result.message)}</b></div></section>'
        + evidence_section(shown)
        + theme.section(
            "Fewest GPUs per option",
            "Counts are searched in increasing order; each answer is the first count whose best fitting "
            "strategy meets the deadline. Click a header to sort.",
            table_html(sizing_table_info(result), "sizing-table"),
            "sizing",
        )
        + theme.section(
            "Cost vs time to train",
            f"Each answer (and recipe-style alternative) with its {BAND_NAME} as error bars.",
            chart,
            "cost-time",
        )
        + theme.section("Notes", "", f'<div class="notes">{theme.notes(result.notes)}</div>', "inputs")
        + theme.footer(
            "Times and costs follow from the estimated throughput; measure before signing a contract."
        )
    )
    return render_page(title, body, plotlyjs)


def write_sizing_report(result: Any, path: str | Path, *, plotlyjs: str = "inline") -> Path:
    """Write the --deadline sizing page as one self-contained HTML file (plotly.js inlined unless 'cdn')."""
    return write_text(path, sizing_report_html(result, plotlyjs))
