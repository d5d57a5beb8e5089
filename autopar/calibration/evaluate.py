"""Leave-one-source-out evaluation of the corrector: errors before/after per source and GPU family."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from scipy.stats import kendalltau
from sklearn.base import clone
from sklearn.model_selection import KFold

from autopar.calibration.corrector import ThroughputCorrector
from autopar.calibration.features import TrainingSet


@dataclass
class LosoResult:
    """Held-out predictions: for each row, the corrector trained without the row's source."""

    ts: TrainingSet
    log_factor: np.ndarray  # predicted log(measured/predicted)
    log_low: np.ndarray
    log_high: np.ndarray
    chosen: dict[str, str]  # held-out source -> model picked by the inner cross-validation

    @property
    def before(self) -> np.ndarray:
        """Analytical tokens/s per GPU."""
        return self.ts.predicted

    @property
    def after(self) -> np.ndarray:
        """Calibrated tokens/s per GPU."""
        return self.ts.predicted * np.exp(self.log_factor)

    def frame(self) -> pd.DataFrame:
        """One row per run: ids, groups, measured, before, after, band and the errors."""
        ts = self.ts
        return pd.DataFrame(
            {
                "id": ts.ids,
                "source": ts.sources,
                "gpu": ts.gpus,
                "family": ts.families,
                "measured": ts.measured,
                "predicted": self.before,
                "calibrated": self.after,
                "low": ts.predicted * np.exp(self.log_low),
                "high": ts.predicted * np.exp(self.log_high),
                "ape_before": np.abs(self.before / ts.measured - 1),
                "ape_after": np.abs(self.after / ts.measured - 1),
                "measurement": ts.how,
            }
        )


def leave_one_source_out(ts: TrainingSet, estimator: ThroughputCorrector | None = None) -> LosoResult:
    """Train on all sources but one, predict the held-out one; repeat for every source."""
    est = estimator if estimator is not None else ThroughputCorrector()
    sources = np.array(ts.sources)
    n = len(ts)
    c, lo, hi = np.zeros(n), np.zeros(n), np.zeros(n)
    chosen: dict[str, str] = {}
    for src in sorted(set(ts.sources)):
        test = sources == src
        if test.all():
            continue
        m = clone(est).fit(ts.X[~test], ts.y[~test], groups=sources[~test])
        c[test], lo[test], hi[test] = m.predict_interval(ts.X[test])
        chosen[src] = m.model_name_
    return LosoResult(ts=ts, log_factor=c, log_low=lo, log_high=hi, chosen=chosen)


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau between two series (NaN with fewer than 2 points or no variation)."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(kendalltau(a, b).statistic)


