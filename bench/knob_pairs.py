"""One knob at a time: does the model size the effect of each knob as the sweeps measured it?

A ranking (bench/ranking.py) can be right for the wrong reasons; a pick that changes one knob against a tuned
recipe (a larger micro-batch, a smaller EP) is only as good as the model's estimate of that one knob's effect.
For every pair of measured layouts of one problem (bench/ranking.py's problems: same source, model, cluster and
workload) that differ in exactly one knob, this compares the measured speed-up with the predicted one:

    measured ratio   m(b) / m(a)        predicted ratio   p(b) / p(a)        (a: the smaller value of the knob)

and per knob prints the pairs, how many agree in sign (both above 1 or both below), and the median of
predicted / measured ratio (above 1: the model overstates what going from a to b gains). Knobs are the completed
strategy's fields (Strategy) and the workload options the sweeps vary (ranking.LAYOUT_OPTIONS); the layouts'
labels name everything else they share.

Usage: python bench/knob_pairs.py [--data FILE ...] [--no-seen] [--only SUBSTRING] [--knob NAME] [--pairs]
"""

from __future__ import annotations

import argparse
import difflib
import math
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ranking import LAYOUT_OPTIONS, SWEEPS, Layout, Problem, load_problems  # noqa: E402

from autopar.errors import AutoparError  # noqa: E402
from autopar.specs import Strategy  # noqa: E402

# Strategy fields that are bookkeeping of another knob, not a knob a team sets (dp follows the others).
DERIVED_FIELDS = ("dp",)
KNOBS = tuple(f for f in Strategy.model_fields if f not in DERIVED_FIELDS) + LAYOUT_OPTIONS


@dataclass(frozen=True)
class Pair:
    """Two measured layouts of one problem that differ in one knob; `a` holds the smaller value."""

    problem: str
    knob: str
    a: Layout
    b: Layout
    value_a: object
    value_b: object

    @property
    def measured(self) -> float:
        return self.b.measured / self.a.measured

    @property
    def predicted(self) -> float:
        return self.b.predicted / self.a.predicted


def knob_values(lay: Layout) -> dict[str, object]:
    """The layout's completed strategy fields (the workload options come from its label: layout_options)."""
    st = lay.est.strategy
    return {k: getattr(st, k) for k in Strategy.model_fields if k not in DERIVED_FIELDS}


def _order(x: object) -> tuple[int, float, str]:
    """Sort key that puts numbers by value, False before True, and text alphabetically."""
    if isinstance(x, bool):
        return (0, float(x), "")
    if isinstance(x, int | float):
        return (0, float(x), "")
    return (1, 0.0, str(x))


def pairs_of(p: Problem, options: dict[str, dict[str, object]]) -> Iterator[Pair]:
    """Every pair of the problem's layouts that differs in exactly one knob."""
    for x, y in combinations(p.layouts, 2):
        vx, vy = {**knob_values(x), **options[x.row_id]}, {**knob_values(y), **options[y.row_id]}
        diff = [k for k in KNOBS if vx.get(k) != vy.get(k)]
        if len(diff) != 1:
            continue
        k = diff[0]
        a, b = (x, y) if _order(vx[k]) <= _order(vy[k]) else (y, x)
        va, vb = (vx[k], vy[k]) if a is x else (vy[k], vx[k])
        yield Pair(p.name, k, a, b, va, vb)


def layout_options(p: Problem) -> dict[str, dict[str, object]]:
    """The sweep options of each layout, parsed back from its label (ranking._label appends `k=v`)."""
    out: dict[str, dict[str, object]] = {}
    for lay in p.layouts:
        opts = dict(part.split("=", 1) for part in lay.label.split() if "=" in part)
        out[lay.row_id] = {k: opts.get(k) for k in LAYOUT_OPTIONS}
    return out


# A speed-up within this of 1 counts as no change (rounding makes 3a/3b and a/b differ in the last bit).
TIE = 1e-9


def _direction(ratio: float) -> int:
    """+1 faster, -1 slower, 0 no change (within TIE)."""
    return 0 if abs(ratio - 1.0) <= TIE else (1 if ratio > 1.0 else -1)


def summary(pairs: Sequence[Pair]) -> tuple[int, int, float]:
    """n pairs, how many agree in sign, and the median predicted / measured ratio."""
    agree = sum(_direction(q.predicted) == _direction(q.measured) for q in pairs)
    med = statistics.median(q.predicted / q.measured for q in pairs) if pairs else math.nan
    return len(pairs), agree, med


def _print(by_knob: dict[str, list[Pair]], show_pairs: bool) -> None:
    print(f"{'knob':<24} {'pairs':>5} {'same sign':>9} {'pred/meas (median)':>19}")
    for k in sorted(by_knob):
        n, agree, med = summary(by_knob[k])
        print(f"{k:<24} {n:>5} {agree:>9} {med:>19.2f}")
        if not show_pairs:
            continue
        for q in by_knob[k]:
            print(
                f"    {q.problem.split(':')[0]:<12} {q.value_a!s:>8} -> {q.value_b!s:<8} measured x{q.measured:.2f} "
                f"predicted x{q.predicted:.2f}   ({q.a.label[:60]})"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", type=Path, default=[], help="sweep file (default: sweeps.csv)")
    ap.add_argument("--no-seen", action="store_true", help="leave out the calibration's own sweeps")
    ap.add_argument("--only", default="", help="rows whose id or model contains this")
    ap.add_argument("--knob", default="", help=f"one knob only (one of {', '.join(KNOBS)})")
    ap.add_argument("--pairs", action="store_true", help="print every pair")
    args = ap.parse_args(argv)
    if args.knob and args.knob not in KNOBS:
        close = difflib.get_close_matches(args.knob.replace("-", "_"), KNOBS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        print(f"error: --knob {args.knob!r}: expected one of {', '.join(KNOBS)}{hint}", file=sys.stderr)
        return 2
    try:
        probs = load_problems(args.data or [SWEEPS], seen=not args.no_seen, only=args.only)
    except AutoparError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    by_knob: dict[str, list[Pair]] = {}
    for p in probs:
        for q in pairs_of(p, layout_options(p)):
            if not args.knob or q.knob == args.knob:
                by_knob.setdefault(q.knob, []).append(q)
    if not by_knob:
        print("no pair of measured layouts differs in exactly one knob")
        return 0
    _print(by_knob, args.pairs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
