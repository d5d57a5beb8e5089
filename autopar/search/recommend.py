"""Recommended points on a Pareto set, each with a plain-language "why", and the no-fit message.

Roles: one per chosen objective (fastest, cheapest, most_headroom, shortest_step, most_efficient)
plus ``balanced``, the knee: every chosen objective is scaled to [0, 1] over the front (best -> 0,
worst -> 1) and the point closest (Euclidean) to the ideal point (0, ..., 0) wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from autopar.layouts import STACKS, family_runs_te_cp
from autopar.objectives import RATIO_SCALE, REGISTRY, Objective
from autopar.perf.pipeline import SCHEDULES
from autopar.perf.software import software_for
from autopar.perf.types import Estimate
from autopar.search.evidence import EvidenceFn, defensible, low_factor
from autopar.search.pareto import (
    NEAR_TIE_FRACTION as NEAR_TIE_FRACTION,  # re-exported: reports, costs read it here
)
from autopar.search.pareto import normalize, reference_bounds, to_min_matrix
from autopar.search.result import Recommendation, TrialRecord
from autopar.units import GiB, format_duration

if TYPE_CHECKING:
    from autopar.search.space import Space
    from autopar.specs import ModelSpec

ROLE_OF = {
    "throughput": "fastest",
    "cost": "cheapest",
    "headroom": "most_headroom",
    "step_time": "shortest_step",
    "mfu": "most_efficient",
}

_BOTTLENECK = {
    "compute": ("compute-bound", ""),
    "tp_comm": (
        "limited by exposed tensor-parallel collectives",
        "a lower TP degree, keeping TP inside the NVLink domain, or TP comm overlap would help",
    ),
    "cp_comm": ("limited by the context-parallel KV exchange", "a lower CP degree would help"),
    "ep_comm": (
        "limited by the expert all-to-all",
        "keeping EP inside a node or a lower EP degree would help",
    ),
    "pp_comm": (
        "limited by pipeline point-to-point transfers",
        "fewer pipeline stages or virtual stages would help",
    ),
    "dp_comm": (
        "limited by data-parallel gradient reduction / parameter gathers",
        "more gradient accumulation (smaller dp or micro-batch), ZeRO-1 instead of ZeRO-3, or faster NICs would help",
    ),
    "bubble": (
        "limited by the pipeline bubble",
        "more micro-batches per step, interleaving (vpp) or fewer pipeline stages would help",
    ),
    "optimizer": ("limited by the optimizer step", "sharding the optimizer (ZeRO-1+) would help"),
}


def _fmt(name: str, v: float) -> str:
    """An objective value with its unit, compactly."""
    if name == "throughput":
        return f"{v:,.0f} tokens/s"
    if name == "headroom":
        return f"{v:.1f} GiB headroom"
    if name == "cost":
        return f"${v:.3f}/Mtoken"
    if name == "step_time":
        return f"{v:.2f} s/step"
    return f"{v:.1f}% MFU"


def _delta(name: str, a: float, b: float) -> str:
    """How b differs from a on one objective, in words ('2.1 GiB more headroom', '3.0% slower')."""
    if name == "headroom":
        return f"{abs(b - a):.1f} GiB {'more' if b > a else 'less'} headroom"
    if name == "mfu":
        return f"{abs(b - a):.1f} points {'more' if b > a else 'less'} MFU"
    rel = (b - a) / abs(a) * 100 if a else 0.0
    word = {
        "throughput": ("faster", "slower"),
        "cost": ("more expensive", "cheaper"),
        "step_time": ("longer per step", "shorter per step"),
    }[name]
    return f"{abs(rel):.1f}% {word[0] if rel >= 0 else word[1]}"


def _compute_hint(r: TrialRecord | None) -> str:
    """What could speed up a compute-bound point, given what it already uses."""
    if r is None:
        return "only faster math or more GPUs help"
    opts = []
    if r.precision == "bf16":
        opts.append("FP8")
    if r.strategy.recompute != "none":
        opts.append("less activation recompute (costs memory)")
    opts.append("more GPUs")
    return "only " + ", ".join(opts[:-1]) + (" or " if len(opts) > 1 else "") + opts[-1] + " would help"


def bottleneck_hint(e: Estimate, r: TrialRecord | None = None) -> tuple[str, str]:
    """(what limits the step, what would help) for an estimate's bottleneck, in words."""
    what, hint = _BOTTLENECK.get(e.bottleneck, (f"limited by {e.bottleneck}", ""))
    return what, (_compute_hint(r) if e.bottleneck == "compute" else hint)


