"""Exhaustive search on arrays, memory bounded by one block (issue 15).

A space above KEEP_ALL_LIMIT points is swept block by block (`Space.column_blocks`): the vectorized
model (perf/vector.py) estimates a block without building a Strategy or an Estimate per point, the
corrector predicts once on the block's feature matrix, and the objectives and constraints are the
registry's own functions applied to arrays. Nothing is kept per point; kept over the sweep are the
running Pareto front, the feasible count, the objective bounds of the feasible points (ideal and nadir,
for hypervolumes) and the indices of a stride sample of SAMPLE_KEPT points. The front and the sample
are then evaluated again by the scalar evaluator, so every record a user sees comes from the one
model (a block row equals the single estimate bit for bit, tests/perf/test_batch_model.py); only which
points are on the front is decided on arrays, before the corrector's rows are re-run one by one.

Smaller spaces keep every point's record (`loops.run_exhaustive`): the oracle the tests compare with.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from autopar.objectives import REGISTRY, Objective
from autopar.search.evaluate import MEMORY_CONSTRAINT, Evaluator
from autopar.search.loops import Run
from autopar.search.pareto import (
    MAX_NEAR_TIES,
    near_front_mask,
    near_tie_shift,
    nondominated_mask,
    tie_space,
)
from autopar.search.progress import SearchProgress
from autopar.search.space import Space
from autopar.units import GiB

if TYPE_CHECKING:
    from autopar.perf.vector import VectorEstimates
    from autopar.perf.vector_columns import StrategyColumns
    from autopar.search.space import Hardware
    from autopar.search.space_columns import ColumnBlock

KEEP_ALL_LIMIT = 20_000  # spaces up to this size keep every point's record (loops.run_exhaustive)
BLOCK_ROWS = 8192  # points estimated together: bounds the sweep's memory
SAMPLE_KEPT = 2000  # points besides the front whose records are kept (an even stride over the space)
NEAR_KEPT = 8 * MAX_NEAR_TIES  # running near-ties kept on arrays (the final front beats some of them)


def sweepable(space: Space, ev: Evaluator) -> bool:
    """Whether the space can be estimated on arrays: the default model and rules, and a corrector (if any)
    that predicts on feature matrices."""
    cal = ev.calibration
    return ev.trusts_space and ev.default_model and (cal is None or hasattr(cal, "factors"))


def can_sweep(space: Space, ev: Evaluator) -> bool:
    """Whether `--sampler exhaustive` sweeps on arrays: a space above KEEP_ALL_LIMIT that is `sweepable`."""
    return space.size > KEEP_ALL_LIMIT and sweepable(space, ev)


@dataclass
class _Front:
    """The running front (minimised objective rows and their point indices), feasible-point bounds and the
    running near-ties (rows the front beats by less than the near-tie tolerance, search/pareto.py)."""

    F: np.ndarray
    idx: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_feasible: int = 0
    objectives: Sequence[Objective] = ()
    near_F: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    near_idx: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @classmethod
    def empty(cls, objectives: Sequence[Objective]) -> _Front:
        k = len(objectives)
        return cls(
            np.empty((0, k)),
            np.empty(0, np.int64),
            np.full(k, np.inf),
            np.full(k, -np.inf),
            objectives=tuple(objectives),
            near_F=np.empty((0, k)),
        )

    def add(self, F: np.ndarray, idx: np.ndarray) -> None:
        """Merge a block's feasible rows: drop those the front dominates, then re-filter the union."""
        if not len(F):
            return
        block_F, block_idx = F, idx
        self.n_feasible += len(F)
        self.lo, self.hi = np.minimum(self.lo, F.min(axis=0)), np.maximum(self.hi, F.max(axis=0))
        own = nondominated_mask(F)  # a row another block row dominates is off the union's front too
        F, idx = F[own], idx[own]
        if len(self.F):
            le = np.all(self.F[None, :, :] <= F[:, None, :], axis=2)
            lt = np.any(self.F[None, :, :] < F[:, None, :], axis=2)
            keep = ~np.any(le & lt, axis=1)
            F, idx = F[keep], idx[keep]
        F, idx = np.vstack([self.F, F]), np.concatenate([self.idx, idx])
        order = np.argsort(idx, kind="stable")  # index order: the same front whatever the blocks
        F, idx = F[order], idx[order]
        mask = nondominated_mask(F)
        self.F, self.idx = F[mask], idx[mask]
        if self.objectives:
            self._near(block_F, block_idx)

    def _near(self, F: np.ndarray, idx: np.ndarray) -> None:
        """Keep the rows (old near-ties and this block's) the current front beats by less than the tolerance,
        off the front, the closest NEAR_KEPT: a superset of the final front's near-ties, which beats more."""
        F, idx = np.vstack([self.near_F, F]), np.concatenate([self.near_idx, idx])
        F, idx = F[~np.isin(idx, self.idx)], idx[~np.isin(idx, self.idx)]
        both = tie_space(np.vstack([F, self.F]), self.objectives)
        G, Fr = both[: len(F)], both[len(F) :]
        mask = near_front_mask(G, Fr, near_tie_shift(self.objectives))
        F, idx, G = F[mask], idx[mask], G[mask]
        gap = np.min(np.max(G[:, None, :] - Fr[None, :, :], axis=2), axis=1) if len(G) else np.empty(0)
        order = np.lexsort((idx, gap))[:NEAR_KEPT]
        self.near_F, self.near_idx = F[order], idx[order]


