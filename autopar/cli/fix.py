"""CLI command `autopar fix`: from a strategy that runs today to the nearest ones that fit in memory, run faster
or run on another GPU count (autopar/search/neighbourhood.py), each change explained with its predicted effect."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.common import resolve_calibration
from autopar.cli.evaluation import Evaluation, evaluate, label_strategy
from autopar.cli.options import (
    CALIBRATION,
    CLUSTER,
    SHAPE,
    STACK,
    WORKLOAD_EXTRAS,
    Flags,
    OptionSpec,
    opt,
    single_problem,
    with_options,
)
from autopar.errors import NoFeasibleStrategyError, SpecError
from autopar.layouts import Axis
from autopar.units import GiB

FIT, FASTER, GPUS = "fit", "faster", "gpus"
GOALS = (FIT, FASTER, GPUS)
ALLOWABLE = ("precision",)  # knobs the search changes only when --allow names them
DEFAULT_MAX_CHANGES = 3
# `--goal faster` asks for at least this much more throughput: a smaller gain is well inside the model's error
# (~5-10% median on tokens/s, README accuracy tables) and not worth a change.
FASTER_MIN_GAIN = 0.01


@dataclass(frozen=True)
class Plan:
    """What `autopar fix` searches: the current strategy evaluated where it runs, the goal and the target."""

    label: str
    current: Evaluation  # on the GPU count it runs on today
    cluster: Any  # the target cluster (another GPU count with --goal gpus)
    goal: str
    min_headroom_gib: float  # free GiB the memory margin asks of the current strategy
    margin: Any = None  # the memory margin every candidate is held to (search/margin.py)


def _label_world(label: str) -> int | None:
    """The GPU count a label runs on (tp·pp·cp·dp), or None when it leaves dp out."""
    from autopar.launch.labels import parse_strategy_label

    s = parse_strategy_label(label)
    return s.tp * s.pp * s.cp * s.dp if s.dp else None


def _with_gpus(cluster: Any, n: int) -> Any:
    """The cluster with another GPU count (validated: a count the host size does not divide is an error)."""
    from pydantic import ValidationError

    from autopar.specs import ClusterSpec

    try:
        return ClusterSpec.model_validate({**cluster.model_dump(), "num_gpus": n})
    except ValidationError as e:
        raise SpecError(f"the label's {n} GPUs are not a valid cluster: {e.errors()[0]['msg']}") from None


def _current(label: str, flags: Flags, calib: Any) -> tuple[Evaluation, Any, Any]:
    """The label evaluated on the GPU count it names (its DP), the target cluster (--gpus) and the workload.
    Without --gpus (and --cluster) the target is the label's own count."""
    from pydantic import ValidationError

    world = _label_world(label)
    derived = world is not None and flags.gpus is None and flags.cluster_name is None
    try:
        m, cluster, workload = single_problem(flags, **({"gpus": world} if derived else {}))
    except ValidationError as e:
        if not derived:
            raise
        msg = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise SpecError(
            f"--strategy {label!r} runs on {world} GPUs (tp·pp·cp·dp), not a valid cluster: {msg}"
        ) from None
    s = label_strategy(label, m.is_moe)
    here = cluster if world in (None, cluster.num_gpus) else _with_gpus(cluster, world)
    try:
        ev = evaluate(m, here, workload, s, calib, strict=not flags.allow_uneven)
    except SpecError as e:
        where = f"{here.num_gpus}x {here.gpu.name}"
        raise SpecError(f"--strategy {label!r} is not valid on {where}: {e}") from None
    return ev, cluster, workload