def explain_time(e: Estimate, r: TrialRecord | None = None) -> str:
    """One sentence on where the step time goes and what limits it."""
    t = e.time
    step = e.step_time_s or 1.0
    parts = {
        "compute": t.compute,
        "TP comm": t.tp_comm,
        "CP comm": t.cp_comm,
        "EP comm": t.ep_comm,
        "PP comm": t.pp_comm,
        "DP comm": t.dp_comm,
        "bubble": t.bubble,
        "optimizer": t.optimizer,
    }
    shown = ", ".join(f"{k} {100 * v / step:.0f}%" for k, v in parts.items() if v / step >= 0.01)
    what, hint = bottleneck_hint(e, r)
    rc = f"; recompute is {100 * t.recompute / step:.0f}% of it" if t.recompute / step >= 0.01 else ""
    return f"Its {format_duration(e.step_time_s)} step is {what} ({shown}{rc}){'; ' + hint if hint else ''}."


def explain_memory(e: Estimate) -> str:
    """One sentence on memory use and its largest component."""
    m = e.memory
    cats = {
        "weights": m.weights,
        "gradients": m.grads,
        "optimizer states": m.optimizer,
        "activations": m.activations,
        "logits": m.logits,
        "buffers": m.buffers,
        "overhead": m.overhead,
    }
    big = max(cats, key=lambda k: cats[k])
    return (
        f"It uses {m.total / GiB:.1f} of {e.capacity_bytes / GiB:.1f} GiB per GPU "
        f"({e.headroom_bytes / GiB:.1f} GiB free), mostly {big} ({cats[big] / GiB:.1f} GiB)."
    )


_CP_WHY = {
    "p2p": "ring exchange hidden behind attention",
    "a2a": "Ulysses all-to-all inside the NVLink domain",
    "allgather": "K/V of the whole sequence all-gathered before attention (the Llama 3 form)",
    "a2a+p2p": "all-to-all inside the NVLink domain, ring across",
}
# PyTorch's context_parallel (torchtitan; software.yaml torch_cp) runs both variants as one ring loop of SDPA
# steps; its rotate method only decides how K/V travel (perf/cp.py `_torch_ring`, `_torch_permute_ring`).
_TORCH_CP_WHY = {
    "p2p": "PyTorch's ring attention, K/V passed one hop per step (rotate method alltoall)",
    "allgather": "PyTorch's ring attention, K/V all-gathered once per pass (rotate method allgather)",
}


def _ships(framework: str, what: str, name: str | None, offered: Sequence[str]) -> str:
    """Where the stack runs a chosen value (its own name for it), or that it does not ship it."""
    if name is not None:
        return (
            f"; {framework} runs it as {name} (the search offers {framework}'s {what}: {', '.join(offered)})"
        )
    return f"; {framework} does not ship it (a what-if)"


