"""CLI command `autopar compare`: strategies given by their labels, estimated on one problem, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.cluster_opts import ClusterOpt, NvlinkDomainOpt
from autopar.cli.common import (
    CalibrationOpt,
    FrameworkOpt,
    NoCalibrationOpt,
    PlotlyOpt,
    TpOverlapOpt,
    check_plotly,
    resolve_calibration,
)
from autopar.cli.evaluation import (
    AllowUnevenOpt,
    GlobalBatchOpt,
    GpuOpt,
    GpusOpt,
    GpusPerNodeOpt,
    InternodeOpt,
    ModelOpt,
    PrecisionOpt,
    SeqLenOpt,
    evaluate,
    label_strategy,
    on_demand_price,
    problem,
)
from autopar.cli.workload_opts import (
    CudaGraphsOpt,
    FP8RecipeOpt,
    MoECapacityOpt,
    MoEDispatcherOpt,
    MoEImbalanceOpt,
    MoEOverlapOpt,
)
from autopar.defaults import (
    DEFAULT_FRAMEWORK,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_MODEL,
    DEFAULT_PRECISION,
    DEFAULT_SEQ_LEN,
)
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


@command("compare")
def compare_cmd(
    labels: Annotated[
        list[str],
        typer.Argument(help="Strategy labels as optimize prints them, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1'"),
    ],
    model: ModelOpt = DEFAULT_MODEL,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    nvlink_domain: NvlinkDomainOpt = None,
    fp8_recipe: FP8RecipeOpt = None,
    moe_imbalance: MoEImbalanceOpt = None,
    moe_capacity_factor: MoECapacityOpt = None,
    moe_dispatcher: MoEDispatcherOpt = None,
    moe_ep_overlap: MoEOverlapOpt = False,
    cuda_graphs: CudaGraphsOpt = False,
    cluster_name: ClusterOpt = None,
    internode_gbps: InternodeOpt = None,
    seq_len: SeqLenOpt = DEFAULT_SEQ_LEN,
    global_batch: GlobalBatchOpt = DEFAULT_GLOBAL_BATCH,
    precision: PrecisionOpt = DEFAULT_PRECISION,
    framework: FrameworkOpt = DEFAULT_FRAMEWORK,
    tp_comm_overlap: TpOverlapOpt = None,
    allow_uneven: AllowUnevenOpt = False,
    prices: Annotated[
        Path | None, typer.Option(help="Price book YAML/CSV for $/Mtoken (default: built-in)")
    ] = None,
    calibration: CalibrationOpt = None,
    no_calibration: NoCalibrationOpt = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (one estimate object per label)")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Also write the comparison as an HTML page here (the answer first)."),
    ] = None,
    plotly: PlotlyOpt = "inline",
) -> None:
    """Estimate several strategies on one problem and show them side by side, the best of each row marked."""
    check_plotly(plotly, out)
    m, cluster, workload = problem(locals())
    strategies = []
    for i, label in enumerate(labels, 1):
        try:
            strategies.append(label_strategy(label, m.is_moe))
        except SpecError as e:
            raise SpecError(f"label {i} {label!r}: {e}") from None
    calib = resolve_calibration(calibration, no_calibration)
    price = on_demand_price(cluster, prices)
    evs = [evaluate(m, cluster, workload, s, calib, strict=not allow_uneven, price=price) for s in strategies]
    info = comparison_info(
        evs, f"{m.name} on {cluster.num_gpus}x {cluster.gpu.name}, seq {seq_len}, batch {global_batch}"
    )
    if as_json:
        emit_json([e.doc() for e in evs], indent=2)
    else:
        console.print(_table(info))
        console.print(f"*: best in its row; {info.price_note}", highlight=False)
        console.print(info.calibration_note, highlight=False)
    if out is not None:
        path = _write_report(info, out, plotly)
        if not as_json:
            console.print(f"report: {path}", highlight=False)


def _write_report(info: ComparisonInfo, out: Path, plotly: str) -> Path:
    """Write the HTML comparison (autopar.reports.compare_html, which needs plotly)."""
    try:
        from autopar.reports import write_compare_report
    except (ImportError, AttributeError) as e:
        raise AutoparError(f"out={out}: the HTML report writer is not available in this build") from e
    return write_compare_report(info, out, plotlyjs=plotly)
