"""Pareto maths: non-dominated filter vs an all-pairs oracle, exact hypervolume vs hand cases and oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.search.pareto import (
    FrontTracker,
    hypervolume,
    nondominated_mask,
    nondominated_mask_slow,
    normalize,
    normalized_hypervolume,
)


def matrices(max_rows: int = 12, dims: tuple[int, ...] = (2, 3, 4), values: int = 6):
    """Small integer matrices (ties are likely, which is the hard case)."""
    return st.sampled_from(dims).flatmap(
        lambda d: st.lists(
            st.lists(st.integers(0, values), min_size=d, max_size=d), min_size=0, max_size=max_rows
        ).map(lambda rows, d=d: np.array(rows, dtype=float).reshape(-1, d))
    )


@settings(max_examples=200, deadline=None)
@given(matrices(max_rows=25))
def test_nondominated_matches_all_pairs_oracle(F):
    assert nondominated_mask(F).tolist() == nondominated_mask_slow(F).tolist()


@settings(max_examples=100, deadline=None)
@given(matrices(max_rows=25))
def test_front_tracker_matches_batch_filter(F):
    tr = FrontTracker()
    for i, row in enumerate(F):
        tr.add(i, row)
    assert sorted(tr.keys) == np.flatnonzero(nondominated_mask(F)).tolist()


def test_hypervolume_2d_by_hand():
    # Points (1,3), (2,2), (3,1), ref (4,4): staircase strips 3*1 + 2*1 + 1*1 = 6.
    F = np.array([[1, 3], [2, 2], [3, 1]], dtype=float)
    assert hypervolume(F, [4, 4]) == pytest.approx(6.0)
    # A dominated point and one outside the reference box change nothing.
    G = np.vstack([F, [[3, 3], [5, 0]]])
    assert hypervolume(G, [4, 4]) == pytest.approx(6.0)
    assert hypervolume(np.empty((0, 2)), [1, 1]) == 0.0


def test_hypervolume_3d_by_hand():
    # One point at the origin, ref (1,2,3): a 1x2x3 box = 6.
    assert hypervolume(np.array([[0.0, 0.0, 0.0]]), [1, 2, 3]) == pytest.approx(6.0)
    # (0,0,1) and (1,1,0), ref (2,2,2): boxes 2*2*1 = 4 and 1*1*2 = 2 overlapping in [1,2]^3 = 1 -> 5.
    F = np.array([[0, 0, 1], [1, 1, 0]], dtype=float)
    assert hypervolume(F, [2, 2, 2]) == pytest.approx(5.0)


def hv_inclusion_exclusion(F: np.ndarray, ref: np.ndarray) -> float:
    """Slow oracle: volume of the union of boxes [p, ref] by inclusion-exclusion over all subsets."""
    P = F[np.all(ref > F, axis=1)]
    total = 0.0
    for k in range(1, len(P) + 1):
        for sub in itertools.combinations(range(len(P)), k):
            corner = P[list(sub)].max(axis=0)
            total += (-1) ** (k + 1) * float(np.prod(ref - corner))
    return total


@settings(max_examples=150, deadline=None)
@given(matrices(max_rows=7, dims=(2, 3, 4), values=9))
def test_hypervolume_matches_inclusion_exclusion(F):
    ref = np.full(F.shape[1], 10.0)
    assert hypervolume(F, ref) == pytest.approx(hv_inclusion_exclusion(F, ref), abs=1e-9)


def test_hypervolume_matches_monte_carlo_on_a_larger_front():
    rng = np.random.default_rng(1)
    # 60 points on the simplex-like front x+y+z = 1 (all mutually non-dominated), ref (1.1, 1.1, 1.1).
    P = rng.dirichlet([1, 1, 1], size=60)
    exact = hypervolume(P, [1.1, 1.1, 1.1])
    samples = rng.uniform(0, 1.1, size=(200_000, 3))
    dominated = np.zeros(len(samples), dtype=bool)
    for p in P:
        dominated |= np.all(samples >= p, axis=1)
    mc = dominated.mean() * 1.1**3
    assert exact == pytest.approx(mc, rel=0.01)


def test_normalized_hypervolume_of_ideal_point():
    # A front containing the ideal point covers the whole [0, 1.1]^k box: 1.1^2 = 1.21.
    F = np.array([[0.0, 0.0], [1.0, 2.0]])
    ideal, nadir = np.array([0.0, 0.0]), np.array([1.0, 2.0])
    assert normalize(F, ideal, nadir).tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert normalized_hypervolume(F, ideal, nadir) == pytest.approx(1.21)