def explain_layout(r: TrialRecord, framework: str = "megatron", model: ModelSpec | None = None) -> str:
    """One sentence on the pipeline schedule and split, CP variant, HSDP and memory savers a point uses,
    saying what the stack (layouts.STACKS) calls each choice or that it does not ship it; `model` tells
    whether its family runs Transformer Engine's CP on a PyTorch-CP stack."""
    stack = STACKS[framework]
    s, e = r.strategy, r.estimate
    step = (e.step_time_s if e is not None else 0.0) or 1.0
    out = []
    if s.pp > 1 and s.pp_schedule:
        bubble = f", bubble {100 * e.time.bubble / step:.0f}% of the step" if e is not None else ""
        name = stack.schedules.get(s.pp_schedule)
        where = _ships(framework, "schedules", name, list(stack.schedules))
        where += "" if name else f" ({SCHEDULES[s.pp_schedule].source})"
        out.append(f"PP{s.pp}: {SCHEDULES[s.pp_schedule].why}{bubble}{where}")
    if s.pp_first_layers is not None or s.pp_last_layers is not None:
        out.append(f"uneven stages (first {s.pp_first_layers}, last {s.pp_last_layers} layers)")
    elif s.pp_account_embedding or s.pp_account_loss:
        counted = " and ".join(
            n for n, on in (("embedding", s.pp_account_embedding), ("loss", s.pp_account_loss)) if on
        )
        out.append(f"uneven stages ({counted} counted as a layer)")
    if s.cp > 1:
        cp = f", {100 * e.time.cp_comm / step:.0f}% exposed" if e is not None else ""
        ok = s.cp_comm in stack.cp_comm
        where = _ships(framework, "CP variants", s.cp_comm if ok else None, stack.cp_comm)
        torch = software_for(framework).torch_cp and not (model and family_runs_te_cp(framework, model))
        why = (_TORCH_CP_WHY if torch else _CP_WHY).get(s.cp_comm, _CP_WHY[s.cp_comm])
        out.append(f"CP{s.cp} {s.cp_comm}: {why}{cp}{where}")
    if s.dp_shard:
        out.append(
            f"HSDP: ZeRO-3 over groups of {s.dp_shard} data-parallel ranks in one NVLink domain, replicated across"
        )
    if s.optimizer_states or s.optimizer_offload:
        st = f"{s.optimizer_states} optimizer states" if s.optimizer_states else ""
        off = f"{100 * s.optimizer_offload:.0f}% of the optimizer on the CPU" if s.optimizer_offload else ""
        out.append(" and ".join(x for x in (st, off) if x))
    return ("Layout: " + "; ".join(out) + ".") if out else ""


def _head(r: TrialRecord) -> str:
    e = r.estimate
    mfu = f", MFU {100 * e.mfu:.1f}%" if e is not None else ""
    return (
        f"{r.strategy.label()} on {r.num_gpus}x {r.gpu} ({r.precision}): "
        f"{r.values['throughput']:,.0f} tokens/s{mfu}, ${r.values['cost']:.3f}/Mtoken."
    )


def _why(
    role: str,
    r: TrialRecord,
    runner: TrialRecord | None,
    key: str | None,
    objectives: Sequence[Objective],
    dist: float | None = None,
    framework: str = "megatron",
    tied: int = 0,
    model: ModelSpec | None = None,
) -> str:
    """The paragraph for one recommendation (`tied`: other points within NEAR_TIE_FRACTION of it)."""
    if role == "balanced":
        lead = (
            f"Balanced (knee): closest to the ideal point once each objective is scaled to [0, 1] over "
            f"the front (distance {dist:.3f})."
        )
    else:
        lead = f"{role.replace('_', ' ').capitalize()}: best {REGISTRY[key].info.label.split(' (')[0].lower()} on the front"
        lead += (
            f" among points within {100 - 100 * SAFE_SPEED_FRACTION:.0f}% of the best throughput."
            if role == "most_headroom" and any(o.name == "throughput" for o in objectives)
            else f", as a near-tie of {tied + 1} points within {100 * NEAR_TIE_FRACTION:.0f}% of the best."
            if tied
            else "."
        )
    text = [lead, _head(r)]
    if r.estimate is not None:
        text += [explain_time(r.estimate, r), explain_memory(r.estimate)]
    text += [x for x in (explain_layout(r, framework, model),) if x]
    if runner is not None:
        trades = [
            _delta(o.name, r.values[o.name], runner.values[o.name])
            for o in objectives
            if abs(runner.values[o.name] - r.values[o.name]) > 1e-9 * max(1.0, abs(r.values[o.name]))
        ]
        said = (
            (", ".join(trades[:-1]) + " and " + trades[-1])
            if len(trades) > 1
            else (trades[0] if trades else "equal on every objective")
        )
        text.append(
            f"The runner-up, {runner.strategy.label()} on {runner.num_gpus}x {runner.gpu} "
            f"({runner.precision}), is {said}."
        )
    else:
        text.append("It is the only point on the front.")
    return " ".join(text)


