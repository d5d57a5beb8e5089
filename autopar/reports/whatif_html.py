"""The what-if report: per-option summary table, cost-vs-time chart, sensitivity table.

Renders `autopar.costs.whatif.WhatIfResult`. Data functions (`cost_time_info`,
`options_table_info`, `sensitivity_table_info`) are separate from drawing so tests can check them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

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
from autopar.units import SECONDS_PER_DAY, format_duration, format_duration_short

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


def _hover(o: Any) -> str:
    f = o.figures
    lines = [
        f"<b>{o.label}</b>" + (f" (rank {o.rank})" if o.rank else ""),
        o.strategy_label,
        f"{fmt_num(o.tokens_per_s)} tokens/s · MFU {100 * (o.mfu or 0):.1f} % · "
        f"headroom {o.headroom_gib or 0:.1f} GiB",
        f"time to train {format_duration(f.time_to_train_s)} · ${f.total_cost_usd:,.0f} · "
        f"${f.usd_per_mtoken:.3f}/Mtoken",
        f"${o.usd_per_gpu_hour:.2f}/GPU-h ({o.tier})",
    ]
    return "<br>".join(lines)


def cost_time_info(result: Any) -> CostTimeInfo:
    """Points of the cost-vs-time chart: one per feasible option with a token budget."""
    ok = [
        o
        for o in result.options
        if o.feasible and o.figures is not None and o.figures.time_to_train_s is not None
    ]
    by = {o.label: o for o in ok}
    front = [by[lbl] for lbl in result.pareto if lbl in by]
    winner = result.ranking[0] if result.ranking else None
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
        deadline_days=result.deadline_s / DAY if result.deadline_s else None,
        max_cost_usd=result.max_cost_usd,
        infeasible=tuple(f"{o.label}: {o.reason}" for o in result.options if not o.feasible),
    )


def _price_text(o: Any) -> str:
    """'6.00', or '6.00 (B200's)' when the option is priced with another GPU's price (a price-book alias)."""
    borrowed = getattr(o, "price_borrowed_from", "")
    return f"{o.usd_per_gpu_hour:.2f}" + (f" ({borrowed}'s)" if borrowed else "")


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
        ("days", "Time to train (days)", True),
        ("cost", "Total cost (USD)", True),
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
            (f"{days:,.1f}", days) if days is not None else ("–", float("inf")),
            (f"{f.total_cost_usd:,.0f}", f.total_cost_usd)
            if f and f.total_cost_usd is not None
            else ("–", float("inf")),
            (f"{f.usd_per_mtoken:.4g}", f.usd_per_mtoken) if f else ("–", float("inf")),
            (f"{f.usd_per_hour:,.0f}", f.usd_per_hour) if f else ("–", float("inf")),
            (f"{f.gpu_hours:,.0f}", f.gpu_hours) if f and f.gpu_hours is not None else ("–", float("inf")),
            _yes(o.meets_deadline),
            _yes(o.within_cost_cap),
            _yes(o.on_pareto if o.feasible else None),
            (f"{o.n_trials} ({o.n_feasible})", float(o.n_trials)),
            (o.reason or "", o.reason or ""),
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
                cells.append(
                    (
                        f"{format_duration_short(so.time_to_train_s)} / ${so.total_cost_usd:,.0f}",
                        so.time_to_train_s / DAY,
                    )
                )
        rows.append(tuple(cells))
        roles.append("Winner changes" if s.winner_changed else "")
    return TableInfo(columns=tuple(cols), rows=tuple(rows), roles=tuple(roles))


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
    xlog, ylog = _spans(info.days), _spans(info.usd)
    xr, yr = _range(info.days, xlog), _range(info.usd, ylog)
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
        mode="markers",
        cliponaxis=False,
        hovertext=info.hover,
        hovertemplate="%{hovertext}<extra></extra>",
        name="Options",
        marker={"size": 11, "color": colors, "line": {"width": 1, "color": "white"}},
        textfont={"family": FONT, "size": 12, "color": "#111827"},
    )


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
    metrics = [
        ("Time to train", format_duration(f.time_to_train_s)),
        ("Total cost", f"${f.total_cost_usd:,.0f}"),
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
        + '<section id="options"><h2>Options</h2><p class="lead">The fastest strategy that fits, per '
        "hardware option, priced at the chosen tier. Click a header to sort.</p>"
        + table_html(options_table_info(result), "options-table")
        + "</section>"
        + '<section id="cost-time"><h2>Cost vs time to train</h2><p class="lead">Each point is one option; '
        "the line joins the options no other option beats on both time and cost.</p>"
        + _chart(result)
        + "</section>"
        + '<section id="sensitivity"><h2>Sensitivity</h2><p class="lead">How the ranking moves when prices '
        "change by ±20 % or the inter-node bandwidth halves.</p>"
        + sens
        + "</section>"
        + _inputs_section(result)
        + theme.footer(
            "Times and costs follow from the estimated throughput; measure before signing a contract."
        )
    )
    return render_page(title, body, plotlyjs)


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
