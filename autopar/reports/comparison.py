"""What `autopar compare` shows, computed apart from how it is drawn: the compared rows, the best of each
row, the answer (which label is best on throughput, memory and cost) and each label's step-time split.

The terminal table (autopar/cli/compare.py) and the HTML page (compare_html.py) both render this, so the
two show the same rows with the same best marks. Evaluations are `autopar.cli.evaluation.Evaluation`
(duck-typed here: the reports layer sits below the CLI). No plotly import: the terminal path stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autopar.calibration.verdict import OOM
from autopar.units import GiB


@dataclass(frozen=True)
class Row:
    """One row of the comparison: its name, the figure of an Evaluation, how to show it, which way is better."""

    name: str
    value: Callable[[Any], float]
    shown: Callable[[Any], str]
    higher_is_better: bool


# The step-time split (TimeBreakdown fields) in table and chart order, with their row names.
STEP_SPLIT = (
    ("compute", "compute (s, incl. recompute)"),
    ("tp_comm", "TP comm exposed (s)"),
    ("cp_comm", "CP comm exposed (s)"),
    ("ep_comm", "EP comm exposed (s)"),
    ("dp_comm", "DP comm exposed (s)"),
    ("pp_comm", "PP comm exposed (s)"),
    ("bubble", "PP bubble (s)"),
    ("optimizer", "optimizer step (s)"),
    ("act_offload", "activation offload (s)"),
)
SPLIT_INDENT = "  "  # the split rows are indented under "step time (s)"


def _band(ev: Any) -> str:
    lo_hi = ev.est.tokens_per_s_band
    return f" ({lo_hi[0]:,.0f}-{lo_hi[1]:,.0f})" if lo_hi else ""


def _time_row(name: str, field: str) -> Row:
    return Row(
        SPLIT_INDENT + name,
        lambda e: getattr(e.est.time, field),
        lambda e: f"{getattr(e.est.time, field):.3f}",
        False,
    )


def rows(precision: str, calibrated: bool) -> list[Row]:
    """The compared figures, in table order."""
    return [
        Row(
            "tokens/s (cluster" + ("; 80% band)" if calibrated else ")"),
            lambda e: e.est.tokens_per_s,
            lambda e: f"{e.est.tokens_per_s:,.0f}{_band(e)}",
            True,
        ),
        Row(
            "tokens/s per GPU",
            lambda e: e.est.tokens_per_s_per_gpu,
            lambda e: f"{e.est.tokens_per_s_per_gpu:,.0f}",
            True,
        ),
        Row(
            f"MFU (model FLOPs, full s² attention; % of dense {precision} peak)",
            lambda e: e.est.mfu,
            lambda e: f"{100 * e.est.mfu:.1f}%",
            True,
        ),
        Row("step time (s)", lambda e: e.est.step_time_s, lambda e: f"{e.est.step_time_s:.3f}", False),
        *(_time_row(name, field) for field, name in STEP_SPLIT),
        Row(
            "peak memory (GiB)",
            lambda e: e.est.memory.total / GiB,
            lambda e: f"{e.est.memory.total / GiB:.1f}",
            False,
        ),
        Row("free memory (GiB)", lambda e: e.est.headroom_gib, lambda e: f"{e.est.headroom_gib:+.1f}", True),
        Row("$/Mtoken", lambda e: e.usd_per_mtoken, lambda e: f"{e.usd_per_mtoken:.3f}", False),
    ]


def best_columns(values: list[float], shown: list[str], higher_is_better: bool) -> set[int]:
    """Columns holding the best value of a row, as shown (a value that prints like the best ties with it);
    none when every column shows the same (nothing to choose)."""
    if len(set(shown)) <= 1:
        return set()
    best = shown[values.index(max(values) if higher_is_better else min(values))]
    return {i for i, s in enumerate(shown) if s == best}


@dataclass(frozen=True)
class ShownRow:
    """A row as displayed: name, one cell per label, the columns holding its best value."""

    name: str
    cells: tuple[str, ...]
    best: frozenset[int]


@dataclass(frozen=True)
class Best:
    """The answer on one objective: the labels best on it (ties as shown), the figure, and why none."""

    objective: str  # "throughput", "memory", "cost"
    labels: tuple[str, ...]
    figure: str  # the best value as shown, with its unit
    note: str = ""


@dataclass(frozen=True)
class ComparisonInfo:
    """Everything the compare page shows, in order."""

    title: str
    labels: tuple[str, ...]
    answer: tuple[Best, ...]
    rows: tuple[ShownRow, ...]
    verdicts: tuple[str, ...]
    split: tuple[tuple[str, tuple[float, ...]], ...]  # (split row name, seconds per label), STEP_SPLIT order
    price_note: str
    calibration_note: str


def shown_rows(evs: Sequence[Any]) -> list[ShownRow]:
    """Every compared row with its cells and best columns (the terminal table and the page)."""
    out = []
    for row in rows(evs[0].workload.precision, evs[0].calib is not None):
        shown = [row.shown(e) for e in evs]
        best = best_columns([row.value(e) for e in evs], shown, row.higher_is_better)
        out.append(ShownRow(row.name, tuple(shown), frozenset(best)))
    return out


def _best(objective: str, evs: Sequence[Any], value, shown, higher: bool, unit: str) -> Best:  # noqa: ANN001
    """The best labels on one objective. Throughput and cost rank only the labels that may fit in memory
    (verdict not 'oom'): a strategy that runs out of memory trains nothing."""
    pool = [i for i, e in enumerate(evs) if objective == "memory" or e.verdict != OOM]
    if not pool:
        return Best(objective, (), "", "no label fits in memory")
    cells = [shown(evs[i]) for i in pool]
    vals = [value(evs[i]) for i in pool]
    top = cells[vals.index(max(vals) if higher else min(vals))]
    labels = tuple(evs[i].strategy.label() for i, c in zip(pool, cells, strict=True) if c == top)
    note = "all labels equal" if len(labels) == len(evs) and len(evs) > 1 else ""
    return Best(objective, labels, f"{top} {unit}".strip(), note)


def answer(evs: Sequence[Any]) -> tuple[Best, ...]:
    """Which label is best on throughput (tokens/s), memory (lowest peak) and cost ($/Mtoken)."""
    return (
        _best(
            "throughput",
            evs,
            lambda e: e.est.tokens_per_s,
            lambda e: f"{e.est.tokens_per_s:,.0f}",
            True,
            "tokens/s",
        ),
        _best(
            "memory",
            evs,
            lambda e: e.est.memory.total,
            lambda e: f"{e.est.memory.total / GiB:.1f}",
            False,
            "GiB peak",
        ),
        _best(
            "cost", evs, lambda e: e.usd_per_mtoken, lambda e: f"${e.usd_per_mtoken:.3f}", False, "per Mtoken"
        ),
    )


def comparison_info(evs: Sequence[Any], title: str) -> ComparisonInfo:
    """The compare page's content for evaluations on one problem (same model, cluster, workload, price)."""
    price, calib = evs[0].price, evs[0].calib
    return ComparisonInfo(
        title=title,
        labels=tuple(e.strategy.label() for e in evs),
        answer=answer(evs),
        rows=tuple(shown_rows(evs)),
        verdicts=tuple(e.verdict for e in evs),
        split=tuple((name, tuple(getattr(e.est.time, f) for e in evs)) for f, name in STEP_SPLIT),
        price_note=f"$/Mtoken at {price[0]:g} USD/GPU-hour ({price[1]})",
        calibration_note="uncalibrated: analytical model only (--no-calibration)"
        if calib is None
        else calib.describe(),
    )