# How an objective moves with a throughput correction factor f: value_analytical = value / f**power.
_POWER = {"throughput": 1, "mfu": 1, "cost": -1, "step_time": -1}


def _factor(r: TrialRecord) -> float:
    return r.estimate.calibration_factor if r.estimate is not None else 1.0


def _analytical(r: TrialRecord, name: str) -> float:
    """The objective value the analytical model alone gives (the corrector's factor taken out)."""
    return r.values[name] / _factor(r) ** _POWER[name]


def _band_halfwidth(r: TrialRecord) -> float:
    """Half the width of the correction's 80% band, in log units (0 without a band)."""
    e = r.estimate
    if e is None or e.tokens_per_s_band is None or e.tokens_per_s <= 0:
        return 0.0
    lo, hi = e.tokens_per_s_band
    half: float = 0.5 * (np.log(max(hi, 1e-300)) - np.log(max(lo, 1e-300)))
    return half


def correction_effect(
    best: TrialRecord, pool: Sequence[TrialRecord], o: Objective
) -> tuple[TrialRecord | None, bool, str]:
    """Did the corrector change which point leads on objective `o`? (analytical leader or None, tie?, text).

    A tie: the leader leads only because of the correction and the two points' factors differ by less
    than the correction's own 80% band, i.e. the lead is inside what the corrector cannot tell apart.
    """
    if o.name not in _POWER or all(abs(_factor(r) - 1.0) < 1e-12 for r in pool):
        return None, False, ""
    lead = min(pool, key=lambda r: (o.to_min(_analytical(r, o.name)), r.number))
    if lead is best or _analytical(lead, o.name) == _analytical(best, o.name):
        return None, False, "The corrector did not change which point leads."
    a_lead = abs(_analytical(lead, o.name) / _analytical(best, o.name) - 1) * 100
    c_lead = abs(best.values[o.name] / lead.values[o.name] - 1) * 100
    diff = abs(np.log(_factor(best) / _factor(lead)))
    half = min(_band_halfwidth(best), _band_halfwidth(lead)) or max(
        _band_halfwidth(best), _band_halfwidth(lead)
    )
    tie = diff <= half
    text = (
        f"The corrector changed the ranking: on the analytical model alone {lead.strategy.label()} leads by "
        f"{a_lead:.1f}%; the correction (x{_factor(best):.2f} here, x{_factor(lead):.2f} there) puts this "
        f"point first by {c_lead:.1f}%."
    )
    if tie:
        text += (
            f" That {100 * np.expm1(diff):.1f}% difference in correction is inside the correction's own 80% "
            f"band (±{100 * np.expm1(half):.0f}%): treat the two as a tie, not a winner."
        )
    else:
        text += f" The difference in correction exceeds its 80% band (±{100 * np.expm1(half):.0f}%)."
    return lead, tie, text


