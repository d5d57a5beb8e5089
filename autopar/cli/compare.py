"""CLI command `autopar compare`: strategies given by their labels, estimated on one problem, side by side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    TpOverlapOpt,
    resolve_calibration,
)
from autopar.cli.evaluation import (
    AllowUnevenOpt,
    Evaluation,
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
from autopar.errors import SpecError
from autopar.units import GiB

BEST_MARK = " *"  # appended to the best value of a row (also without colour, e.g. piped)


@dataclass(frozen=True)
class Row:
    """One row of the comparison: its name, the figure of an Evaluation, how to show it, which way is better."""

    name: str
    value: Callable[[Evaluation], float]
    shown: Callable[[Evaluation], str]
    higher_is_better: bool


def _band(ev: Evaluation) -> str:
    lo_hi = ev.est.tokens_per_s_band
    return f" ({lo_hi[0]:,.0f}-{lo_hi[1]:,.0f})" if lo_hi else ""


def _time_row(name: str, field: str) -> Row:
    return Row(
        name, lambda e: getattr(e.est.time, field), lambda e: f"{getattr(e.est.time, field):.3f}", False
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
        _time_row("  compute (s, incl. recompute)", "compute"),
        _time_row("  TP comm exposed (s)", "tp_comm"),
        _time_row("  CP comm exposed (s)", "cp_comm"),
        _time_row("  EP comm exposed (s)", "ep_comm"),
        _time_row("  DP comm exposed (s)", "dp_comm"),
        _time_row("  PP comm exposed (s)", "pp_comm"),
        _time_row("  PP bubble (s)", "bubble"),
        _time_row("  optimizer step (s)", "optimizer"),
        _time_row("  activation offload (s)", "act_offload"),
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


def _table(title: str, evs: list[Evaluation]) -> Table:
    table = Table("figure", *(e.strategy.label() for e in evs), title=title, title_justify="left")
    for c in table.columns[1:]:
        c.justify = "right"
    for row in rows(evs[0].workload.precision, evs[0].calib is not None):
        shown = [row.shown(e) for e in evs]
        best = best_columns([row.value(e) for e in evs], shown, row.higher_is_better)
        cells = [styled((c + BEST_MARK, "bold green")) if i in best else c for i, c in enumerate(shown)]
        table.add_row(row.name, *cells)
    table.add_row("memory verdict", *(e.verdict for e in evs))
    return table


@command("compare")
def compare_cmd(
    labels: Annotated[
        list[str],
        typer.Argument(help="Strategy labels as optimize prints them, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1'"),
    ],
    model: ModelOpt = "Llama-3.1-70B",
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
    seq_len: SeqLenOpt = 8192,
    global_batch: GlobalBatchOpt = 512,
    precision: PrecisionOpt = "bf16",
    framework: FrameworkOpt = "megatron",
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
) -> None:
    """Estimate several strategies on one problem and show them side by side, the best of each row marked."""
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
    if as_json:
        emit_json([e.doc() for e in evs], indent=2)
        return
    title = f"{m.name} on {cluster.num_gpus}x {cluster.gpu.name}, seq {seq_len}, batch {global_batch}"
    console.print(_table(title, evs))
    console.print(f"*: best in its row; $/Mtoken at {price[0]:g} USD/GPU-hour ({price[1]})", highlight=False)
    console.print(
        "uncalibrated: analytical model only (--no-calibration)" if calib is None else calib.describe(),
        highlight=False,
    )
