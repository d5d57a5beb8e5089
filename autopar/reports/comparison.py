"""What `autopar compare` shows, computed apart from how it is drawn: the compared rows, the best of each
row, the answer (which label is best on throughput, memory and cost) and each label's step-time split.

The terminal table (autopar/cli/compare.py) and the HTML page (compare_html.py) both render this, so the
two show the same rows with the same best marks. Evaluations are `autopar.cli.evaluation.Evaluation`
(duck-typed here: the reports layer sits below the CLI). No plotly import: the terminal path stays light.

A column is one label on one GPU (`Entry`): with `compare --gpu H100-SXM,B200` every label is estimated on
every GPU. A label that cannot run on a GPU (its layout is invalid there) keeps its column, shown "–" with
the reason, and takes no best mark; one that runs out of memory is marked by its memory verdict. Calibrated,
tokens/s, step time and $/Mtoken carry the corrector's 80% band (step time and $/Mtoken fall as tokens/s
rises, so their low end comes from the throughput band's high end: costs/bands.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autopar.calibration.evaluation.verdict import OOM
from autopar.costs.bands import BAND_NAME, inverse_band, number_range
from autopar.units import GiB

NOT_RUN = "–"  # the cell of a label that cannot run on that column's GPU


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


def _step_cell(ev: Any) -> str:
    return number_range(ev.est.step_time_s, inverse_band(ev.est, ev.est.step_time_s), ".3f")


def _usd_cell(ev: Any) -> str:
    return number_range(ev.usd_per_mtoken, inverse_band(ev.est, ev.usd_per_mtoken), ".3f")


def _time_row(name: str, field: str) -> Row:
    return Row(
        SPLIT_INDENT + name,
        lambda e: getattr(e.est.time, field),
        lambda e: f"{getattr(e.est.time, field):.3f}",
        False,
    )


def rows(precision: str, calibrated: bool) -> list[Row]:
    """The compared figures, in table order."""
    band = f"; {BAND_NAME}" if calibrated else ""
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
        Row(f"step time (s{band})", lambda e: e.est.step_time_s, _step_cell, False),
        *(_time_row(name, field) for field, name in STEP_SPLIT),
        Row(
            "peak memory (GiB)",
            lambda e: e.est.memory.total / GiB,
            lambda e: f"{e.est.memory.total / GiB:.1f}",
            False,
        ),
        Row("free memory (GiB)", lambda e: e.est.headroom_gib, lambda e: f"{e.est.headroom_gib:+.1f}", True),
        Row(
            f"$/Mtoken{' (' + BAND_NAME + ')' if calibrated else ''}",
            lambda e: e.usd_per_mtoken,
            _usd_cell,
            False,
        ),
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
    not_run: tuple[str, ...] = ()  # 'column: cannot run: why' for each label that cannot run on its GPU


@dataclass(frozen=True)
class Entry:
    """One compared column: a label on one GPU, its evaluation, or why the label cannot run there."""

    name: str  # the column's heading: the label, or 'GPU: label' when several GPUs are compared
    ev: Any = None  # the Evaluation (None: the label cannot run on this GPU)
    reason: str = ""  # why not

    @property
    def verdict(self) -> str:
        return self.ev.verdict if self.ev is not None else "cannot run"


def _entries(items: Sequence[Any]) -> list[Entry]:
    """Entries as given, or evaluations named by their labels."""
    return [x if isinstance(x, Entry) else Entry(x.strategy.label(), x) for x in items]


def shown_rows(items: Sequence[Any]) -> list[ShownRow]:
    """Every compared row with its cells and best columns (the terminal table and the page); a column
    that did not run shows NOT_RUN and takes no mark."""
    entries = _entries(items)
    ran = [i for i, e in enumerate(entries) if e.ev is not None]
    if not ran:
        return []
    first = entries[ran[0]].ev
    out = []
    for row in rows(first.workload.precision, first.calib is not None):
        shown = [row.shown(e.ev) if e.ev is not None else NOT_RUN for e in entries]
        best = best_columns(
            [row.value(entries[i].ev) for i in ran], [shown[i] for i in ran], row.higher_is_better
        )
        out.append(ShownRow(row.name, tuple(shown), frozenset(ran[j] for j in best)))
    return out


def _best(objective: str, entries: Sequence[Entry], value, shown, higher: bool, unit: str) -> Best:  # noqa: ANN001
    """The best columns on one objective. Throughput and cost rank only the columns that may fit in memory
    (verdict not 'oom'): a strategy that runs out of memory trains nothing."""
    pool = [
        i
        for i, e in enumerate(entries)
        if e.ev is not None and (objective == "memory" or e.ev.verdict != OOM)
    ]
    if not pool:
        return Best(objective, (), "", "no label fits in memory")
    cells = [shown(entries[i].ev) for i in pool]
    vals = [value(entries[i].ev) for i in pool]
    top = cells[vals.index(max(vals) if higher else min(vals))]
    labels = tuple(entries[i].name for i, c in zip(pool, cells, strict=True) if c == top)
    note = "all labels equal" if len(labels) == len(entries) and len(entries) > 1 else ""
    return Best(objective, labels, f"{top} {unit}".strip(), note)


def answer(items: Sequence[Any]) -> tuple[Best, ...]:
    """Which column is best on throughput (tokens/s), memory (lowest peak) and cost ($/Mtoken)."""
    entries = _entries(items)
    return (
        _best(
            "throughput",
            entries,
            lambda e: e.est.tokens_per_s,
            lambda e: f"{e.est.tokens_per_s:,.0f}",
            True,
            "tokens/s",
        ),
        _best(
            "memory",
            entries,
            lambda e: e.est.memory.total,
            lambda e: f"{e.est.memory.total / GiB:.1f}",
            False,
            "GiB peak",
        ),
        _best(
            "cost",
            entries,
            lambda e: e.usd_per_mtoken,
            lambda e: f"${e.usd_per_mtoken:.3f}",
            False,
            "per Mtoken",
        ),
    )


def price_note(evs: Sequence[Any]) -> str:
    """'$/Mtoken at 3.49 USD/GPU-hour (source)', or each GPU's price when the columns span several GPUs."""
    prices = {e.cluster.gpu.name: e.price for e in evs}
    if len(prices) == 1:
        price = next(iter(prices.values()))
        return f"$/Mtoken at {price[0]:g} USD/GPU-hour ({price[1]})"
    each = "; ".join(f"{gpu} {p[0]:.2f} ({p[1]})" for gpu, p in prices.items())
    return f"$/Mtoken at each GPU's USD/GPU-hour: {each}"


def comparison_info(items: Sequence[Any], title: str) -> ComparisonInfo:
    """The compare page's content for evaluations (or Entries: a label on a GPU, possibly not run) of one
    model and workload, on one cluster or one per GPU type."""
    entries = _entries(items)
    evs = [e.ev for e in entries if e.ev is not None]
    calib = evs[0].calib if evs else None
    return ComparisonInfo(
        title=title,
        labels=tuple(e.name for e in entries),
        answer=answer(entries),
        rows=tuple(shown_rows(entries)),
        verdicts=tuple(e.verdict for e in entries),
        split=tuple(
            (name, tuple(getattr(e.ev.est.time, f) if e.ev is not None else 0.0 for e in entries))
            for f, name in STEP_SPLIT
        ),
        price_note=price_note(evs) if evs else "no label could be estimated",
        calibration_note="uncalibrated: analytical model only (--no-calibration)"
        if calib is None
        else calib.describe(),
        not_run=tuple(f"{e.name}: cannot run: {e.reason}" for e in entries if e.ev is None),
    )
