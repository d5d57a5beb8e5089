"""The default search: exact where exact is cheap, NSGA-II over layouts with exact inner solves where not.

`run_auto` picks the method by the space's size. Up to EXACT_LIMIT points the whole space is swept on
arrays (search/sweep.py): the front is the exact one. Above it (procurement what-ifs: GPU types x counts
x every knob, 10^6-10^8 points) the search splits the knobs in two:

- outer (expensive, combinatorial): the hardware option and the tp/pp/cp/ep/etp degrees, i.e. one
  `Layout`. Optuna's stock NSGA-II proposes them in an ordinary in-memory study (metric names, named
  constraints, user attrs), one trial per layout;
- inner (cheap): micro-batch, vpp, schedule, SP, ZeRO/HSDP, recompute, CP variant, split and memory
  savers, every combination of a layout estimated at once by the vectorized model (`solve_layouts`,
  several layouts of one hardware option per call; NSGA-II's proposals are asked a population at a time).
  The trial's values are the layout's best feasible value per objective (the ideal point of its inner
  front), its constraints those of its least-violating point when none is feasible, and the inner Pareto
  set is merged into the result's front.

After NSGA-II, an exact neighbourhood pass solves every unsolved layout one outer step from a front layout
(the next tp/pp/cp/ep/etp degree, a trade between two of tp/pp/cp with dp kept, the same degrees on
another GPU count or type), then every layout on the hardware of each objective's best point, until
nothing new reaches the front (or NEIGHBOUR_POINT_CAP points were estimated). Deterministic per seed: NSGA-II is seeded and every other step
is ordered by layout index. Records (what a user sees) are the front and a stride sample, evaluated
again by the scalar evaluator, as the sweep does.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autopar.layouts import Axis
from autopar.objectives import Objective
from autopar.search.evaluate import COST_CONSTRAINT, MEMORY_CONSTRAINT, Evaluator
from autopar.search.jsontypes import JSONDict, Key
from autopar.search.loops import Run, population_size
from autopar.search.progress import SearchProgress
from autopar.search.space import Layout, Space
from autopar.search.sweep import BLOCK_ROWS, _Front, block_outcomes, keep_records, run_sweep, sweepable

if TYPE_CHECKING:
    import optuna

    from autopar.search.storage import StorageSpec

# Points swept exactly: at the vectorized model's ~200-500k strategies/s (calibrated, this 2-core machine)
# about 2-5 s; every bench problem but the procurement ones (0.1-0.85M points) is below it.
EXACT_LIMIT = 1_000_000
AUTO_SAMPLE_KEPT = 150  # records besides the front (the sweep keeps 2,000: ~0.6 s of scalar estimates here)
NEIGHBOUR_POINT_CAP = 1_000_000  # points the passes after NSGA-II may estimate (bounds their time; at 600k
# the 405B procurement front fell to 0.989 of the reference hypervolume)
# A layout trial estimates a whole layout (~500-5,000 strategies, 3-9 ms here), so NSGA-II proposes
# budget / 4 layouts: on the 405B procurement problem 150 layouts plus the neighbourhood pass reach the
# exhaustive front (bench/search.py), while 40-100 leave it 3-35% short in hypervolume.
LAYOUTS_PER_TRIAL = 0.25
# Neighbourhood trades: two of tp/pp/cp each change by at most this factor with dp kept (TP8 CP1 -> TP4
# CP2): one-knob moves change dp, so without trades a search stalls one such step from the fastest layout.
TRADE_RATIO = 2.5
OUTER_KNOBS = ("gpu", "num_gpus", "precision", Axis.TP, Axis.PP, Axis.CP, Axis.EP, Axis.ETP)
MAX_ASK_FACTOR = 4  # NSGA-II proposals handled per budget trial at most (duplicates end the search)


def choose_method(space: Space, ev: Evaluator, storage: StorageSpec) -> str:
    """'nsga2' (a stored study, or a model/corrector the array path cannot run), 'exhaustive' (exact sweep)
    or 'hybrid' (NSGA-II over layouts, exact inner solves)."""
    if storage is not None or not sweepable(space, ev):
        return "nsga2"
    return "exhaustive" if space.size <= EXACT_LIMIT else "hybrid"


@dataclass
class LayoutSolve:
    """The exact inner solve of one layout: its feasible front and what its outer trial reports."""

    values: list[float]  # the trial's values (display units): best feasible per objective, or least violating
    constraints: dict[str, float]  # Optuna constraints of the trial (<= 0 feasible)
    n_feasible: int
    best: dict[str, int]  # objective name -> point index of the best feasible value


def layout_starts(space: Space) -> list[int]:
    """Index of each layout's first point in the space."""
    return [c - lay.size for c, lay in zip(space._cum, space.layouts, strict=True)]


