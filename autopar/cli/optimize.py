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
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autopar.cli.app import NOTE_STYLE, command, console, emit_json, styled
from autopar.cli.common import check_explain, check_plotly, explain_option, resolve_calibration
from autopar.cli.options import (
    CALIBRATION,
    CLUSTER,
    STACK,
    WORKLOAD_EXTRAS,
    Flags,
    detect,
    opt,
    problem_of,
    with_options,
)
from autopar.errors import AutoparError, NoFeasibleStrategyError
from autopar.search.storage import mask
from autopar.units import format_duration, format_tokens

if TYPE_CHECKING:
    from autopar.problem import SearchSettings

_COLS = {
    "throughput": ("tokens/s", "{:,.0f}"),
    "headroom": ("free GiB", "{:.1f}"),
    "cost": ("$/Mtok", "{:.3f}"),
    "step_time": ("step s", "{:.2f}"),
    "mfu": ("MFU %", "{:.1f}"),
}


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


def result_assumptions(result: Any) -> list[str]:
    """What the search's figures assume that the problem did not state (calibration/evaluation/assumptions.py)."""
    from autopar.calibration.evaluation.assumptions import search_assumptions

    return search_assumptions(result.clusters, result.workload, bool(result.calibration))


def result_json(result: Any) -> dict[str, Any]:
    """The --json document: inputs, space_size, trials, pareto, recommended (+ notes, stats)."""
    from autopar.reports.counts import search_counts
    from autopar.reports.recipe import recipe_json
    from autopar.search.pareto import record_row

    n = search_counts(result)
    v = _verdict(result)
    return {
        "verdict": v.to_json() if v is not None else None,
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
        "recipe": recipe_json(result),
        "notes": result.notes,
        "assumptions": result_assumptions(result),
        "hypervolume": result.stats.get("hypervolume"),
        "calibration": result.calibration,
        "wall_s": result.wall_s,
    }


def print_result(result: Any, top: int, explain: bool = False) -> None:
    """Rich output, the answer first: the problem line, the verdict (pick, band, time and cost to train, its
    near-ties), the Pareto table with the pick marked, the other roles in a line each, the recipe and notes;
    with `explain` the full reasoning behind each recommendation and the recipe comparison."""
    verdict = _verdict(result)
    _print_problem(result)
    from autopar.reports.verdict import verdict_lines

    for line in verdict_lines(verdict) if verdict is not None else []:
        console.print(line, style="bold", highlight=False, soft_wrap=True)
    console.print(_pareto_table(result, top, verdict.row if verdict is not None else 0))
    if len(result.pareto) > top:
        console.print(f"... {len(result.pareto) - top} more (use --top or --json)", style="dim")
    names = [o.name for o in result.objectives]
    marks = (
        "★ = the pick"
        + (_near_tie_mark() if any(r.get("near_tie") for r in result.pareto_rows) else "")
        + ("; · = not an objective, shown for reference" if any(n not in names for n in _SHOWN) else "")
    )
    console.print(marks, style="dim")
    _print_counts(result)
    if result.calibration:
        from autopar.calibration.apply.model import provenance

        cal = result.calibration
        named = provenance(str(cal.get("name")), cal.get("n_runs"), cal.get("sources"))
        console.print(
            f"tokens/s corrected by {named}; (low–high) is the 80% band; "
            "--no-calibration for the analytical model alone",
            style="dim",
            highlight=False,
        )
    _print_recommended(result, explain)
    recipe = _recipe(result, explain, verdict)  # the published recipe beside the pick (issue 21)
    if recipe:
        if explain:
            console.print()
        console.print(styled(("recipe", "bold"), f": {recipe}"), highlight=False, soft_wrap=False)
    for n in result.notes:  # informational: dim, not the warning colour
        console.print(styled(("note:", NOTE_STYLE), f" {n}"), soft_wrap=True)
    if not explain:
        console.print("--explain for the reasoning behind each recommendation", style="dim")


def _verdict(result: Any) -> Any:
    """The verdict (reports/verdict.py) for the search's first recommendation, or None."""
    from autopar.reports.decision import decision_info, recommendation_cards
    from autopar.reports.verdict import verdict_info

    cards = recommendation_cards(result.recommended, result.objectives)
    return verdict_info(result, decision_info(result, cards))


def _near_tie_mark() -> str:
    from autopar.search.pareto import NEAR_TIE_FRACTION

    return (
        f"; ≈ = a near-tie: off the front by less than {NEAR_TIE_FRACTION:.0%} on each objective, "
        "which the model cannot order against it"
    )


_SHOWN = ("throughput", "headroom", "cost", "mfu")  # columns shown (· marked) even when not an objective


def _print_problem(result: Any) -> None:
    """The problem line."""
    w = result.workload
    console.print(
        styled(
            (result.model.name, "bold"),
            f" · {', '.join(result.inputs['gpu'])} x {'/'.join(map(str, result.inputs['gpus']))} GPUs · "
            f"{'/'.join(result.inputs['precision'])} · seq {w.seq_len} · global batch {w.global_batch}"
            + (f" · {format_tokens(w.token_budget)} tokens" if w.token_budget else "")
            + (f" · LoRA rank {w.lora_dim}" if w.finetune == "lora" else ""),
        )
    )


