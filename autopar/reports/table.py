"""The Pareto-set table: data function (`pareto_table_info`) and its HTML (sortable in plain JS)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from autopar.knobs import COLUMN_HEADERS, COLUMN_KNOBS
from autopar.reports.common import esc, fmt_num, pareto_trials, role_title
from autopar.search.result import SearchResult, TrialRecord
from autopar.specs import Strategy

STRATEGY_COLS = list(COLUMN_KNOBS)  # the knob registry's report columns (autopar/knobs.py), in its order
LEAD_COLS = ["gpu", "num_gpus", "precision"]
KNOWN_LABELS = {
    **COLUMN_HEADERS,
    "gpu": "GPU",
    "num_gpus": "GPUs",
    "precision": "Precision",
    "mfu": "MFU (%)",
    "step_s": "Step time (s)",
    "step_time_s": "Step time (s)",
    "tokens_per_s": "Throughput (tokens/s)",
    "tokens_per_s_per_gpu": "Tokens/s per GPU",
    "mem_gib": "Peak memory (GiB)",
    "headroom_gib": "Headroom (GiB)",
    "bottleneck": "Bottleneck",
}
HIDDEN = {"number", "trial", "label", "strategy", "dominated", "feasible", "near_tie"}
# Shown before "all columns" is ticked, beside the label and the objectives: the figures a reader decides on, so
# the table fits a laptop screen (the label already spells every strategy knob).
FIRST_SCREEN = ("throughput_low", "throughput_high", "mfu_pct", "step_s", "mem_gib", "bottleneck")
DUPLICATES = {"mfu": "mfu_pct", "step_time": "step_s"}  # hide the first when the second is present


@dataclass(frozen=True)
class Column:
    """A table column: DataFrame key, header with unit, numeric or text."""

    key: str
    label: str
    numeric: bool
    extra: bool = False  # hidden until the reader asks for all columns


@dataclass(frozen=True)
class TableInfo:
    """Rows of the Pareto table as (display text, sort key) cells, plus recommended roles per row."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[tuple[str, float | str], ...], ...]
    roles: tuple[str, ...]  # "" or e.g. "Fastest · Balanced"


def _label(key: str, result: SearchResult) -> str:
    for o in result.objectives:
        if o.name == key:
            return o.label if (not o.unit or o.unit in o.label or "(" in o.label) else f"{o.label} ({o.unit})"
    if key in KNOWN_LABELS:
        return KNOWN_LABELS[key]
    for suffix, unit in (("_gib", "GiB"), ("_s", "s"), ("_usd", "USD"), ("_pct", "%")):
        if key.endswith(suffix):
            return f"{key[: -len(suffix)].replace('_', ' ')} ({unit})"
    return key.replace("_", " ")


def _row_strategy(row: pd.Series) -> Strategy | None:
    fields = {k: row[k] for k in STRATEGY_COLS if k in row.index and not _isnan(row[k])}
    try:
        fields = {
            k: (bool(v) if k == "sp" else v if isinstance(v, str) else int(v)) for k, v in fields.items()
        }
        return Strategy(**fields)
    except Exception:  # noqa: BLE001 - a row without usable strategy columns just has no label
        return None


def _isnan(v: object) -> bool:
    return isinstance(v, float) and math.isnan(v)


def row_label(row: pd.Series) -> str:
    """The row's Strategy.label() (from a 'label'/'strategy' column or rebuilt from its fields)."""
    for k in ("label", "strategy"):
        if k in row.index and isinstance(row[k], str) and row[k]:
            return row[k]
    s = _row_strategy(row)
    return s.label() if s else ""


def _row_key(row: pd.Series) -> tuple[object, ...]:
    return (
        row_label(row),
        str(row.get("gpu", "")),
        int(row.get("num_gpus", 0) or 0),
        str(row.get("precision", "")),
    )


def _trial_key(t: TrialRecord) -> tuple[object, ...]:
    return (t.strategy.label(), t.gpu, t.num_gpus, t.precision)


def row_trials(result: SearchResult) -> list[TrialRecord | None]:
    """The trial behind each Pareto row (by trial-number column, else by strategy+cluster match)."""
    df = result.pareto
    front = pareto_trials(result)
    by_num = {t.number: t for t in result.trials}
    num_col = next((c for c in ("number", "trial") if c in df.columns), None)
    if num_col is not None:
        return [by_num.get(int(v)) for v in df[num_col]]
    by_key = {_trial_key(t): t for t in front}
    return [by_key.get(_row_key(r)) for _, r in df.iterrows()]


