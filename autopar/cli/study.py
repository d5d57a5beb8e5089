"""CLI commands `autopar study status|report`: progress and the HTML report of a stored study, at any
time, from whatever it holds (while workers are still running, or after they are gone)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar.cli.app import app, command, console, emit_json, styled
from autopar.cli.common import explain_option
from autopar.cli.options import CALIBRATION, Flags, opt, with_options

study_app = typer.Typer(
    help="Inspect a stored study (`optimize --storage ...`): progress, Pareto set, HTML report.",
    no_args_is_help=True,
)
app.add_typer(study_app, name="study")

StorageOpt = Annotated[
    str,
    typer.Option(
        "--storage",
        help="Where the study is: a journal file, sqlite:///file.db or postgresql://user:password@host/db.",
    ),
]
StudyNameOpt = Annotated[
    str | None,
    typer.Option("--study-name", help="Study name \\[default: the only study in the storage]."),
]


def _command(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return command(*args, typer_app=study_app, **kwargs)


@_command("status")
def status_cmd(
    storage: StorageOpt,
    study_name: StudyNameOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Trials per state (COMPLETE counts toward the budget; PRUNED = invalid layouts; FAIL = a worker
    stopped mid-trial), feasible count and budget of a stored study."""
    from autopar.search.stored import study_status

    st = study_status(storage, study_name)
    if as_json:
        emit_json(st.as_dict())
        return
    states = ", ".join(f"{k} {v}" for k, v in sorted(st.states.items())) or "no trials"
    budget = f" of budget {st.budget}" if st.budget else ""
    console.print(styled((st.name, "bold"), f" · {st.model or '?'} on {', '.join(st.hardware) or '?'}"))
    console.print(
        f"{st.complete} COMPLETE{budget} ({st.feasible} feasible) · trials: {states}", highlight=False
    )
    if st.metric_names:
        console.print(f"objectives: {', '.join(st.metric_names)}", style="dim", highlight=False)
    if st.unreadable:
        console.print(
            f"ignored (not written by this autopar): {'; '.join(st.unreadable)}", style="dim", highlight=False
        )


@_command("runs")
def runs_cmd(
    storage: StorageOpt,
    study_name: StudyNameOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """A tune's runs in order (`autopar tune` keeps them in its study): candidate, state (RUNNING while the
    job runs), the band it believed at launch, what it measured, the best so far, and how the tune ended."""
    from autopar.search.stored import load_study
    from autopar.tune.status import tune_status

    st = tune_status(load_study(storage, study_name))
    if as_json:
        emit_json(st.as_dict())
        return
    _print_runs(st)


def _print_runs(st: Any) -> None:
    from rich.table import Table

    table = Table(
        title=f"{st.name} · {len(st.runs)} runs of {st.candidates} candidates", title_justify="left"
    )
    for col in ("#", "strategy", "state", "believed (tokens/s/GPU)", "measured", "best so far"):
        table.add_column(col, justify="right" if col not in ("strategy", "state") else "left")
    for r in st.runs:
        band = f"{r.believed_low:,.0f}–{r.believed_high:,.0f}" if r.believed_low and r.believed_high else ""
        state = r.status if r.state != "FAIL" else f"{r.status}: {r.reason[:60]}"
        table.add_row(
            str(r.number),
            r.strategy,
            state,
            band,
            f"{r.measured:,.0f}" if r.measured is not None else "",
            f"{r.best_so_far:,.0f}" if r.best_so_far is not None else "",
        )
    console.print(table)
    if st.stopped:
        pick = st.stopped.get("pick") or "none"
        console.print(
            f"stopped ({st.stopped.get('rule')}): {st.stopped.get('why')}; pick {pick}", highlight=False
        )
    else:
        console.print(
            f"not stopped: {st.running} run(s) RUNNING, or the tune was interrupted", highlight=False
        )


@_command("report")
@with_options(
    opt("storage", StorageOpt),
    opt("study_name", StudyNameOpt, None),
    opt("out", Annotated[Path | None, typer.Option("--out", help="Write the HTML report here.")], None),
    *CALIBRATION,
    opt("top", Annotated[int, typer.Option(help="Pareto rows to print.")], 15),
    explain_option(),
    opt(
        "as_json",
        Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")],
        False,
    ),
)
def report_cmd(f: Flags) -> None:
    """Pareto set and recommendations of whatever a stored study holds; --out writes the HTML report.

    The study keeps the inputs it was searched with, so no other option is needed; the calibration
    is the one the search used unless --calibration/--no-calibration say otherwise.
    """
    from autopar.cli.common import check_explain, resolve_calibration
    from autopar.cli.optimize import print_result, result_json
    from autopar.errors import NoFeasibleStrategyError
    from autopar.search.stored import load_result

    check_explain(f.explain, f.as_json)
    cal: Any = "stored"
    if f.calibration is not None or f.no_calibration:
        cal = resolve_calibration(f.calibration, f.no_calibration)
    result = load_result(f.storage, f.study_name, cal)
    if f.as_json:
        emit_json(result_json(result))
    elif result.pareto_rows:
        print_result(result, f.top, f.explain)
    if f.out is not None:
        from autopar.reports import write_search_report

        path = write_search_report(result, f.out)
        if not f.as_json:
            console.print(f"report: {path}", highlight=False)
    if not result.pareto_rows:
        raise NoFeasibleStrategyError(
            result.notes[-1] if result.notes else "no feasible trial in the study yet"
        )


@_command("repair")
def repair_cmd(
    file: Annotated[str, typer.Argument(help="The study's journal file (`optimize --storage FILE`).")],
    out: Annotated[
        str | None,
        typer.Option(
            "--out", help="Write the repaired journal here \\[default: over FILE, keeping FILE.bak]."
        ),
    ] = None,
) -> None:
    """Keep the readable part of a damaged journal file: every record before the first line Optuna
    cannot replay (a foreign or garbled record, a torn last line); the lines from there on are dropped.

    The file is replaced atomically and the original kept as FILE.bak, unless --out names another file.
    """
    from autopar.search.storage import repair_journal

    done = repair_journal(file, out)
    if done.out is None:
        console.print(f"{file}: all {done.kept} records are readable; nothing to repair", highlight=False)
        return
    where = f"; from line {done.kept + 1}" + (
        f" ({done.first_bad.why})" if done.first_bad else " (a torn last line)"
    )
    console.print(
        f"kept {done.kept} records, dropped {done.dropped} line{'s' if done.dropped != 1 else ''}"
        f"{where if done.dropped else ''}",
        highlight=False,
    )
    console.print(
        f"wrote {done.out}" + (f"; the original is in {done.backup}" if done.backup else ""), highlight=False
    )
