"""CLI commands: `autopar whatif` (procurement what-ifs) and `autopar prices` (the price book)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from autopar.catalog.prices import TIER_HELP, PriceBook, normalize_tier
from autopar.cli.app import (
    NOTE_STYLE,
    WARNING_STYLE,
    command,
    console,
    emit_json,
    err_console,
    note_text,
    styled,
    warning_text,
)
from autopar.cli.common import check_plotly, resolve_calibration
from autopar.cli.options import (
    CALIBRATION,
    CLUSTER,
    STACK,
    Flags,
    OptionSpec,
    detect,
    opt,
    problem_of,
    with_options,
)
from autopar.costs.bands import BAND_NAME, duration_range, usd_range
from autopar.costs.figures import (
    format_duration,
    format_tokens,
    format_usd,
    parse_duration,
    parse_usd,
)
from autopar.defaults import DEFAULT_GLOBAL_BATCH, DEFAULT_SIZING_MAX_GPUS
from autopar.errors import AutoparError, SpecError

if TYPE_CHECKING:
    from autopar.costs.sizing import DeadlineResult
    from autopar.costs.whatif import WhatIfResult
    from autopar.costs.whatif_types import WhatIfSettings


def _fmt(x: float | None, spec: str, dash: str = "-") -> str:
    return dash if x is None else format(x, spec)


def _yes_no(x: bool | None) -> str | Text:
    return "-" if x is None else (styled(("yes", "green")) if x else styled(("no", "red")))


def _si(x: float | None) -> str:
    """Compact count: 540.6K, 1.23M."""
    if x is None:
        return "-"
    for suffix, mult in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= mult:
            return f"{x / mult:.4g}{suffix}"
    return f"{x:.4g}"


def render_whatif(result: WhatIfResult) -> None:
    """Print a what-if result as rich tables (evidence, options by rank, strategies, sensitivity, notes)."""
    console.print(_whatif_head(result))
    order = sorted(result.options, key=lambda o: (o.rank is None, o.rank or 0))
    _print_evidence([(o.label, o.evidence) for o in order])
    console.print(_options_table(result, order))
    for o in order:
        line = (
            styled(f"  {o.label:>16}  {o.strategy_label} ({o.precision}) at {o.price_label}")
            if o.feasible
            else styled(f"  {o.label:>16}  ", ("no fitting strategy", "red"), f": {o.reason}")
        )
        console.print(line, soft_wrap=True)
    _print_verify(order)
    console.print(result.message, style="bold", highlight=False)
    if result.sensitivity:
        _print_sensitivity(result)
    for n in result.notes:
        console.print(note_text(n), soft_wrap=True)
    n_options = len(result.options)
    console.print(
        f"{sum(o.n_trials for o in result.options)} trials over {n_options} option{'s' * (n_options != 1)} "
        f"in {format_duration(result.wall_s)} (seed {result.seed}, budget {result.search_budget} trials per "
        "option)",
        style="dim",
        highlight=False,
    )


def _whatif_head(result: WhatIfResult) -> Text:
    """The problem line: model, tokens, shape, tier, goodput, deadline and cap."""
    wl = result.workload
    head = (
        f", {format_tokens(result.token_budget)} tokens, seq {wl.seq_len}, "
        f"global batch {wl.global_batch}, {wl.precision}; tier {result.tier}; goodput {result.goodput:g}"
    )
    if result.goodput >= 1:
        head += " (no time lost to failures assumed; see --goodput)"
    if result.deadline_s is not None:
        head += f"; deadline {format_duration(result.deadline_s)}"
    if result.max_cost_usd is not None:
        head += f"; spending cap {format_usd(result.max_cost_usd)}"
    return styled((result.model.name, "bold"), head)


def _print_evidence(items: list[tuple[str, Any]]) -> None:
    """What the calibration measured near each option, before its figures (costs/evidence.py)."""
    from autopar.costs.evidence import evidence_lines

    lines = evidence_lines(items)
    if not lines:
        return
    console.print("Evidence behind the figures (measured runs in the calibration):", highlight=False)
    for line in lines:
        console.print(f"- {line}", highlight=False, soft_wrap=True)


def _print_verify(options: list) -> None:
    """A warning line per option whose chosen layout no published recipe would use (costs/recipe_style.py)."""
    for o in options:
        if o.verify:
            console.print(warning_text(f"{o.label}: {o.verify_text}"), soft_wrap=True)


def _banded_what(options: list) -> str:
    """'time, cost: centre (80% band); ' when any option has a band, else ''."""
    return f"time, cost: centre ({BAND_NAME}); " if any(o.band is not None for o in options) else ""


def _time_cell(o: Any) -> str:
    """'28.5 d (25–33)': time to train and its 80% band ('-' when not timed)."""
    if o.time_to_train_s is None:
        return "-"
    return duration_range(o.time_to_train_s, o.band.time_to_train_s if o.band is not None else None)


def _cost_cell(o: Any) -> str:
    """'$2.07M (1.8–2.4M)': total cost and its 80% band ('-' when not priced)."""
    if o.total_cost_usd is None:
        return "-"
    return usd_range(o.total_cost_usd, o.band.total_cost_usd if o.band is not None else None)


def _options_table(result: WhatIfResult, order: list) -> Table:
    """One row per hardware option, best first."""
    t = Table(
        title=f"Hardware options, best first ({_banded_what(result.options)}free = GiB free per GPU; ● = on the "
        "cost-vs-time Pareto front)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("#", "option", "tok/s", "MFU", "time", "cost", "$/Mtok", "free"):
        t.add_column(col, justify="left" if col == "option" else "right", no_wrap=True)
    if result.deadline_s is not None:
        t.add_column("in time", justify="center", no_wrap=True)
    if result.max_cost_usd is not None:
        t.add_column("≤ cap", justify="center", no_wrap=True)
    t.add_column("●", justify="center", no_wrap=True)
    for o in order:
        row: list[str | Text] = [
            str(o.rank) if o.rank else "-",
            o.label,
            _si(o.tokens_per_s),
            "-" if o.mfu is None else f"{100 * o.mfu:.1f}%",
            _time_cell(o),
            _cost_cell(o),
            _fmt(o.usd_per_mtoken, ".3f"),
            _fmt(o.headroom_gib, ".1f"),
        ]
        if result.deadline_s is not None:
            row.append(_yes_no(o.meets_deadline))
        if result.max_cost_usd is not None:
            row.append(_yes_no(o.within_cost_cap))
        row.append("●" if o.on_pareto else "")
        t.add_row(*row)
    return t


def _print_sensitivity(result: WhatIfResult) -> None:
    """Whether the winner changes under each scenario, and what halving the bandwidth did."""
    s = Table(
        title="Sensitivity: does the winner change?",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    from autopar.costs.sensitivity import winner_swing

    base = result.winner
    for col in (
        "scenario",
        "winner",
        "runner-up",
        "changes?",
        f"{base.label if base else 'winner'}: time, cost",
    ):
        s.add_column(col)
    for r in result.sensitivity:
        s.add_row(
            r.scenario,
            r.winner or "-",
            r.runner_up or "-",
            warning_text("yes") if r.winner_changed else "no",
            winner_swing(r, base) if base is not None else "-",
        )
    console.print(s)
    bw = [r for r in result.sensitivity if r.kind == "internode_bw"]
    if bw and bw[0].note:
        console.print(f"bandwidth halved: {bw[0].note}", style="dim", highlight=False, soft_wrap=True)


def _sizing_head(result: DeadlineResult) -> Text:
    wl = result.workload
    batch = (
        f"global batch {format_tokens(result.batch_tokens_per_gpu)} tokens per GPU"
        if result.batch_tokens_per_gpu
        else f"global batch {wl.global_batch}"
    )
    return styled(
        (result.model.name, "bold"),
        f", {format_tokens(result.token_budget)} tokens, seq {wl.seq_len}, {batch}, {wl.precision}; tier "
        f"{result.tier}; goodput {result.goodput:g}; deadline {format_duration(result.deadline_s)}",
    )


def render_sizing(result: DeadlineResult) -> None:
    """Print a --deadline sizing: per GPU type the fewest GPUs that meet it, time, cost (with their bands),
    $/Mtoken, strategy; the evidence first, the verdict and any layout to verify after."""
    console.print(_sizing_head(result))
    _print_evidence([(r.option or r.gpu, (r.answer or r.fastest or _NONE).evidence) for r in result.rows])
    t = Table(
        title=f"Fewest GPUs that train in {format_duration(result.deadline_s)} ({_banded_what(result.answers)}"
        "counts searched in increasing order)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("option", "min GPUs", "time", "cost", "$/Mtok", "$/GPU-h", "strategy"):
        t.add_column(col, justify="left" if col in ("option", "strategy") else "right")
    for r in result.rows:
        t.add_row(*_sizing_cells(r, r.answer, r.option or r.gpu))
        if r.recipe_style is not None:
            t.add_row(*_sizing_cells(r, r.recipe_style, "  ↳ recipe-style"), style=NOTE_STYLE)
    console.print(t)
    if result.message:
        console.print(result.message, style="bold", highlight=False)
    _print_verify(result.answers)
    for n in result.notes:
        console.print(note_text(n), soft_wrap=True)
    n_searched = sum(len(r.searched) for r in result.rows)
    n_more = sum(len(r.recipe_style_searched) for r in result.rows)
    more = f" (+{n_more} for recipe-style layouts)" if n_more else ""
    console.print(
        f"{n_searched} counts searched{more} in {format_duration(result.wall_s)} (seed {result.seed}, budget "
        f"{result.search_budget} trials per count)",
        style=NOTE_STYLE,
        highlight=False,
    )


class _NoOption(NamedTuple):
    evidence: Any = None


_NONE = _NoOption()


def _sizing_cells(r: Any, a: Any, name: str) -> list[str | Text]:
    """One sizing row: the count `a` answers with, its time and cost with their bands, prices, strategy
    (⚠: verify); `name` heads the row."""
    if a is None:
        return [name, styled(("cannot", "red")), "-", "-", "-", "-", r.reason]
    units = a.count // r.unit
    flag: tuple[str, str] = (" ⚠ verify", WARNING_STYLE) if a.verify else ("", "")
    return [
        name,
        f"{a.count} ({units} {r.unit_name}{'s' * (units != 1)})",
        _time_cell(a),
        _cost_cell(a),
        _fmt(a.usd_per_mtoken, ".3f"),
        f"{a.usd_per_gpu_hour:.2f}" + (f" ({a.price_borrowed_from}'s)" if a.price_borrowed_from else ""),
        styled(f"{a.strategy_label} ({a.precision})", flag),
    ]


def _report_writer(out: Path, name: str = "write_whatif_report"):
    """`autopar.reports.whatif_html.write_whatif_report` (or the sizing page's writer, write_sizing_report),
    checked before the search runs."""
    try:
        import autopar.reports.whatif_html as pages

        return getattr(pages, name)
    except (ImportError, AttributeError) as e:
        raise AutoparError(f"out={out}: the HTML what-if report is not available in this build") from e


class Hardware(NamedTuple):
    """A what-if's hardware options and the cluster shape every option shares (None: the GPU's own)."""

    options: list[str]
    gpus_per_node: int | None
    nvlink_domain: int | None
    internode_gbps: float | None
    transport: str | None


def _hardware_options(
    option: list[str] | None,
    cluster: str | None,
    gpus_per_node: int | None,
    nvlink_domain: int | None,
    internode_gbps: float | None,
    transport: str | None,
) -> Hardware:
    """--option GPU:COUNT (repeatable) or one --cluster NAME:COUNT shorthand, never both; a system
    shorthand's transport (e.g. AWS p5: efa) unless --transport says otherwise."""
    from autopar.problem import ClusterConfig, check_transport

    transport = check_transport(transport)
    if cluster is None:
        if not option:
            raise SpecError("give --option GPU:COUNT (repeatable) or --cluster NAME:COUNT")
        return Hardware(option, gpus_per_node, nvlink_domain, internode_gbps, transport)
    if option:
        raise SpecError(f"--cluster {cluster} already names the hardware; drop --option")
    given = ClusterConfig(
        system=cluster,
        gpus_per_node=gpus_per_node,
        nvlink_domain=nvlink_domain,
        internode_gbps=internode_gbps,
        transport=transport,
    )
    c = given.choice(detect)
    return Hardware([f"{c.gpu}:{c.gpus}"], c.gpus_per_node, c.nvlink_domain, c.internode_gbps, c.transport)


