"""The nearest strategies to a current one that meet a goal (`autopar fix`): a knob-change distance and an
exact search by distance.

**Distance.** The number of knob groups (`KNOB_GROUPS`) whose value differs between two strategies, each put in
its canonical form first (a knob that cannot act is read as off: SP with tp = 1, the CP variant with cp = 1,
virtual stages, schedule and split with pp = 1, the HSDP degree without ZeRO-3), plus one when the precision
differs. A group holds knobs that move together (cp with its variant, ZeRO with its HSDP degree, vpp with the
schedule it implies). dp is not a knob: on a given GPU count it follows from tp·pp·cp, and the global batch
stays fixed, so the gradient-accumulation count follows from dp·micro-batch. It is a Hamming distance on the
canonical forms, hence a metric on them (tests/search/test_neighbourhood.py).

**Search.** Every strategy of the space (only valid ones: the global batch divisible by dp·micro-batch, and
every other rule of autopar.layouts) gets its distance on arrays; those within `max_changes` are estimated on
arrays (search/sweep.block_outcomes: the model, corrector and memory feasibility of optimize's sweep); the goal
keeps some, and the smallest distance that has any wins. Exact within `max_changes`: nothing is sampled.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from autopar.layouts import Axis, split_of
from autopar.perf.vector_columns import CP_COMM_CODES, SCHEDULE_CODES, StrategyColumns, columns_of
from autopar.search.evaluate import Evaluator, resolve_price
from autopar.search.margin import MemoryMargin
from autopar.search.space import Layout, Space, split_code
from autopar.search.sweep import BLOCK_ROWS, block_outcomes
from autopar.specs import Strategy

# Knob groups, in the order changes are listed. `Axis` members are the parallel degrees.
KNOB_GROUPS: tuple[str, ...] = (
    Axis.TP, "sp", Axis.PP, Axis.VPP, "split", Axis.CP, Axis.EP, Axis.ETP, "zero", "micro_batch",
    "recompute", "act_offload", "optimizer_states", "optimizer_offload",
)  # fmt: skip
PRECISION = "precision"  # a change of the hardware option's GEMM precision (only with `autopar fix --allow`)
# Groups a Layout fixes (one value per layout): a layout that differs in k of them is at least k away.
LAYOUT_GROUPS: tuple[str, ...] = (Axis.TP, Axis.PP, Axis.CP, Axis.EP, Axis.ETP)
# An answer one change further is shown when its throughput beats the nearest answer's by this share: below
# it, the model's error (~10% median on throughput, README accuracy tables) could reverse the order.
MUCH_BETTER = 0.10
# The codes a knob that cannot act is read as (its value on a strategy without that axis).
_NO_PP_SCHEDULE, _NO_CP_COMM = SCHEDULE_CODES.index("1f1b"), CP_COMM_CODES.index("p2p")


def _canonical(c: StrategyColumns) -> dict[str, tuple[np.ndarray, ...]]:
    """Each knob group's values per row, a knob that cannot act set to its off value."""
    on_tp, on_pp, on_cp = c.tp > 1, c.pp > 1, c.cp > 1
    split = (c.pp_first_layers, c.pp_last_layers, c.pp_account_embedding, c.pp_account_loss)
    return {
        Axis.TP: (c.tp,),
        "sp": (c.sp & on_tp,),
        Axis.PP: (c.pp,),
        Axis.VPP: (np.where(on_pp, c.vpp, 1), np.where(on_pp, c.pp_schedule, _NO_PP_SCHEDULE)),
        "split": tuple(np.where(on_pp, x, x.dtype.type(-1) if x.dtype != bool else False) for x in split),
        Axis.CP: (c.cp, np.where(on_cp, c.cp_comm, _NO_CP_COMM)),
        Axis.EP: (c.ep,),
        Axis.ETP: (c.etp,),
        "zero": (c.zero, np.where(c.zero == 3, c.dp_shard, 0)),
        "micro_batch": (c.micro_batch,),
        "recompute": (c.recompute,),
        "act_offload": (np.maximum(c.activation_offload_layers, 0),),
        "optimizer_states": (c.optimizer_states,),
        "optimizer_offload": (c.optimizer_offload,),
    }


def changed_groups(cols: StrategyColumns, ref: StrategyColumns) -> dict[str, np.ndarray]:
    """Per knob group, whether each row of `cols` differs from the one row of `ref` (canonical forms)."""
    a, b = _canonical(cols), _canonical(ref)
    out = {}
    for name in KNOB_GROUPS:
        diff = np.zeros(len(cols), dtype=bool)
        for x, y in zip(a[name], b[name], strict=True):
            diff |= x != y[0]
        out[name] = diff
    return out