def error_table(res: LosoResult, by: str = "source") -> pd.DataFrame:
    """Per-group n, median/mean APE before and after, Kendall tau before/after, band coverage; plus 'all'."""
    df = res.frame()
    rows = []
    groups = [(str(k), g) for k, g in df.groupby(by, sort=True)] + [("all", df)]
    for name, g in groups:
        rows.append(
            {
                by: name,
                "n": len(g),
                "median_ape_before": float(g.ape_before.median()),
                "median_ape_after": float(g.ape_after.median()),
                "mean_ape_before": float(g.ape_before.mean()),
                "mean_ape_after": float(g.ape_after.mean()),
                "tau_before": _tau(g.measured.to_numpy(), g.predicted.to_numpy()),
                "tau_after": _tau(g.measured.to_numpy(), g.calibrated.to_numpy()),
                "band_coverage": float(((g.measured >= g.low) & (g.measured <= g.high)).mean()),
                "model": res.chosen.get(name, "") if by == "source" else "",
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------ report
_PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4b5563"]


def scatter_figure(res: LosoResult) -> go.Figure:
    """Predicted vs measured tokens/s per GPU, before (analytical) and after (held-out calibrated)."""
    df = res.frame()
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.06,
        subplot_titles=("analytical (uncalibrated)", "calibrated (leave-one-source-out)"),
    )
    lo, hi = float(df.measured.min()) / 1.5, float(df.measured.max()) * 1.5
    for i, (src, g) in enumerate(df.groupby("source", sort=True)):
        color = _PALETTE[i % len(_PALETTE)]
        hover = [
            f"{r.id} ({r.gpu})<br>measured {r.measured:,.0f}<br>predicted {r.predicted:,.0f}<br>"
            f"calibrated {r.calibrated:,.0f} [{r.low:,.0f}, {r.high:,.0f}]"
            for r in g.itertuples()
        ]
        fig.add_trace(
            go.Scatter(
                x=g.measured,
                y=g.predicted,
                mode="markers",
                name=src,
                legendgroup=src,
                marker={"color": color, "size": 8},
                text=hover,
                hoverinfo="text",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=g.measured,
                y=g.calibrated,
                mode="markers",
                name=src,
                legendgroup=src,
                showlegend=False,
                marker={"color": color, "size": 8},
                text=hover,
                hoverinfo="text",
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": g.high - g.calibrated,
                    "arrayminus": g.calibrated - g.low,
                    "thickness": 1,
                    "width": 0,
                },
            ),
            row=1,
            col=2,
        )
    for col in (1, 2):
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
        fig.update_xaxes(type="log", title_text="measured tokens/s per GPU", row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_yaxes(title_text="predicted tokens/s per GPU", row=1, col=1)
    fig.update_layout(
        height=520,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        template="plotly_white",
        legend={"title": {"text": "source"}},
    )
    return fig


_HEADERS = {
    "median_ape_before": "median APE before",
    "median_ape_after": "after",
    "mean_ape_before": "mean APE before",
    "mean_ape_after": "after",
    "tau_before": "Kendall tau before",
    "tau_after": "after",
    "band_coverage": "in 80% band",
    "model": "model picked",
}


def _table_html(df: pd.DataFrame) -> str:
    """A compact HTML table: APEs as %, taus with 2 decimals."""
    shown = df.copy()
    if "model" in shown and not shown["model"].astype(bool).any():
        shown = shown.drop(columns="model")
    for c in shown.columns:
        if "ape" in c or c == "band_coverage":
            shown[c] = [f"{100 * v:.1f}%" for v in shown[c]]
        elif c.startswith("tau"):
            shown[c] = [
                "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}" for v in shown[c]
            ]
    return shown.rename(columns=_HEADERS).to_html(index=False, border=0, classes="tbl", escape=True)


def report_html(
    res: LosoResult,
    *,
    title: str,
    description: str,
    plotlyjs: str = "inline",
    memory: LosoResult | None = None,
) -> str:
    """The calibration report page: LOSO tables per source and GPU family, scatter, per-run rows."""
    by_source, by_family = error_table(res, "source"), error_table(res, "family")
    fig = scatter_figure(res).to_html(
        full_html=False,
        include_plotlyjs=True if plotlyjs == "inline" else "cdn",
        config={"displaylogo": False, "responsive": True},
    )
    rows = res.frame()[
        [
            "id",
            "source",
            "gpu",
            "measurement",
            "measured",
            "predicted",
            "calibrated",
            "low",
            "high",
            "ape_before",
            "ape_after",
        ]
    ].round(1)
    skipped = "".join(f"<li>{html.escape(i)}: {html.escape(r)}</li>" for i, r in res.ts.skipped)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1200px; color: #111827; padding: 0 16px; }}
h1 {{ font-size: 1.5rem; }} h2 {{ font-size: 1.15rem; margin-top: 2rem; }}
.tbl {{ border-collapse: collapse; font-size: 0.85rem; }}
.tbl th, .tbl td {{ padding: 4px 10px; border-bottom: 1px solid #e5e7eb; text-align: right; }}
.tbl th:first-child, .tbl td:first-child {{ text-align: left; }}
p.note {{ color: #4b5563; font-size: 0.9rem; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(description)}</p>
<p class="note">Each source is predicted by a corrector trained on the other sources only
(leave-one-source-out). APE = |predicted / measured - 1| of tokens/s per GPU; Kendall's tau is
computed within each group between measured and predicted throughput; band coverage is the share
of runs whose measurement falls inside the calibrated 80% band.</p>
<h2>Per source</h2>{_table_html(by_source)}
<h2>Per GPU family</h2>{_table_html(by_family)}
{_memory_section(memory)}
<h2>Predicted vs measured</h2>
<p class="note">Solid line: exact; dotted: ±10%. Error bars: the calibrated band.</p>
{fig}
<h2>Runs</h2>
<details><summary>{len(rows)} runs used{f", {len(res.ts.skipped)} skipped" if res.ts.skipped else ""}</summary>
{rows.to_html(index=False, border=0, classes="tbl")}
{f"<ul>{skipped}</ul>" if skipped else ""}
</details>
</body></html>
"""


def _memory_section(memory: LosoResult | None) -> str:
    """The peak-memory corrector's K-fold table (memory is measured by too few sources for LOSO)."""
    if memory is None:
        return ""
    srcs = ", ".join(sorted(set(memory.ts.sources)))
    return (
        f"<h2>Peak memory (5-fold cross-validation)</h2><p class='note'>{len(memory.ts)} runs with measured "
        f"memory, from {html.escape(srcs)}: too few sources for leave-one-source-out, so these errors say "
        f"little about other frameworks.</p>{_table_html(error_table(memory, 'source'))}"
    )


def write_report(
    res: LosoResult,
    path: str | Path,
    *,
    title: str = "autopar calibration report",
    description: str = "",
    plotlyjs: str = "inline",
    memory: LosoResult | None = None,
) -> Path:
    """Write the calibration report HTML to `path` and return it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(report_html(res, title=title, description=description, plotlyjs=plotlyjs, memory=memory))
    return p


def kfold_cross_validated(
    ts: TrainingSet, estimator: ThroughputCorrector | None = None, n_splits: int = 5, seed: int = 0
) -> LosoResult:
    """Held-out predictions from shuffled K-fold (for targets measured by too few sources for LOSO)."""
    est = estimator if estimator is not None else ThroughputCorrector()
    n = len(ts)
    c, lo, hi = np.zeros(n), np.zeros(n), np.zeros(n)
    k = max(2, min(n_splits, n))
    for tr, te in KFold(n_splits=k, shuffle=True, random_state=seed).split(ts.X):
        m = clone(est).fit(ts.X[tr], ts.y[tr], groups=np.array(ts.sources)[tr])
        c[te], lo[te], hi[te] = m.predict_interval(ts.X[te])
    return LosoResult(ts=ts, log_factor=c, log_low=lo, log_high=hi, chosen={})
