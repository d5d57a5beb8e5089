"""CLI command `autopar compare`: strategies given by their labels, estimated on one problem, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autopar.calibration.assumptions import assumption_lines
from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.common import check_plotly, resolve_calibration
from autopar.cli.evaluation import evaluate, label_strategy, on_demand_price
from autopar.cli.options import CALIBRATION, SINGLE, Flags, opt, single_problem, with_options
from autopar.errors import AutoparError, SpecError
from autopar.reports.comparison import ComparisonInfo, comparison_info

BEST_MARK = " *"  # appended to the best value of a row (also without colour, e.g. piped)


def _table(info: ComparisonInfo) -> Table:
    table = Table("figure", *info.labels, title=info.title, title_justify="left")
    for c in table.columns[1:]:
        c.justify = "right"
    for row in info.rows:
        cells = [
            styled((c + BEST_MARK, "bold green")) if i in row.best else c for i, c in enumerate(row.cells)
        ]
        table.add_row(row.name, *cells)
    table.add_row("memory verdict", *info.verdicts)
    return table


_COMPARE = (
    opt(
        "labels",
        Annotated[
            list[str],
            typer.Argument(help="Strategy labels as optimize prints them, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1'"),
        ],
    ),
    *SINGLE,
    "allow_uneven",
    "prices",
    *CALIBRATION,
    opt(
        "as_json",
        Annotated[bool, typer.Option("--json", help="Print JSON (one estimate object per label)")],
        False,
    ),
    opt(
        "out",
        Annotated[
            Path | None,
            typer.Option("--out", help="Also write the comparison as an HTML page here (the answer first)."),
        ],
        None,
    ),
    "plotly",
)


@command("compare")
@with_options(*_COMPARE)
def compare_cmd(f: Flags) -> None:
    """Estimate several strategies on one problem and show them side by side, the best of each row marked."""
    check_plotly(f.plotly, f.out)
    m, cluster, workload = single_problem(f)
    strategies = []
    for i, label in enumerate(f.labels, 1):
        try:
            strategies.append(label_strategy(label, m.is_moe))
        except SpecError as e:
            raise SpecError(f"label {i} {label!r}: {e}") from None
    calib = resolve_calibration(f.calibration, f.no_calibration)
    price = on_demand_price(cluster, f.prices)
    evs = [
        evaluate(m, cluster, workload, s, calib, strict=not f.allow_uneven, price=price) for s in strategies
    ]
    title = f"{m.name} on {cluster.num_gpus}x {cluster.gpu.name}, seq {workload.seq_len}, batch {workload.global_batch}"
    info = comparison_info(evs, title)
    said = assumption_lines(cluster, workload, calibrated=calib is not None)
    if f.as_json:
        emit_json([{**e.doc(), "assumptions": said} for e in evs], indent=2)
    else:
        for line in said:
            console.print(line, style="dim", highlight=False)
        console.print(_table(info))
        console.print(f"*: best in its row; {info.price_note}", highlight=False)
        console.print(info.calibration_note, highlight=False)
    if f.out is not None:
        path = _write_report(info, f.out, f.plotly)
        if not f.as_json:
            console.print(f"report: {path}", highlight=False)


def _write_report(info: ComparisonInfo, out: Path, plotly: str) -> Path:
    """Write the HTML comparison (autopar.reports.compare_html, which needs plotly)."""
    try:
        from autopar.reports import write_compare_report
    except (ImportError, AttributeError) as e:
        raise AutoparError(f"out={out}: the HTML report writer is not available in this build") from e
    return write_compare_report(info, out, plotlyjs=plotly)
