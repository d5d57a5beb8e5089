"""The tune page (`autopar tune --out FILE.html`): the pick and why the tune stopped first, then predicted
against measured for every run in order, the belief about every candidate before and after the runs, and
the pick's launch files. Renders the `tune --json` document (autopar/cli/tune.py `tune_json`), computed apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from autopar.reports import theme
from autopar.reports.common import PALETTE, base_layout, esc, figure_html, render_page, write_text


def runs_figure(doc: dict[str, Any]) -> go.Figure:
    """Each run: the belief when it was chosen (median and 80% band) and what it measured."""
    runs = doc["runs"]
    x = [r["run"] for r in runs]
    fig = go.Figure()
    med = [r["believed"][0] for r in runs]
    lo = [r["believed"][0] - r["believed"][1] if r["believed"][1] else 0 for r in runs]
    hi = [r["believed"][2] - r["believed"][0] if r["believed"][2] else 0 for r in runs]
    text = [esc(r["strategy"]) for r in runs]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=med,
            mode="markers",
            name="believed before the run (80% band)",
            error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
            marker={"color": PALETTE[0], "size": 9},
            text=text,
            hovertemplate="run %{x}: %{text}<br>believed %{y:,.0f} tokens/s/GPU<extra></extra>",
        )
    )
    meas = [r["measured"] for r in runs]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=meas,
            mode="markers",
            name="measured",
            marker={"color": PALETTE[1], "size": 11, "symbol": "diamond"},
            text=[f"{esc(r['strategy'])} ({r['status']})" for r in runs],
            hovertemplate="run %{x}: %{text}<br>measured %{y:,.0f} tokens/s/GPU<extra></extra>",
        )
    )
    fig.update_layout(**base_layout(380, legend={"orientation": "h", "y": 1.08, "x": 0}))
    fig.update_xaxes(title_text="run", dtick=1)
    fig.update_yaxes(title_text="tokens/s per GPU ↑ better")
    return fig


def belief_figure(doc: dict[str, Any]) -> go.Figure:
    """Every candidate: the prior's and the posterior's median and 80% band, and its measurement if it ran."""
    cands = doc["candidates"]
    names = [esc(c["key"]) for c in cands]
    fig = go.Figure()
    for i, (which, label) in enumerate((("prior", "before any run"), ("posterior", "after the runs"))):
        med = [c[which][0] for c in cands]
        fig.add_trace(
            go.Scatter(
                y=names,
                x=med,
                mode="markers",
                name=f"belief {label} (80% band)",
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [c[which][2] - c[which][0] for c in cands],
                    "arrayminus": [c[which][0] - c[which][1] for c in cands],
                },
                marker={"color": PALETTE[2 * i], "size": 8},
            )
        )
    ran = [c for c in cands if c.get("measured")]
    fig.add_trace(
        go.Scatter(
            y=[esc(c["key"]) for c in ran],
            x=[c["measured"] for c in ran],
            mode="markers",
            name="measured",
            marker={"color": PALETTE[1], "size": 11, "symbol": "diamond"},
        )
    )
    fig.update_layout(
        **base_layout(max(320, 26 * len(cands) + 120), legend={"orientation": "h", "y": 1.04, "x": 0})
    )
    fig.update_xaxes(title_text="tokens/s per GPU ↑ better")
    fig.update_yaxes(autorange="reversed")
    return fig


def _pick_card(doc: dict[str, Any]) -> str:
    p = doc.get("pick")
    if not p:
        return '<div class="card"><div class="role">Pick</div><div class="strategy" id="pick">none measured</div></div>'
    band = p.get("predicted_band") or [None, None]
    pred = f"predicted {p['predicted']:,.0f}" + (
        f" (80% band {band[0]:,.0f}–{band[1]:,.0f})" if band[0] else ""
    )
    return (
        '<div class="card"><div class="role">Pick (measured)</div>'
        f'<div class="strategy" id="pick">{esc(p["strategy"])}</div>'
        f'<div class="where">measured {p["measured"]:,.0f} tokens/s per GPU · {esc(pred)}'
        + (f" · candidate {esc(p['candidate_id'])}" if p.get("candidate_id") else "")
        + "</div></div>"
    )


def _runs_table(doc: dict[str, Any]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("run", "strategy", "believed (80% band)", "measured", "status", "best so far")
    )
    rows = []
    for r in doc["runs"]:
        b = r["believed"]
        believed = f"{b[0]:,.0f} ({b[1]:,.0f}–{b[2]:,.0f})" if b[0] else "(resumed)"
        meas = f"{r['measured']:,.0f}" if r["measured"] else ""
        best = f"{r['best_so_far']:,.0f}" if r.get("best_so_far") else ""
        status = r["status"] + (f": {r['reason']}" if r["status"] != "ok" else "")
        rows.append(
            f"<tr><td>{r['run']}</td><td>{esc(r['strategy'])}</td><td>{believed}</td><td>{meas}</td>"
            f"<td>{esc(status)}</td><td>{best}</td></tr>"
        )
    return f'<div class="table-wrap"><table id="runs-table" class="tbl sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _launch(doc: dict[str, Any]) -> str:
    files = doc.get("launch") or {}
    if not files:
        return "<p>No pick, so no launch files.</p>"
    parts = [f"<p>Written to {esc(files.get('dir', ''))}:</p>"]
    for name, text in (files.get("files") or {}).items():
        parts.append(f"<h4>{esc(name)}</h4><pre>{esc(text)}</pre>")
    return "".join(parts)


def tune_report_html(doc: dict[str, Any], plotlyjs: str = "inline") -> str:
    """The complete tune page as a string."""
    title = doc.get("title", "autopar tune")
    facts = [
        ("Runs", str(len(doc["runs"]))),
        ("Candidates", str(len(doc["candidates"]))),
        ("Stopped", doc["stopped"]),
    ]
    top = theme.header("tune", title, doc.get("why", ""), facts)
    body = (
        top
        + theme.section(
            "Answer",
            f"Stopped: {doc['stopped']} — {doc.get('why', '')}",
            '<div class="cards">' + _pick_card(doc) + "</div>",
            "answer",
        )
        + theme.section(
            "Runs",
            "Each run in order: what was believed when it was chosen, what it measured.",
            _runs_table(doc) + f'<div class="panel">{figure_html(runs_figure(doc), "fig-runs")}</div>',
            "runs",
        )
        + theme.section(
            "Belief",
            "Every candidate before any run (the calibrated model) and after the runs (the model plus a Gaussian "
            "process on the measured log residuals).",
            f'<div class="panel">{figure_html(belief_figure(doc), "fig-belief")}</div>',
            "belief",
        )
        + theme.section("Launch", "The pick's launch files.", _launch(doc), "launch")
        + f'<div class="notes">{theme.notes(doc.get("notes") or [], ok=True)}</div>'
        + theme.footer("Measured on your cluster; short runs, warm-up steps left out.")
    )
    return render_page(f"Tune: {title}", body, plotlyjs)


def write_tune_report(doc: dict[str, Any], path: str | Path, *, plotlyjs: str = "inline") -> Path:
    """Write the tune page as one HTML file (atomically); returns the resolved path."""
    return write_text(path, tune_report_html(doc, plotlyjs))