def distances(cols: StrategyColumns, ref: StrategyColumns) -> np.ndarray:
    """The knob-change distance of each row of `cols` to the one row of `ref`."""
    return np.sum(list(changed_groups(cols, ref).values()), axis=0, dtype=np.int64).reshape(len(cols))


def distance(a: Strategy, b: Strategy) -> int:
    """The knob-change distance between two strategies (same precision)."""
    return int(distances(columns_of([a]), columns_of([b]))[0])


def _shown(group: str, s: Strategy) -> str:
    """A knob group's value in a change line, e.g. cp '2-a2a', zero '3/HSDP8'."""
    if group == "sp":
        return "on" if s.sp and s.tp > 1 else "off"
    if group == Axis.VPP:
        implied = "interleaved" if (s.vpp or 1) > 1 else "1f1b"
        return f"{s.vpp}" + (f" {s.pp_schedule}" if s.pp > 1 and s.pp_schedule != implied else "")
    if group == "split":
        return split_code(split_of(s)) if s.pp > 1 else "even"
    if group == Axis.CP:
        return f"{s.cp}" + (f"-{s.cp_comm}" if s.cp > 1 and s.cp_comm != "p2p" else "")  # as in labels
    if group == "zero":
        return f"{s.zero}" + (f"/HSDP{s.dp_shard}" if s.zero == 3 and s.dp_shard else "")
    if group == "act_offload":
        return f"{s.activation_offload_layers or 0} layers"
    if group == "optimizer_states":
        return s.optimizer_states or "as optimizer"
    if group == "optimizer_offload":
        return f"{s.optimizer_offload:g}"
    return str(getattr(s, group))


@dataclass(frozen=True)
class Change:
    """One knob group changed: its name and its value before and after, as shown."""

    knob: str
    before: str
    after: str

    def text(self) -> str:
        """E.g. 'cp 1→2'."""
        return f"{self.knob} {self.before}→{self.after}"


def changes(a: Strategy, b: Strategy, precisions: tuple[str, str] | None = None) -> list[Change]:
    """The knob groups that differ from `a` to `b` (in KNOB_GROUPS order), and the precision when it does."""
    diff = changed_groups(columns_of([b]), columns_of([a]))
    out = [Change(str(g), _shown(g, a), _shown(g, b)) for g in KNOB_GROUPS if diff[g][0]]
    if precisions is not None and precisions[0] != precisions[1]:
        out.append(Change(PRECISION, *precisions))
    return out


@dataclass(frozen=True)
class Candidate:
    """A strategy of the space that meets the goal, with its distance and the figures the goal reads."""

    hw: int  # hardware option of the space
    strategy: Strategy
    distance: int
    tokens_per_s: float  # cluster, corrected as the evaluator corrects
    headroom_gib: float


@dataclass(frozen=True)
class Neighbourhood:
    """The outcome of `nearest`: the best candidates at the smallest distance that has any, and the counts."""

    distance: int | None  # None: nothing within max_changes meets the goal
    best: list[Candidate]
    further: Candidate | None  # the best one change further, when MUCH_BETTER than best[0]
    reached: dict[int, int]  # strategies estimated, per distance
    met: dict[int, int]  # strategies meeting the goal, per distance
    max_changes: int


def make_evaluator(space: Space, margin: MemoryMargin, calibration: object) -> Evaluator:
    """The evaluator of the space's points: on-demand prices, the memory margin, the corrector."""
    prices = [resolve_price(h.cluster, None, "on_demand")[0] for h in space.hardware]
    return Evaluator(
        space.model,
        space.hardware,
        prices=prices,
        memory_margin=margin,
        calibration=calibration,
        space_points=True,
    )


def _layout_bound(lay: Layout, s: Strategy) -> int:
    """A lower bound of the distance from `s` to any strategy of the layout: the degrees it fixes."""
    return sum((getattr(lay, g) or 0) != (getattr(s, g) or 0) for g in LAYOUT_GROUPS)


Piece = tuple[int, np.ndarray, np.ndarray, StrategyColumns]  # layout index, rows, distances, their columns


