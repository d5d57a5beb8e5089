"""CLI: `autopar calibrate ingest|list|export|fit|report` (run store and throughput corrector)."""

from __future__ import annotations

import csv
import functools
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from autopar.calibration.ingest.formats import FORMATS
from autopar.calibration.store.run_store import RunStore
from autopar.cli.app import app, command, console, emit_json, err_console, styled, warning_text
from autopar.errors import DataError, SpecError
from autopar.files import check_target, write_atomic
from autopar.text import csv_cell, json_text

if TYPE_CHECKING:
    from autopar.calibration.records.checks import RowError

calibrate_app = typer.Typer(
    help="Learn from measured runs: ingest logs/tables into a store, fit and evaluate the corrector.",
    no_args_is_help=True,
)
app.add_typer(calibrate_app, name="calibrate")


def _command(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a `calibrate` subcommand behind the same error boundary as autopar's commands."""
    return command(*args, typer_app=calibrate_app, **kwargs)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="run store: a SQLite file, or postgresql://user:password@host:5432/db for a team's shared one "
        "(default $AUTOPAR_STORE, else $AUTOPAR_HOME/runs.db, else ~/.autopar/runs.db)",
    ),
]


def _error_table(path: Path, errors: list[RowError], title: str) -> Table:
    """A per-row report: row number, field, value, reason."""
    t = Table(title=f"{title}: {path}", title_justify="left")
    for col in ("row", "field", "value", "reason"):
        t.add_column(col, overflow="fold")
    for e in errors:
        t.add_row(str(e.row), e.field, "" if e.value is None else repr(e.value), e.reason)
    return t


IngestGroupOpt = Annotated[
    str | None,
    typer.Option(
        "--group",
        help="your cluster's name: the source of runs without one, so that `calibrate fit --group NAME` "
        "adapts to them as one cluster (default for logs: the sidecar's cluster, else the log format)",
    ),
]