_WHATIF: tuple[OptionSpec, ...] = (
    opt(
        "tokens",
        Annotated[str, typer.Option("--tokens", "-t", help="Tokens to train: 2T, 500B, 1.5T, 300M, 10K.")],
    ),
    "model:short",
    opt(
        "option",
        Annotated[
            list[str] | None,
            typer.Option(
                "--option",
                "-o",
                help="Hardware option GPU:COUNT, repeatable; COUNT may be 256,512 or a doubling range 256..2048. "
                "With --deadline, a GPU without a count (H100-SXM) is sized: the fewest GPUs that meet it.",
            ),
        ],
        None,
    ),
    *("seq_len", "global_batch"),
    opt(
        "batch_tokens_per_gpu",
        Annotated[
            str | None,
            typer.Option(
                "--batch-tokens-per-gpu",
                help="Let the global batch grow with the GPU count: count x this many tokens per step "
                "(e.g. 16K; whole sequences). Replaces --global-batch.",
            ),
        ],
        None,
    ),
    opt(
        "max_gpus",
        Annotated[
            int | None,
            typer.Option(
                "--max-gpus",
                help="Largest count --deadline sizing tries for a GPU given without counts "
                f"\\[default: {DEFAULT_SIZING_MAX_GPUS}].",
            ),
        ],
        None,
    ),
    *("precision", *CLUSTER, "cluster_name", "tier", "prices"),
    # what is trained: each option's workload
    *("workload", "optimizer", "master_weights", "finetune", "lora_rank", "lora_targets", "lora_base"),
    opt(
        "deadline",
        Annotated[
            str | None,
            typer.Option(
                "--deadline",
                help="Wall-clock deadline, e.g. 30d, 720h, 2w; with --option GPU (no count): the fewest GPUs "
                "that meet it.",
            ),
        ],
        None,
    ),
    opt(
        "max_spend",
        Annotated[str | None, typer.Option("--max-spend", help="Spending cap in USD, e.g. 2M or 500K.")],
        None,
    ),
    *("budget:whatif", "seed"),
    opt(
        "goodput",
        Annotated[
            float,
            typer.Option(
                "--goodput",
                help="Fraction of wall-clock time making progress (restarts, failures), 0 < g <= 1.",
            ),
        ],
        1.0,
    ),
    *("min_headroom", *CALIBRATION, *STACK),
    opt(
        "no_sensitivity",
        Annotated[bool, typer.Option("--no-sensitivity", help="Skip the sensitivity analysis.")],
        False,
    ),
    opt(
        "as_json",
        Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")],
        False,
    ),
    opt(
        "out", Annotated[Path | None, typer.Option("--out", help="Write the HTML what-if report here.")], None
    ),
    "plotly",
    opt(
        "storage",
        Annotated[
            str | None,
            typer.Option(
                "--storage",
                help="Keep one study per option here (journal file, sqlite:///..., postgresql://...): "
                "workers running the same what-if share the options; a re-run skips finished ones.",
            ),
        ],
        None,
    ),
    opt(
        "study_name",
        Annotated[
            str | None,
            typer.Option("--study-name", help="Prefix of the per-option study names (needs --storage)."),
        ],
        None,
    ),
)
# The WhatIfSettings fields `run_sizing` takes as keywords too (a sizing has no cap, storage or sensitivity).
_SIZING_FIELDS = (
    *("token_budget", "tier", "goodput", "budget", "seed", "min_headroom_gib", "precisions", "gpus_per_node"),
    *("internode_bw", "nvlink_domain", "batch_tokens_per_gpu", "transport"),
)