def _print_counts(result: Any) -> None:
    """What the figures assume that the problem did not state, the space and trial counts, and the stored
    study's states."""
    from autopar.reports.counts import search_counts

    for line in result_assumptions(result):
        console.print(line, style="dim", highlight=False)
    st = result.stats
    valid = f"{result.space_valid:,}" if result.space_valid is not None else "?"
    if not st.get("space_valid_exact", True):
        valid = "~" + valid
    n = search_counts(result)
    console.print(
        f"space {result.space_size:,} combinations ({valid} valid) · {result.sampler}: "
        f"{n['total']:,} trials = {n['evaluated']:,} evaluated + {n['rule_violations']:,} invalid layouts "
        f"(pruned) · {n['feasible']:,} feasible, {n['pareto']} on the front"
        + (f" + {n['near_ties']} near-ties" if n["near_ties"] else "")
        + f" · {format_duration(result.wall_s)}",
        highlight=False,
        style="dim",
    )
    if st.get("study_name"):
        states = ", ".join(f"{n} {k}" for k, n in sorted(st.get("study_states", {}).items()))
        console.print(
            f"study {st['study_name']!r} in {mask(str(result.inputs.get('storage')))}: {states}",
            highlight=False,
            style="dim",
        )


def _pareto_table(result: Any, top: int, pick_row: int = 0) -> Any:
    """The Pareto set's first `top` rows: hardware (when several), strategy, objectives, bottleneck; the
    pick's row (1-based, 0 for none) marked ★."""
    from rich.table import Table

    multi_hw = len({(t.gpu, t.num_gpus, t.precision) for t in result.trials}) > 1
    names = [o.name for o in result.objectives]
    shown = names + [n for n in _SHOWN if n not in names]
    ties = any(r.get("near_tie") for r in result.pareto_rows)
    title = "Pareto set and its near-ties" if ties else "Pareto set"
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in ["#"] + (["hardware"] if multi_hw else []) + ["strategy"]:
        table.add_column(col)
    for n in shown:
        table.add_column(_COLS[n][0] + ("" if n in names else " ·"), justify="right")
    table.add_column("bottleneck")
    for i, row in enumerate(result.pareto.head(top).to_dict("records")):
        mark = ("★" if i + 1 == pick_row else "") + ("≈" if row.get("near_tie") else "")
        cells = [f"{i + 1}{mark}"] + (
            [f"{row['num_gpus']}x {row['gpu']} {row['precision']}"] if multi_hw else []
        )
        cells.append(row["label"])
        cells += [_COLS[n][1].format(row[n]) for n in shown]
        low = row.get("throughput_low")
        if "throughput" in shown and low is not None and low == low:  # present and not NaN
            k = shown.index("throughput") + len(cells) - len(shown)
            band = f" ({row['throughput_low'] / 1e3:,.0f}k–{row['throughput_high'] / 1e3:,.0f}k)"
            cells[k] = styled(cells[k], (band, "dim"))
        cells.append(str(row.get("bottleneck", "")))
        table.add_row(*cells)
    return table


def _print_recommended(result: Any, explain: bool) -> None:
    """Each recommended point once: its roles and label; with `explain` its why and the time and cost to train
    the token budget, else one line of figures (the first point's figures are the verdict's). A point that
    holds several roles (fastest and cheapest on one fixed cluster) is printed once, with the first sentence of
    each further role's why (its reason for that role) after the full first one."""
    by_point: dict[int, list[Any]] = {}
    for r in result.recommended:
        by_point.setdefault(r.trial.number, []).append(r)
    for i, recs in enumerate(by_point.values()):
        first = recs[0]
        roles = " = ".join(r.role for r in recs)
        if not explain:
            what = "the pick" if i == 0 else f"{first.trial.strategy.label()} · {_figures(first.trial)}"
            console.print(styled((roles, "bold green"), f": {what}"))
            continue
        console.print()
        console.print(styled((roles, "bold green"), f": {first.trial.strategy.label()}"))
        also = "".join(" " + _first_sentence(r.why) for r in recs[1:])
        console.print(first.why + also + _train_words(result, first.trial), highlight=False, soft_wrap=False)


def _figures(t: Any) -> str:
    """'66,429 tokens/s (54k–74k), 45.2 GiB free' for a recommended point's one line."""
    tps = t.values.get("throughput")
    band = t.estimate.tokens_per_s_band if t.estimate is not None else None
    text = f"{tps:,.0f} tokens/s" if tps else ""
    if tps and band:
        text += f" ({band[0] / 1e3:,.0f}k–{band[1] / 1e3:,.0f}k)"
    if t.estimate is not None:
        text += f", {t.estimate.headroom_bytes / 2**30:.1f} GiB free"
    return text


def _train_words(result: Any, t: Any) -> str:
    """' Training 1.5e+13 tokens takes 27 days and costs $12,345.' when a token budget was given."""
    tokens = result.workload.token_budget
    if not (tokens and t.values.get("throughput")):
        return ""
    time_s = tokens / t.values["throughput"]
    cost = f" and costs ${t.values['cost'] * tokens / 1e6:,.0f}" if "cost" in t.values else ""
    return f" Training {format_tokens(tokens)} tokens takes {format_duration(time_s)}{cost}."