@_command("ingest")
def ingest_cmd(
    files: Annotated[list[Path], typer.Argument(help="CSV/JSONL/Parquet run records, or training logs")],
    store: StoreOpt = None,
    skip_invalid: Annotated[
        bool,
        typer.Option(
            "--skip-invalid",
            help="ingest the valid rows, report the rest (default: a file with a bad row is rejected whole)",
        ),
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="|".join(FORMATS))] = "auto",
    source: Annotated[
        str | None,
        typer.Option(help="source label for rows without one (default: file name; for logs the format)"),
    ] = None,
    group: IngestGroupOpt = None,
    warmup: Annotated[
        int | None, typer.Option(help="logged steps to skip at the start of a log (default 10%, at least 1)")
    ] = None,
    sidecar: Annotated[Path | None, typer.Option(help="YAML with the run's config (for logs)")] = None,
    model: Annotated[str | None, typer.Option(help="catalog model name (for logs)")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU name (for logs)")] = None,
    gpus: Annotated[int | None, typer.Option(help="number of GPUs (for logs)")] = None,
    gpus_per_node: Annotated[int | None, typer.Option()] = None,
    tp: Annotated[int | None, typer.Option()] = None,
    pp: Annotated[int | None, typer.Option()] = None,
    cp: Annotated[int | None, typer.Option()] = None,
    ep: Annotated[int | None, typer.Option()] = None,
    dp: Annotated[int | None, typer.Option()] = None,
    vpp: Annotated[int | None, typer.Option()] = None,
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp")] = None,
    micro_batch: Annotated[int | None, typer.Option()] = None,
    global_batch: Annotated[int | None, typer.Option()] = None,
    seq_len: Annotated[int | None, typer.Option()] = None,
    precision: Annotated[str | None, typer.Option(help="bf16|fp16|fp8|fp32")] = None,
    recompute: Annotated[str | None, typer.Option(help="none|selective|full")] = None,
    zero: Annotated[int | None, typer.Option(help="0-3")] = None,
    framework: Annotated[str | None, typer.Option()] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate run records or training logs and add them to the run store (idempotent)."""
    sp_flag = None if sp is None else int(sp)
    axes = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": dp, "vpp": vpp, "sp": sp_flag}
    run = {"micro_batch": micro_batch, "global_batch": global_batch, "seq_len": seq_len, "zero": zero}
    what = {"model": model, "gpu": gpu, "num_gpus": gpus, "gpus_per_node": gpus_per_node}
    how = {"precision": precision, "recompute": recompute, "framework": framework}
    config = _ingest_config(sidecar, {**what, **axes, **run, **how})
    if source is not None and group is not None and source != group:
        raise SpecError(
            f"--source {source!r} and --group {group!r}: give one (the source of runs without one)"
        )
    report = _run_ingest(
        files, store, config, fmt=fmt, skip_invalid=skip_invalid, warmup=warmup, source=source or group
    )
    if as_json:
        emit_json(_ingest_json(report))
        return
    _print_ingest(report, "--group" if group is not None else "--source")


def _run_ingest(files: list[Path], store: str | None, config: dict[str, Any], **opts: Any) -> Any:
    """Ingest into the store; a file rejected whole prints its invalid rows before the error."""
    from autopar.calibration.ingest.ingest import InvalidRowsError, ingest

    try:
        return ingest(files, RunStore(store), config=config or None, **opts)
    except InvalidRowsError as e:
        for c in e.checks:
            if c.errors:
                err_console.print(_error_table(c.path, c.errors, "invalid rows"))
        raise


def _ingest_config(sidecar: Path | None, flags: dict[str, Any]) -> dict[str, Any]:
    """A log's run config: the sidecar YAML's, overridden by the command-line flags that are set."""
    from autopar.calibration.ingest.log_files import load_sidecar, normalize_config

    config = load_sidecar(sidecar) if sidecar else {}
    config.update(normalize_config(flags))
    return config


def _print_ingest(report: Any, given_by: str) -> None:
    """`calibrate ingest`'s summary table (and each file's skipped rows), the source each file's runs got
    (`given_by`: the option that named it), far-off warnings and the counts line."""
    from autopar.calibration.ingest.log_files import GIVEN_SOURCE

    summary = Table(title="ingest", title_justify="left")
    for col in ("file", "format", "rows", "valid", "invalid"):
        summary.add_column(col, justify="left" if col in ("file", "format") else "right")
    for c in report.checks:
        summary.add_row(str(c.path), c.fmt, str(c.rows_read), str(len(c.records)), str(len(c.bad_rows)))
        if c.errors:
            err_console.print(_error_table(c.path, c.errors, "skipped invalid rows"))
    console.print(summary)
    for c in report.checks:
        if c.default_source:
            how = given_by if c.source_how == GIVEN_SOURCE else c.source_how
            console.print(f"{c.path.name}: source '{c.default_source}' ({how})", highlight=False)
    for line in report.warnings:
        err_console.print(warning_text(f"warning: {line}"))
    console.print(
        f"added {report.added} new record(s) ({report.duplicates} already stored, "
        f"{report.skipped} invalid row(s) skipped) to {report.store_path}"
    )


def _errors_json(errors: list[RowError]) -> list[dict[str, Any]]:
    return [{"row": e.row, "field": e.field, "value": e.value, "reason": e.reason} for e in errors]


def _ingest_json(report: Any) -> dict[str, Any]:
    """`calibrate ingest --json`: store, counts and per-file checks (invalid rows with reasons)."""
    files = [
        {
            "file": str(c.path),
            "format": c.fmt,
            "rows": c.rows_read,
            "valid": len(c.records),
            "invalid": len(c.bad_rows),
            "errors": _errors_json(c.errors),
            "default_source": c.default_source or None,
            "default_source_from": c.source_how or None,
        }
        for c in report.checks
    ]
    return {
        "store": report.store_path,
        "added": report.added,
        "duplicates": report.duplicates,
        "skipped": report.skipped,
        "files": files,
        "warnings": report.warnings,
    }


def _fmt(v: Any, digits: int = 0) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


@_command("remove")
def remove_cmd(
    ids: Annotated[list[str], typer.Argument(help="run ids or fingerprints (autopar calibrate list)")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete stored runs (all named, or none: one unknown id removes nothing)."""
    removed = RunStore(store).remove(ids)
    if as_json:
        emit_json({"store": RunStore(store).location, "removed": removed})
    else:
        console.print(f"removed {len(removed)} run(s) from {RunStore(store).location}: {', '.join(removed)}")


