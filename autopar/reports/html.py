"""The search report: one self-contained HTML page for a SearchResult (header, cards, figures, table)."""

from __future__ import annotations

import re
from pathlib import Path

from autopar.calibration.evaluation.assumptions import search_assumptions
from autopar.costs.figures import format_usd
from autopar.errors import AutoparError
from autopar.launch.settings import launch_settings
from autopar.perf.params import count_params
from autopar.perf.types import Estimate
from autopar.reports import theme
from autopar.reports.common import (
    autopar_version,
    cluster_label,
    esc,
    figure_html,
    fmt_num,
    fmt_value,
    pareto_trials,
    render_page,
    search_counts,
    trial_cluster,
    trial_workload,
    write_text,
)
from autopar.reports.decision import Card, Decision, decision_info, recommendation_cards
from autopar.reports.figures import (
    memory_bar_info,
    parallel_coords_info,
    pareto_plot_info,
    strategy_fields,
    time_bar_info,
)
from autopar.reports.plots import plot_parallel_coords, plot_pareto, plot_stacked_bars
from autopar.reports.table import pareto_table_info, table_html
from autopar.search.pareto import NEAR_TIE_FRACTION
from autopar.search.result import SearchResult, TrialRecord
from autopar.search.storage import mask
from autopar.specs import ClusterSpec
from autopar.units import SECONDS_PER_DAY, GiB, format_duration, format_tokens


def _cluster_text(c: ClusterSpec) -> str:
    price = f", ${c.price_usd_per_gpu_hour:.2f}/GPU-h" if c.price_usd_per_gpu_hour is not None else ""
    return (
        f"{cluster_label(c.gpu.name, c.num_gpus)} ({c.nodes} node{'s' if c.nodes > 1 else ''} of "
        f"{min(c.node_size, c.num_gpus)}, {c.nic_bw / 1e9:.0f} GB/s NIC per GPU{price})"
    )


def calibration_text(result: SearchResult) -> str:
    """'uncalibrated' or the corrector's name, version and error, from `result.calibration`."""
    cal = result.calibration
    if not cal:
        return "uncalibrated (analytical model only)"
    name = cal.get("name") or cal.get("corrector") or "corrector"
    parts = [str(name)]
    if cal.get("version"):
        parts.append(f"v{cal['version']}")
    err_keys = [k for k in cal if any(s in k.lower() for s in ("error", "mape", "mae", "rmse"))]
    for k in err_keys:
        v = cal[k]
        parts.append(f"{k.replace('_', ' ')} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}")
    described = [str(cal[k]) for k in ("description", "summary") if cal.get(k)]
    if any(str(name) in d for d in described):  # the description already names the corrector
        parts = parts[1:]
    extra = [
        f"{k}={v}"
        for k, v in cal.items()
        if k not in {"name", "corrector", "version", "description", "summary", *err_keys}
        and not (described and k == "n_runs")  # the description names the runs already
        and isinstance(v, (str, int, float))
    ]
    return ", ".join(parts + described + extra[:4])


def _front_words(front: list[TrialRecord]) -> str:
    """'7 non-dominated strategies', or '1 non-dominated strategy and 6 near-ties (...)' when some are."""
    ties = sum(t.near_tie for t in front)
    n = len(front) - ties
    words = f"{n} non-dominated strateg{'y' if n == 1 else 'ies'}"
    if ties:
        words += (
            f" and {ties} near-tie{'s' if ties != 1 else ''} (off the front by less than "
            f"{NEAR_TIE_FRACTION:.0%}: the model cannot order them against it)"
        )
    return words


def _top(result: SearchResult) -> str:
    """The page header: model, hardware, workload on one line; the search counts as KPI tiles."""
    m, w = result.model, result.workload
    n = search_counts(result)
    kpis = [
        (
            "Pareto points",
            f"{n['pareto']:,}" + (f" + {n['near_ties']:,} near-ties" if n["near_ties"] else ""),
        ),
        ("Evaluated", f"{n['evaluated']:,}"),
        ("Feasible", f"{n['feasible']:,}"),
        ("Search space", fmt_num(result.space_size)),
        ("Search time", format_duration(result.wall_s)),
    ]
    sub = " · ".join(cluster_label(c.gpu.name, c.num_gpus) for c in result.clusters)
    sub += f" · seq {w.seq_len:,} · global batch {w.global_batch:,} · {w.precision}"
    study, storage = result.inputs.get("study_name"), result.inputs.get("storage")
    if storage:  # a stored study: where it lives and its trials per state
        sub += f" · storage {mask(str(storage))} · trials {_states(result)}"
    sub += "".join(
        " · " + a for a in search_assumptions(result.clusters, result.workload, bool(result.calibration))
    )
    title = f"Parallelism plan for {m.name}" + (f" · study {study}" if study else "")
    return theme.header("study report" if storage else "optimize report", title, sub, kpis)