def solve_layouts(
    space: Space, ev: Evaluator, ks: Sequence[int], starts: Sequence[int], objectives: Sequence[Objective]
) -> dict[int, tuple[LayoutSolve, np.ndarray, np.ndarray]]:
    """Estimate every inner combination of the layouts `ks` on arrays, several layouts of one hardware
    option per call (up to BLOCK_ROWS rows: the vectorized model's cost per call is mostly fixed).
    Per layout: its solve, its feasible rows (minimised) and their point indices."""
    from autopar.perf.vector_columns import StrategyColumns
    from autopar.search.space_columns import ColumnBlock

    out: dict[int, tuple[LayoutSolve, np.ndarray, np.ndarray]] = {}
    for group in _batches(space, ks):
        cols = StrategyColumns.concat([space.layouts[k].columns() for k in group])
        values, feasible = block_outcomes(space, ev, ColumnBlock(space.layouts[group[0]].hw, 0, cols))
        F = np.column_stack([values[o.name] * (-1.0 if o.maximize else 1.0) for o in objectives])
        at = 0
        for k in group:
            n = space.layouts[k].size
            part = slice(at, at + n)
            sub = {name: v[part] for name, v in values.items()}
            out[k] = _solve_one(F[part], sub, feasible[part], starts[k], ev, objectives)
            at += n
    return out


def _batches(space: Space, ks: Sequence[int]) -> list[list[int]]:
    """The layouts in index order, cut into runs of one hardware option and at most BLOCK_ROWS rows."""
    out: list[list[int]] = []
    rows = 0
    for k in sorted(set(ks)):
        lay = space.layouts[k]
        if out and space.layouts[out[-1][0]].hw == lay.hw and rows + lay.size <= BLOCK_ROWS:
            out[-1].append(k)
            rows += lay.size
        else:
            out.append([k])
            rows = lay.size
    return out


def _solve_one(
    F: np.ndarray,
    values: dict[str, np.ndarray],
    feasible: np.ndarray,
    start: int,
    ev: Evaluator,
    objectives: Sequence[Objective],
) -> tuple[LayoutSolve, np.ndarray, np.ndarray]:
    """One layout's front, trial values and constraints from its rows' outcomes."""
    rows = np.flatnonzero(feasible)
    Ff, idx = F[rows], start + rows
    if len(rows):
        at = rows[Ff.argmin(axis=0)]
        vals = [float(values[o.name][i]) for o, i in zip(objectives, at, strict=True)]
        best = {o.name: int(start + i) for o, i in zip(objectives, at, strict=True)}
        cons = {MEMORY_CONSTRAINT: float(np.min(values[MEMORY_CONSTRAINT][rows]))}
        if ev.max_cost is not None:
            cons[COST_CONSTRAINT] = float(np.min((values["cost"][rows] - ev.max_cost) / ev.max_cost))
        cons = {k: min(v, 0.0) for k, v in cons.items()}
    else:
        vals, cons, best = _least_violating(values, ev, objectives)
    return LayoutSolve(vals, cons, len(rows), best), Ff, idx


def _least_violating(
    values: dict[str, np.ndarray], ev: Evaluator, objectives: Sequence[Objective]
) -> tuple[list[float], dict[str, float], dict[str, int]]:
    """Trial values and constraints of a layout with no feasible point: those of its least violating point
    (short of memory by at least 1e-3 GiB, as Evaluator._finish reports an out-of-memory point)."""
    need = np.maximum(values[MEMORY_CONSTRAINT], 1e-3)
    viol = need.copy()
    excess = None
    if ev.max_cost is not None:
        excess = (values["cost"] - ev.max_cost) / ev.max_cost
        viol = viol + np.maximum(excess, 0.0)
    i = int(np.argmin(viol))
    cons = {MEMORY_CONSTRAINT: float(need[i])}
    if excess is not None:
        cons[COST_CONSTRAINT] = float(excess[i])
    return [float(values[o.name][i]) for o in objectives], cons, {}