@_command("list")
def list_cmd(
    store: StoreOpt = None,
    implausible: Annotated[
        bool,
        typer.Option(
            "--implausible",
            help="only the runs today's ingest would refuse (implied MFU over 100%, 10x off the model, "
            "non-finite), with the reason; `calibrate remove` deletes them",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show the runs in the store (tokens/s per GPU marked * when derived from step time or TFLOP/s)."""
    from autopar.calibration.records.checks import stored_record_problem
    from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu

    runs = RunStore(store).runs()
    problems = {r.fingerprint: stored_record_problem(r.record) for r in runs} if implausible else {}
    if implausible:
        runs = [r for r in runs if problems[r.fingerprint]]
    if as_json:  # one document, also when the store is empty
        rows = [{**r.record, "_file": r.file, "_fingerprint": r.fingerprint} for r in runs]
        for row, r in zip(rows, runs, strict=True):
            if implausible:
                row["_problem"] = problems[r.fingerprint]
        emit_json({"store": RunStore(store).location, "count": len(rows), "runs": rows})
        return
    if implausible:
        for r in runs:
            console.print(f"{r.record.get('id')}: {problems[r.fingerprint]}", markup=False, highlight=False)
        console.print(f"{len(runs)} implausible run(s); autopar calibrate remove ID ... deletes them")
        return
    t = Table(title=f"{len(runs)} run(s) in {RunStore(store).location}", title_justify="left")
    for c in ("id", "source", "model", "GPUs", "layout", "batch", "prec", "tok/s/GPU", "step s", "GiB"):
        t.add_column(
            c,
            no_wrap=c in ("id", "tok/s/GPU"),
            justify="right" if c in ("tok/s/GPU", "step s", "GiB") else "left",
        )
    for r in runs:
        d = r.record
        tps, how = measured_tokens_per_s_per_gpu(d)
        layout = " ".join(f"{k}{d[k]}" for k in ("tp", "pp", "cp", "ep", "dp") if d.get(k) not in (None, ""))
        if d.get("micro_batch"):
            layout += f" mb{d['micro_batch']}"
        t.add_row(
            str(d.get("id")),
            r.source,
            _fmt(d.get("model")),
            f"{d.get('gpu')}x{d.get('num_gpus')}",
            layout,
            f"{d.get('global_batch')}x{d.get('seq_len')}",
            _fmt(d.get("precision")),
            "" if tps is None else f"{tps:,.0f}" + ("" if how == "measured" else "*"),
            _fmt(d.get("measured_step_s"), 3),
            _fmt(d.get("measured_mem_gb_per_gpu"), 1),
        )
    console.print(t)


def export_text(records: list[dict[str, Any]], fmt: str) -> str:
    """Records as CSV (schema columns first, then extras; header row) or JSON lines."""
    from autopar.calibration.records.columns import RECORD_COLUMNS

    if fmt == "jsonl":
        return "".join(json_text(r) + "\n" for r in records)
    extras = sorted({k for r in records for k in r} - set(RECORD_COLUMNS))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    fields = [*RECORD_COLUMNS, *extras]
    w.writerow([csv_cell(f) for f in fields])
    for r in records:
        w.writerow([csv_cell("" if r.get(f) is None else r[f]) for f in fields])
    return buf.getvalue()


@_command("export")
def export_cmd(
    store: StoreOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="csv|jsonl")] = "csv",
    out: Annotated[Path | None, typer.Option("--out", help="file to write (default: stdout)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Dump the store, one record per row (CSV with header) or per line (JSONL); re-ingestable.

    With --json: the records as one JSON document, or with --out a summary of what was written."""
    if fmt not in ("csv", "jsonl"):
        raise DataError(f"--format={fmt} is not an export format (allowed: csv, jsonl)")
    records = RunStore(store).records()
    if out is None:
        if as_json:
            emit_json({"store": RunStore(store).location, "count": len(records), "records": records})
        else:
            sys.stdout.write(export_text(records, fmt))
        return
    write_atomic(out, export_text(records, fmt))
    if as_json:
        emit_json({"store": RunStore(store).location, "count": len(records), "format": fmt, "out": str(out)})
    else:
        console.print(f"wrote {out}")


@_command("upgrade")
def upgrade_cmd(
    file: Annotated[
        Path, typer.Argument(help="run-record CSV written before the stack-knob columns (issue 44)")
    ],
    out: Annotated[Path, typer.Option("--out", help="CSV to write (may be FILE itself)")],
    as_json: JsonOpt = False,
) -> None:
    """Move the stack knobs an older record file states only in its notes (stage=last, dropout 0.1,
    --untie-embeddings-and-output-weights, pp_schedule=..., attention unfused, the allocator statistic) into
    their columns; a filled column is never touched, so running it twice changes nothing."""
    from autopar.calibration.ingest.tables import read_run_records
    from autopar.calibration.records.legacy_notes import upgrade

    if file.suffix.lower() != ".csv" or out.suffix.lower() != ".csv":
        raise DataError(f"calibrate upgrade reads and writes CSV; got {file.name} -> {out.name}")
    table, filled = upgrade(read_run_records(file).fillna(""))
    write_atomic(out, table.to_csv(index=False))
    if as_json:
        emit_json({"file": str(file), "out": str(out), "rows": len(table), "cells_filled": filled})
    else:
        console.print(
            f"wrote {out}: {len(table)} rows, {filled} cells moved from the notes into their columns"
        )


# ------------------------------------------------------------------------------------ fit, report
PublicOpt = Annotated[
    bool, typer.Option("--public/--no-public", help="include the published runs shipped with autopar")
]
DataOpt = Annotated[
    list[Path] | None,
    typer.Option("--data", help="extra run-record file(s) (CSV/JSONL/Parquet), validated like ingest"),
]


def _usable_stored(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored records that today's ingest would accept; the others (stored by an older autopar: infinite
    or implausible measurements) are skipped with a note on stderr, so old stores never break fit/report."""
    from autopar.calibration.records.checks import stored_record_problem

    usable, skipped = [], []
    for rec in records:
        why = stored_record_problem(rec)
        if why:
            skipped.append(f"{rec.get('id') or '?'}: {why}")
        else:
            usable.append(rec)
    if skipped:
        err_console.print(
            f"note: skipped {len(skipped)} stored run(s) that ingest now refuses: "
            + "; ".join(skipped[:3])
            + (" ..." if len(skipped) > 3 else ""),
            markup=False,
            highlight=False,
        )
    return usable


def _without_smoke(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out CPU smoke records (autopar dryrun on CPU: not GPU measurements), with a note on stderr."""
    from autopar.calibration.records.checks import learnable

    kept, smoke = learnable(records)
    if smoke:
        err_console.print(
            f"note: left out {smoke} CPU smoke record(s) (autopar dryrun on CPU; not GPU measurements)",
            markup=False,
            highlight=False,
        )
    return kept


def gather_records(store: str | None, public: bool, data: list[Path] | None) -> list[dict[str, Any]]:
    """Training records: the store's, the published runs and extra files, deduplicated by fingerprint."""
    return training_records(store, public, data)[0]


@functools.lru_cache(maxsize=1)
def _published_records() -> tuple[dict[str, Any], ...]:
    """The published runs shipped with autopar, validated like ingest (once per process)."""
    from autopar.calibration.ingest.ingest import check_file
    from autopar.data import published_runs_path

    return tuple(check_file(published_runs_path()).records)


def training_records(
    store: str | None, public: bool, data: list[Path] | None
) -> tuple[list[dict[str, Any]], set[str]]:
    """gather_records' records, and the ids of those that are your runs: stored, and not one of the
    published runs the default calibration was fitted on."""
    from autopar.calibration.ingest.ingest import InvalidRowsError, check_file
    from autopar.calibration.records.record import fingerprint

    if store is not None and not (given := RunStore(store)).exists():
        raise DataError(
            f"no run store at '{given.location}': ingest runs first (autopar calibrate ingest FILE)"
        )
    stored = _without_smoke(_usable_stored(RunStore(store).records()))  # [] when the default store is absent
    published = {fingerprint(r) for r in _published_records()}
    records = list(stored)
    if public:
        records.extend(_published_records())
    for f in data or []:
        chk = check_file(f)
        if chk.errors:
            raise InvalidRowsError([chk])
        records.extend(_without_smoke(chk.records))
    seen: set[str] = set()
    unique = []
    for r in records:
        fp = fingerprint(r)
        if fp not in seen:
            seen.add(fp)
            unique.append(r)
    if not unique:
        raise DataError("no runs to learn from: ingest some (autopar calibrate ingest FILE) or use --public")
    own = {str(r.get("id") or "") for r in stored if fingerprint(r) not in published}
    return unique, own


# Title note of an error table whose corrected columns equal the analytical ones on every group: with shrink 0
# (no global correction passed the no-worse gate) a source left out gets no offset of its own, so its held-out
# prediction is the analytical one by construction, not by a bug in the "before" figure.
SAME_AS_ANALYTICAL = (
    "analytical = corrected on every left-out source: no global correction passed the no-worse gate, "
    "and a cluster's own offset moves only its own predictions"
)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _rho(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f}"


def _same_as_analytical(rows: list[dict[str, Any]]) -> bool:
    """Whether every group's corrected figures equal its analytical ones (to the digits shown)."""
    pairs = [("median_ape_before", "median_ape_after"), ("mean_ape_before", "mean_ape_after")]
    return all(
        _pct(r[b]) == _pct(r[a]) and _rho(r["spearman_before"]) == _rho(r["spearman_after"])
        for r in rows
        for b, a in pairs
    )


def _loso_table(df: Any, by: str, title: str | None = None) -> Table:
    """Rich table of an error_table: analytical -> corrected per metric, one row per group plus 'all';
    a single figure per metric, and a title that says why, when the two are the same on every group."""
    rows = df.to_dict("records")
    same = _same_as_analytical(rows)
    head = title or ("leave-one-source-out" + ("" if by == "source" else " by GPU family"))
    t = Table(
        title=f"{head} ({SAME_AS_ANALYTICAL})" if same else f"{head}: analytical → corrected",
        title_justify="left",
    )
    for c in (by, "n", "median APE", "mean APE", "Spearman", "in 80% band", "band width"):
        t.add_column(c, justify="left" if c == by else "right", no_wrap=True)

    def pair(before: str, after: str) -> str:
        return before if same else f"{before} → {after}"

    for r in rows:
        t.add_row(
            str(r[by]),
            str(r["n"]),
            pair(_pct(r["median_ape_before"]), _pct(r["median_ape_after"])),
            pair(_pct(r["mean_ape_before"]), _pct(r["mean_ape_after"])),
            pair(_rho(r["spearman_before"]), _rho(r["spearman_after"])),
            _pct(r["band_coverage"]),
            _pct(r["band_width"]),
            style="bold" if r[by] == "all" else None,
        )
    return t


GroupOpt = Annotated[
    str | None,
    typer.Option(
        "--group",
        help="your cluster: the `cluster` id (else source) of your ingested runs; its learned offset then "
        "applies to every prediction made with this model (default: the store's group when it has one)",
    ),
]


def _default_group(store: str | None, groups: set[str]) -> str | None:
    """The store's single group (a team's own cluster), if its runs all share one."""
    from autopar.calibration.models.features import group_of
    from autopar.calibration.records.checks import learnable

    mine = {group_of(r) for r in learnable(RunStore(store).records())[0]}
    return next(iter(mine)) if len(mine) == 1 and mine <= groups else None


def _memory_held_out(mem_ts: Any) -> Any:
    """Held-out peak-memory errors, when enough runs report memory (else None)."""
    from autopar.calibration.apply.fit import MIN_MEMORY_RUNS
    from autopar.calibration.evaluation.validation import held_out, select_params

    if len(mem_ts) < MIN_MEMORY_RUNS:
        return None
    mch = select_params(mem_ts.X, mem_ts.y, mem_ts.groups)
    return held_out(mem_ts, mch.alpha, mch.shrink, mch.folds)


def _store_curve(store: str | None, ts: Any, ch: Any) -> tuple[str, list[dict[str, float]]] | None:
    """The learning curve of the store's own cluster (its single group), if it has one."""
    from autopar.calibration.models.corrector import ThroughputCorrector
    from autopar.calibration.models.features import FEATURE_NAMES
    from autopar.calibration.models.hierarchy import (
        MIN_CLUSTERS,
        adapter_clusters,
        group_curve,
        slope_columns,
    )

    grp = _default_group(store, set(ts.groups))
    if grp is None or len(set(ts.groups) - {grp}) < MIN_CLUSTERS:
        return None
    m = ThroughputCorrector(alpha=ch.alpha, shrink=ch.shrink, prior_scale=ch.prior_scale)
    m.fit(ts.X, ts.y, groups=ts.groups)
    keys = adapter_clusters(ts.groups, ts.gpus, grp)
    return grp, group_curve(m, ts.X, ts.y, keys, ts.sources, grp, slope_columns(FEATURE_NAMES))


def _write_html(
    out: Path, res: Any, desc: str, plotlyjs: str, memory: Any, curve: Any, reason: str, learning: Any
) -> None:
    """The report page (reports/calibration_html.py), the learning curve of the store's cluster in it."""
    import pandas as pd

    from autopar.reports.calibration_html import write_report

    lc = None if learning is None else (learning[0], pd.DataFrame(learning[1]))
    write_report(
        res,
        out,
        description=desc,
        plotlyjs=plotlyjs,
        memory=memory,
        adaptation=curve,
        choice=reason,
        learning=lc,
    )


def _print_report(res: Any, curve: Any, memory: Any, reason: str) -> None:
    """`calibrate report`'s tables: per source, per family, adaptation lines, memory, the choice."""
    from autopar.calibration.evaluation.validation import adaptation_summary, error_table

    console.print(_loso_table(error_table(res, "source"), "source"))
    console.print(_loso_table(error_table(res, "family"), "family"))
    summary = adaptation_summary(curve)
    for r in summary.to_dict("records"):
        console.print(
            f"adaptation k={r['k']}: median APE {100 * r['median_ape_before']:.1f}% -> "
            f"{100 * r['median_ape_after']:.1f}% on the remaining runs ({r['groups']} sources), "
            f"band covers {100 * r['band_coverage']:.0f}%",
            highlight=False,
        )
    if memory is not None:
        console.print(
            _loso_table(
                error_table(memory, "source"),
                "source",
                title=f"peak memory, {memory.scheme} ({len(memory.ts)} runs)",
            )
        )
    console.print(reason, highlight=False)


def _adapt(cal: Any, ts: Any, group: str) -> list[dict[str, float]]:
    """Replace the model's group offsets by the hierarchical adapter (per-cluster posteriors) and return
    `group`'s learning curve (its runs ingested -> error on its other runs); with fewer than MIN_CLUSTERS
    other clusters to learn the priors from, the model keeps its shrunken offsets and there is no curve."""
    from autopar.calibration.models.features import FEATURE_NAMES
    from autopar.calibration.models.hierarchy import (
        MIN_CLUSTERS,
        adapt_corrector,
        adapter_clusters,
        group_curve,
        slope_columns,
    )

    if len(set(ts.groups) - {group}) < MIN_CLUSTERS:  # no between-cluster prior: keep the offsets
        return []
    idx, keys = slope_columns(FEATURE_NAMES), adapter_clusters(ts.groups, ts.gpus, group)
    curve = group_curve(cal.corrector, ts.X, ts.y, keys, ts.sources, group, idx)
    cal.corrector = adapt_corrector(cal.corrector, ts.X, ts.y, keys, ts.sources, idx, ts.groups)
    return curve


def _curve_table(curve: list[dict[str, float]], group: str) -> Table:
    """Rich table of a cluster's learning curve (hierarchy.learning_curve rows)."""
    t = Table(
        title=f"learning curve of '{group}': n of its runs ingested, median APE on its other runs",
        title_justify="left",
    )
    for c in ("runs ingested", "held out", "no adaptation", "offsets", "adapter", "in 80% band"):
        t.add_column(c, justify="right", no_wrap=True)
    for r in curve:
        t.add_row(
            str(r["n"]),
            str(r["held_out"]),
            *(f"{100 * r[k]:.1f}%" for k in ("ape_global", "ape_offsets", "ape_adapter", "coverage")),
        )
    return t


ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="replace an existing --out even when the new model predicts your held-out runs worse than the "
        "default calibration (a new file is written with a warning)",
    ),
]


@_command("fit")
def fit_cmd(
    out: Annotated[Path, typer.Option("--out", help="where to save the model (JSON)")],
    store: StoreOpt = None,
    public: PublicOpt = True,
    data: DataOpt = None,
    group: GroupOpt = None,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the correctors on stored (and published) runs, validated by source; save them as JSON.
    With a group (yours): per-cluster offset and slopes (calibration.hierarchy) and its learning curve.
    Says first, in plain words, what the fit does for your runs against the default calibration; a model
    that predicts your held-out runs worse than the default is written with a warning, and never replaces
    an existing --out (a model that may be in use) unless --force."""
    from autopar.calibration.apply import fit_training_set
    from autopar.calibration.models.features import build_training_set

    if out.suffix.lower() in (".joblib", ".pkl", ".pickle"):
        raise DataError(f"--out {out}: models are saved as JSON (use a .json name), never pickle")
    replaces = check_target(out) is not None  # before fitting; an existing model may be in use
    records, own = training_records(store, public, data)
    ts, mem = build_training_set(records), build_training_set(records, "memory")
    grp, how, ts, mem = _fit_group(group, store, ts, mem, own, records)
    cal = fit_training_set(ts, name=out.stem, memory_ts=mem, group=grp, records=records)
    curve = _adapt(cal, ts, grp) if grp is not None else []
    summary = _fit_summary(cal, ts, own, how, records)
    if summary.worse and replaces and not force:  # a worse model never silently replaces one in use
        if not as_json:
            _print_summary(summary)
        raise DataError(f"{out} not replaced: {summary.held_out_line()}; --force replaces it anyway")
    cal.save(out)
    if as_json:
        emit_json(
            {
                "out": str(out),
                "name": cal.meta.name,
                "description": cal.describe(),
                "summary": summary.to_json(),
                "choice": dict(cal.meta.choice),
                "leave_one_source_out": list(cal.meta.loso or []),
                "memory_cv": list(cal.meta.memory_cv or []),
                "learning_curve": curve,
                "skipped": [{"run": i, "reason": why} for i, why in ts.skipped],
            }
        )
        return
    _print_summary(summary)
    if summary.worse:
        err_console.print(warning_text(f"warning: {summary.held_out_line()}: worse than the default"))
    _print_fit(cal, ts, out, curve)


def _fit_group(
    group: str | None, store: str | None, ts: Any, mem: Any, own: set[str], records: list[dict[str, Any]]
) -> tuple[str | None, str, Any, Any]:
    """The cluster the fit adapts to, why, and the training sets (regrouped when --group names none of the
    runs' groups: your runs without a `cluster` cell are then that one cluster)."""
    from autopar.calibration.evaluation.fit_summary import group_names

    mine = sorted({g for i, g in zip(ts.ids, ts.groups, strict=True) if i in own})
    if group is not None and (group in ts.groups or not mine):
        return group, "given by --group", ts, mem
    if group is not None:
        free = {str(r.get("id")) for r in records if str(r.get("id")) in own and not r.get("cluster")}
        how = (
            f"--group names none of the runs' groups: your runs ({group_names(mine)}) fitted as this cluster"
        )
        return group, how, _regrouped(ts, free, group), _regrouped(mem, free, group)
    default = _default_group(store, set(ts.groups))
    if default is not None:
        return default, "the one group of your stored runs", ts, mem
    if len(mine) > 1:
        how = (
            f"no --group: your runs are in {len(mine)} groups ({group_names(mine)}); they refit the band and "
            "memory margin for every cluster and no prediction gets their offset: --group NAME fits them as "
            "your one cluster NAME"
        )
        return None, how, ts, mem
    return None, "no --group", ts, mem


def _regrouped(ts: Any, ids: set[str], group: str) -> Any:
    """A training set whose runs `ids` are in `group`."""
    import dataclasses

    return dataclasses.replace(
        ts, groups=[group if i in ids else g for i, g in zip(ts.ids, ts.groups, strict=True)]
    )


def _fit_summary(cal: Any, ts: Any, own: set[str], how: str, records: list[dict[str, Any]]) -> Any:
    """The fit's FitSummary against the default calibration, with the memory margins of your runs' stacks."""
    from autopar.calibration.apply import load_default_calibration
    from autopar.calibration.evaluation.fit_summary import own_mask, summarize

    default = load_default_calibration()
    gpus = {str(r.get("id")): r.get("num_gpus") for r in records}
    summary = summarize(cal, default, ts, own, how, gpus)
    stacks = sorted({s for s, o in zip(ts.stacks, own_mask(ts, own), strict=True) if o})
    summary.margins = [_margin_change(default, cal, s) for s in stacks]
    return summary


def _margin_text(m: Any) -> str:
    """A memory margin in a few characters: the band's factor, else the fixed GiB."""
    return f"x{m.factor:.2f}" if m.coverage else f"+{m.extra_gib:g} GiB"


def _margin_change(default: Any, cal: Any, stack: str) -> Any:
    """The memory margin a search uses on `stack`, with the default calibration and with `cal`, and why it
    changed (search/margin.py band_margin)."""
    from autopar.calibration.evaluation.fit_summary import MarginChange
    from autopar.search.margin import band_margin

    before, after = band_margin(default, 0.0, stack), band_margin(cal, 0.0, stack)
    if before.coverage and after.coverage:
        why = "the memory band was refitted with your runs' measured peaks"
    elif after.coverage:
        why = f"your runs measured peaks on {stack}, a stack the default memory band was not fitted on"
    else:
        why = f"no run this fit learned from measured a peak on {stack}"
    return MarginChange(stack, _margin_text(before), _margin_text(after), why)


def _print_summary(summary: Any) -> None:
    """The fit's plain-words summary (before its tables), and a warning line per far-off run."""
    console.print("fit summary:", highlight=False)
    for line in summary.lines():
        console.print(f"- {line}", highlight=False)
    for line in summary.far_off:
        err_console.print(warning_text(f"warning: {line}"))


def _print_fit(cal: Any, ts: Any, out: Path, curve: list[dict[str, float]]) -> None:
    """`calibrate fit`'s tables: skipped runs, leave-one-source-out, memory, learning curve, choice."""
    import pandas as pd

    if ts.skipped:
        console.print(
            styled(
                (f"{len(ts.skipped)} run(s) not usable:", "yellow"),
                " " + "; ".join(f"{i}: {why}" for i, why in ts.skipped[:5]),
            )
        )
    if cal.meta.loso:
        console.print(_loso_table(pd.DataFrame(cal.meta.loso), "source"))
    if cal.meta.memory_cv:
        console.print(
            _loso_table(
                pd.DataFrame(cal.meta.memory_cv),
                "source",
                title=f"peak memory, {cal.meta.memory_scheme} ({cal.meta.memory_n_train} runs)",
            )
        )
    if curve:
        console.print(_curve_table(curve, str(cal.meta.group)))
    console.print(f"throughput: {cal.meta.choice['reason']}", highlight=False)
    if cal.meta.memory_choice:
        console.print(f"memory: {cal.meta.memory_choice['reason']}", highlight=False)
    console.print(f"saved {out}: {cal.describe()}", highlight=False)


@_command("report")
def report_cmd(
    out: Annotated[Path, typer.Option("--out", help="HTML file to write")] = Path("reports/calibration.html"),
    store: StoreOpt = None,
    public: PublicOpt = True,
    data: DataOpt = None,
    plotlyjs: Annotated[str, typer.Option(help="inline (offline page) or cdn")] = "inline",
    as_json: JsonOpt = False,
) -> None:
    """Leave-one-source-out errors, band coverage and the adaptation curve, as tables + HTML."""
    from autopar.calibration.evaluation.validation import (
        adaptation,
        adaptation_summary,
        error_table,
        held_out,
        select_params,
    )
    from autopar.calibration.models.features import build_training_set

    if plotlyjs not in ("inline", "cdn"):
        raise DataError(f"--plotlyjs={plotlyjs} (allowed: inline, cdn)")
    check_target(out)  # before the held-out fits
    records = gather_records(store, public, data)
    ts = build_training_set(records)
    sources = sorted(set(ts.groups))
    if len(sources) < 2:
        raise DataError(
            f"leave-one-source-out needs runs from at least 2 sources; have {sources or 'none'} "
            "(add --public or ingest runs from another source)"
        )
    ch = select_params(ts.X, ts.y, ts.groups)
    res = held_out(ts, ch.alpha, ch.shrink, ch.folds)
    curve = adaptation(ts, ch.alpha, ch.shrink, ch.prior_scale, folds=ch.folds)
    memory = _memory_held_out(build_training_set(records, "memory"))
    learning = _store_curve(store, ts, ch)
    desc = f"{len(ts)} runs from {len(sources)} sources ({', '.join(sources)})" + (
        f"; {len(ts.skipped)} runs skipped" if ts.skipped else ""
    )
    _write_html(out, res, desc, plotlyjs, memory, curve, ch.reason, learning)
    if as_json:
        emit_json(
            {
                "out": str(out),
                "description": desc,
                "choice": ch.reason,
                "by_source": error_table(res, "source").to_dict("records"),
                "by_family": error_table(res, "family").to_dict("records"),
                "memory": None if memory is None else error_table(memory, "source").to_dict("records"),
                "adaptation": adaptation_summary(curve).to_dict("records"),
                "learning_curve": None if learning is None else {"group": learning[0], "curve": learning[1]},
            }
        )
        return
    _print_report(res, curve, memory, ch.reason)
    if learning is not None:
        console.print(_curve_table(learning[1], learning[0]))
    console.print(f"wrote {out}")


from autopar.cli.calibrate_plan import plan_cmd  # noqa: E402

_command("plan")(plan_cmd)