def _recipe(result: Any, explain: bool, verdict: Any) -> str:
    """The published recipe beside the pick: the full comparison with `explain`, else one line."""
    from autopar.reports.recipe import recipe_text, recipe_view
    from autopar.reports.verdict import recipe_line

    if explain or not result.recommended:
        return recipe_text(result)
    view = recipe_view(result, result.recommended[0].trial)
    return "" if view is None else recipe_line(view, verdict.band if verdict is not None else None)


def _first_sentence(text: str) -> str:
    """'Cheapest: best cost on the front.' out of a role's why (up to the first '. ')."""
    head, sep, _ = text.partition(". ")
    return head + "." if sep else text


_OPTIMIZE = (
    *("model", "gpu", "gpus", *CLUSTER, *WORKLOAD_EXTRAS, "cluster_name"),
    *(
        "seq_len",
        "global_batch",
        "precision",
        "tokens",
        "budget",
        "objectives",
        "seed",
    ),
    *("sampler", "storage", "study_name"),
    opt(
        "workers",
        Annotated[
            int, typer.Option(help="Worker processes on this host sharing the study (needs --storage).")
        ],
        1,
    ),
    *("heartbeat", "timeout"),
    *("min_headroom", "memory_band"),
    "max_cost",
    *("fix", "forbid", "prices", "tier", *CALIBRATION, *STACK, "memory_savers"),
    opt("top", Annotated[int, typer.Option(help="Pareto rows to print.")], 15),
    explain_option(),
    opt(
        "as_json",
        Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")],
        False,
    ),
    opt(
        "out",
        Annotated[Path | None, typer.Option(help="Write an HTML report here, e.g. reports/run.html.")],
        None,
    ),
    "plotly",
)


@command("optimize")
@with_options(*_OPTIMIZE)
def optimize_cmd(f: Flags) -> None:
    """Search parallelism strategies (an exact sweep; NSGA-II over layouts for large spaces), print the Pareto set.

    Budget = COMPLETE trials in the study (distinct strategies with an estimate). To share one
    search, start the same command with the same --storage and --study-name on several hosts (a
    PostgreSQL URL) or use --workers K on one host; they stop together when the study holds --budget
    COMPLETE trials. Re-running with the same storage resumes the study.
    """
    from autopar.search.workers import run_workers

    check_plotly(f.plotly, f.out)
    check_explain(f.explain, f.as_json)
    p = problem_of(f)
    built = p.build(detect)
    _check_storage(p.search)
    book = None
    if f.prices is not None:
        from autopar.costs import load_price_book

        book = load_price_book(f.prices)
    calib = resolve_calibration(f.calibration, f.no_calibration)
    if f.model is None and not f.as_json:
        c = p.cluster.choice(detect)
        console.print(
            f"no --model given: default problem {built.model.name} on {c.gpus}x {c.gpu}, seq "
            f"{p.workload.seq_len}, global batch {p.workload.global_batch}",
            style="dim",
            highlight=False,
        )
    ref = None if f.no_calibration else (str(f.calibration.resolve()) if f.calibration else "default")
    kwargs = dict(
        model=built.model,
        clusters=built.clusters,
        workload=built.workload,
        settings=built.settings,
        price_book=book,
        calibration=calib,
        progress=not f.as_json and sys.stdout.isatty(),
        stored_inputs={"calibration": ref, "gpus_arg": f.gpus},
    )
    result = run_workers(f.workers, kwargs)
    result.notes[:0] = built.skipped
    result.inputs["gpus_arg"] = p.cluster.choice(detect).gpus
    _finish(result, f)


def _check_storage(s: SearchSettings) -> None:
    """--study-name and --heartbeat need a storage (a database server for the heartbeat)."""
    from autopar.search.storage import is_server

    if s.study_name is not None and s.storage is None:
        raise AutoparError("study-name: an in-memory search has no study name; give --storage too")
    if s.heartbeat_s is not None and (s.storage is None or not is_server(s.storage)):
        raise AutoparError("heartbeat: only a database-server --storage (postgresql://...) uses heartbeats")
    if s.heartbeat_s is not None and s.heartbeat_s < 1:
        raise AutoparError(f"heartbeat={s.heartbeat_s}: must be at least 1 second")


def _finish(result: Any, f: Flags) -> None:
    """Print the result (tables or JSON) and write the HTML report; exit 1 when nothing fits."""
    if not result.pareto_rows:
        raise NoFeasibleStrategyError(result.notes[-1])
    if f.as_json:
        emit_json(result_json(result))
    else:
        print_result(result, f.top, f.explain)
    if f.out is not None:
        try:
            from autopar.reports import write_search_report
        except (ImportError, AttributeError) as e:
            raise AutoparError(f"out={f.out}: the HTML report writer is not available in this build") from e
        path = write_search_report(result, f.out, plotlyjs=f.plotly)
        if not f.as_json:
            console.print(f"report: {path}", highlight=False)
