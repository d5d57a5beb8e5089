"""CLI command `autopar compare`: strategies given by their labels, estimated on one problem, side by side;
with several GPUs (`--gpu H100-SXM,B200`, or `--gpu` repeated) every label on every GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autopar.calibration.evaluation.assumptions import assumption_lines
from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.common import check_plotly, resolve_calibration
from autopar.cli.evaluation import evaluate, label_strategy, on_demand_price
from autopar.cli.options import CALIBRATION, SINGLE, Flags, opt, single_problem, with_options
from autopar.errors import AutoparError, SpecError
from autopar.reports.comparison import SPLIT_INDENT, ComparisonInfo, Entry, comparison_info

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


def _table_across(info: ComparisonInfo) -> Table:
    """Several GPUs: one row per label on a GPU and one column per headline figure (the step-time split is
    left to --json and --out), so the table stays readable however many columns the comparison has."""
    heads = [r for r in info.rows if not r.name.startswith(SPLIT_INDENT)]
    table = Table(
        "GPU: label", *(r.name for r in heads), "memory verdict", title=info.title, title_justify="left"
    )
    table.columns[0].no_wrap = True
    for c in table.columns[1:-1]:
        c.justify = "right"
    for i, name in enumerate(info.labels):
        cells = [styled((r.cells[i] + BEST_MARK, "bold green")) if i in r.best else r.cells[i] for r in heads]
        table.add_row(name, *cells, info.verdicts[i])
    return table


_GPU = opt(
    "gpu",
    Annotated[
        list[str] | None,
        typer.Option(
            "--gpu",
            metavar="GPU[,GPU...]",
            help="GPU type (see `autopar gpus`) or a YAML/JSON GPU file; a comma list (H100-SXM,B200) or the "
            "option repeated estimates every label on every GPU, side by side.",
        ),
    ],
    None,
)
_COMPARE = (
    opt(
        "labels",
        Annotated[
            list[str],
            typer.Argument(help="Strategy labels as optimize prints them, e.g. 'TP4+SP PP2v2 DP8/Z1 mb1'"),
        ],
    ),
    *(_GPU if key == "gpu:one" else key for key in SINGLE),
    "allow_uneven",
    "prices",
    *CALIBRATION,
    opt(
        "as_json",
        Annotated[bool, typer.Option("--json", help="Print JSON (one estimate object per label and GPU)")],
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


def parse_gpus(values: list[str] | None) -> list[str | None]:
    """The GPUs of `--gpu` (each a name, a GPU file or a comma list of them), in order, repeats dropped;
    [None] (the default GPU) when none is given."""
    gpus = [g.strip() for v in values or [] for g in v.split(",") if g.strip()]
    if values and not gpus:
        raise SpecError(f"gpu={values[0]!r}: name a GPU type (see `autopar gpus`), e.g. --gpu H100-SXM,B200")
    return list(dict.fromkeys(gpus)) or [None]


@command("compare")
@with_options(*_COMPARE)
def compare_cmd(f: Flags) -> None:
    """Estimate several strategies on one problem and show them side by side, the best of each row marked;
    with several GPUs, every label on every GPU."""
    check_plotly(f.plotly, f.out)
    gpus = parse_gpus(f.gpu)
    problems = [single_problem(f, gpu=g) for g in gpus]
    m = problems[0][0]
    strategies = []
    for i, label in enumerate(f.labels, 1):
        try:
            strategies.append(label_strategy(label, m.is_moe))
        except SpecError as e:
            raise SpecError(f"label {i} {label!r}: {e}") from None
    calib = resolve_calibration(f.calibration, f.no_calibration)
    entries = [
        _entry(problem, label, s, calib, f, several=len(gpus) > 1)
        for problem in problems
        for label, s in zip(f.labels, strategies, strict=True)
    ]
    _, cluster, workload = problems[0]
    names = ", ".join(p[1].gpu.name for p in problems)
    title = f"{m.name} on {cluster.num_gpus}x {names}, seq {workload.seq_len}, batch {workload.global_batch}"
    info = comparison_info(entries, title)
    said = {p[1].gpu.name: assumption_lines(p[1], p[2], calibrated=calib is not None) for p in problems}
    if f.as_json:
        emit_json([_doc(e, said, info, several=len(gpus) > 1) for e in entries], indent=2)
    else:
        _print(info, list(dict.fromkeys(line for lines in said.values() for line in lines)), len(gpus) > 1)
    if f.out is not None:
        path = _write_report(info, f.out, f.plotly)
        if not f.as_json:
            console.print(f"report: {path}", highlight=False)


def _entry(problem: tuple, label: str, strategy: Any, calib: Any, f: Flags, several: bool) -> Entry:
    """One label on one GPU's problem, estimated; a label whose layout is invalid on a GPU compared beside
    others is kept as a column that did not run (on the only GPU it is an error, as before)."""
    m, cluster, workload = problem
    name = f"{cluster.gpu.name}: {label}" if several else label
    try:
        price = on_demand_price(cluster, f.prices)
        return Entry(
            name, evaluate(m, cluster, workload, strategy, calib, strict=not f.allow_uneven, price=price)
        )
    except AutoparError as e:
        if not several:
            raise
        return Entry(name, None, str(e))


def _doc(e: Entry, said: dict[str, list[str]], info: ComparisonInfo, several: bool) -> dict[str, Any]:
    """One column's JSON: the `estimate --json` document (and its GPU's assumptions); with several GPUs also
    the objectives it is best on, or, for a label that cannot run on that GPU, why."""
    if e.ev is None:
        gpu, _, label = e.name.partition(": ")
        return {"label": label, "inputs": {"gpu": gpu}, "runs": False, "error": e.reason}
    doc = {**e.ev.doc(), "assumptions": said[e.ev.cluster.gpu.name]}
    if several:
        doc["best_on"] = [b.objective for b in info.answer if e.name in b.labels]
    return doc


def _print(info: ComparisonInfo, said: list[str], across: bool) -> None:
    for line in said:
        console.print(line, style="dim", highlight=False)
    console.print(_table_across(info) if across else _table(info))
    console.print(f"*: best in its {'column' if across else 'row'}; {info.price_note}", highlight=False)
    for line in info.not_run:
        console.print(styled((line, "yellow")), soft_wrap=True)
    console.print(info.calibration_note, highlight=False)


def _write_report(info: ComparisonInfo, out: Path, plotly: str) -> Path:
    """Write the HTML comparison (autopar.reports.compare_html, which needs plotly)."""
    try:
        from autopar.reports import write_compare_report
    except (ImportError, AttributeError) as e:
        raise AutoparError(f"out={out}: the HTML report writer is not available in this build") from e
    return write_compare_report(info, out, plotlyjs=plotly)
