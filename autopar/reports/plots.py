"""Plotly figures drawn from the data functions in `autopar.reports.figures` (no computation here)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autopar.reports.common import FONT, PALETTE, base_layout
from autopar.reports.figures import ParallelCoordsInfo, ParetoPlotInfo, StackedBarInfo
from autopar.reports.labels import place_labels

HOVER = "%{hovertext}<extra></extra>"
PANEL_HEIGHT = 440
ASSUMED_WIDTH = 1260  # px: the report's content width (template .wrap), for label placement


# The dominated and infeasible cloud is drawn with this many significant digits (the page stores every
# coordinate as JSON text; a plot resolves far less than 1e-6 of an axis), hover texts keep the values.
CLOUD_DIGITS = 6


def _round(values: tuple[float, ...]) -> list[float]:
    return [float(f"{v:.{CLOUD_DIGITS}g}") for v in values]


def focus_range(
    front: list[float], everything: list[float], pad: float = 0.18, log: bool = False
) -> list[float] | None:
    """Initial axis range around the Pareto points (padded), so far-off dominated points do not
    squash the front; the autoscale button still shows everything. Log axes: in log10 units."""
    if not front:
        return None
    if log:
        front, everything = [math.log10(v) for v in front], [math.log10(v) for v in everything if v > 0]
    lo, hi = min(front), max(front)
    span = hi - lo or max(abs(hi) * 0.1, 1e-9)
    lo, hi = lo - pad * span, hi + pad * span
    if everything:  # never pad beyond the data
        lo, hi = max(lo, min(everything) - pad * span), min(hi, max(everything) + pad * span)
    return [lo, hi]


def _label_recommended(fig: go.Figure, p, i: int, ranges, grid) -> None:  # noqa: ANN001
    """Recommended-point labels as annotations placed so that they do not overlap (labels.py)."""
    if not p.recommended.x:
        return
    cols, rows = grid
    ref = "" if i == 0 else str(i + 1)
    xa, ya = fig.layout[f"xaxis{ref}"], fig.layout[f"yaxis{ref}"]
    width = (ASSUMED_WIDTH - 100) * (xa.domain[1] - xa.domain[0])
    height = (PANEL_HEIGHT * rows - 60) * (ya.domain[1] - ya.domain[0])
    tx = [math.log10(v) for v in p.recommended.x] if p.x_log else list(p.recommended.x)
    ty = [math.log10(v) for v in p.recommended.y] if p.y_log else list(p.recommended.y)
    (x0, x1), (y0, y1) = ranges[0] or (min(tx), max(tx) + 1), ranges[1] or (min(ty), max(ty) + 1)
    pts = [
        ((x - x0) / ((x1 - x0) or 1) * width, (1 - (y - y0) / ((y1 - y0) or 1)) * height)
        for x, y in zip(tx, ty, strict=True)
    ]
    for (x, y), text, (ax, ay) in zip(
        zip(tx, ty, strict=True),
        p.recommended.text,
        place_labels(pts, list(p.recommended.text), width, height),
        strict=True,
    ):
        fig.add_annotation(
            x=x,
            y=y,
            xref=f"x{ref}",
            yref=f"y{ref}",
            text=text,
            ax=ax,
            ay=ay,
            showarrow=True,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor="#92400e",
            bgcolor="rgba(255,255,255,0.85)",
            font={"family": FONT, "size": 12, "color": "#111827"},
        )


DOMINATED_MARKER = {"size": 6, "color": "#94a3b8", "opacity": 0.35}
INFEASIBLE_MARKER = {
    "size": 7,
    "color": "#dc2626",
    "symbol": "x-thin",
    "line": {"width": 1.5, "color": "#dc2626"},
}
RECOMMENDED_MARKER = {
    "size": 17,
    "color": "#f59e0b",
    "symbol": "star",
    "line": {"width": 1.2, "color": "#92400e"},
}


def plot_pareto(info: ParetoPlotInfo) -> go.Figure:
    """Pareto front, one panel per objective pair: front coloured, dominated faded, infeasible hidden."""
    n = len(info.panels)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.09, vertical_spacing=0.16)
    for i, p in enumerate(info.panels):
        _pareto_panel(fig, info, p, i, (cols, rows))
    fig.update_layout(
        **base_layout(
            PANEL_HEIGHT * rows + 40,
            legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
            margin={"l": 70, "r": 30, "t": 40, "b": 60},
        )
    )
    return fig


def _pareto_panel(fig: go.Figure, info: ParetoPlotInfo, p, i: int, grid: tuple[int, int]) -> None:  # noqa: ANN001
    """Panel i: dominated cloud, infeasible (hidden), the front by group, the recommended stars, axes."""
    cols, _ = grid
    cell = {"row": i // cols + 1, "col": i % cols + 1}
    first = i == 0
    cloud = {"hovertemplate": HOVER, "mode": "markers", "showlegend": first}
    fig.add_trace(
        go.Scatter(
            x=_round(p.dominated.x),
            y=_round(p.dominated.y),
            hovertext=p.dominated.hover,
            name="Dominated (feasible)",
            legendgroup="dominated",
            marker=DOMINATED_MARKER,
            **cloud,
        ),
        **cell,
    )
    fig.add_trace(
        go.Scatter(
            x=_round(p.infeasible.x),
            y=_round(p.infeasible.y),
            hovertext=p.infeasible.hover,
            name="Infeasible (click to show)",
            legendgroup="infeasible",
            visible="legendonly",
            marker=INFEASIBLE_MARKER,
            **cloud,
        ),
        **cell,
    )
    for trace in _front_traces(info, p, first):
        fig.add_trace(trace, **cell)
    fig.add_trace(
        go.Scatter(
            x=p.recommended.x,
            y=p.recommended.y,
            hovertext=p.recommended.hover,
            cliponaxis=False,
            name="Recommended",
            legendgroup="recommended",
            marker=RECOMMENDED_MARKER,
            **cloud,
        ),
        **cell,
    )
    xr, yr = _panel_axes(fig, p, cell)
    _label_recommended(fig, p, i, (xr, yr), grid)


def _front_traces(info: ParetoPlotInfo, p, first: bool) -> list[go.Scatter]:  # noqa: ANN001
    """The panel's Pareto points, one trace per group (cluster) when there are several. A group with no point on
    the front shows its dominated points in its colour instead, so every GPU of a comparison keeps its legend
    entry (plotly leaves an empty trace out of the legend)."""
    colors = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(info.groups)}
    multi = len(info.groups) > 1
    traces = []
    for g in info.groups or ("",):
        on_front = g in p.pareto.group or not multi
        pts = p.pareto if on_front else p.dominated
        idx = [k for k, gg in enumerate(pts.group) if gg == g] if multi else range(len(pts.x))
        marker = {
            "size": 9 if on_front else 7,
            "color": colors.get(g, PALETTE[0]),
            "opacity": 0.9 if on_front else 0.5,
            "line": {"width": 1, "color": "white"},
        }
        name = "Pareto front" if not multi else f"Pareto front · {g}" if on_front else f"{g} · dominated"
        traces.append(
            go.Scatter(
                x=[pts.x[k] for k in idx] or [None],
                y=[pts.y[k] for k in idx] or [None],
                hovertext=[pts.hover[k] for k in idx],
                hovertemplate=HOVER,
                mode="markers",
                name=name,
                legendgroup=f"pareto-{g}",
                showlegend=first,
                marker=marker,
            )
        )
    return traces


def _panel_axes(fig: go.Figure, p, cell: dict[str, int]) -> tuple:  # noqa: ANN001
    """Axis titles, scales and a range focused on the front (with the cloud around it)."""
    front_x, front_y = [*p.pareto.x, *p.recommended.x], [*p.pareto.y, *p.recommended.y]
    all_x, all_y = [*front_x, *p.dominated.x], [*front_y, *p.dominated.y]
    xr, yr = focus_range(front_x, all_x, log=p.x_log), focus_range(front_y, all_y, log=p.y_log)
    axis = {"automargin": True, "zeroline": False, **cell}
    fig.update_xaxes(title_text=p.x_title, range=xr, type="log" if p.x_log else "linear", **axis)
    fig.update_yaxes(title_text=p.y_title, range=yr, type="log" if p.y_log else "linear", **axis)
    return xr, yr


def plot_parallel_coords(info: ParallelCoordsInfo) -> go.Figure:
    """Parallel coordinates of knobs and objectives; Pareto lines blue, dominated lines grey."""
    dims = []
    for d in info.dimensions:
        dim: dict[str, object] = {"label": d.label, "values": d.values}
        if d.tickvals is None and max((abs(v) for v in d.values), default=0) >= 1000:
            dim["tickformat"] = ".3~s"
        elif d.tickvals is None and any(not float(v).is_integer() for v in d.values):
            dim["tickformat"] = ".3~g"
        if d.tickvals is not None:
            dim["tickvals"], dim["ticktext"] = d.tickvals, d.ticktext
        dims.append(dim)
    fig = go.Figure(
        go.Parcoords(
            dimensions=dims,
            line={
                "color": list(info.is_pareto),
                "cmin": 0,
                "cmax": 1,
                "colorscale": [[0, "#cbd5e1"], [1, "#2563eb"]],
            },
            labelfont={"family": FONT, "size": 12},
            tickfont={"family": FONT, "size": 10},
            labelangle=0,
            labelside="top",
        )
    )
    fig.update_layout(**base_layout(460, margin={"l": 60, "r": 60, "t": 70, "b": 30}))
    return fig


def plot_stacked_bars(info: StackedBarInfo) -> go.Figure:
    """Stacked bars per recommended point, with the GPU capacity as a dashed line where given."""
    xs = list(range(len(info.categories)))
    fig = go.Figure()
    for seg in info.segments:
        fig.add_trace(
            go.Bar(
                x=xs,
                y=seg.values,
                name=seg.name,
                marker={"color": seg.color},
                hovertemplate=f"{seg.name}: %{{y:.3g}} {info.unit}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=info.totals,
            mode="text",
            text=[f"{v:.3g} {info.unit}" for v in info.totals],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
            textfont={"family": FONT, "size": 12, "color": "#111827"},
        )
    )
    if info.capacity:
        lx: list[float | None] = []
        ly: list[float | None] = []
        for x, cap in zip(xs, info.capacity, strict=True):
            lx += [x - 0.42, x + 0.42, None]
            ly += [cap, cap, None]
        fig.add_trace(
            go.Scatter(
                x=lx,
                y=ly,
                mode="lines",
                name="GPU capacity",
                line={"color": "#dc2626", "width": 2, "dash": "dash"},
                hovertemplate=f"GPU capacity: %{{y:.1f}} {info.unit}<extra></extra>",
            )
        )
    top = max([*info.totals, *(info.capacity or ())], default=1.0)
    fig.update_layout(
        **base_layout(
            450,
            barmode="stack",
            bargap=0.35,
            legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
            margin={"l": 70, "r": 20, "t": 60, "b": 110},
        )
    )
    fig.update_xaxes(tickvals=xs, ticktext=list(info.categories), range=[-0.6, len(xs) - 0.4], tickangle=0)
    fig.update_yaxes(title_text=info.y_title, range=[0, top * 1.15], rangemode="tozero")
    return fig
