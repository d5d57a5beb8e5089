"""Pareto maths and the Pareto table: non-dominated filtering, exact hypervolume, the front as table rows.

Convention inside: objective matrices are *minimised* (maximised objectives are negated first with
``to_min_matrix``), one row per point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from autopar.knobs import COLUMN_KNOBS
from autopar.objectives import RATIO_SCALE, Objective
from autopar.search.jsontypes import JSONDict, Key
from autopar.search.result import TrialRecord

if TYPE_CHECKING:
    import pandas as pd

# Points within this fraction of the best value of an objective are a near-tie: no measurement we have
# ranks them. Identical NeMo configurations measured in two container releases (24.07 vs 24.12, the
# groundtruth README) differ by about ±4%, and the model's median error on the published runs is 5%; 2% is
# half the release-to-release spread. Which near-tied point an NSGA-II search meets first depends on the
# seed, so the recommendation is chosen among all of them by what does not: the most free memory (the
# margin against the memory model's error), then the label.
NEAR_TIE_FRACTION = 0.02
# The near-front keeps at most this many near-ties (the closest to the front first): enough to show what the
# model cannot separate from the front, few enough for a table.
MAX_NEAR_TIES = 24


def to_min_matrix(records: Sequence[TrialRecord], objectives: Sequence[Objective]) -> np.ndarray:
    """Objective values of the records as an (n, k) matrix to minimise."""
    return np.array([[o.to_min(r.values[o.name]) for o in objectives] for r in records], dtype=float).reshape(
        len(records), len(objectives)
    )


def nondominated_mask(F: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of F (minimised) that no other row dominates; equal rows all survive.

    Rows are visited in lexicographic order, so a row can only be dominated by an earlier one: the first
    row still standing is non-dominated, and every later row it dominates is struck out at once (a row
    struck out dominates nothing that its striker does not, by transitivity). One vectorized pass per
    front member: O(front x n), with a Python step per front member rather than per row.
    """
    F = np.asarray(F, dtype=float)
    n = F.shape[0]
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    order = np.lexsort(F.T[::-1])
    G = F[order]
    alive = np.ones(n, dtype=bool)
    i = 0
    while i < n:
        mask[order[i]] = True
        rest = G[i + 1 :]
        beaten = (G[i] <= rest).all(axis=1) & (G[i] < rest).any(axis=1)
        alive[i + 1 :] &= ~beaten
        nxt = np.flatnonzero(alive[i + 1 :])
        i = i + 1 + int(nxt[0]) if len(nxt) else n
    return mask


def crowding_distance(F: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance of each row (extremes get infinity)."""
    n, k = F.shape
    d = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(k):
        order = np.argsort(F[:, j], kind="stable")
        span = F[order[-1], j] - F[order[0], j]
        d[order[0]] = d[order[-1]] = np.inf
        if span > 0:
            d[order[1:-1]] += (F[order[2:], j] - F[order[:-2], j]) / span
    return d


class FrontTracker:
    """Incrementally maintained non-dominated set of (key, minimised vector) pairs."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self._F = np.empty((0, 0))
        self._cd: np.ndarray | None = None  # crowding distances of the current front (None = stale)

    def crowding(self) -> np.ndarray:
        """NSGA-II crowding distance of each member, computed once per change of the front."""
        if self._cd is None:
            self._cd = crowding_distance(self._F)
        return self._cd

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: Key, vec: Sequence[float]) -> bool:
        """Insert a point; returns True if it joined the front (dropping those it dominates)."""
        v = np.asarray(vec, dtype=float)
        cur = self._F
        if len(self.keys):  # ndarray methods: the np.all/np.any wrappers cost more than the tests here
            if ((cur <= v).all(axis=1) & (cur < v).any(axis=1)).any():
                return False
            keep = ~((v <= cur).all(axis=1) & (v < cur).any(axis=1))
            self.keys = [k for k, m in zip(self.keys, keep, strict=True) if m]
            self._F = np.vstack([cur[keep], v])
        else:
            self._F = v.reshape(1, -1)
        self.keys.append(key)
        self._cd = None
        return True

    @property
    def matrix(self) -> np.ndarray:
        return self._F