@command(
    "whatif",
    help="Compare hardware options for a training run: best strategy, time and cost to train, ranked.",
)
@with_options(*_WHATIF)
def whatif(f: Flags) -> None:
    """Run the what-if and print it (tables, or --json), optionally writing the HTML report."""
    from autopar.catalog.pricefile import load_price_book
    from autopar.parse import check_seed

    check_plotly(f.plotly, f.out)
    check_seed(f.seed)
    deadline_s = parse_duration(f.deadline) if f.deadline is not None else None
    gb, per_gpu = _batch(f.global_batch, f.batch_tokens_per_gpu)
    sizing = _sizing_options(f.option, f.cluster_name, f.gpus_per_node, f.nvlink_domain, deadline_s)
    hw = _hardware(f, sizing)
    # the stated batch, else the tree's (or --workload's); with --batch-tokens-per-gpu each count sets its own
    p = problem_of(f, global_batch=gb if per_gpu is not None else f.global_batch, tokens=None)
    from autopar.catalog import get_model

    spec = get_model(p.model)
    wl = p.workload.build(spec)
    book = load_price_book(f.prices)
    cap = parse_usd(f.max_spend, "max-spend") if f.max_spend is not None else None
    settings = _settings(f, p, hw, per_gpu, deadline_s, cap)
    runtime = dict(
        price_book=book,
        calibration=resolve_calibration(f.calibration, f.no_calibration),
        progress=None if f.as_json else (lambda msg: err_console.print(msg, style="dim", highlight=False)),
    )
    if sizing is not None:
        common = {k: getattr(settings, k) for k in _SIZING_FIELDS}
        report = (f.out, f.plotly)
        _run_sizing(spec, sizing, wl, deadline_s, f.max_gpus, {**common, **runtime}, f.as_json, report)  # type: ignore[arg-type]  # deadline_s is set whenever sizing is
        return
    _run_ranking(spec, hw[0], wl, settings, runtime, f.as_json, f.out, f.plotly)