def _states(result: SearchResult) -> str:
    """'COMPLETE 300 · PRUNED 16': a stored study's trials per Optuna state."""
    states = result.stats.get("study_states") or {}
    return " · ".join(f"{k} {v:,}" for k, v in sorted(states.items())) or "none"


def _inputs(result: SearchResult) -> list[tuple[str, list[tuple[str, str]]]]:
    """The input panels (model, clusters, workload, search, and the study when one is stored)."""
    m, w = result.model, result.workload
    inp = result.inputs
    counts = count_params(m)
    params = f"{counts.total / 1e9:.1f} B total"
    if m.is_moe:
        params += f", {counts.active / 1e9:.1f} B active"
    clusters = "<br>".join(esc(_cluster_text(c)) for c in result.clusters)
    budget = f"{w.token_budget / 1e9:,.0f} B tokens" if w.token_budget else "not set"
    objectives = ", ".join(
        f"{o.name} ({'max' if o.direction == 'maximize' else 'min'}, {o.unit})" for o in result.objectives
    )
    tier = inp.get("tier") or inp.get("price_tier") or "on_demand"
    cal = result.calibration
    cal_short = "uncalibrated (analytical model only)" if not cal else str(cal.get("name") or "corrector")
    boxes = [
        (
            "Model",
            [
                ("name", esc(m.name)),
                ("parameters", esc(params)),
                ("layers × hidden", f"{m.layers} × {m.hidden}"),
                ("heads / kv", f"{m.heads} / {m.kv}"),
                ("experts", f"{m.experts} (top-{m.topk})" if m.is_moe else "dense"),
            ],
        ),
        (
            "Cluster" + ("s" if len(result.clusters) > 1 else ""),
            [("hardware", clusters), ("price tier", esc(tier))],
        ),
        (
            "Workload",
            [
                ("sequence length", f"{w.seq_len:,} tokens"),
                ("global batch", f"{w.global_batch:,} sequences ({w.tokens_per_step / 1e6:.2f} M tokens)"),
                ("precision / optimizer", esc(f"{w.precision} / {w.optimizer}")),
                ("token budget", esc(budget)),
            ],
        ),
        (
            "Search",
            [
                ("objectives", esc(objectives)),
                ("sampler / budget", esc(f"{result.sampler} / {result.budget} trials")),
                ("seed", esc(result.seed)),
                ("calibration", theme.collapsed(cal_short, f"<p>{esc(calibration_text(result))}</p>")),
                ("autopar", esc(autopar_version())),
            ],
        ),
    ]
    return boxes + _study_box(result)


def _study_box(result: SearchResult) -> list[tuple[str, list[tuple[str, str]]]]:
    """The stored study: name, storage (credentials masked) and trials per Optuna state."""
    storage = result.inputs.get("storage")
    if not storage:
        return []
    return [
        (
            "Study",
            [
                ("name", esc(result.inputs.get("study_name") or "–")),
                ("storage", esc(mask(str(storage)))),
                ("trials", esc(_states(result))),
            ],
        )
    ]


def _about(result: SearchResult) -> str:
    """What the answer rests on, below the figures: inputs, notes, how far to trust the numbers."""
    notes = theme.notes(result.notes)
    if result.calibration is None:
        notes += theme.notes(
            [
                "Predictions come from the analytical model alone (no calibration against measured runs); "
                "treat absolute throughput as ±15–25 %."
            ],
            ok=True,
        )
    inner = theme.panels(_inputs(result)) + (f'<div class="notes">{notes}</div>' if notes else "")
    return theme.section(
        "Inputs and notes", "What the search was given and what it noticed.", inner, "inputs"
    )


