"""CLI command `autopar optimize`: search strategies (NSGA-II or exhaustive), print the Pareto set.

Several workers can share one study: run the same command with the same ``--storage`` (a journal
file, SQLite, or a PostgreSQL URL for workers on several hosts) and ``--study-name`` on any number of
hosts, or ``--workers K`` on one; they stop when the study holds ``--budget`` COMPLETE trials and
each prints the union.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar.cli.app import NOTE_STYLE, command, console, emit_json, styled
from autopar.cli.cluster_opts import ClusterOpt, NvlinkDomainOpt, resolve_cluster
from autopar.cli.common import (
    CalibrationOpt,
    FrameworkOpt,
    MemorySaversOpt,
    NoCalibrationOpt,
    PlotlyOpt,
    TpOverlapOpt,
    check_framework,
    check_plotly,
    parse_memory_savers,
    resolve_calibration,
)
from autopar.cli.workload_opts import (
    CudaGraphsOpt,
    FP8RecipeOpt,
    MoECapacityOpt,
    MoEDispatcherOpt,
    MoEImbalanceOpt,
    MoEOverlapOpt,
    workload_extras,
)
from autopar.defaults import (
    DEFAULT_BUDGET,
    DEFAULT_FRAMEWORK,
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_GPU,
    DEFAULT_GPUS,
    DEFAULT_MIN_HEADROOM_GIB,
    DEFAULT_MODEL,
    DEFAULT_OBJECTIVES,
    DEFAULT_PRECISION,
    DEFAULT_SAMPLER,
    DEFAULT_SEED,
    DEFAULT_SEQ_LEN,
    tp_comm_overlap_default,
)
from autopar.errors import AutoparError, NoFeasibleStrategyError
from autopar.search.storage import mask
from autopar.units import format_duration

HEADROOM_DEFAULT = f"{DEFAULT_MIN_HEADROOM_GIB:g}GiB"

_COLS = {
    "throughput": ("tokens/s", "{:,.0f}"),
    "headroom": ("free GiB", "{:.1f}"),
    "cost": ("$/Mtok", "{:.3f}"),
    "step_time": ("step s", "{:.2f}"),
    "mfu": ("MFU %", "{:.1f}"),
}


def build_clusters(
    gpus: list[str],
    counts: list[int],
    gpus_per_node: int | None,
    internode_gbps: float | None,
    nvlink_domain: int | None = None,
) -> tuple[list[Any], list[str]]:
    """ClusterSpecs for every GPU type x count; counts that are not host multiples are skipped (noted)."""
    from autopar.catalog import get_gpu
    from autopar.specs import ClusterSpec

    out, skipped = [], []
    for name in gpus:
        g = get_gpu(name)
        node = gpus_per_node or g.host_size or g.scaleup_domain
        for n in counts:
            if n > node and n % node:
                skipped.append(f"{n}x {g.name}: not a multiple of {node} GPUs per node, skipped")
                continue
            out.append(
                ClusterSpec(
                    gpu=g,
                    num_gpus=n,
                    gpus_per_node=gpus_per_node,
                    nvlink_domain=nvlink_domain,
                    internode_bw=internode_gbps * 1e9 if internode_gbps else None,
                )
            )
    if not out:
        raise AutoparError("gpus: no GPU count fits a whole number of nodes (" + "; ".join(skipped) + ")")
    return out, skipped


def _jsonable(v: Any) -> Any:
    """Plain JSON values (numpy scalars -> Python, NaN/inf -> None)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# --json's one MFU convention, shared with `estimate --json` and `whatif --json`: `mfu` is a fraction of the
