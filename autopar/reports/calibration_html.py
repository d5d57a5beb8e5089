"""The calibration report page: held-out (leave-one-source-out) errors, band coverage, adaptation curve.

Renders what autopar.calibration.evaluation.validation computed; computes nothing itself.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autopar.calibration.evaluation.validation import HeldOut, error_table
from autopar.files import write_atomic
from autopar.reports import theme
from autopar.reports.common import MODEBAR_MARGIN, PLOT_CONFIG, render_page
from autopar.reports.plotlyjs import figure_html

# ------------------------------------------------------------------------------------------ report
_PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4b5563"]


def _plotly_text(value: object) -> str:
    """Input text for a plotly label or hover: plotly.js reads <b>, <a href=...> and entities in them,
    so <, > and & are written as entities (shown as typed, never as markup or a link)."""
    return html.escape(str(value), quote=False)


def scatter_figure(res: HeldOut) -> go.Figure:
    """Predicted vs measured tokens/s per GPU, before (analytical) and after (held-out calibrated)."""
    df = res.frame()
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.06,
        subplot_titles=("analytical (uncalibrated)", "calibrated (leave-one-source-out)"),
    )
    for i, (source, g) in enumerate(df.groupby("source", sort=True)):
        _add_source(fig, g, _plotly_text(source), _PALETTE[i % len(_PALETTE)])
    lo, hi = float(df.measured.min()) / 1.5, float(df.measured.max()) * 1.5
    for col in (1, 2):
        _add_guides(fig, lo, hi, col)
        fig.update_xaxes(type="log", title_text="measured tokens/s per GPU", row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_yaxes(title_text="predicted tokens/s per GPU", row=1, col=1)
    fig.update_layout(
        height=520,
        margin={"l": 60, "r": 20, "t": 90, "b": 50},
        template="plotly_white",
        # above the panels from the left, like the other reports' legends (the toolbar is in the right margin)
        legend={
            "title": {"text": "source"},
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.1,
            "xanchor": "left",
            "x": 0,
        },
    )
    return fig


def _add_source(fig: go.Figure, g: pd.DataFrame, src: str, color: str) -> None:
    """One source's runs: analytical prediction (left panel), calibrated with its band (right)."""
    hover = [
        f"{_plotly_text(r.id)} ({_plotly_text(r.gpu)})<br>measured {r.measured:,.0f}<br>"
        f"predicted {r.predicted:,.0f}<br>calibrated {r.calibrated:,.0f} [{r.low:,.0f}, {r.high:,.0f}]"
        for r in g.itertuples()
    ]
    common = {"x": g.measured, "mode": "markers", "name": src, "legendgroup": src, "text": hover}
    marker = {"color": color, "size": 8}
    fig.add_trace(go.Scatter(y=g.predicted, marker=marker, hoverinfo="text", **common), row=1, col=1)
    band = {
        "type": "data",
        "symmetric": False,
        "array": g.high - g.calibrated,
        "arrayminus": g.calibrated - g.low,
        "thickness": 1,
        "width": 0,
    }
    fig.add_trace(
        go.Scatter(y=g.calibrated, showlegend=False, marker=marker, hoverinfo="text", error_y=band, **common),
        row=1,
        col=2,
    )


def _add_guides(fig: go.Figure, lo: float, hi: float, col: int) -> None:
    """The exact line (solid) and +-10% lines (dotted) of one panel."""
    for k, dash in ((1.0, "solid"), (1.1, "dot"), (1 / 1.1, "dot")):
        fig.add_trace(
            go.Scatter(
                x=[lo, hi],
                y=[lo * k, hi * k],
                mode="lines",
                showlegend=False,
                hoverinfo="skip",
                line={"color": "#9ca3af", "width": 1, "dash": dash},
            ),
            row=1,
            col=col,
        )


_HEADERS = {
    "median_ape_before": "median APE before",
    "median_ape_after": "after",
    "mean_ape_before": "mean APE before",
    "mean_ape_after": "after",
    "spearman_before": "Spearman within source before",
    "spearman_after": "after",
    "band_coverage": "in 80% band",
    "band_width": "mean band width",
    "ape_global": "median APE, no adaptation",
    "ape_offsets": "offsets",
    "ape_adapter": "adapter",
}


def _table_html(df: pd.DataFrame) -> str:
    """A compact HTML table: APEs, coverage and widths as %, rank correlations with 2 decimals."""
    shown = df.copy()
    for c in shown.columns:
        if "ape" in c or c.startswith("band_") or c == "mean_ape":
            shown[c] = [f"{100 * v:.1f}%" for v in shown[c]]
        elif c.startswith("spearman"):
            shown[c] = [
                "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}" for v in shown[c]
            ]
    return shown.rename(columns=_HEADERS).to_html(index=False, border=0, classes="tbl", escape=True)