def _metrics(t: TrialRecord, result: SearchResult) -> str:
    e: Estimate | None = t.estimate
    items: list[tuple[str, str]] = []
    for o in result.objectives:
        if o.name in t.values:
            items.append((o.label, fmt_value(t.values[o.name], o.unit)))
    if e is not None:
        names = {o.name for o in result.objectives}
        if "throughput" not in names:
            items.append(("Throughput (cluster)", f"{fmt_num(e.tokens_per_s)} tokens/s"))
        items += [
            ("Tokens/s per GPU", fmt_num(e.tokens_per_s_per_gpu)),
            ("MFU", f"{100 * e.mfu:.1f} %"),
            ("Step time", format_duration(e.step_time_s)),
        ]
    items = items[: len(items) - len(items) % 2] if len(items) > 2 else items
    band = ""
    if e is not None and e.tokens_per_s_band is not None:
        lo, hi = e.tokens_per_s_band
        band = (
            f'<div class="small muted">Calibrated x{e.calibration_factor:.2f} on the analytical model; '
            f"80% band {fmt_num(lo)}–{fmt_num(hi)} tokens/s (cluster)</div>"
        )
    return (
        '<div class="metrics">'
        + "".join(
            f'<div class="metric"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
            for k, v in items[:8]
        )
        + "</div>"
        + band
    )


def _knobs(t: TrialRecord) -> str:
    """Compact knob summary for a card: 'tp 4 · pp 2 (v2) · dp 8 · ZeRO-1 · mb 1 · recompute sel'."""
    s = t.strategy
    parts = [
        f"tp {s.tp}" + (" +SP" if s.sp and s.tp > 1 else ""),
        f"pp {s.pp}" + (f" ×{s.vpp} virtual" if s.vpp > 1 else ""),
        f"dp {s.dp}",
    ]
    parts += [f"cp {s.cp}"] if s.cp > 1 else []
    parts += [f"ep {s.ep}"] if s.ep > 1 else []
    parts += [
        f"ZeRO-{s.zero}" if s.zero else "DDP",
        f"micro-batch {s.micro_batch}",
        f"recompute {s.recompute}",
    ]
    return " · ".join(parts)


def _memory_bar(e: Estimate) -> str:
    frac = max(0.0, min(1.0, e.memory.total / e.capacity_bytes)) if e.capacity_bytes else 0.0
    tight = " tight" if frac > 0.92 else ""
    return (
        f'<div class="small muted">Peak memory {e.memory.total / GiB:.1f} of {e.capacity_bytes / GiB:.1f} GiB '
        f"per GPU · headroom {e.headroom_bytes / GiB:.1f} GiB</div>"
        f'<div class="bar{tight}"><span style="width:{100 * frac:.1f}%"></span></div>'
    )


def _pre(text: str) -> str:
    return f'<button class="copy" type="button">Copy</button><pre><code>{esc(text)}</code></pre>'


def launch_html(result: SearchResult, t: TrialRecord, key: str) -> str:
    """Collapsible launch settings (Megatron, torchtitan, DeepSpeed, SLURM) for one trial."""
    try:
        ls = launch_settings(result.model, trial_cluster(result, t), trial_workload(result, t), t.strategy)
    except AutoparError as err:
        return f'<details class="launch"><summary>Launch settings</summary><p class="muted">{esc(err)}</p></details>'
    tabs = [
        ("megatron", "Megatron-LM", ls.torchrun),
        ("torchtitan", "torchtitan", ls.torchtitan or f"# {ls.torchtitan_reason}"),
        ("deepspeed", "DeepSpeed", ls.deepspeed or f"# {ls.deepspeed_reason}"),
        ("slurm", "SLURM", ls.slurm),
    ]
    buttons = "".join(
        f'<button type="button" data-tab="{k}"{" class=on" if i == 0 else ""}>{esc(lbl)}</button>'
        for i, (k, lbl, _) in enumerate(tabs)
    )
    panels = "".join(
        f'<div class="tabpanel{" on" if i == 0 else ""}" data-tab="{k}" id="{key}-{k}">{_pre(txt)}</div>'
        for i, (k, _, txt) in enumerate(tabs)
    )
    caveats = "".join(f"<li>{esc(n)}</li>" for n in ls.notes)
    return (
        f'<details class="launch"><summary>Launch settings ({ls.nodes} node'
        f"{'s' if ls.nodes > 1 else ''} × {ls.gpus_per_node} GPUs)</summary>"
        f'<div class="tabs">{buttons}</div>{panels}'
        + (f'<ul class="caveats">{caveats}</ul>' if caveats else "")
        + "</details>"
    )