# dense peak (0..1); `mfu_pct` the same in percent. The `mfu` objective (tables, Optuna's stored values) is
# in percent, so its rows are converted here, at the JSON edge.
JSON_MFU_UNIT = "fraction"
# --json's one memory convention, shared by every command: GiB (2**30 bytes) in a field whose name says
# `_gib` (or inside an object named `memory_gib`); catalogs (`models`, `gpus`, ...) keep SI bytes.
JSON_MEMORY_UNIT = "GiB"


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A result row for --json: values made JSON-safe, `mfu` as a fraction (JSON_MFU_UNIT), the `headroom`
    objective also as `headroom_gib` (JSON_MEMORY_UNIT)."""
    out = {k: _jsonable(v) for k, v in row.items()}
    if "mfu" in out and out["mfu"] is not None:
        out["mfu"] = out["mfu"] / 100.0
    if "headroom" in out:  # the objective's name carries no unit; JSON memory fields say theirs
        out.setdefault("headroom_gib", out["headroom"])
    return out


def _json_objective(o: Any) -> dict[str, Any]:
    return {"name": o.name, "direction": o.direction, "unit": JSON_MFU_UNIT if o.name == "mfu" else o.unit}


def result_json(result: Any) -> dict[str, Any]:
    """The --json document: inputs, space_size, trials, pareto, recommended (+ notes, stats)."""
    from autopar.reports.counts import search_counts
    from autopar.search.pareto import record_row

    n = search_counts(result)
    return {
        "inputs": result.inputs,
        "space_size": result.space_size,
        "space_valid": result.space_valid,
        "trials": {
            "total": n["total"],
            "evaluated": n["evaluated"],
            "feasible": n["feasible"],
            "pareto": n["pareto"],
            "rule_violations": n["rule_violations"],
            "optuna_trials": result.stats.get("optuna_trials"),
            "duplicates": result.stats.get("duplicates"),
        },
        "study": {
            "name": result.stats.get("study_name"),
            "states": result.stats.get("study_states") or {},
        },
        "objectives": [_json_objective(o) for o in result.objectives],
        "pareto": [_json_row(row) for row in result.pareto_rows],
        "recommended": [
            {"role": r.role, **_json_row(record_row(r.trial)), "why": r.why} for r in result.recommended
        ],
        "notes": result.notes,
        "hypervolume": result.stats.get("hypervolume"),
        "calibration": result.calibration,
        "wall_s": result.wall_s,
    }


def print_result(result: Any, top: int) -> None:
    """Rich output: summary line, Pareto table, recommendations and notes."""
    from rich.table import Table

    from autopar.reports.counts import search_counts

    hw = {(t.gpu, t.num_gpus, t.precision) for t in result.trials}
    multi_hw = len(hw) > 1
    st = result.stats
    w = result.workload
    console.print(
        styled(
            (result.model.name, "bold"),
            f" · {', '.join(result.inputs['gpu'])} x {'/'.join(map(str, result.inputs['gpus']))} GPUs · "
            f"{'/'.join(result.inputs['precision'])} · seq {w.seq_len} · global batch {w.global_batch}",
        )
    )
    valid = f"{result.space_valid:,}" if result.space_valid is not None else "?"
    if not st.get("space_valid_exact", True):
        valid = "~" + valid
    n = search_counts(result)
    console.print(
        f"space {result.space_size:,} combinations ({valid} valid) · {result.sampler}: "
        f"{n['total']:,} trials = {n['evaluated']:,} evaluated + {n['rule_violations']:,} invalid layouts "
        f"(pruned) · {n['feasible']:,} feasible, {n['pareto']} on the front · {format_duration(result.wall_s)}",
        highlight=False,
    )
    if st.get("study_name"):
        states = ", ".join(f"{n} {k}" for k, n in sorted(st.get("study_states", {}).items()))
        console.print(
            f"study {st['study_name']!r} in {mask(str(result.inputs.get('storage')))}: {states}",
            highlight=False,
            style="dim",
        )
    names = [o.name for o in result.objectives]
    extra = [n for n in ("throughput", "headroom", "cost", "mfu") if n not in names]
    table = Table(title="Pareto set", title_justify="left", show_lines=False)
    for col in ["#"] + (["hardware"] if multi_hw else []) + ["strategy"]:
        table.add_column(col)
    for n in names + extra:
        table.add_column(_COLS[n][0] + ("" if n in names else " ·"), justify="right")
    table.add_column("bottleneck")
    df = result.pareto.head(top)
    for i, row in enumerate(df.to_dict("records")):
        cells = [str(i + 1)] + ([f"{row['num_gpus']}x {row['gpu']} {row['precision']}"] if multi_hw else [])
        cells.append(row["label"])
        cells += [_COLS[n][1].format(row[n]) for n in names + extra]
        low = row.get("throughput_low")
        if "throughput" in names + extra and low is not None and low == low:  # present and not NaN
            k = (names + extra).index("throughput") + len(cells) - len(names + extra)
            band = f" ({row['throughput_low'] / 1e3:,.0f}k–{row['throughput_high'] / 1e3:,.0f}k)"
            cells[k] = styled(cells[k], (band, "dim"))
        cells.append(str(row.get("bottleneck", "")))
        table.add_row(*cells)
    console.print(table)
    if len(result.pareto) > top:
        console.print(f"... {len(result.pareto) - top} more (use --top or --json)", style="dim")
    if extra:
        console.print("· = not an objective, shown for reference", style="dim")
    if result.calibration:
        from autopar.calibration.apply import provenance

        cal = result.calibration
        named = provenance(str(cal.get("name")), cal.get("n_runs"), cal.get("sources"))
        console.print(
            f"tokens/s corrected by {named}; (low–high) is the 80% band; "
            "--no-calibration for the analytical model alone",
            style="dim",
            highlight=False,
        )
    tokens = w.token_budget
    for r in result.recommended:
        console.print()
        console.print(styled((r.role, "bold green"), f": {r.trial.strategy.label()}"))
        train = ""
        if tokens and r.trial.values.get("throughput"):
            time_s = tokens / r.trial.values["throughput"]
            train = (
                f" Training {tokens:.3g} tokens takes {format_duration(time_s)} and costs "
                f"${r.trial.values['cost'] * tokens / 1e6:,.0f}."
            )
        console.print(r.why + train, highlight=False, soft_wrap=False)
    from autopar.reports.decision import recipe_text

    recipe = recipe_text(result)  # the published recipe beside the pick (issue 21)
    if recipe:
        console.print()
        console.print(styled(("recipe", "bold"), f": {recipe}"), highlight=False, soft_wrap=False)
    for n in result.notes:  # informational: dim, not the warning colour
        console.print(styled(("note:", NOTE_STYLE), f" {n}"), soft_wrap=True)


@command("optimize")
def optimize_cmd(
    model: Annotated[
        str | None,
        typer.Option(help=f"Model name/alias or path to a HF config.json \\[default: {DEFAULT_MODEL}]."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help=f"GPU type(s), comma list makes it a search dimension \\[default: {DEFAULT_GPU}]."),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option(
            help="GPU count: N, N,M,..., LOW..HIGH (powers of two) or LOW..HIGH:STEP "
            f"\\[default: {DEFAULT_GPUS}]."
        ),
    ] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs per host (server or tray) \\[default: GPU's].")
    ] = None,
    nvlink_domain: NvlinkDomainOpt = None,
    fp8_recipe: FP8RecipeOpt = None,
    moe_imbalance: MoEImbalanceOpt = None,
    moe_capacity_factor: MoECapacityOpt = None,
    moe_dispatcher: MoEDispatcherOpt = None,
    moe_ep_overlap: MoEOverlapOpt = False,
    cuda_graphs: CudaGraphsOpt = False,
    cluster: ClusterOpt = None,
    internode_gbps: Annotated[float | None, typer.Option(help="NIC GB/s per GPU per direction.")] = None,
    seq_len: Annotated[int, typer.Option(help="Sequence length (tokens).")] = DEFAULT_SEQ_LEN,
    global_batch: Annotated[
        int, typer.Option(help="Global batch (sequences per step).")
    ] = DEFAULT_GLOBAL_BATCH,
    precision: Annotated[
        str, typer.Option(help="bf16, fp8 or bf16,fp8 (a search dimension).")
    ] = DEFAULT_PRECISION,
    tokens: Annotated[
        str | None, typer.Option(help="Token budget, e.g. 1T (for time/cost to train).")
    ] = None,
    budget: Annotated[int, typer.Option(help="Distinct strategies to evaluate.")] = DEFAULT_BUDGET,
    objectives: Annotated[
        str, typer.Option(help="2-4 of throughput,headroom,cost,step_time,mfu.")
    ] = ",".join(DEFAULT_OBJECTIVES),
    seed: Annotated[
        int, typer.Option(help="Random seed (same seed + inputs = same Pareto set).")
    ] = DEFAULT_SEED,
    sampler: Annotated[
        str,
        typer.Option(
            help="auto (exact sweep up to 1M points, else NSGA-II over layouts with exact inner knobs; "
            "nsga2 with --storage), nsga2, exhaustive or hybrid."
        ),
    ] = DEFAULT_SAMPLER,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Keep the study: a journal file path (fast, no server), sqlite:///study.db, or "
            "postgresql://user:password@host/db for workers on several hosts. Re-running resumes."
        ),
    ] = None,
    study_name: Annotated[str | None, typer.Option(help="Study name in --storage (resume/share).")] = None,
    workers: Annotated[
        int, typer.Option(help="Worker processes on this host sharing the study (needs --storage).")
    ] = 1,
    heartbeat: Annotated[
        int | None,
        typer.Option(
            help="Seconds between heartbeats of a database-server worker; a trial silent for 3x this "
            "is marked FAILED \\[default: 10]."
        ),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    min_headroom: Annotated[
        str,
        typer.Option(
            help="Constraint: free memory per GPU, e.g. 4GiB (default keeps a margin for the memory model's error)."
        ),
    ] = HEADROOM_DEFAULT,
    max_cost: Annotated[float | None, typer.Option(help="Constraint: max $ per million tokens.")] = None,
    fix: Annotated[
        list[str] | None,
        typer.Option(
            help="Search only KNOB=VALUE, e.g. tp=8 (repeatable; knobs: tp pp cp ep etp dp vpp ...)"
        ),
    ] = None,
    forbid: Annotated[
        list[str] | None,
        typer.Option(
            help="Pin an axis to 1 or turn a feature off (cp, ep, pp, hsdp, ...), or drop one value "
            "(cp_comm=allgather); repeatable"
        ),
    ] = None,
    prices: Annotated[Path | None, typer.Option(help="Price book YAML/CSV overriding the defaults.")] = None,
    tier: Annotated[str, typer.Option(help="Price tier (on_demand, reserved, spot, ...).")] = "on_demand",
    calibration: CalibrationOpt = None,
    no_calibration: NoCalibrationOpt = False,
    framework: FrameworkOpt = DEFAULT_FRAMEWORK,
    tp_comm_overlap: TpOverlapOpt = None,
    memory_savers: MemorySaversOpt = "",
    top: Annotated[int, typer.Option(help="Pareto rows to print.")] = 15,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    out: Annotated[
        Path | None, typer.Option(help="Write an HTML report here, e.g. reports/run.html.")
    ] = None,
    plotly: PlotlyOpt = "inline",
) -> None:
    """Search parallelism strategies (an exact sweep; NSGA-II over layouts for large spaces), print the Pareto set.

    Budget = COMPLETE trials in the study (distinct strategies with an estimate). To share one
    search, start the same command with the same --storage and --study-name on several hosts (a
    PostgreSQL URL) or use --workers K on one host; they stop together when the study holds --budget
    COMPLETE trials. Re-running with the same storage resumes the study.
    """
    from autopar.catalog import get_model
    from autopar.search.parse import check_seed, parse_count, parse_gib, parse_gpu_counts, parse_list
    from autopar.search.storage import is_server
    from autopar.search.workers import run_workers
    from autopar.specs import Workload

    check_plotly(plotly, out)
    check_seed(seed)
    default_problem = model is None
    m = get_model(model or DEFAULT_MODEL)
    choice = resolve_cluster(
        cluster,
        gpu=gpu,
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        nvlink_domain=nvlink_domain,
        default_gpu=DEFAULT_GPU,
        default_gpus=DEFAULT_GPUS,
    )
    counts = parse_gpu_counts(choice.gpus, node_size=10**9)
    clusters, skipped = build_clusters(
        parse_list(choice.gpu, "gpu"),
        counts,
        choice.gpus_per_node,
        internode_gbps if internode_gbps is not None else choice.internode_gbps,
        choice.nvlink_domain,
    )
    precs = parse_list(precision, "precision")
    wl = Workload(
        seq_len=seq_len,
        global_batch=global_batch,
        precision=precs[0],
        token_budget=parse_count(tokens),
        framework=check_framework(framework),
        tp_comm_overlap=tp_comm_overlap_default(check_framework(framework), tp_comm_overlap),
        memory_savers=parse_memory_savers(memory_savers),
        **workload_extras(m, precs, locals()),
    )
    book = None
    if prices is not None:
        from autopar.costs import load_price_book

        book = load_price_book(prices)
    calib = resolve_calibration(calibration, no_calibration)
    if default_problem and not as_json:
        console.print(
            f"no --model given: default problem {m.name} on {choice.gpus}x {choice.gpu}, seq {seq_len}, "
            f"global batch {global_batch}",
            style="dim",
            highlight=False,
        )
    progress = not as_json and sys.stdout.isatty()
    if study_name is not None and storage is None:
        raise AutoparError("study-name: an in-memory search has no study name; give --storage too")
    if heartbeat is not None and (storage is None or not is_server(storage)):
        raise AutoparError("heartbeat: only a database-server --storage (postgresql://...) uses heartbeats")
    if heartbeat is not None and heartbeat < 1:
        raise AutoparError(f"heartbeat={heartbeat}: must be at least 1 second")
    from autopar.search.constraints import parse_constraints

    constraints = parse_constraints(fix or (), forbid or ())
    ref = None if no_calibration else (str(calibration.resolve()) if calibration else "default")
    result = run_workers(
        workers,
        dict(
            model=m,
            clusters=clusters,
            workload=wl,
            budget=budget,
            objectives=objectives,
            seed=seed,
            sampler=sampler,
            storage=storage,
            study_name=study_name,
            timeout=timeout,
            min_headroom_gib=parse_gib(min_headroom),
            max_cost=max_cost,
            precisions=precs,
            price_book=book,
            tier=tier,
            calibration=calib,
            progress=progress,
            heartbeat_s=heartbeat,
            constraints=constraints,
            stored_inputs={"calibration": ref, "gpus_arg": gpus},
        ),
    )
    result.notes[:0] = skipped
    result.inputs["gpus_arg"] = choice.gpus
    if not result.pareto_rows:
        raise NoFeasibleStrategyError(result.notes[-1])
    if as_json:
        emit_json(result_json(result))
    else:
        print_result(result, top)
    if out is not None:
        try:
            from autopar.reports import write_search_report
        except (ImportError, AttributeError) as e:
            raise AutoparError(f"out={out}: the HTML report writer is not available in this build") from e
        path = write_search_report(result, out, plotlyjs=plotly)
        if not as_json:
            console.print(f"report: {path}", highlight=False)
