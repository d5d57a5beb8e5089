"""Free memory is a constraint by default and the front is shown with its near-ties (issue 46, item 7).

With (throughput, $/Mtoken) as the objectives, one fixed cluster's front is its fastest point: $/Mtoken is
price x GPUs / throughput there. What a user must choose among is what the model cannot order against that
point: the near-ties, the points the front beats by less than NEAR_TIE_FRACTION on every objective
(epsilon-dominance with the near-tie tolerance as epsilon). They are shown beside the front, marked, and the
pick is chosen among them by the near-tie rule.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.defaults import DEFAULT_OBJECTIVES
from autopar.objectives import parse_objectives
from autopar.reports.counts import search_counts
from autopar.search import optimize
from autopar.search.pareto import (
    NEAR_TIE_FRACTION,
    near_front_mask,
    near_tie_shift,
    nondominated_mask,
    tie_space,
)
from autopar.specs import ClusterSpec, Workload

TPS_COST = parse_objectives("throughput,cost")
PROBLEM = (
    get_model("Llama-3.1-8B"),
    ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
    Workload(seq_len=4096, global_batch=64),
)  # 9,936 points: below the sweep's KEEP_ALL_LIMIT, so every record is kept and the test can recount


def _near(F: np.ndarray, objectives=TPS_COST) -> np.ndarray:
    """Near-tie mask of the rows of a minimised matrix F against its own front (front rows excluded)."""
    front = nondominated_mask(F)
    G = tie_space(F, objectives)
    return near_front_mask(G, G[front], near_tie_shift(objectives)) & ~front


def test_default_objectives_leave_free_memory_to_the_constraint():
    assert DEFAULT_OBJECTIVES == ("throughput", "cost")


def test_near_tie_by_hand_on_one_cluster():
    """Price x GPUs = 1: cost = 1 / throughput. Against the front point at 100 tokens/s, 99 (1% slower) and
    98.1 (100/98.1 = 1.0194 < 1.02) are near-ties; 98 (100/98 = 1.0204) and 90 are beaten by more than 2%."""
    tps = np.array([100.0, 99.0, 98.1, 98.0, 90.0])
    F = np.column_stack([-tps, 1.0 / tps])
    assert _near(F).tolist() == [False, True, True, False, False]


def test_near_tie_needs_one_front_point_within_the_tolerance_on_every_objective():
    """Two clusters, front A = (100 tokens/s, $1.00) and B = (80, $0.80). C = (99, $1.10): A beats it by 1% on
    speed, so by less than 2% on both: a near-tie. D = (79, $0.95): B beats it by 1.3% on speed, A is dearer:
    a near-tie. E = (90, $1.20): A beats it by 11% and 20%: not one."""
    F = np.array([[-100.0, 1.00], [-80.0, 0.80], [-99.0, 1.10], [-79.0, 0.95], [-90.0, 1.20]])
    assert _near(F).tolist() == [False, False, True, True, False]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(1.0, 1e6), st.floats(0.01, 100.0)),
        min_size=1,
        max_size=40,
    )
)
def test_near_ties_are_exactly_the_points_within_the_tolerance(rows):
    """Property: a non-front point is a near-tie iff no front point is at least (1 + tol) times faster and
    (1 + tol) times cheaper (the definition on the raw values; points on the boundary are skipped)."""
    F = np.array([[-t, c] for t, c in rows])
    front, near, k = nondominated_mask(F), _near(F), 1 + NEAR_TIE_FRACTION
    fronts = [rows[j] for j in np.flatnonzero(front)]
    for i, (t, c) in enumerate(rows):
        ratios = [(tj / t, c / cj) for tj, cj in fronts]
        if front[i] or any(abs(a - k) < 1e-9 or abs(b - k) < 1e-9 for a, b in ratios):
            assert not (front[i] and near[i])
            continue
        assert near[i] == (not any(a >= k and b >= k for a, b in ratios))


def test_headroom_is_never_a_ratio_tie():
    """Free GiB has no ratio scale, so no tolerance on its column: (99.5 tokens/s, 9.9 GiB) is 0.5% slower
    than the front's (100, 10): a near-tie; (97, 9) is 3% slower and has less room: not one."""
    objs = parse_objectives("throughput,headroom")
    assert near_tie_shift(objs).tolist() == [pytest.approx(math.log1p(NEAR_TIE_FRACTION)), 0.0]
    F = np.array([[-100.0, -10.0], [-99.5, -9.9], [-97.0, -9.0]])
    assert _near(F, objs).tolist() == [False, True, False]


def test_one_cluster_front_with_near_ties_and_no_knee():
    """On one fixed cluster the front is the fastest point (cost follows throughput); the near-ties are
    every point within the tolerance of its throughput, marked on their rows; no 'balanced' knee is offered
    (there is none on one axis) and free memory is a column, not an objective."""
    r = optimize(*PROBLEM, sampler="exhaustive")
    assert [o.name for o in r.objectives] == ["throughput", "cost"]
    front = [t for t in r.trials if t.feasible and not t.dominated]
    best = max(t.values["throughput"] for t in r.trials if t.feasible)
    assert {t.values["throughput"] for t in front} == {best}
    ties = {row["label"] for row in r.pareto_rows if row["near_tie"]}
    # recomputed from every feasible record: a near-tie iff within the tolerance of the fastest
    want = sorted(
        (t for t in r.trials if t.feasible and t.dominated and t.values["throughput"] * 1.02 > best),
        key=lambda t: -t.values["throughput"],
    )
    assert ties == {t.strategy.label() for t in want[:24]}
    assert ties and all("headroom" in row for row in r.pareto_rows)
    assert {rec.role for rec in r.recommended} == {"fastest", "cheapest"}
    counts = search_counts(r)
    assert counts["pareto"] == len({row["label"] for row in r.pareto_rows if not row["near_tie"]})
    assert counts["near_ties"] == len(ties)
    assert any("free memory is a constraint" in n for n in r.notes)


def test_headroom_objective_on_request_keeps_its_role():
    r = optimize(*PROBLEM, sampler="exhaustive", objectives="throughput,headroom,cost")
    assert "most_headroom" in {rec.role for rec in r.recommended}
    assert any("also an objective" in n for n in r.notes)


def test_constraint_still_binds_free_memory():
    """The default search keeps only points that leave --min-headroom free."""
    r = optimize(*PROBLEM, sampler="exhaustive", min_headroom_gib=30.0)
    assert r.pareto_rows and all(row["headroom"] >= 30.0 for row in r.pareto_rows)


def test_a_recipe_is_set_against_the_search_on_its_own_hardware():
    """Searching 64..512 H100 puts the pick on 512 GPUs; the 64-GPU recipe is compared with the search's best
    on 64 GPUs (the table's fastest 64-GPU point), not with the 512-GPU pick (it read "+721%" before)."""
    import json

    from typer.testing import CliRunner

    from autopar.cli import app

    res = CliRunner().invoke(app, ["optimize", "--gpus", "64..512", "--json"])
    assert res.exit_code == 0, res.output[-1000:]
    doc = json.loads(res.stdout)
    recipe = doc["recipe"]
    assert doc["verdict"]["hardware"].startswith("512") and "64 x H100-SXM" in recipe["against"]
    best64 = max(r["throughput"] for r in doc["pareto"] if r["num_gpus"] == 64)
    assert recipe["pick_over_recipe"] == pytest.approx(best64 / recipe["tokens_per_s"], rel=1e-9)
    assert 0.8 < recipe["pick_over_recipe"] < 1.25