def _hardware(f: Flags, sizing: list | None) -> Hardware:
    """(--option values, GPUs per host, NVLink domain, NIC GB/s, transport) of a ranked what-if or a sizing."""
    if sizing is None and f.max_gpus is not None:
        raise SpecError(
            f"max-gpus={f.max_gpus}: only --deadline sizing uses it (an --option GPU without a count); drop it"
        )
    if sizing is None:
        return _hardware_options(
            f.option, f.cluster_name, f.gpus_per_node, f.nvlink_domain, f.internode_gbps, f.transport
        )
    _check_sizing_flags(f.max_spend, f.storage, f.no_sensitivity)
    from autopar.problem import check_transport

    per_node, domain, transport = f.gpus_per_node, f.nvlink_domain, check_transport(f.transport)
    if f.cluster_name is not None:
        per_node, domain, own = _system_shape(f.cluster_name)
        transport = transport or own
    return Hardware(f.option or [], per_node, domain, f.internode_gbps, transport)


def _settings(
    f: Flags, p: Any, hw: tuple, per_gpu: float | None, deadline_s: float | None, cap: float | None
) -> WhatIfSettings:
    """The what-if's settings from its options (the problem's search part and the money questions)."""
    from autopar.costs.whatif_types import WhatIfSettings
    from autopar.parse import parse_gib

    if f.study_name is not None and f.storage is None:
        raise AutoparError("study-name: names the stored per-option studies; give --storage too")
    _, gpus_per_node, nvlink_domain, internode_gbps, transport = hw
    return WhatIfSettings(
        token_budget=f.tokens,
        tier=f.tier,
        goodput=f.goodput,
        deadline_s=deadline_s,
        max_cost_usd=cap,
        budget=f.budget,
        seed=f.seed,
        min_headroom_gib=parse_gib(f.min_headroom),
        precisions=p.workload.precisions(),
        gpus_per_node=gpus_per_node,
        internode_bw=internode_gbps * 1e9 if internode_gbps is not None else None,
        nvlink_domain=nvlink_domain,
        transport=transport,
        sensitivity=not f.no_sensitivity,
        prices_file=str(f.prices) if f.prices else None,
        storage=f.storage,
        study_name=f.study_name,
        batch_tokens_per_gpu=per_gpu,
    )