def _cards(result: SearchResult, cards: list[Card]) -> str:
    """The alternatives: one card per other distinct recommended point, saying what it buys."""
    out = []
    for c in cards:
        t = c.trial
        why = "".join(_why(w) for w in c.whys)
        mem = _memory_bar(t.estimate) if t.estimate is not None else ""
        bottleneck = (
            f" · bottleneck: {esc(t.estimate.bottleneck.replace('_', ' '))}" if t.estimate is not None else ""
        )
        out.append(
            f'<div class="card" data-trial="{t.number}"><div class="role">{esc(c.title)}</div>'
            f'<div class="strategy" title="{esc(strategy_fields(t))}">{esc(t.strategy.label())}</div>'
            f'<p class="buys">{esc(c.buys)}</p>'
            f'<div class="where">{esc(cluster_label(t.gpu, t.num_gpus))} · {esc(t.precision)}'
            f"{bottleneck}<br>{esc(_knobs(t))}</div>{_metrics(t, result)}{mem}{why}"
            f"{launch_html(result, t, f'launch-{t.number}')}</div>"
        )
    return '<div class="cards">' + "".join(out) + "</div>"


def _decision(result: SearchResult, d: Decision | None) -> str:
    """The answer, first on the page: the recommended strategy, its figures, what would do better."""
    if d is None:
        return theme.section(
            "Recommendation",
            "",
            '<p class="muted">No recommendation: the search found no feasible strategy.</p>',
            "decision",
        )
    t = d.card.trial
    tokens = f"{format_tokens(d.tokens)} tokens"
    tiles = [("Throughput (cluster)", f"{fmt_num(d.tokens_per_s)} tokens/s")]
    if d.band is not None:
        tiles.append(("80% band (calibrated)", f"{fmt_num(d.band[0])}–{fmt_num(d.band[1])} tokens/s"))
    if d.train_days is not None:
        tiles.append((f"Time to train {tokens}", format_duration(d.train_days * SECONDS_PER_DAY)))
    if d.train_usd is not None:
        tiles.append((f"Cost to train {tokens}", format_usd(d.train_usd)))
    if d.mfu is not None:
        tiles.append(("MFU", f"{100 * d.mfu:.1f} %"))
    if d.headroom_gib is not None and d.capacity_gib is not None:
        tiles.append(("Memory free per GPU", f"{d.headroom_gib:.1f} of {d.capacity_gib:.1f} GiB"))
    better = "".join(f"<li>{esc(b)}</li>" for b in d.better)
    why = "".join(_why(w) for w in d.card.whys)
    main = (
        f'<div class="hero-main"><div class="role">Recommended · {esc(d.card.title)}</div>'
        f'<div class="strategy" id="recommended-strategy" title="{esc(strategy_fields(t))}">'
        f"{esc(t.strategy.label())}</div>"
        f'<div class="where">{esc(d.where)} · {esc(_knobs(t))}</div>'
        f"{_verdict_html(result, d)}"
        f"{theme.metrics(tiles, 'metrics hero-metrics')}"
        + (
            ""
            if d.budget_given
            else f'<div class="small muted">No --token-budget was given: time and cost are for {esc(tokens)}.</div>'
        )
        + _evidence_html(d)
        + f"{theme.collapsed('Why this strategy', why, 'more') if why else ''}"
        f"{launch_html(result, t, 'launch-recommended')}</div>"
    )
    side = f'<div class="hero-side"><h3>What it would take to do better</h3><ul class="better">{better}</ul></div>'
    return (
        f'<section id="decision"><div class="card hero" data-trial="{t.number}">{main}{side}</div></section>'
    )


def _verdict_html(result: SearchResult, d: Decision) -> str:
    """The verdict's lines (reports/verdict.py): the pick and its band, time and cost to train, its near-ties."""
    from autopar.reports.verdict import verdict_info, verdict_lines

    v = verdict_info(result, d)
    if v is None:
        return ""
    return (
        '<ul class="verdict" id="verdict">'
        + "".join(f"<li>{esc(x)}</li>" for x in verdict_lines(v))
        + "</ul>"
    )


def _evidence_html(d: Decision) -> str:
    """Whether a published run resembles the pick, and the published recipe beside it (search/evidence.py)."""
    out = ""
    if d.evidence:
        out += f'<p class="why" id="evidence"><strong>{esc(d.evidence)}</strong></p>'
    r = d.recipe
    if r is not None:
        reasons = "".join(f"<li>{esc(x)}</li>" for x in r.reasons)
        out += (
            f'<div class="small" id="recipe"><p class="why">{esc(r.sentence(reasons=False))}</p>'
            + (
                f'<p class="why">Where the step differs most:</p><ul class="better">{reasons}</ul>'
                if reasons
                else ""
            )
            + "</div>"
        )
    return out


