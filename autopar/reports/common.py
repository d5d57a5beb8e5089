"""Small helpers shared by the report modules: number formatting, lookups, the HTML template."""

from __future__ import annotations

import datetime as _dt
import html
import math
from importlib import resources
from pathlib import Path

import plotly.graph_objects as go

from autopar.files import write_atomic
from autopar.reports.counts import search_counts  # noqa: F401 - re-exported for the report modules
from autopar.reports.names import (  # noqa: F401 - re-exported for the report modules
    ROLE_TITLES,
    cluster_label,
    role_title,
    trial_cluster,
)
from autopar.reports.plotlyjs import RENDER_JS, plotly_script
from autopar.reports.plotlyjs import figure_html as _figure_html
from autopar.search.result import SearchResult, TrialRecord
from autopar.specs import Workload
from autopar.units import format_duration

# One colour per category, reused across figures so a segment means the same thing everywhere.
PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4b5563"]
# The plotly toolbar appears only while the pointer is over a plot, stacked vertically in the right
# margin (base_layout: modebar orientation "v", margin r >= MODEBAR_MARGIN), so it never covers a legend
# drawn above the plot area.
PLOT_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "displayModeBar": "hover",
    "modeBarButtonsToRemove": ["lasso2d", "select2d"],
}
MODEBAR_MARGIN = 44  # px: a vertical modebar's width
FONT = "Inter, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def esc(x: object) -> str:
    """HTML-escape any value (user-provided names end up in the page)."""
    return html.escape(str(x), quote=True)


def fmt_num(x: float | None, digits: int = 3) -> str:
    """Compact number with thousands suffix (1.23M, 45.6k, 0.123); '–' for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    ax = abs(x)
    for div, suf in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= div:
            return f"{x / div:.{digits}g}{suf}"
    if ax == 0 or ax >= 1:
        return f"{x:.{digits}g}" if ax < 1000 else f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_value(x: float | None, unit: str) -> str:
    """A value with its display unit ('1.2M tokens/s', '41.0 %', '$2.31/Mtoken', '12.3 GiB')."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if unit == "%":
        return f"{x:.1f} %"
    if unit.startswith("$"):
        return f"${x:,.2f}{unit[1:]}" if unit != "$" else f"${x:,.2f}"
    if unit == "GiB":
        return f"{x:.1f} GiB"
    if unit == "s":
        return format_duration(x)
    return f"{fmt_num(x)} {unit}".strip()


def trial_workload(result: SearchResult, trial: TrialRecord) -> Workload:
    """The workload with the trial's GEMM precision (the search may vary precision)."""
    if trial.precision and trial.precision != result.workload.precision:
        return result.workload.model_copy(update={"precision": trial.precision})
    return result.workload


def pareto_trials(result: SearchResult) -> list[TrialRecord]:
    """Feasible non-dominated trials in trial order: the Pareto set as the search marked it."""
    return sorted((t for t in result.trials if t.shown), key=lambda t: t.number)


def autopar_version() -> str:
    """Installed autopar version (package metadata), 'dev' when not installed."""
    try:
        from importlib.metadata import version

        return version("autopar")
    except Exception:  # noqa: BLE001 - metadata missing in a source checkout
        return "dev"


def now_utc() -> str:
    """Report timestamp, UTC, minute resolution."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A figure as an embeddable <div> (drawn once the page's plotly.js is ready)."""
    return _figure_html(fig, div_id, PLOT_CONFIG)


def render_page(title: str, body: str, plotlyjs: str) -> str:
    """Fill the single HTML template with a title, the plotly.js loader and the body."""
    tpl = resources.files("autopar.reports").joinpath("template.html").read_text(encoding="utf-8")
    values = {"title": esc(title), "plotlyjs": plotly_script(plotlyjs), "body": body, "render": RENDER_JS}
    out, rest = [], tpl
    while "{{" in rest:  # substitute once, left to right, never inside inserted text
        head, _, tail = rest.partition("{{")
        key, _, rest = tail.partition("}}")
        out += [head, values[key.strip()]]
    out.append(rest)
    return "".join(out)


def write_text(path: str | Path, text: str) -> Path:
    """Write the page atomically (autopar.files), creating parent folders; returns the resolved path."""
    return write_atomic(path, text).resolve()


def base_layout(height: int, **kw: object) -> dict[str, object]:
    """Shared plotly layout: white template, explicit height, readable font, tight margins."""
    layout: dict[str, object] = {
        "template": "plotly_white",
        "height": height,
        "font": {"family": FONT, "size": 12, "color": "#1f2937"},
        "margin": {"l": 70, "r": 30, "t": 50, "b": 60},
        "hoverlabel": {"font": {"family": FONT, "size": 12}, "align": "left"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
    }
    layout.update(kw)
    margin = dict(layout["margin"])  # type: ignore[call-overload]  # the dict set above (or by kw): values are typed object
    margin["r"] = max(int(margin.get("r", 0)), MODEBAR_MARGIN)
    layout["margin"] = margin
    layout["modebar"] = {"orientation": "v"}
    return layout