def _goal(given: str | None, ev: Evaluation, cluster: Any, label: str, min_headroom: float) -> str:
    """The goal: as given (checked that it can take effect), else gpus when --gpus moves the label, fit when it
    lacks the headroom, faster when it has it."""
    now, there = ev.cluster.num_gpus, cluster.num_gpus
    short = ev.est.headroom_gib < min_headroom
    if given is None:
        return GPUS if now != there else (FIT if short else FASTER)
    goal = given.strip().lower()
    if goal not in GOALS:
        close = difflib.get_close_matches(goal, GOALS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SpecError(f"--goal {given!r} is not a goal{hint} (goals: {', '.join(GOALS)})")
    if goal == GPUS and now == there and _label_world(label) is None:
        raise SpecError(
            f"--goal gpus: {label!r} names no DP, so the GPU count it runs on today is not known; give its DP "
            "(e.g. 'TP2 DP8/Z1 mb1' on 16 GPUs) and --gpus NEW"
        )
    if goal == GPUS and now == there:
        raise SpecError(
            f"--goal gpus: {label!r} runs on {now} GPUs and --gpus is {there}; give --gpus NEW, the count to move to"
        )
    if goal != GPUS and now != there:
        raise SpecError(
            f"--goal {goal}: {label!r} runs on {now} GPUs (its DP), not --gpus {there}; use --goal gpus to move "
            "it, or drop DP from the label"
        )
    if goal == FIT and not short:
        raise SpecError(
            f"--goal fit: {label!r} already fits with {ev.est.headroom_gib:.1f} GiB free (at least "
            f"{min_headroom:.1f} GiB the memory margin asks); nothing to fix (--goal faster looks for more tokens/s)"
        )
    return goal


def _allowed(allow: list[str] | None) -> set[str]:
    """The --allow values, checked (close matches for a typo)."""
    out = set()
    for raw in allow or ():
        for name in (x.strip().lower() for x in raw.split(",") if x.strip()):
            if name not in ALLOWABLE:
                close = difflib.get_close_matches(name, ALLOWABLE, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise SpecError(
                    f"--allow {name!r} is not a knob fix may open{hint} (allowed: {', '.join(ALLOWABLE)})"
                )
            out.add(name)
    return out


def _space(plan: Plan, model: Any, workload: Any, allow: set[str], savers: str, fix: Any, forbid: Any) -> Any:
    """The space searched: every valid strategy on the target cluster, in the workload's precision (and the
    other one with --allow precision), within the --fix/--forbid constraints."""
    from autopar.constraints import parse_constraints
    from autopar.search.space import build_space

    precs = [workload.precision]
    if "precision" in allow:
        precs.append("fp8" if workload.precision == "bf16" else "bf16")
    from autopar.problem import check_memory_savers

    wl = workload.model_copy(update={"memory_savers": check_memory_savers(savers)})
    space = build_space(model, plan.cluster, wl, precs, parse_constraints(fix or (), forbid or ()))
    if len(space.hardware) < len(precs):
        raise SpecError(f"--allow precision cannot take effect: {'; '.join(space.skipped)}")
    return space


def _seq(n: int) -> str:
    """A sequence length as people say it: 32768 -> '32k'."""
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}"


def _problem_text(plan: Plan) -> str:
    """What is wrong with the current strategy, as the head of an explanation ('OOM at 32k')."""
    from autopar.calibration.evaluation.verdict import FITS, OOM

    ev = plan.current
    if plan.goal == GPUS:
        return f"{ev.cluster.num_gpus} → {plan.cluster.num_gpus} GPUs"
    if plan.goal == FASTER:
        return "faster"
    seq = _seq(ev.workload.seq_len)
    if ev.verdict == FITS:
        return f"{ev.est.headroom_gib:.1f} GiB free at {seq} (< {plan.min_headroom_gib:.1f} GiB, the memory margin)"
    return f"{'OOM' if ev.verdict == OOM else 'uncertain fit'} at {seq}"


def _grad_accum(ev: Evaluation) -> int:
    """Micro-batches per step and pipeline: the global batch over dp·micro-batch (kept fixed by fix)."""
    s = ev.strategy
    return ev.workload.global_batch // max(1, s.dp * (s.micro_batch or 1))


def _consequences(cur: Evaluation, new: Evaluation) -> str:
    """What follows from the changes without being one: dp and the gradient-accumulation count."""
    if cur.strategy.dp == new.strategy.dp:
        return ""
    return f" (DP {cur.strategy.dp}→{new.strategy.dp}, grad-accum {_grad_accum(cur)}→{_grad_accum(new)})"


def _keeps(cur: Evaluation, changed: set[str]) -> str:
    """The parallel degrees > 1 the candidate keeps, e.g. '; keeps TP2 CP2'."""
    s = cur.strategy
    kept = [
        f"{a.upper()}{getattr(s, a)}"
        for a in (Axis.TP, Axis.PP, Axis.CP, Axis.EP)
        if a not in changed and getattr(s, a) > 1
    ]
    return f"; keeps {' '.join(kept)}" if kept else ""


def explain(plan: Plan, new: Evaluation, chg: list[Any]) -> str:
    """One line: the problem, the changes, what follows and the predicted memory and throughput, e.g.
    'OOM at 32k: cp 1→2-a2a (DP 8→4, grad-accum 8→16); keeps TP2; predicted 71.9 GiB of 79.2 GiB, 6,765 →
    6,658 tokens/s/GPU (-1.6%)'."""
    cur = plan.current
    what = ", ".join(c.text() for c in chg) or "keep the layout"
    before, after = cur.est.tokens_per_s_per_gpu, new.est.tokens_per_s_per_gpu
    return (
        f"{_problem_text(plan)}: {what}{_consequences(cur, new)}{_keeps(cur, {c.knob for c in chg})}; "
        f"predicted {new.est.memory.total / GiB:.1f} GiB of {new.est.capacity_bytes / GiB:.1f} GiB, "
        f"{before:,.0f} → {after:,.0f} tokens/s/GPU ({100 * (after / before - 1):+.1f}%)"
    )


def _row(ev: Evaluation) -> dict[str, Any]:
    """The figures of one strategy in --json (SI units but memory in GiB; mfu a fraction)."""
    est = ev.est
    return {
        "label": ev.strategy.label(),
        "num_gpus": ev.cluster.num_gpus,
        "precision": ev.workload.precision,
        "memory_verdict": ev.verdict,
        "peak_memory_gib": est.memory.total / GiB,
        "capacity_gib": est.capacity_bytes / GiB,
        "headroom_gib": est.headroom_gib,
        "tokens_per_s": est.tokens_per_s,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
        "mfu": est.mfu,
        "step_time_s": est.step_time_s,
        "usd_per_mtoken": ev.usd_per_mtoken,
        "strategy": ev.strategy.model_dump(),
    }


@dataclass(frozen=True)
class Found:
    """One answer: its scalar evaluation (what `estimate` prints for it), its changes and its distance."""

    ev: Evaluation
    changes: list[Any]
    distance: int

    def doc(self, plan: Plan) -> dict[str, Any]:
        """The answer in --json: the figures, the change list and the explanation line."""
        before = plan.current.est.tokens_per_s_per_gpu
        return {
            **_row(self.ev),
            "distance": self.distance,
            "changes": [{"knob": c.knob, "from": c.before, "to": c.after} for c in self.changes],
            "tokens_per_s_per_gpu_delta_pct": 100 * (self.ev.est.tokens_per_s_per_gpu / before - 1),
            "explanation": explain(plan, self.ev, self.changes),
        }


def _found(plan: Plan, space: Any, cand: Any, calib: Any) -> Found:
    """A candidate of the search evaluated again by the scalar model (the figures a user sees), with its
    changes from the current strategy."""
    from autopar.search.neighbourhood import changes

    hw = space.hardware[cand.hw]
    ev = evaluate(space.model, hw.cluster, hw.workload, cand.strategy, calib, strict=True)
    precisions = (plan.current.workload.precision, hw.precision)
    return Found(ev, changes(plan.current.strategy, cand.strategy, precisions), cand.distance)


def _goal_text(plan: Plan, floor: float) -> str:
    head = (
        f"fits at {plan.margin.describe()}"
        if plan.margin
        else f"fits with {plan.min_headroom_gib:g} GiB free"
    )
    if plan.goal == GPUS:
        return f"goal gpus: runs on {plan.cluster.num_gpus} GPUs and {head}"
    if plan.goal == FASTER:
        per_gpu = floor / plan.cluster.num_gpus
        return f"goal faster: {head} and runs above {per_gpu:,.0f} tokens/s/GPU (+{100 * FASTER_MIN_GAIN:g}%)"
    return f"goal fit: {head}"


def _none_found(plan: Plan, nb: Any) -> NoFeasibleStrategyError:
    """Nothing within --max-changes meets the goal: say how much was searched and what to try."""
    n = sum(nb.reached.values())
    what = {FIT: "fits", FASTER: "is faster and fits", GPUS: f"fits on {plan.cluster.num_gpus} GPUs"}[
        plan.goal
    ]
    return NoFeasibleStrategyError(
        f"--goal {plan.goal}: none of the {n:,} valid strateg{'y' if n == 1 else 'ies'} within {nb.max_changes} changes of "
        f"{plan.label!r} {what} (with the memory margin); raise --max-changes, allow more "
        "(--memory-savers, --allow precision) or search the whole space with `autopar optimize`"
    )


def _current_text(ev: Evaluation) -> str:
    est = ev.est
    return (
        f"current: {ev.strategy.label()} on {ev.cluster.num_gpus}x {ev.cluster.gpu.name}, seq "
        f"{ev.workload.seq_len}, batch {ev.workload.global_batch}: {ev.verdict}, {est.memory.total / GiB:.1f} "
        f"GiB of {est.capacity_bytes / GiB:.1f} GiB ({est.headroom_gib:+.1f} GiB free), "
        f"{est.tokens_per_s_per_gpu:,.0f} tokens/s/GPU ({est.tokens_per_s:,.0f} tokens/s)"
    )


def _table(plan: Plan, found: list[Found], further: Found | None) -> Table:
    """One row per answer (the one change further marked +1): changes, label, memory, throughput, delta."""
    table = Table("#", "changes", "strategy", "peak GiB", "free GiB", "tokens/s/GPU", "vs current", "memory")
    for c in table.columns[3:7]:
        c.justify = "right"
    before = plan.current.est.tokens_per_s_per_gpu
    for i, f in enumerate([*found, *([further] if further else [])], 1):
        est = f.ev.est
        table.add_row(
            str(i) if f is not further else "+1",
            ", ".join(c.text() for c in f.changes) or "none",
            f.ev.strategy.label(),
            f"{est.memory.total / GiB:.1f}",
            f"{est.headroom_gib:.1f}",
            f"{est.tokens_per_s_per_gpu:,.0f}",
            f"{100 * (est.tokens_per_s_per_gpu / before - 1):+.1f}%",
            f.ev.verdict,
        )
    return table


def _print(plan: Plan, nb: Any, found: list[Found], further: Found | None, floor: float, size: int) -> None:
    """The text output: the current verdict, the goal, what was searched, the table and one line per answer."""
    console.print(_current_text(plan.current), highlight=False)
    console.print(_goal_text(plan, floor), highlight=False)
    d, n = nb.distance, sum(nb.reached.values())
    console.print(
        f"searched all {n:,} valid strategies within {nb.max_changes} changes (exact; the space holds "
        f"{size:,}): the nearest meeting the goal are {d} change{'s' if d != 1 else ''} away ({nb.met[d]:,} "
        f"there); the best {len(found)}:",
        highlight=False,
    )
    console.print(_table(plan, found, further))
    for i, f in enumerate(found, 1):
        console.print(f"{i}. {explain(plan, f.ev, f.changes)}", highlight=False)
    if further is not None:
        gain = 100 * (further.ev.est.tokens_per_s / found[0].ev.est.tokens_per_s - 1)
        console.print(
            styled(
                ("one change further", "bold"),
                f" ({further.distance} changes, {gain:+.0f}% tokens/s over 1): "
                + explain(plan, further.ev, further.changes),
            )
        )


def _doc(plan: Plan, nb: Any, found: list[Found], further: Found | None) -> dict[str, Any]:
    """The --json document."""
    inputs = plan.current.doc()["inputs"]
    gain = further.ev.est.tokens_per_s / found[0].ev.est.tokens_per_s - 1 if further else None
    return {
        "inputs": {
            **inputs,
            "num_gpus": plan.cluster.num_gpus,
            "current_num_gpus": plan.current.cluster.num_gpus,
        },
        "goal": plan.goal,
        "min_headroom_gib": plan.min_headroom_gib,
        "max_changes": nb.max_changes,
        "current": _row(plan.current),
        "distance": nb.distance,
        "candidates": [f.doc(plan) for f in found],
        "further": None if further is None else {**further.doc(plan), "tokens_per_s_gain_pct": 100 * gain},
        "searched": {
            "strategies": sum(nb.reached.values()),
            "by_distance": {str(k): v for k, v in sorted(nb.reached.items())},
            "meeting_goal_by_distance": {str(k): v for k, v in sorted(nb.met.items())},
        },
    }


# The options of `autopar fix` besides the problem options it shares with `estimate` (autopar.cli.options).
_FIX: tuple[OptionSpec, ...] = (
    opt(
        "strategy",
        Annotated[
            str,
            typer.Option(
                "--strategy",
                help="The strategy that runs today, as a label ('TP2+SP DP8/Z1 mb1'); its DP gives the GPU count "
                "it runs on",
            ),
        ],
    ),
    opt(
        "goal",
        Annotated[
            str | None,
            typer.Option(
                help="fit (fit with --min-headroom free), faster (fit and more tokens/s) or gpus (run on --gpus "
                "NEW, DP adapted first) \\[default: gpus when --gpus differs from the label's count, else fit "
                "when it lacks the headroom, else faster]"
            ),
        ],
        None,
    ),
    *(
        "model",
        "gpu:one",
        "gpus:fix",
        *CLUSTER,
        *WORKLOAD_EXTRAS,
        *SHAPE,
        "precision:one",
        *STACK,
        "allow_uneven",
    ),
    opt(
        "max_changes",
        Annotated[
            int,
            typer.Option(min=0, help="Knob groups a fix may change at most (the search is exact up to it)"),
        ],
        DEFAULT_MAX_CHANGES,
    ),
    *("min_headroom", "memory_band"),
    opt(
        "allow",
        Annotated[
            list[str] | None,
            typer.Option(help="Also change: precision (bf16 <-> fp8); repeatable or a comma list"),
        ],
        None,
    ),
    *("memory_savers", "fix", "forbid"),
    opt("top", Annotated[int, typer.Option(min=1, help="Answers shown at the nearest distance")], 5),
    *CALIBRATION,
    opt("as_json", Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")], False),
)


@command("fix")
@with_options(*_FIX)
def fix_cmd(f: Flags) -> None:
    """Find the nearest strategies to one that runs today that fit in memory, run faster, or run on another
    GPU count: fewest knob changes first, each change explained with its predicted effect."""
    from autopar.parse import parse_gib
    from autopar.search.margin import search_margin
    from autopar.search.neighbourhood import make_evaluator, nearest

    calib = resolve_calibration(f.calibration, f.no_calibration)
    # the memory margin optimize uses (issue 21): the band's upper end, plus --min-headroom
    allowed = _allowed(f.allow)
    cur, cluster, workload = _current(f.strategy, f, calib)
    margin = search_margin(calib, parse_gib(f.min_headroom), f.memory_band, workload.framework, cur.model)
    want = margin.required_free_gib(cur.est.peak_memory_bytes / GiB)  # free GiB the margin asks of it
    plan = Plan(f.strategy, cur, cluster, _goal(f.goal, cur, cluster, f.strategy, want), want, margin)
    space = _space(plan, cur.model, workload, allowed, f.memory_savers, f.fix, f.forbid)
    floor = cur.est.tokens_per_s * (1 + FASTER_MIN_GAIN) if plan.goal == FASTER else 0.0
    ev = make_evaluator(space, margin, calib)
    nb = nearest(
        space, ev, cur.strategy, workload.precision, f.max_changes, min_tokens_per_s=floor, top=f.top
    )
    if nb.distance is None:
        raise _none_found(plan, nb)
    found = [_found(plan, space, c, calib) for c in nb.best]
    further = _found(plan, space, nb.further, calib) if nb.further else None
    if f.as_json:
        emit_json(_doc(plan, nb, found, further), indent=2)
    else:
        _print(plan, nb, found, further, floor, space.size)
