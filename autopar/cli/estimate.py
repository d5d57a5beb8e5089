"""CLI command `autopar estimate`: one strategy's memory and step time, or a batch of run records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autopar.calibration.evaluation.assumptions import assumption_lines
from autopar.calibration.evaluation.verdict import OOM, UNCERTAIN
from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.common import knob_strategy, resolve_calibration
from autopar.cli.evaluation import evaluate, label_strategy
from autopar.cli.options import (
    CALIBRATION,
    KNOBS,
    SINGLE,
    Flags,
    OptionSpec,
    opt,
    single_problem,
    with_options,
)
from autopar.errors import DataError, SpecError
from autopar.files import write_atomic_with
from autopar.knobs import KNOB_NAMES, implied_schedule
from autopar.text import csv_cell
from autopar.units import GiB, format_duration


def _write_table(df: Any, out: Path) -> None:
    """Write a DataFrame as CSV, JSONL or Parquet, chosen by the file extension (atomically, autopar.files)."""
    suffix = out.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        write_atomic_with(out, lambda fh: df.to_json(fh, orient="records", lines=True))
    elif suffix == ".parquet":
        write_atomic_with(out, lambda fh: df.to_parquet(fh, index=False))
    elif suffix in (".csv", ""):
        # text cells quoted so that a spreadsheet will not run them
        write_atomic_with(out, lambda fh: df.map(csv_cell).to_csv(fh, index=False))
    else:
        raise DataError(f"--out '{out}': unsupported extension '{suffix}' (use .csv, .jsonl or .parquet)")


def run_batch(batch: Path, out: Path | None, as_json: bool, calib: Any = None) -> None:
    """Evaluate every row of a run-record file (corrected + band when `calib`); bad rows get
    status=error and the rest still run."""
    from autopar.calibration.apply.batch import calibrated_batch
    from autopar.calibration.ingest.tables import read_run_records

    df = read_run_records(batch)
    preds = calibrated_batch(df, calib)
    n_ok = int((preds["status"] == "ok").sum())
    failed = bool(len(preds)) and not n_ok  # a file with nothing to evaluate is an error: nothing written
    if out is not None and not failed:
        _write_table(preds, out)
    if as_json:
        sys.stdout.write(preds.to_json(orient="records") + "\n")
    else:
        _print_batch(preds, n_ok, None if failed else out, calib)
    if failed:
        first = preds.iloc[0]
        raise DataError(
            f"batch={batch}: none of its {len(preds)} rows could be evaluated, so nothing was written "
            f"(row {first['id']}: {first['status'].removeprefix('error: ')}; each row's reason is above)"
        )


def _print_batch(preds: Any, n_ok: int, out: Path | None, calib: Any) -> None:
    """The batch summary line and, without --out, the per-row table."""
    console.print(
        f"evaluated {len(preds)} rows: {n_ok} ok, {len(preds) - n_ok} not evaluable"
        + (f"; wrote {out}" if out else "")
        + ("; analytical model only (--no-calibration)" if calib is None else f"; {calib.describe()}"),
        highlight=False,
    )
    if out is None:
        cols = [
            "id",
            "status",
            "pred_tokens_per_s_per_gpu_analytical",
            "pred_tokens_per_s_per_gpu",
            "pred_tokens_per_s_per_gpu_lo",
            "pred_tokens_per_s_per_gpu_hi",
            "pred_step_s",
            "pred_mfu",
            "pred_mem_gib_per_gpu",
            "pred_memory_verdict",
        ]
        table = Table("id", "status", "analytical tok/s/GPU", "tok/s/GPU", "80% band", "step s", "MFU %")
        table.add_column("mem GiB")
        table.add_column("memory")
        for r in preds[cols].to_dict("records"):
            ok = r["status"] == "ok"
            lo, hi = r["pred_tokens_per_s_per_gpu_lo"], r["pred_tokens_per_s_per_gpu_hi"]
            table.add_row(
                str(r["id"]),
                str(r["status"])[:60],
                f"{r['pred_tokens_per_s_per_gpu_analytical']:,.0f}" if ok else "",
                f"{r['pred_tokens_per_s_per_gpu']:,.0f}" if ok else "",
                f"{lo:,.0f}-{hi:,.0f}" if ok and lo == lo else "",
                f"{r['pred_step_s']:.2f}" if ok else "",
                f"{100 * r['pred_mfu']:.1f}" if ok else "",
                f"{r['pred_mem_gib_per_gpu']:.1f}" if ok else "",
                str(r["pred_memory_verdict"]) if ok else "",
            )
        console.print(table)


def _print_estimate(model: Any, cluster: Any, workload: Any, strategy: Any, est: Any, verdict: str) -> None:
    """Readable breakdown: headline figures, memory and time tables, notes."""
    fabric = f" ({cluster.transport})" if cluster.transport != "infiniband" else ""
    head = Table(
        title=f"{model.name} on {cluster.num_gpus}x {cluster.gpu.name}{fabric}: {strategy.label()}",
        show_header=False,
        title_justify="left",
    )
    head.add_column("figure")
    head.add_column("value", justify="right")
    head.add_row("step time", format_duration(est.step_time_s))
    head.add_row("throughput (cluster)", f"{est.tokens_per_s:,.0f} tokens/s")
    head.add_row("throughput per GPU", f"{est.tokens_per_s_per_gpu:,.0f} tokens/s")
    head.add_row("model TFLOP/s per GPU", f"{est.model_tflops_per_gpu:.1f} (model FLOPs, full s² attention)")
    head.add_row("FLOPs counted", est.flops_basis)
    head.add_row(
        "MFU",
        f"{100 * est.mfu:.1f}% of {est.peak_flops / 1e12:.0f} TFLOP/s dense {workload.precision} "
        f"peak ({100 * est.mfu_causal:.1f}% with causal-halved attention)",
    )
    head.add_row("HFU (incl. recompute)", f"{100 * est.hfu:.1f}%")
    head.add_row(
        "peak memory (most loaded GPU)", f"{est.memory.total / GiB:.1f} GiB of {est.capacity_bytes / GiB:.1f}"
    )
    flag = {
        UNCERTAIN: ("  uncertain: usable memory is inside the 80% band; measure it (autopar tune)", "yellow")
    }
    flag[OOM] = ("  does not fit: even the band's low end is over usable memory", "red")
    head.add_row("headroom", styled(f"{est.headroom_gib:+.1f} GiB", flag.get(verdict, "")))
    head.add_row("bottleneck", est.bottleneck)
    console.print(head)
    mem = Table("memory", "GiB", "share", title="Memory per GPU", title_justify="left")
    for k, v in est.memory.as_dict().items():
        if k != "total":
            mem.add_row(k, f"{v / GiB:.2f}", f"{100 * v / est.memory.total:.0f}%")
    mem.add_row(styled(("total", "bold")), styled((f"{est.memory.total / GiB:.2f}", "bold")), "100%")
    tim = Table("time per step", "s", "share", title="Step time", title_justify="left")
    for k, v in est.time.as_dict().items():
        if k not in ("total", "recompute"):
            tim.add_row(k, f"{v:.3f}", f"{100 * v / est.step_time_s:.0f}%")
    tim.add_row(
        "  of which recompute",
        f"{est.time.recompute:.3f}",
        f"{100 * est.time.recompute / est.step_time_s:.0f}%",
    )
    tim.add_row(styled(("total", "bold")), styled((f"{est.step_time_s:.3f}", "bold")), "100%")
    console.print(mem)
    console.print(tim)
    for n in est.notes:
        console.print(f"note: {n}")
    for a in est.assumed:
        console.print(f"assumed: {a}")


def _schedule_of(vpp: int | None, pp: int) -> str | None:
    """The pipeline schedule implied by vpp (interleaved when > 1); None = left for the estimate to complete."""
    if pp == 1:
        return "1f1b"
    if vpp is None:
        return None
    return implied_schedule(vpp)


# Options that apply with --batch; every other option describes one strategy, cluster or workload, which each
# row of the file brings itself, so setting one with --batch is an error.
_BATCH_OPTIONS = frozenset({"batch", "out", "calibration", "no_calibration", "as_json"})
_FLAG_NAMES = {"cluster_name": "--cluster"}  # parameters whose flag is not their name


# The knob flags a --strategy label sets itself (a flag given with the label could not take effect): a label
# carries every knob (knobs.LABEL_TOKENS), so every knob flag of this command.
LABEL_KNOBS = KNOB_NAMES


def _changed(given: dict[str, Any], names: Any) -> list[str]:
    """The flags among `names` set to other than their default (as `--flag-name`)."""
    import inspect

    defaults = {n: p.default for n, p in inspect.signature(estimate_cmd).parameters.items()}
    bad = [k for k in names if k in given and k in defaults and given[k] != defaults[k]]
    return [_FLAG_NAMES.get(k, "--" + k.replace("_", "-")) for k in bad]


def _reject_single_options(given: dict[str, Any]) -> None:
    """A single-strategy option given together with --batch cannot take effect: say so (exit 2)."""
    import inspect

    names = [k for k in inspect.signature(estimate_cmd).parameters if k not in _BATCH_OPTIONS]
    bad = _changed(given, names)
    if bad:
        raise SpecError(
            f"{', '.join(bad)} cannot apply with --batch (each row of the file gives its own); drop it"
        )


def _reject_knobs_with_label(given: dict[str, Any], label: str) -> None:
    """Knob flags given together with --strategy LABEL cannot take effect: name both (exit 2)."""
    bad = _changed(given, LABEL_KNOBS)
    if bad:
        raise SpecError(
            f"--strategy {label!r} and {', '.join(bad)} both set the strategy: give the label or the knob "
            "flags, not both"
        )


_ESTIMATE: tuple[OptionSpec, ...] = (
    *SINGLE,
    *KNOBS,
    "allow_uneven",
    opt(
        "batch",
        Annotated[
            Path | None, typer.Option(help="Run-record file (CSV/JSONL/Parquet) to evaluate row by row")
        ],
        None,
    ),
    opt(
        "out",
        Annotated[
            Path | None, typer.Option(help="With --batch: write predictions here (.csv/.jsonl/.parquet)")
        ],
        None,
    ),
    *CALIBRATION,
    opt("as_json", Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")], False),
)


@command("estimate")
@with_options(*_ESTIMATE)
def estimate_cmd(f: Flags) -> None:
    """Predict per-GPU memory and step time of one strategy, or of every row of a run-record file."""
    given = vars(f)
    if f.batch is not None:
        _reject_single_options(given)
        run_batch(f.batch, f.out, f.as_json, resolve_calibration(f.calibration, f.no_calibration))
        return
    if f.out is not None:
        raise SpecError("--out goes with --batch (single estimates print to the terminal; use --json)")
    m, cluster, workload = single_problem(f)
    if f.strategy is not None:
        _reject_knobs_with_label(given, f.strategy)
        s = label_strategy(f.strategy, m.is_moe)
    else:
        s = knob_strategy(given, pp_schedule=f.pp_schedule or _schedule_of(f.vpp, f.pp), cp_comm=f.cp_comm)
    calib = resolve_calibration(f.calibration, f.no_calibration)
    ev = evaluate(m, cluster, workload, s, calib, strict=not f.allow_uneven)
    said = assumption_lines(cluster, workload, calibrated=calib is not None)
    if f.as_json:
        emit_json({**ev.doc(), "assumptions": said}, indent=2)
        return
    for line in said:
        console.print(line, style="dim", highlight=False)
    _print_estimate(m, cluster, workload, ev.strategy, ev.est, ev.verdict)
    _print_calibration(ev)


def _print_calibration(ev: Any) -> None:
    """The line saying how the estimate was corrected (or that it was not)."""
    est, analytical, mem_band, calib = ev.est, ev.analytical, ev.mem_band, ev.calib
    if calib is None:
        console.print("uncalibrated: analytical model only (--no-calibration)")
        return
    lo, hi = est.tokens_per_s_band or (est.tokens_per_s, est.tokens_per_s)
    console.print(
        f"calibrated: x{est.calibration_factor:.3f} on the analytical {analytical.tokens_per_s:,.0f} "
        f"tokens/s; 80% band {lo:,.0f}-{hi:,.0f} tokens/s; peak memory "
        f"{est.memory.total / GiB:.1f} GiB (analytical {analytical.memory.total / GiB:.1f}), 80% band "
        f"{mem_band[0]:.1f}-{mem_band[1]:.1f} GiB ({calib.describe()})",
        highlight=False,
    )