def _batch(global_batch: int | None, batch_tokens_per_gpu: str | None) -> tuple[int, float | None]:
    """(global batch in sequences, tokens per GPU per step or None): one of the two, never both."""
    if batch_tokens_per_gpu is None:
        return (global_batch if global_batch is not None else DEFAULT_GLOBAL_BATCH), None
    if global_batch is not None:
        raise SpecError(
            f"batch-tokens-per-gpu={batch_tokens_per_gpu}: sets the global batch at each count; "
            f"drop --global-batch {global_batch} (or drop --batch-tokens-per-gpu to keep it fixed)"
        )
    from autopar.costs.figures import parse_tokens

    per_gpu = parse_tokens(batch_tokens_per_gpu)
    return DEFAULT_GLOBAL_BATCH, float(per_gpu)


def _sizing_options(
    option: list[str] | None,
    cluster: str | None,
    gpus_per_node: int | None,
    nvlink_domain: int | None,
    deadline_s: float | None,
) -> list | None:
    """The GPU types to size when --deadline comes with an --option GPU (or --cluster NAME) without a
    count; None for a ranked what-if. A count-less option without --deadline is an error."""
    bare = [o for o in option or [] if ":" not in o]
    bare_cluster = cluster is not None and ":" not in cluster and _is_system(cluster)
    if not bare and not (bare_cluster and deadline_s is not None):
        return None
    if deadline_s is None:
        raise SpecError(
            f"option={bare[0]!r}: give a count ({bare[0]}:512) or --deadline to find the fewest GPUs that meet it"
        )
    from autopar.costs.sizing import parse_sizing_option, system_sizing_option

    if cluster is not None:
        if option:
            raise SpecError(f"--cluster {cluster} already names the hardware; drop --option")
        if gpus_per_node is not None or nvlink_domain is not None:
            raise SpecError(
                f"--cluster {cluster} already sets GPUs per host and the NVLink domain; drop them"
            )
        return [system_sizing_option(cluster)]
    return [parse_sizing_option(o, gpus_per_node) for o in option or []]


