"""The compare page (`autopar compare LABEL ... --out FILE.html`): the answer first (which label is best on
throughput, memory and cost), then the side-by-side table (the terminal table's rows and best marks), then
a stacked bar chart of each label's step-time split. Renders `comparison.ComparisonInfo`, computed apart.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from autopar.reports import theme
from autopar.reports.common import PALETTE, base_layout, esc, figure_html, render_page, write_text
from autopar.reports.comparison import SPLIT_INDENT, Best, ComparisonInfo

BEST_TITLES = {"throughput": "Fastest", "memory": "Least memory", "cost": "Cheapest"}
BEST_STAR = " \u2605"  # marks the best cell of a row, as the terminal table's " *"


def split_figure(info: ComparisonInfo) -> go.Figure:
    """Each label's step time as a stacked bar of its split (parts that are zero for every label left out)."""
    fig = go.Figure()
    for i, (name, secs) in enumerate(info.split):
        if not any(secs):
            continue
        fig.add_trace(
            go.Bar(
                x=list(info.labels),
                y=list(secs),
                name=name.strip(),
                marker={"color": PALETTE[i % len(PALETTE)]},
                hovertemplate="%{x}<br>" + esc(name.strip()) + ": %{y:.3f} s<extra></extra>",
            )
        )
    fig.update_layout(
        **base_layout(
            420,
            barmode="stack",
            legend={
                "orientation": "h",
                "traceorder": "normal",  # the split's order, not the stack's reversed one
                "yanchor": "bottom",
                "y": 1.02,
                "xanchor": "left",
                "x": 0,
            },
        )
    )
    fig.update_yaxes(title_text="Step time (s) ↓ better")
    return fig


def _card(b: Best) -> str:
    sid = f"best-{b.objective}"
    if not b.labels:
        body = f'<div class="strategy" id="{sid}">none</div><div class="where">{esc(b.note)}</div>'
    else:
        names = "<br>".join(esc(x) for x in b.labels)
        note = f" · {esc(b.note)}" if b.note else ""
        body = f'<div class="strategy" id="{sid}">{names}</div><div class="where">{esc(b.figure)}{note}</div>'
    return f'<div class="card"><div class="role">{esc(BEST_TITLES[b.objective])}</div>{body}</div>'


def _table(info: ComparisonInfo) -> str:
    head = "<th>figure</th>" + "".join(f"<th>{esc(x)}</th>" for x in info.labels)
    body = []
    for r in info.rows:
        cells = "".join(
            f'<td class="best"><b>{esc(c)}{BEST_STAR}</b></td>' if i in r.best else f"<td>{esc(c)}</td>"
            for i, c in enumerate(r.cells)
        )
        pad = ' style="padding-left:22px"' if r.name.startswith(SPLIT_INDENT) else ""
        body.append(f"<tr><td{pad}>{esc(r.name.strip())}</td>{cells}</tr>")
    body.append(
        "<tr><td>memory verdict</td>" + "".join(f"<td>{esc(v)}</td>" for v in info.verdicts) + "</tr>"
    )
    return (
        f'<div class="table-wrap"><table id="compare-table" class="tbl"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def compare_report_html(info: ComparisonInfo, plotlyjs: str = "inline") -> str:
    """The complete compare page as a string."""
    top = theme.header("compare", info.title, info.price_note, [("Strategies", str(len(info.labels)))])
    body = (
        top
        + theme.section(
            "Answer",
            "Best label on each objective; throughput and cost rank only labels that may fit in memory.",
            '<div class="cards">' + "".join(_card(b) for b in info.answer) + "</div>",
            "answer",
        )
        + theme.section(
            "Side by side",
            f"{BEST_STAR.strip()}: best in its row (a value shown like the best ties with it).",
            _table(info),
            "side-by-side",
        )
        + theme.section(
            "Step-time split",
            "Where each strategy's step goes: compute and the communication, bubble and optimizer time "
            "left exposed.",
            f'<div class="panel">{figure_html(split_figure(info), "fig-step-split")}</div>',
            "step-split",
        )
        + f'<div class="notes">{theme.notes(info.not_run)}'
        + f"{theme.notes([info.price_note, info.calibration_note], ok=True)}</div>"
        + theme.footer("Figures are estimates; measure before committing a cluster.")
    )
    return render_page(f"Compare: {info.title}", body, plotlyjs)


def write_compare_report(info: ComparisonInfo, path: str | Path, *, plotlyjs: str = "inline") -> Path:
    """Write the compare page as one HTML file (autopar.files.write_atomic); returns the resolved path."""
    return write_text(path, compare_report_html(info, plotlyjs))