@dataclass
class _Outer:
    """State of the outer search: solved layouts, the merged front and the totals."""

    space: Space
    ev: Evaluator
    objectives: Sequence[Objective]
    starts: list[int]
    front: _Front
    solved: dict[int, LayoutSolve]
    evaluated: int = 0

    def solve(self, ks: Sequence[int]) -> None:
        """Solve the layouts of `ks` not solved yet (together) and merge their fronts, in index order."""
        new = sorted({k for k in ks if k not in self.solved})
        if not new:
            return
        solved = sorted(solve_layouts(self.space, self.ev, new, self.starts, self.objectives).items())
        F = np.vstack([F for _, (_, F, _) in solved])
        idx = np.concatenate([i for _, (_, _, i) in solved])
        for at in range(0, len(idx), BLOCK_ROWS):  # bounded memory: the add compares rows with the front
            self.front.add(F[at : at + BLOCK_ROWS], idx[at : at + BLOCK_ROWS])
        for k, (sol, _, _) in solved:
            self.evaluated += self.space.layouts[k].size
            self.solved[k] = sol

    def layout_at(self, i: int) -> int:
        """The layout holding point i."""
        return int(np.searchsorted(np.asarray(self.starts), i, side="right")) - 1

    def front_layouts(self) -> list[int]:
        """Layouts holding a point of the merged front, in layout order."""
        ks = np.searchsorted(np.asarray(self.starts), self.front.idx, side="right") - 1
        return sorted(set(map(int, ks)))


def outer_budget(budget: int) -> int:
    """Layouts NSGA-II proposes for a budget of `budget` strategy trials (at least one population)."""
    return max(population_size(budget), int(budget * LAYOUTS_PER_TRIAL))


def outer_distributions(space: Space) -> dict[str, list[Any]]:
    """The outer knobs' categorical choices (those with more than one value)."""
    return {k: v for k, v in space.distributions().items() if k in OUTER_KNOBS}


def grid_index(space: Space) -> dict[tuple[int, int, int, int, int], list[tuple[int, int]]]:
    """(hardware, tp, pp, cp, ep) -> its layouts' (etp, index), etp ascending (0 for dense)."""
    out: dict[tuple[int, int, int, int, int], list[tuple[int, int]]] = {}
    for k, lay in enumerate(space.layouts):
        out.setdefault((lay.hw, lay.tp, lay.pp, lay.cp, lay.ep), []).append((lay.etp or 0, k))
    for v in out.values():
        v.sort()
    return out


def layout_of(
    space: Space, params: JSONDict, index: dict[tuple[int, int, int, int, int], list[tuple[int, int]]]
) -> int | str:
    """The layout index an outer proposal names (etp repaired to the largest offered value <= the wish, as
    `Space.decode` does), or why it is none."""
    from autopar import layouts as lay_rules

    h0, first = space.hardware[0], space.layouts[0]
    defaults = (h0.gpu, h0.num_gpus, h0.precision)
    gpu, n, prec = (params.get(k, d) for k, d in zip(OUTER_KNOBS[:3], defaults, strict=True))
    h = space.hardware_index(gpu, n, prec)
    if h is None:
        return f"{n}x {gpu} in {prec} is not a usable hardware option"
    tp, pp, cp, ep = (params.get(k, getattr(first, k)) for k in (Axis.TP, Axis.PP, Axis.CP, Axis.EP))
    offered = index.get((h, tp, pp, cp, ep))
    if not offered:
        hw, etp = space.hardware[h], params.get(Axis.ETP, first.etp)
        why = lay_rules.grid_problems(space.model, hw.cluster, hw.workload, tp, pp, cp, ep, etp)
        return lay_rules.explain(why) or f"no micro-batch splits global_batch={hw.workload.global_batch}"
    want = params.get(Axis.ETP) or 0
    below = [k for e, k in offered if e <= want]
    return below[-1] if below else offered[0][1]


def run_hybrid(
    space: Space,
    ev: Evaluator,
    objectives: Sequence[Objective],
    *,
    budget: int,
    seed: int,
    timeout: float | None,
    progress: bool,
) -> Run:
    """NSGA-II over layouts (`outer_budget(budget)` solved layouts at most), exact inner solves, then the
    exact neighbourhood pass; the run keeps scalar records of the front and a sample."""
    front = _Front.empty(objectives)
    st = _Outer(space, ev, objectives, layout_starts(space), front, {})
    run, t0 = Run(), time.perf_counter()
    with SearchProgress(
        min(outer_budget(budget), len(space.layouts)), progress, "NSGA-II over layouts"
    ) as bar:
        asked = _outer_nsga2(st, budget, seed, t0, timeout, bar)
    run.timed_out = timeout is not None and time.perf_counter() - t0 > timeout
    if not run.timed_out:
        run.timed_out = not _polish(st, t0, timeout)
    keep_records(run, space, ev, front, _sample(st, AUTO_SAMPLE_KEPT), st.evaluated)
    run.sweep.update(method="hybrid", outer_trials=asked, layouts=(len(st.solved), len(space.layouts)))
    return run