def _cell(key: str, v: object, pct: bool = False) -> tuple[str, float | str]:
    if v is None or _isnan(v):
        return "–", float("-inf")
    if isinstance(v, bool):
        return ("yes" if v else "no"), float(v)
    if isinstance(v, int) or (
        isinstance(v, float) and v.is_integer() and abs(v) < 1e6 and key in STRATEGY_COLS + LEAD_COLS
    ):
        return f"{int(v)}", float(v)
    if isinstance(v, float):
        if pct:
            return f"{100 * v:.1f}", v * 100
        return fmt_num(v, 4), v
    return str(v), str(v)


def pareto_table_info(result: SearchResult) -> TableInfo:
    """One row per Pareto point from `result.pareto`, strategy first, objectives next, breakdown last."""
    df = result.pareto.reset_index(drop=True)
    obj_cols = [o.name for o in result.objectives if o.name in df.columns]
    lead = [c for c in LEAD_COLS if c in df.columns]
    strat = [c for c in STRATEGY_COLS if c in df.columns]
    dup = {k for k, better in DUPLICATES.items() if k not in obj_cols and better in df.columns}
    rest = [c for c in df.columns if c not in set(lead + strat + obj_cols) | HIDDEN | dup]
    keys = lead + obj_cols + strat + rest
    multi_hw = len(df[lead].drop_duplicates()) > 1 if lead else False
    shown = set(obj_cols) | set(FIRST_SCREEN) | (set(lead) if multi_hw else set())
    columns = [Column("label", "Strategy", False)]
    columns += [
        Column(
            k,
            _label(k, result),
            pd.api.types.is_numeric_dtype(df[k]) and not pd.api.types.is_bool_dtype(df[k]),
            k not in shown,
        )
        for k in keys
    ]
    pct = {
        k
        for k in ("mfu", "mfu_causal", "hfu")
        if k in keys and k not in obj_cols and pd.api.types.is_numeric_dtype(df[k]) and df[k].max() <= 1.0
    }
    roles_by_num: dict[int, list[str]] = {}
    for r in result.recommended:
        roles_by_num.setdefault(r.trial.number, []).append(role_title(r.role))
    trials = row_trials(result)
    rows, roles = [], []
    for (_, row), t in zip(df.iterrows(), trials, strict=True):
        label = row_label(row) or (t.strategy.label() if t else "")
        cells = [(label, label)] + [_cell(k, _py(row[k]), k in pct) for k in keys]
        rows.append(tuple(cells))
        tie = ["≈ near-tie"] if t is not None and t.near_tie else []
        roles.append(" · ".join(roles_by_num.get(t.number, []) + tie) if t else "")
    return TableInfo(columns=tuple(columns), rows=tuple(rows), roles=tuple(roles))


def _py(v: object) -> object:
    """numpy scalar -> Python scalar."""
    return v.item() if hasattr(v, "item") else v


def table_html(info: TableInfo, table_id: str = "pareto-table") -> str:
    """A sortable <table> (header click sorts; see template.html) with recommended rows marked."""
    ths = []
    for c in info.columns:
        kind = "num" if c.numeric else "text"
        cls = _classes(c)
        ths.append(
            f'<th data-type="{kind}"{cls} title="Sort by {esc(c.label)}">{esc(c.label)}'
            '<span class="sort-ind"></span></th>'
        )
    head = "".join(ths)
    body = []
    for cells, role in zip(info.rows, info.roles, strict=True):
        tds = []
        for i, (text, key) in enumerate(cells):
            sort = key if isinstance(key, str) else ("" if math.isinf(key) else repr(key))
            badge = f' <span class="badge">{esc(role)}</span>' if (i == 0 and role) else ""
            tds.append(f'<td{_classes(info.columns[i])} data-sort="{esc(sort)}">{esc(text)}{badge}</td>')
        cls = ' class="rec"' if role else ""
        body.append(f"<tr{cls}>{''.join(tds)}</tr>")
    n_extra = sum(c.extra for c in info.columns)
    toggle = (
        f'<label class="small muted all-cols-toggle"><input type="checkbox" onchange="document.getElementById('
        f"'{table_id}').classList.toggle('all-cols', this.checked)\"> show all {len(info.columns)} columns "
        f"({n_extra} more: every knob and breakdown)</label>"
        if n_extra
        else ""
    )
    return (
        f'{toggle}<div class="table-wrap"><table id="{table_id}" class="sortable">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _classes(c: Column) -> str:
    """' class="num extra"' and the like: right-aligned numbers, columns hidden until asked for."""
    names = [n for n, on in (("num", c.numeric), ("extra", c.extra)) if on]
    return f' class="{" ".join(names)}"' if names else ""