def defended_why(
    best: TrialRecord,
    pool: Sequence[TrialRecord],
    o: Objective,
    ev: EvidenceFn,
    ties: Sequence[TrialRecord] = (),
) -> str:
    """' Ranked by ...' when the point with the best central value is neither the one chosen nor one of
    its near-ties: what its centre claims and why its band's pessimistic end does not defend it ('' else)."""
    lead = min(pool, key=lambda r: (o.to_min(r.values[o.name]), r.number))
    if lead is best or any(lead is t for t in ties) or lead.values[o.name] == best.values[o.name]:
        return ""
    gain = _delta(o.name, best.values[o.name], lead.values[o.name])
    far = ev(lead)
    where = (
        f" ({far.steps:.1f} steps from the nearest published run, {far.nearest.label}: "
        f"{'; '.join(far.differences)})"
        if far.beyond and far.nearest is not None
        else ""
    )
    return (
        f" Ranked by what the evidence defends (the pessimistic end of each 80% band): "
        f"{lead.strategy.label()} is {gain} at its centre, but its band reaches down to "
        f"{100 * low_factor(lead, ev):.0f}% of it{where}: {_fmt(o.name, defensible(lead, o.name, ev))} "
        f"against this point's {_fmt(o.name, defensible(best, o.name, ev))}."
    )


def knee_order(front: Sequence[TrialRecord], objectives: Sequence[Objective]) -> tuple[list[int], np.ndarray]:
    """Indices of the front sorted by normalised distance to the ideal point, and the distances."""
    F = to_min_matrix(front, objectives)
    ideal, nadir = reference_bounds(F)
    d = np.linalg.norm(normalize(F, ideal, nadir), axis=1)
    order = sorted(range(len(front)), key=lambda i: (round(float(d[i]), 12), front[i].number))
    return order, d


SAFE_SPEED_FRACTION = 0.9  # "most headroom" is chosen among points with >= 90% of the best throughput


def _free_gib(r: TrialRecord) -> float:
    """Free GiB per GPU: the headroom objective's value when it is one, else the estimate's."""
    if "headroom" in r.values:
        return r.values["headroom"]
    return r.estimate.headroom_bytes / GiB if r.estimate is not None else -np.inf


def near_tie_choice(
    ranked: Sequence[TrialRecord], name: str, value: Callable[[TrialRecord], float] | None = None
) -> tuple[TrialRecord, list[TrialRecord]]:
    """The recommended point among `ranked` (best first on objective `name`, by `value`: the objective's
    value unless given) and the near-ties it stands for: every point within NEAR_TIE_FRACTION of the best
    value; among them the most free memory, then the label, so the choice depends on the set of points
    found, not on the order they were found in."""
    val = value or (lambda r: r.values[name])
    top = val(ranked[0])
    ties = [r for r in ranked if abs(val(r) - top) <= NEAR_TIE_FRACTION * abs(top)]
    choice = min(ties, key=lambda r: (-_free_gib(r), r.strategy.label(), r.gpu, r.num_gpus, r.precision))
    return choice, [r for r in ties if r is not choice]


def recommend(
    front: Sequence[TrialRecord],
    objectives: Sequence[Objective],
    feasible: Sequence[TrialRecord] = (),
    framework: str = "megatron",
    evidence: EvidenceFn | None = None,
    model: ModelSpec | None = None,
) -> list[Recommendation]:
    """Fastest / cheapest / most headroom (per chosen objective) and the balanced knee, with reasons.

    `feasible` (every feasible trial) lets a recommendation say when the corrector changed which point
    leads: the analytical leader may have left the corrected front. With `evidence` (search/evidence.py)
    the throughput-like objectives rank by what each point can defend: its value at the pessimistic end of
    its 80% band, widened where no measured run resembles it (see `defended_why`)."""
    if not front:
        return []
    names = {o.name for o in objectives}
    best_tps = max(r.values["throughput"] for r in front) if "throughput" in names else None
    out = [
        _recommend_for(o, front, objectives, feasible, framework, evidence, model, best_tps)
        for o in objectives
    ]
    if _one_axis(front, objectives):
        return out  # every objective follows throughput on one hardware option: there is no knee to offer
    order, d = knee_order(front, objectives)
    best = front[order[0]]
    runner = front[order[1]] if len(order) > 1 else None
    out.append(
        Recommendation(
            "balanced",
            best,
            _why("balanced", best, runner, None, objectives, float(d[order[0]]), framework, model=model),
        )
    )
    return out