def nondominated_mask_slow(F: np.ndarray) -> np.ndarray:
    """All-pairs oracle for ``nondominated_mask`` (O(n^2), for tests)."""
    F = np.asarray(F, dtype=float)
    n = F.shape[0]
    out = np.ones(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            if i != j and all(F[j] <= F[i]) and any(F[j] < F[i]):
                out[i] = False
                break
    return out


def hypervolume(F: np.ndarray, ref: Sequence[float]) -> float:
    """Exact hypervolume dominated by the rows of F (minimised) and bounded by `ref`.

    Points not strictly better than `ref` in every objective contribute nothing. 2-D is a sweep;
    higher dimensions slice along the last objective (exact; fine for fronts of a few hundred points
    in 3-4 objectives).
    """
    F = np.asarray(F, dtype=float)
    r = np.asarray(ref, dtype=float)
    if F.size == 0:
        return 0.0
    F = F[np.all(r > F, axis=1)]
    if F.shape[0] == 0:
        return 0.0
    F = F[nondominated_mask(F)]
    return _hv(F, r)


def _hv(F: np.ndarray, r: np.ndarray) -> float:
    d = F.shape[1]
    if d == 1:
        return float(r[0] - F[:, 0].min())
    if d == 2:
        P = F[np.lexsort((F[:, 1], F[:, 0]))]
        area, best_y = 0.0, r[1]
        for x, y in P:
            if y < best_y:
                area += (r[0] - x) * (best_y - y)
                best_y = y
        return float(area)
    P = F[np.argsort(F[:, -1], kind="stable")]
    total = 0.0
    for i in range(P.shape[0]):
        z_hi = P[i + 1, -1] if i + 1 < P.shape[0] else r[-1]
        depth = z_hi - P[i, -1]
        if depth > 0:
            sub = P[: i + 1, :-1]
            total += depth * _hv(sub[nondominated_mask(sub)], r[:-1])
    return float(total)


def normalize(F: np.ndarray, ideal: np.ndarray, nadir: np.ndarray) -> np.ndarray:
    """Scale minimised objectives so that ideal -> 0 and nadir -> 1 (flat objectives -> 0)."""
    span = np.where(nadir > ideal, nadir - ideal, 1.0)
    out: np.ndarray = (np.asarray(F, dtype=float) - ideal) / span
    return out


def reference_bounds(F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ideal and nadir points of a front (component-wise best and worst), minimised."""
    F = np.asarray(F, dtype=float)
    return F.min(axis=0), F.max(axis=0)


def normalized_hypervolume(F: np.ndarray, ideal: np.ndarray, nadir: np.ndarray, margin: float = 0.1) -> float:
    """Hypervolume after normalising with (ideal, nadir); reference point = (1 + margin, ...).

    Use the same (ideal, nadir) for the fronts you compare, e.g. those of the exhaustive front.
    """
    if len(F) == 0:
        return 0.0
    Z = normalize(F, ideal, nadir)
    return hypervolume(Z, [1.0 + margin] * Z.shape[1])


# --- the Pareto table ----------------------------------------------------------------------------
STRATEGY_COLUMNS = COLUMN_KNOBS  # the knob registry's report columns (autopar/knobs.py)


def record_row(r: TrialRecord) -> JSONDict:
    """One flat table row for a trial: hardware, strategy, every objective value, key breakdown figures."""
    s = r.strategy
    row: JSONDict = {
        "trial": r.number,
        "gpu": r.gpu,
        "num_gpus": r.num_gpus,
        "precision": r.precision,
        "label": s.label(),
        "near_tie": r.near_tie,  # off the front by less than the near-tie tolerance (near_front)
    }
    row.update({k: getattr(s, k) for k in STRATEGY_COLUMNS})
    row.update(r.values)
    e = r.estimate
    if e is not None:
        t = e.time
        step = e.step_time_s or 1.0
        row.update(
            {
                "step_s": e.step_time_s,
                "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
                "mfu_pct": 100.0 * e.mfu,
                "mem_gib": e.peak_memory_bytes / 2**30,
                "mem_states_gib": (e.memory.weights + e.memory.grads + e.memory.optimizer) / 2**30,
                "mem_activations_gib": (e.memory.activations + e.memory.logits) / 2**30,
                "capacity_gib": e.capacity_bytes / 2**30,
                "bottleneck": e.bottleneck,
                "compute_pct": 100.0 * t.compute / step,
                "comm_pct": 100.0 * t.comm / step,
                "bubble_pct": 100.0 * t.bubble / step,
                "calibration_factor": e.calibration_factor,
            }
        )
        if e.tokens_per_s_band is not None:  # the corrector's 80% band on cluster tokens/s
            row["throughput_low"], row["throughput_high"] = e.tokens_per_s_band
    return row


def pareto_rows(front: Sequence[TrialRecord], objectives: Sequence[Objective]) -> list[JSONDict]:
    """The Pareto set as table rows, sorted by the first objective (best first, ties by trial number).

    Every row carries every column (first-seen order; None where a row has no value), as a DataFrame
    built from them would, so JSON written from the rows equals JSON written from that frame."""
    o = objectives[0]
    sign = -1.0 if o.maximize else 1.0
    rows = sorted((record_row(r) for r in front), key=lambda row: (sign * row[o.name], row["trial"]))
    cols = list(dict.fromkeys(k for row in rows for k in row))
    return [{k: row.get(k) for k in cols} for row in rows]


def pareto_frame(front: Sequence[TrialRecord], objectives: Sequence[Objective]) -> pd.DataFrame:
    """The Pareto set as a pandas DataFrame (rows of `pareto_rows`)."""
    import pandas as pd

    return pd.DataFrame(pareto_rows(front, objectives))


def _without_noop_twins(front: Sequence[TrialRecord], objectives: Sequence[Objective]) -> list[TrialRecord]:
    """The front less the points that differ from another only in a knob that changed nothing: the same
    hardware, the same strategy but for the ZeRO stage, and the same value on every objective (ZeRO shards
    over the data-parallel group, so at DP1 without CP the stages are one layout). The lowest stage stays:
    the plainest launch settings for the same run."""
    kept: dict[Key, TrialRecord] = {}
    for r in sorted(front, key=lambda r: (r.strategy.zero, r.number)):
        values = tuple(round(float(r.values[o.name]), 9) for o in objectives)
        key = (r.gpu, r.num_gpus, r.precision, r.strategy.model_copy(update={"zero": 0}), values)
        kept.setdefault(key, r)
    chosen = {id(r) for r in kept.values()}
    return [r for r in front if id(r) in chosen]


def pareto_records(records: Sequence[TrialRecord], objectives: Sequence[Objective]) -> list[TrialRecord]:
    """The feasible, non-dominated records (one per distinct hardware+strategy), marking them."""
    seen: dict[Key, TrialRecord] = {}
    for r in records:
        if r.feasible:
            key = (r.gpu, r.num_gpus, r.precision, r.strategy)
            seen.setdefault(key, r)
    cand = list(seen.values())
    if not cand:
        return []
    mask = nondominated_mask(to_min_matrix(cand, objectives))
    front = _without_noop_twins([r for r, m in zip(cand, mask, strict=True) if m], objectives)
    ids = {id(r) for r in front}
    for r in records:
        r.dominated = id(r) not in ids
    return front


def near_tie_shift(objectives: Sequence[Objective], tol: float = NEAR_TIE_FRACTION) -> np.ndarray:
    """Per objective, the margin (in `tie_space` units) by which a point must be beaten to be out of a tie:
    log(1 + tol) on a ratio scale (RATIO_SCALE), 0 elsewhere (beaten at all is beaten)."""
    return np.array([np.log1p(tol) if o.name in RATIO_SCALE else 0.0 for o in objectives])


def tie_space(F: np.ndarray, objectives: Sequence[Objective]) -> np.ndarray:
    """A minimised objective matrix (`to_min_matrix`) with its ratio-scale columns as signed logs, so a
    near-tie is a fixed shift whatever the value (non-positive values keep their column as it is)."""
    G = np.array(F, dtype=float, copy=True)
    for j, o in enumerate(objectives):
        col = G[:, j]
        if o.name in RATIO_SCALE and len(col) and np.all(col != 0):
            G[:, j] = np.sign(col) * np.log(np.abs(col))
    return G


def near_front_mask(G: np.ndarray, front: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Rows of G (tie space) that no front row beats by at least `shift` on every objective: the points the
    model cannot order against the front (an epsilon-dominance test, Laumanns et al. 2002, with the
    near-tie tolerance as epsilon)."""
    if not len(G) or not len(front):
        return np.zeros(len(G), dtype=bool)
    beaten = np.all(front[None, :, :] + shift[None, None, :] <= G[:, None, :], axis=2)
    near: np.ndarray = ~beaten.any(axis=1)
    return near


def near_front(
    records: Sequence[TrialRecord], front: Sequence[TrialRecord], objectives: Sequence[Objective]
) -> list[TrialRecord]:
    """Feasible records off the front by less than the near-tie tolerance (at most MAX_NEAR_TIES, the
    closest first), marked `near_tie`: with free memory a constraint, one fixed cluster's front is its
    fastest point, and these are what the model cannot tell from it."""
    on = {id(r) for r in front}
    keys = {(r.gpu, r.num_gpus, r.precision, r.strategy) for r in front}
    cand: dict[Key, TrialRecord] = {}
    for r in records:
        key = (r.gpu, r.num_gpus, r.precision, r.strategy)
        if r.feasible and id(r) not in on and key not in keys:
            cand.setdefault(key, r)
    rest = list(cand.values())
    if not rest or not front:
        return []
    shift = near_tie_shift(objectives)
    both = tie_space(to_min_matrix([*rest, *front], objectives), objectives)
    G, Fr = both[: len(rest)], both[len(rest) :]
    mask = near_front_mask(G, Fr, shift)
    gap = np.min(np.max(G[:, None, :] - Fr[None, :, :], axis=2), axis=1)  # how far behind the front
    near = sorted((i for i in np.flatnonzero(mask)), key=lambda i: (gap[i], rest[i].number))[:MAX_NEAR_TIES]
    out = _without_noop_twins([rest[i] for i in near], objectives)
    for r in out:
        r.near_tie = True
    return out