def _reachable(space: Space, current: Strategy, precision: str, max_changes: int) -> Iterator[Piece]:
    """Each layout's strategies within `max_changes` of `current` (in layout order)."""
    ref = columns_of([current])
    for k, lay in enumerate(space.layouts):
        extra = int(space.hardware[lay.hw].precision != precision)
        if extra + _layout_bound(lay, current) > max_changes:
            continue
        cols = lay.columns()
        d = distances(cols, ref) + extra
        rows = np.flatnonzero(d <= max_changes)
        if len(rows):
            yield k, rows, d[rows], cols.take(rows)


def _batches(space: Space, pieces: Iterator[Piece]) -> Iterator[list[Piece]]:
    """The pieces in runs of one hardware option and at most BLOCK_ROWS rows (a layout's may be longer)."""
    batch: list[Piece] = []
    rows = 0
    for p in pieces:
        n = len(p[1])
        if batch and (space.layouts[batch[0][0]].hw != space.layouts[p[0]].hw or rows + n > BLOCK_ROWS):
            yield batch
            batch, rows = [], 0
        batch.append(p)
        rows += n
    if batch:
        yield batch


@dataclass
class _Scan:
    """Per estimated strategy: layout index, row in the layout, distance, throughput, headroom, goal met."""

    k: np.ndarray
    j: np.ndarray
    d: np.ndarray
    tps: np.ndarray
    head: np.ndarray
    met: np.ndarray


def _scan(
    space: Space, ev: Evaluator, current: Strategy, precision: str, max_changes: int, min_tokens_per_s: float
) -> _Scan:
    """Estimate every strategy within `max_changes` on arrays; the goal: feasible (fits with the headroom)
    and more than `min_tokens_per_s`."""
    from autopar.search.space_columns import ColumnBlock

    parts: list[tuple[np.ndarray, ...]] = []
    for batch in _batches(space, _reachable(space, current, precision, max_changes)):
        cols = StrategyColumns.concat([p[3] for p in batch])
        values, feasible = block_outcomes(space, ev, ColumnBlock(space.layouts[batch[0][0]].hw, 0, cols))
        tps = values["throughput"]
        k = np.concatenate([np.full(len(p[1]), p[0], dtype=np.int64) for p in batch])
        j = np.concatenate([p[1] for p in batch])
        d = np.concatenate([p[2] for p in batch])
        parts.append((k, j, d, tps, values["headroom"], feasible & (tps > min_tokens_per_s)))
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return _Scan(empty, empty, empty, np.empty(0), np.empty(0), np.empty(0, dtype=bool))
    return _Scan(*(np.concatenate(col) for col in zip(*parts, strict=True)))


def _ranked(space: Space, scan: _Scan, at: int, top: int) -> list[Candidate]:
    """The `top` goal-meeting strategies at distance `at`: most tokens/s first, then most headroom, then the
    space's order (deterministic)."""
    rows = np.flatnonzero(scan.met & (scan.d == at))
    order = rows[np.lexsort((scan.j[rows], scan.k[rows], -scan.head[rows], -scan.tps[rows]))][:top]
    out = []
    for i in order:
        lay = space.layouts[int(scan.k[i])]
        s = lay.strategy(int(scan.j[i]))
        out.append(Candidate(lay.hw, s, int(scan.d[i]), float(scan.tps[i]), float(scan.head[i])))
    return out


def _counts(d: np.ndarray) -> dict[int, int]:
    values, n = np.unique(d, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, n, strict=True)}


def nearest(
    space: Space,
    ev: Evaluator,
    current: Strategy,
    precision: str,
    max_changes: int,
    *,
    min_tokens_per_s: float = 0.0,
    top: int = 5,
) -> Neighbourhood:
    """The strategies of `space` nearest to `current` (trained in `precision`) that fit with the evaluator's
    headroom and exceed `min_tokens_per_s`: the `top` best at the smallest distance that has any (≤
    max_changes), and the best one change further when it is MUCH_BETTER."""
    scan = _scan(space, ev, current, precision, max_changes, min_tokens_per_s)
    reached, met = _counts(scan.d), _counts(scan.d[scan.met])
    if not met:
        return Neighbourhood(None, [], None, reached, met, max_changes)
    at = min(met)
    best = _ranked(space, scan, at, top)
    further = _ranked(space, scan, at + 1, 1)
    much = further and further[0].tokens_per_s >= best[0].tokens_per_s * (1 + MUCH_BETTER)
    return Neighbourhood(at, best, further[0] if much else None, reached, met, max_changes)


__all__ = [
    "KNOB_GROUPS", "MUCH_BETTER", "Candidate", "Change", "Neighbourhood", "changes", "distance", "distances",
    "make_evaluator", "nearest",
]  # fmt: skip