def _one_axis(front: Sequence[TrialRecord], objectives: Sequence[Objective]) -> bool:
    """Whether the front lies on one axis: a single hardware option (GPU, count, precision) and objectives
    that are all functions of throughput there ($/Mtoken = price x GPUs / throughput, step time, MFU)."""
    hardware = {(r.gpu, r.num_gpus, r.precision) for r in front}
    return len(hardware) == 1 and all(o.name in RATIO_SCALE for o in objectives)


def _recommend_for(
    o: Objective,
    front: Sequence[TrialRecord],
    objectives: Sequence[Objective],
    feasible: Sequence[TrialRecord],
    framework: str,
    evidence: EvidenceFn | None,
    model: ModelSpec | None,
    best_tps: float | None,
) -> Recommendation:
    """The recommendation for one objective (see `recommend`)."""
    pool = front
    if o.name == "headroom" and best_tps is not None:
        # The front's extreme headroom point is usually uselessly slow: offer the most headroom among
        # strategies within SAFE_SPEED_FRACTION of the best throughput instead.
        pool = [r for r in front if r.values["throughput"] >= SAFE_SPEED_FRACTION * best_tps] or front

    def value(r: TrialRecord) -> float:
        return defensible(r, o.name, evidence)

    ranked = sorted(pool, key=lambda r: (o.to_min(value(r)), r.number))
    best = ranked[0]
    ties: list[TrialRecord] = []
    if o.name != "headroom":  # most headroom is already the tie-break
        best, ties = near_tie_choice(ranked, o.name, value)
    rest = [r for r in ranked if r is not best]
    runner = next((r for r in rest if r.values[o.name] != best.values[o.name]), rest[0] if rest else None)
    why = _why(
        ROLE_OF[o.name], best, runner, o.name, objectives, framework=framework, tied=len(ties), model=model
    )
    if ties:
        why += (
            f" Near-tie: {len(ties)} other point(s) within {100 * NEAR_TIE_FRACTION:.0f}% on this objective "
            f"(e.g. {ties[0].strategy.label()}); this one is chosen for the most free memory among them."
        )
    _, tie, note = correction_effect(best, [*pool, *feasible], o)
    if note:
        why = ("Tie (within the corrector's band). " if tie else "") + why + " " + note
    said = ""
    if evidence is not None and o.name in _POWER:
        why += defended_why(best, pool, o, evidence, ties)
        said = evidence(best).sentence()
        why += f" {said}" if said else ""
    return Recommendation(ROLE_OF[o.name], best, why, said)


def no_fit_message(model: ModelSpec, space: Space, records: Sequence[TrialRecord]) -> str:
    """Why nothing is feasible: the smallest memory need found and what to change."""
    ests = [(r, r.estimate) for r in records if r.estimate is not None]
    if not ests:
        reasons = sorted({r.reason for r in records if r.reason})[:3]
        return (
            f"no strategy for {model.name} passes the parallelism rules on these GPUs"
            + (f" (e.g. {'; '.join(reasons)})" if reasons else "")
            + "; change --gpus, --global-batch or --seq-len"
        )
    best, e = min(ests, key=lambda re: re[1].peak_memory_bytes - re[1].capacity_bytes)
    s = best.strategy
    if e.fits:
        return (
            "strategies fit in memory but none meets the constraints (the memory margin: the band's upper end "
            "and --min-headroom, or --max-cost); "
            f"the closest is {s.label()}: {best.reason}; relax the constraint"
        )
    tips = ["more GPUs (--gpus)"]
    if s.recompute != "full":
        tips.append("full activation recompute")
    if s.zero != 3:
        tips.append("ZeRO-3")
    tips += ["a shorter --seq-len", "a smaller --global-batch", "a GPU with more memory (--gpu)"]
    return (
        f"nothing fits in memory: the smallest need found is {e.peak_memory_bytes / GiB:.1f} GiB per GPU "
        f"({s.label()} on {best.num_gpus}x {best.gpu}) against {e.capacity_bytes / GiB:.1f} GiB usable; "
        f"try {', '.join(tips)}"
    )