def _is_system(cluster: str) -> bool:
    """Whether --cluster names a catalog system (not `detect`, which reads this host's topology)."""
    from autopar.catalog.clusters import system_catalog
    from autopar.catalog.names import exact_key

    return exact_key(cluster) in system_catalog().exact


def _system_shape(cluster: str) -> tuple[int, int, str | None]:
    """(GPUs per host, NVLink domain, transport) of a --cluster system shorthand."""
    from autopar.catalog.clusters import system_catalog

    sys_ = system_catalog().get(cluster.strip())
    return sys_.gpus_per_node, sys_.nvlink_domain, sys_.transport


def _check_sizing_flags(max_spend: str | None, storage: str | None, no_sens: bool) -> None:
    """Flags a --deadline sizing cannot use are errors, never silently ignored."""
    for flag, given in (("--max-spend", max_spend), ("--storage", storage)):
        if given is not None:
            raise SpecError(
                f"{flag.lstrip('-')}={given}: --deadline sizing (an --option GPU without a count) does not use "
                f"it; give counts (GPU:COUNT) for a ranked what-if, or drop {flag}"
            )
    if no_sens:
        raise SpecError("no-sensitivity: --deadline sizing runs no sensitivity analysis; drop it")


def _run_sizing(
    spec,
    sizing,
    wl,
    deadline_s: float,
    max_gpus,
    common: dict,
    json_out: bool,
    report: tuple[Path | None, str],
) -> None:
    """Size each GPU type for the deadline; print the table or JSON, write the HTML report (--out); exit 1
    when no type meets it."""
    from autopar.costs.sizing import run_sizing

    out, plotly = report
    write_report = _report_writer(out, "write_sizing_report") if out is not None else None
    if max_gpus is not None and all(o.counts for o in sizing):
        raise SpecError(
            f"max-gpus={max_gpus}: every option lists its counts, so it cannot take effect; drop it or give an "
            "option without counts"
        )
    result = run_sizing(
        spec,
        sizing,
        wl,
        deadline_s=deadline_s,
        max_gpus=DEFAULT_SIZING_MAX_GPUS if max_gpus is None else max_gpus,
        **common,
    )
    if write_report is not None:
        path = write_report(result, out, plotlyjs=plotly)
        if not json_out:
            err_console.print(f"report written to {path}", highlight=False)
    if json_out:
        emit_json(result.to_dict(), indent=2)
    else:
        render_sizing(result)
    if not any(r.answer for r in result.rows):
        raise typer.Exit(1)