def report_html(
    res: HeldOut,
    *,
    title: str,
    description: str,
    plotlyjs: str = "inline",
    memory: HeldOut | None = None,
    adaptation: pd.DataFrame | None = None,
    choice: str = "",
    learning: tuple[str, pd.DataFrame] | None = None,
) -> str:
    """The calibration report page: LOSO tables per source and GPU family, scatter, per-run rows."""
    by_source, by_family = error_table(res, "source"), error_table(res, "family")
    fig = _figure(scatter_figure(res))
    runs = _runs_html(res)
    kpis = [
        ("Runs", f"{len(res.ts):,}"),
        ("Sources", str(len(set(res.ts.sources)))),
        ("Skipped", str(len(res.ts.skipped))),
    ]
    body = (
        theme.header(
            "calibration report", title, description or "held-out errors of the throughput corrector", kpis
        )
        + (f'<section id="choice">{theme.notes([choice], ok=True)}</section>' if choice else "")
        + theme.section("Per source", _METHOD, _table_html(by_source), "by-source")
        + theme.section("Per GPU family", "", _table_html(by_family), "by-family")
        + _adaptation_section(adaptation)
        + _learning_section(learning)
        + _memory_section(memory)
        + theme.section(
            "Predicted vs measured",
            "Solid line: exact; dotted: ±10%. Error bars: the calibrated band.",
            f'<div class="panel">{fig}</div>',
            "scatter",
        )
        + theme.section("Runs", "", runs, "runs")
        + theme.footer(
            "Every figure is leave-one-source-out: a source is scored by a corrector fitted without it."
        )
    )
    return render_page(title, body, plotlyjs)


_METHOD = (
    "Each source is predicted by a corrector trained on the other sources only (leave-one-source-out). "
    "APE = |predicted / measured - 1| of tokens/s per GPU; Spearman's rho is computed within each source "
    "over runs of the same model and GPU count; band coverage is the share of runs whose measurement falls "
    "inside the 80% band (split-conformal by source, scored without the held-out source); band width is "
    "(high - low) / corrected figure."
)


def _runs_html(res: HeldOut) -> str:
    """Every run used (measured, predicted, calibrated, band, errors) and every run skipped, folded."""
    cols = ["id", "source", "gpu", "measurement", "measured", "predicted", "calibrated", "low", "high"]
    rows = res.frame()[[*cols, "ape_before", "ape_after"]].round(1)
    skipped = "".join(f"<li>{html.escape(i)}: {html.escape(r)}</li>" for i, r in res.ts.skipped)
    return (
        f"<details><summary>{len(rows)} runs used"
        f"{f', {len(res.ts.skipped)} skipped' if res.ts.skipped else ''}</summary>"
        f"{rows.to_html(index=False, border=0, classes='tbl')}"
        f"{f'<ul>{skipped}</ul>' if skipped else ''}</details>"
    )


def _learning_section(learning: tuple[str, pd.DataFrame] | None) -> str:
    """A cluster's learning curve (calibration.hierarchy.learning_curve): n runs ingested -> error."""
    if learning is None or learning[1].empty:
        return ""
    group, curve = learning
    return theme.section(
        f"Learning curve of your cluster '{group}'",
        "n of its runs ingested (3 random draws), the others scored: no adaptation, today's shrunken "
        "offset, and the hierarchical adapter (offset and slopes with priors from the other clusters); "
        "the last column is the coverage of the adapter's 80% band.",
        _table_html(
            curve.rename(columns={"coverage": "band_coverage", "n": "runs ingested", "held_out": "held out"})
        ),
        "learning",
    )


def _figure(fig: go.Figure) -> str:
    """The scatter as an embedded figure drawn by the shared loader: the partial plotly.js bundle inline
    (scatter with error bars and log axes are in it; tests/reports/test_size.py checks the trace types),
    as in the search and what-if reports."""
    fig.update_layout(modebar={"orientation": "v"}, margin={"r": MODEBAR_MARGIN})
    return figure_html(fig, "fig-calibration", PLOT_CONFIG)


def _adaptation_section(curve: pd.DataFrame | None) -> str:
    """The adaptation curve: each source fitted on the others plus k of its runs, scored on the rest."""
    if curve is None or curve.empty:
        return ""
    return theme.section(
        "Adapting to a cluster (k of its runs ingested)",
        "For each source: fit on the other sources plus k of its runs (10 random draws), score its "
        "remaining runs; its learned offset is what moves the prediction.",
        _table_html(curve),
        "adaptation",
    )


def _memory_section(memory: HeldOut | None) -> str:
    """The peak-memory table, with what its validation scheme allows one to conclude."""
    if memory is None:
        return ""
    srcs = ", ".join(sorted(set(memory.ts.sources)))
    caveat = (
        "only one source reports memory, so no correction can be validated on an unseen source: the "
        "memory factor stays 1 and only the band is learned (scored leave-one-run-out within that source)"
        if memory.scheme.startswith("leave-one-run-out")
        else "validated leave-one-source-out like throughput"
    )
    return theme.section(
        f"Peak memory ({memory.scheme})",
        f"{len(memory.ts)} runs with measured memory, from {srcs}: {caveat}.",
        _table_html(error_table(memory, "source")),
        "memory",
    )


def write_report(
    res: HeldOut,
    path: str | Path,
    *,
    title: str = "autopar calibration report",
    description: str = "",
    plotlyjs: str = "inline",
    memory: HeldOut | None = None,
    adaptation: pd.DataFrame | None = None,
    choice: str = "",
    learning: tuple[str, pd.DataFrame] | None = None,
) -> Path:
    """Write the calibration report HTML to `path` and return it."""
    return write_atomic(
        path,
        report_html(
            res,
            title=title,
            description=description,
            plotlyjs=plotlyjs,
            memory=memory,
            adaptation=adaptation,
            choice=choice,
            learning=learning,
        ),
    )