def _why(text: str, keep: int = 2) -> str:
    """The justification: its first sentences in full, the rest behind a 'more' toggle."""
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    if len(text) <= 240 or len(sentences) <= keep:
        return f'<p class="why">{esc(text)}</p>'
    head, tail = " ".join(sentences[:keep]), " ".join(sentences[keep:])
    return (
        f'<p class="why">{esc(head)}</p><details class="more"><summary>more</summary>'
        f'<p class="why small">{esc(tail)}</p></details>'
    )


def search_report_html(result: SearchResult, plotlyjs: str = "inline") -> str:
    """The complete report page as a string (see `write_search_report`): the decision first, then the
    front, the breakdowns and the table, then the inputs."""
    front = pareto_trials(result)
    cards = recommendation_cards(result.recommended, result.objectives)
    parts = [_top(result), _decision(result, decision_info(result, cards))]
    figures = _figures(result, front) if front else []
    parts += figures[:1]  # the front, right below the answer
    if len(cards) > 1:
        parts.append(
            theme.section(
                "Alternatives",
                "Other points of the Pareto front a role chose (the stars), each with what it buys against "
                "the recommendation; the launch settings reproduce it in Megatron-LM, torchtitan, DeepSpeed "
                "or SLURM.",
                _cards(result, cards[1:]),
                "recommendations",
            )
        )
    parts += figures[1:]
    parts.append(
        theme.section(
            "Pareto set",
            "Click a column header to sort. Highlighted rows are recommended.",
            table_html(pareto_table_info(result)),
            "table",
        )
    )
    parts.append(_about(result))
    parts.append(
        theme.footer(
            "Predictions come from autopar's analytical performance model"
            + (" with calibration" if result.calibration else "")
            + "; measure before committing a large run."
        )
    )
    return render_page(f"autopar · {result.model.name}", "".join(parts), plotlyjs)


def _figures(result: SearchResult, front: list[TrialRecord]) -> list[str]:
    """The Pareto front, the memory/time breakdowns and the parallel coordinates."""
    pinfo = pareto_plot_info(result)
    drawn = (
        f" Drawn: every front point and {pinfo.n_dominated_drawn:,} of {pinfo.n_dominated:,} dominated and "
        f"{pinfo.n_infeasible_drawn:,} of {pinfo.n_infeasible:,} infeasible points (an even sample by trial number)."
        if pinfo.thinned
        else ""
    )
    parts = [
        theme.section(
            "Pareto front",
            f"{_front_words(front)} (coloured) among "
            f"{result.n_feasible:,} feasible ones (grey). Stars mark the recommendations; "
            f"{pinfo.n_infeasible:,} evaluated strategies that do not fit (memory or a constraint) are "
            "hidden — click “Infeasible” in the legend to show them. Hover a point for its full strategy."
            + drawn,
            f'<div class="panel">{figure_html(plot_pareto(pinfo), "fig-pareto")}</div>',
            "pareto",
        )
    ]
    mem, tim = memory_bar_info(result), time_bar_info(result)
    if mem.categories:
        parts.append(
            theme.section(
                "Where the memory and the time go",
                "Per-GPU peak memory of the most loaded GPU "
                "(dashed line: usable capacity) and the optimizer-step time split into compute, the "
                "communication that is not hidden behind compute, the pipeline bubble and the optimizer.",
                f'<div class="grid-2"><div class="panel">{figure_html(plot_stacked_bars(mem), "fig-memory")}'
                f'</div><div class="panel">{figure_html(plot_stacked_bars(tim), "fig-time")}</div></div>',
                "breakdown",
            )
        )
    parts.append(
        theme.section(
            "Knobs vs objectives",
            "Each line is a feasible strategy (blue: Pareto front). Drag along an axis to filter.",
            f'<div class="panel">{figure_html(plot_parallel_coords(parallel_coords_info(result)), "fig-parcoords")}</div>',
            "parcoords",
        )
    )
    return parts


def write_search_report(result: SearchResult, path: str | Path, *, plotlyjs: str = "inline") -> Path:
    """Write the search report as one self-contained HTML file (plotly.js inlined unless 'cdn')."""
    return write_text(path, search_report_html(result, plotlyjs))