def _run_ranking(
    spec: Any,
    option: list[str],
    wl: Any,
    settings: WhatIfSettings,
    runtime: dict[str, Any],
    json_out: bool,
    out: Path | None,
    plotly: str,
) -> None:
    """The ranked what-if over the options' counts; exit 1 when nothing fits on any option."""
    from autopar.costs.whatif import run_whatif

    write_report = _report_writer(out) if out is not None else None
    result = run_whatif(spec, option, wl, settings, **runtime)
    if write_report is not None:
        path = write_report(result, out, plotlyjs=plotly)
        if not json_out:
            err_console.print(f"report written to {path}", highlight=False)
    if json_out:
        emit_json(result.to_dict(), indent=2)
    else:
        render_whatif(result)
    if not any(o.feasible for o in result.options):
        raise typer.Exit(1)


def render_prices(book: PriceBook, gpu: str | None, tier: str | None, quotes: bool) -> None:
    """Print the price book as a table (optionally every quote behind each price)."""
    t = Table(title="Price book (USD per GPU-hour)", title_justify="left")
    for col, just in (("GPU", "left"), ("tier", "left"), ("$/GPU-h", "right"), ("source", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]  # justify is one of rich's literals, held as str
    for e in _select(book, gpu, tier):
        t.add_row(e.gpu, e.tier, f"{e.usd_per_gpu_hour:.2f}", e.source)
        if quotes:
            for q in e.quotes:
                what = q.provider + (f" ({q.note})" if q.note else "")
                t.add_row("", "", f"{q.usd_per_gpu_hour:.2f}", f"{what}; {q.date}; {q.source}", style="dim")
    console.print(t)
    console.print(
        "tiers: " + "; ".join(f"{k} = {v}" for k, v in TIER_HELP.items()), style="dim", highlight=False
    )


def _select(book: PriceBook, gpu: str | None, tier: str | None) -> list:
    rows = book.rows()
    if gpu is not None:
        key = book.resolve(gpu)
        rows = [e for e in rows if e.gpu == key]
    if tier is not None:
        t = normalize_tier(tier)
        rows = [e for e in rows if e.tier == t]
    return rows


@command("prices", help="Show the price book (built-in prices, overridden by --prices), with sources.")
def prices_cmd(
    prices: Annotated[Path | None, typer.Option("--prices", help="YAML/CSV price file to merge in.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Only this GPU.")] = None,
    tier: Annotated[str | None, typer.Option("--tier", help="Only this tier.")] = None,
    quotes: Annotated[
        bool, typer.Option("--quotes", help="Also list every public quote behind a price.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List prices and where they come from."""
    from autopar.catalog.pricefile import load_price_book

    book = load_price_book(prices)
    if json_out:
        rows = [e.as_dict() for e in _select(book, gpu, tier)]
        emit_json(rows, indent=2)
    else:
        render_prices(book, gpu, tier, quotes)
