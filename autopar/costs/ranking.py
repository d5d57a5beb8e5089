"""Ranking hardware options and their cost-vs-time Pareto front (pure functions on plain tuples)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autopar.costs.figures import format_duration, format_usd


@dataclass(frozen=True)
class Candidate:
    """What ranking needs to know about one feasible option."""

    label: str
    time_s: float
    cost_usd: float


def qualifies(c: Candidate, deadline_s: float | None, max_cost_usd: float | None) -> tuple[bool, bool]:
    """(meets the deadline, within the spending cap); True when that limit is not set."""
    return (deadline_s is None or c.time_s <= deadline_s, max_cost_usd is None or c.cost_usd <= max_cost_usd)


def rank(
    cands: Sequence[Candidate], deadline_s: float | None = None, max_cost_usd: float | None = None
) -> list[str]:
    """Labels best first: options within every limit by (cost, time); the rest after, fewest limits
    broken first, then by (time, cost). Ties keep the input order."""

    def key(ic: tuple[int, Candidate]) -> tuple:
        i, c = ic
        ok_t, ok_c = qualifies(c, deadline_s, max_cost_usd)
        broken = (not ok_t) + (not ok_c)
        if broken == 0:
            return (0, c.cost_usd, c.time_s, i)
        return (broken, c.time_s, c.cost_usd, i)

    return [c.label for _, c in sorted(enumerate(cands), key=key)]


def pareto(cands: Sequence[Candidate]) -> list[str]:
    """Labels on the cost-vs-time Pareto front (both minimised), by increasing time.

    A candidate is dropped when another is no slower and no dearer and strictly better in one;
    exact duplicates both stay.
    """
    front = []
    for c in cands:
        dominated = any(
            o.time_s <= c.time_s
            and o.cost_usd <= c.cost_usd
            and (o.time_s < c.time_s or o.cost_usd < c.cost_usd)
            for o in cands
        )
        if not dominated:
            front.append(c)
    return [c.label for c in sorted(front, key=lambda c: (c.time_s, c.cost_usd))]


def headline(
    cands: Sequence[Candidate],
    ranking: Sequence[str],
    deadline_s: float | None,
    max_cost_usd: float | None,
    infeasible: Sequence[str] = (),
) -> str:
    """One plain sentence: the recommendation, or why none of the options works."""
    if not cands:
        which = ", ".join(infeasible) if infeasible else "the options given"
        return f"No option can train this workload: no strategy fits in memory on {which}."
    by = {c.label: c for c in cands}
    fastest = min(cands, key=lambda c: (c.time_s, c.cost_usd))
    cheapest = min(cands, key=lambda c: (c.cost_usd, c.time_s))
    limits = []
    if deadline_s is not None:
        limits.append(f"the {format_duration(deadline_s)} deadline")
    if max_cost_usd is not None:
        limits.append(f"the {format_usd(max_cost_usd)} spending cap")
    meeting = [c for c in cands if all(qualifies(c, deadline_s, max_cost_usd))]
    if deadline_s is not None and not any(c.time_s <= deadline_s for c in cands):
        return (
            f"No option meets the {format_duration(deadline_s)} deadline: the fastest is {fastest.label} "
            f"at {format_duration(fastest.time_s)} ({format_usd(fastest.cost_usd)}); add GPUs or "
            f"relax the deadline."
        )
    if max_cost_usd is not None and not any(c.cost_usd <= max_cost_usd for c in cands):
        return (
            f"No option fits the {format_usd(max_cost_usd)} spending cap: the cheapest is {cheapest.label} "
            f"at {format_usd(cheapest.cost_usd)} ({format_duration(cheapest.time_s)})."
        )
    if limits and not meeting:
        best = by[ranking[0]]
        return (
            f"No option meets both {' and '.join(limits)}; closest is {best.label}: "
            f"{format_duration(best.time_s)}, {format_usd(best.cost_usd)}."
        )
    win = by[ranking[0]]
    why = "cheapest option" + (f" that meets {' and '.join(limits)}" if limits else "")
    text = f"Recommended: {win.label}, the {why}: {format_duration(win.time_s)}, {format_usd(win.cost_usd)}."
    if fastest.label != win.label:
        text += (
            f" Fastest is {fastest.label} at {format_duration(fastest.time_s)} "
            f"({format_usd(fastest.cost_usd)})."
        )
    return text