def run_sweep(
    space: Space,
    ev: Evaluator,
    objectives: Sequence[Objective],
    timeout: float | None,
    progress: bool,
    sample: int = SAMPLE_KEPT,
) -> Run:
    """Estimate every point on arrays; keep the front, the bounds and `sample` more points (then scalar
    records)."""
    front = _Front.empty(objectives)
    run, t0, done = Run(), time.perf_counter(), 0
    with SearchProgress(space.size, progress, "exhaustive") as bar:
        for block in space.column_blocks(BLOCK_ROWS):
            values, feasible = block_outcomes(space, ev, block)
            F = np.column_stack([values[o.name] * (-1.0 if o.maximize else 1.0) for o in objectives])
            rows = np.flatnonzero(feasible)
            front.add(F[rows], block.start + rows)
            done += len(feasible)
            bar.update(done, front.n_feasible, len(front.idx))
            if timeout is not None and time.perf_counter() - t0 > timeout:
                run.timed_out = True
                break
    stride = max(1, math.ceil(done / sample))
    keep_records(run, space, ev, front, list(range(0, done, stride)), done)
    return run


def keep_records(run: Run, space: Space, ev: Evaluator, front: _Front, sample: list[int], swept: int) -> None:
    """Scalar records of the front and the sampled point indices; the totals of the points estimated."""
    stride = max(1, math.ceil(swept / max(1, len(sample))))
    keep = sorted({*map(int, front.idx), *map(int, front.near_idx), *sample})
    points = [space.point(i) for i in keep]
    for i, pt, out in zip(keep, points, ev.evaluate_many(points), strict=True):
        run.outcomes[pt.key], run.first_trial[pt.key], run.points[pt.key] = out, i, pt
    run.n_trials = run.n_evaluated = swept
    run.sweep = {
        "evaluated": swept,
        "feasible": front.n_feasible,
        "kept": len(keep),
        "stride": stride,
        "bounds": (front.lo, front.hi) if front.n_feasible else None,
    }


def block_outcomes(
    space: Space, ev: Evaluator, block: ColumnBlock
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every registered objective's values (display units) and the feasibility of one block's points."""
    from autopar.perf.vector import estimate_columns

    hw = space.hardware[block.hw]
    vest = estimate_columns(space.model, hw.cluster, hw.workload, block.columns)
    est = calibrated_arrays(ev, hw, block.columns, vest)
    price = ev.prices[block.hw]
    values = {name: np.asarray(o.fn(est, hw.cluster, price), dtype=float) for name, o in REGISTRY.items()}
    # GiB short of the memory margin (search/margin.py), the trial's `memory_gib` constraint; not an objective
    peak_gib = (vest.capacity_bytes - est.headroom_bytes) / GiB
    values[MEMORY_CONSTRAINT] = ev.margin.need_gib(values["headroom"], peak_gib)
    feasible = est.fits & (values[MEMORY_CONSTRAINT] <= 0)
    if ev.max_cost is not None:
        feasible &= (values["cost"] - ev.max_cost) / ev.max_cost <= 0
    return values, feasible


def calibrated_arrays(
    ev: Evaluator, hw: Hardware, cols: StrategyColumns, vest: VectorEstimates
) -> SimpleNamespace:
    """The figures the objectives read, corrected as `Evaluator._calibrate_batch` corrects estimates:
    throughput (and step time, MFU) by the corrector's factor, memory by the memory corrector's."""
    tps, step, mfu = vest.tokens_per_s, vest.step_time_s, vest.mfu
    head, fits = vest.headroom_bytes, vest.fits
    cal = ev.calibration
    if cal is not None:
        from autopar.calibration.models.features import features_columns, memory_features_columns

        m, c, w = ev.model, hw.cluster, hw.workload
        f = cal.bands("throughput", features_columns(m, c, w, cols, vest), None, w.stack)[0]
        good = (f > 0) & np.isfinite(f)
        inv = np.where(good, 1.0 / np.where(good, f, 1.0), 1.0)
        tps, step, mfu = np.where(good, tps * f, tps), step * inv, np.where(good, mfu * f, mfu)
        if cal.memory_moves():
            mf = cal.bands("memory", memory_features_columns(m, c, w, cols, vest))[0]
            head, fits = _scaled_memory(vest, mf)
    return SimpleNamespace(tokens_per_s=tps, step_time_s=step, mfu=mfu, headroom_bytes=head, fits=fits)


def _scaled_memory(vest: VectorEstimates, mf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Headroom and fit with every memory term scaled (calibration.apply.scale_memory on arrays)."""
    move = (mf != 1.0) & np.isfinite(mf) & (mf > 0)
    total = None
    for part in vest.mem:  # MemoryBreakdown.total adds its fields in this order
        term = np.where(move, vest.mem[part] * mf, vest.mem[part])
        total = term if total is None else total + term
    head = np.where(move, vest.capacity_bytes - total, vest.headroom_bytes)
    return head, np.where(move, head >= 0, vest.fits)


__all__ = ["BLOCK_ROWS", "KEEP_ALL_LIMIT", "SAMPLE_KEPT", "block_outcomes", "can_sweep", "run_sweep"]