def _outer_nsga2(
    st: _Outer, budget: int, seed: int, t0: float, timeout: float | None, bar: SearchProgress
) -> int:
    """Optuna's NSGA-II over the outer knobs; each new layout solved exactly. Returns the trials asked."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, objs = st.space, st.objectives
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=population_size(outer_budget(budget)))
    study = optuna.create_study(directions=[o.info.direction for o in objs], sampler=sampler)
    with warnings.catch_warnings():  # experimental in Optuna 3.2+, stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o.name for o in objs])
    dists = {
        name: optuna.distributions.CategoricalDistribution(v)
        for name, v in outer_distributions(space).items()
    }
    index = grid_index(space)
    goal = min(outer_budget(budget), len(space.layouts))
    batch = population_size(outer_budget(budget))
    asked = 0
    while len(st.solved) < goal and asked < MAX_ASK_FACTOR * goal:
        if timeout is not None and time.perf_counter() - t0 > timeout:
            break
        trials = [study.ask(dists) for _ in range(min(batch, goal - len(st.solved)))]
        asked += len(trials)
        ks = [layout_of(space, t.params, index) for t in trials]
        st.solve([k for k in ks if not isinstance(k, str)])
        for trial, k in zip(trials, ks, strict=True):
            if isinstance(k, str):
                trial.set_user_attr("autopar_reason", "rule: " + k)
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                _tell(study, trial, st.solved[k], space.layouts[k], space)
        bar.update(len(st.solved), st.front.n_feasible, len(st.front.idx))
    return asked


def _tell(study: optuna.Study, trial: optuna.Trial, sol: LayoutSolve, lay: Layout, space: Space) -> None:
    """Record a solved layout on its trial: constraints, user attrs (the layout, its best inner choices)."""
    for name, v in sol.constraints.items():
        trial.set_constraint(name, v)
    trial.set_user_attr("layout", _layout_label(lay, space))
    trial.set_user_attr("inner_feasible", sol.n_feasible)
    trial.set_user_attr("best", {name: space.point(i).strategy.label() for name, i in sol.best.items()})
    study.tell(trial, sol.values)


def _layout_label(lay: Layout, space: Space) -> str:
    """E.g. '64x H100-SXM bf16 TP8 PP4 CP1 EP1 DP2'."""
    etp = f" ETP{lay.etp}" if lay.etp is not None else ""
    hw = space.hardware[lay.hw].label()
    return f"{hw} TP{lay.tp} PP{lay.pp} CP{lay.cp} EP{lay.ep}{etp} DP{lay.dp}"


def _polish(st: _Outer, t0: float, timeout: float | None) -> bool:
    """The neighbourhood pass, then every layout of the hardware option holding each objective's best
    point (the extremes: one knob at a time cannot walk far along them), again until those are solved or
    NEIGHBOUR_POINT_CAP points were estimated by both together; False on timeout."""
    groups = _neighbour_groups(st.space.layouts)
    seen: set[int] = set()
    left = [NEIGHBOUR_POINT_CAP]
    while True:
        if not neighbourhood_pass(st, groups, left, t0, timeout):
            return False
        F, idx = st.front.F, st.front.idx
        if not len(idx) or left[0] <= 0:  # nothing feasible yet: no extremes to widen around
            return True
        hws = {st.space.layouts[st.layout_at(int(idx[j]))].hw for j in F.argmin(axis=0)} - seen
        if not hws:
            return True
        seen |= hws
        _solve_capped(st, [k for k, lay in enumerate(st.space.layouts) if lay.hw in hws], left)


def _solve_capped(st: _Outer, ks: Sequence[int], left: list[int]) -> None:
    """Solve the unsolved layouts of `ks` in order while the point allowance `left[0]` lasts."""
    take = []
    for j in sorted(set(ks) - set(st.solved)):
        if left[0] < st.space.layouts[j].size:
            left[0] = 0
            break
        left[0] -= st.space.layouts[j].size
        take.append(j)
    st.solve(take)


def neighbourhood_pass(
    st: _Outer,
    groups: list[dict[Key, list[int]]],
    left: list[int],
    t0: float,
    timeout: float | None,
) -> bool:
    """Solve every layout one outer step from a front layout, round by round, until the front's layouts all
    have solved neighbourhoods or the point allowance `left[0]` is spent; False on timeout."""
    done: set[int] = set()
    while left[0] > 0:
        todo = [k for k in st.front_layouts() if k not in done]
        if not todo:
            return True
        done.update(todo)
        _solve_capped(st, [j for k in todo for j in _neighbours(st.space, k, groups)], left)
        if timeout is not None and time.perf_counter() - t0 > timeout:
            return False
    return True


def _coords(lay: Layout) -> tuple[Any, ...]:  # int degrees, etp None on a dense model
    return (lay.hw, lay.tp, lay.pp, lay.cp, lay.ep, lay.etp)


def _neighbour_groups(layouts: Sequence[Layout]) -> list[dict[Key, list[int]]]:
    """Per outer coordinate, the layouts grouped by their other coordinates (in layout order); last, the
    layouts grouped by (hardware, dp, ep, etp), for trades between tp, pp and cp."""
    groups: list[dict[Key, list[int]]] = [{} for _ in range(7)]
    for k, lay in enumerate(layouts):
        c = _coords(lay)
        for i in range(6):
            groups[i].setdefault(c[:i] + c[i + 1 :], []).append(k)
        groups[6].setdefault((lay.hw, lay.dp, lay.ep, lay.etp), []).append(k)  # same dp: for trades
    return groups


def _neighbours(space: Space, k: int, groups: list[dict[Key, list[int]]]) -> list[int]:
    """Layouts one outer step from layout k, in index order: the next tp/pp/cp/ep/etp degree up or down
    (the others kept), or the same degrees on any other GPU count of the same type or any other GPU type
    at the same count (precision kept): hardware moves are few and change the front most."""
    lays, c = space.layouts, _coords(space.layouts[k])
    out: set[int] = set()
    for i in range(1, 6):
        group = sorted(groups[i][c[:i] + c[i + 1 :]], key=lambda j: (_coords(lays[j])[i] or 0, j))
        at = group.index(k)
        out.update(group[max(0, at - 1) : at + 2])
    hw = space.hardware[c[0]]
    for j in groups[0][c[1:]]:  # the same degrees on another GPU count of this type, or another type
        other = space.hardware[lays[j].hw]
        if other.precision == hw.precision and (other.gpu == hw.gpu or other.num_gpus == hw.num_gpus):
            out.add(j)
    for j in groups[6][(c[0], lays[k].dp, c[4], c[5])]:  # a trade between two of tp/pp/cp, dp kept
        d = [(_coords(lays[j])[i], c[i]) for i in (1, 2, 3)]
        moved = [a / b for a, b in d if a != b]
        if len(moved) == 2 and all(1 / TRADE_RATIO <= r <= TRADE_RATIO for r in moved):
            out.add(j)
    out.discard(k)
    return sorted(out)


def _sample(st: _Outer, n: int) -> list[int]:
    """About n point indices at an even stride over the solved layouts' points (layout order)."""
    total = sum(st.space.layouts[k].size for k in st.solved)
    stride = max(1, -(-total // n))
    out: list[int] = []
    pos = 0
    for k in sorted(st.solved):
        size, start = st.space.layouts[k].size, st.starts[k]
        first = (-pos) % stride
        out.extend(range(start + first, start + size, stride))
        pos += size
    return out


def run_auto(
    space: Space,
    ev: Evaluator,
    objectives: Sequence[Objective],
    *,
    budget: int,
    seed: int,
    timeout: float | None,
    progress: bool,
) -> Run:
    """The exact sweep up to EXACT_LIMIT points, else the hybrid (the caller checked `choose_method`)."""
    if space.size <= EXACT_LIMIT:
        run = run_sweep(space, ev, objectives, timeout, progress, sample=AUTO_SAMPLE_KEPT)
        if run.sweep is not None:
            run.sweep["method"] = "exhaustive"
        return run
    return run_hybrid(space, ev, objectives, budget=budget, seed=seed, timeout=timeout, progress=progress)


__all__ = ["EXACT_LIMIT", "choose_method", "run_auto", "run_hybrid", "solve_layouts"]
