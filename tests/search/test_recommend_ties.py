"""Near-ties in a recommendation (recommend.near_tie_choice): the same set of points gives the same
recommendation whatever order a search found them in, and a point outside the tie band is never chosen."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autopar.search.recommend import NEAR_TIE_FRACTION, near_tie_choice
from autopar.search.result import TrialRecord
from autopar.specs import Strategy

LAYOUTS = [Strategy(tp=t, pp=p) for t in (1, 2, 4, 8) for p in (1, 2, 4)]


def _trial(i: int, tps: float, free: float, number: int) -> TrialRecord:
    values = {"throughput": tps, "headroom": free}
    return TrialRecord(number, LAYOUTS[i], 64, "H100-SXM", "bf16", None, values, True)


points = st.lists(
    st.tuples(st.floats(1000.0, 1100.0), st.floats(0.0, 40.0)), min_size=1, max_size=len(LAYOUTS)
)


@given(points, st.randoms(use_true_random=False))
def test_choice_does_not_depend_on_the_order_found(pts, rnd):
    trials = [_trial(i, tps, free, i) for i, (tps, free) in enumerate(pts)]
    order = list(range(len(trials)))
    rnd.shuffle(order)
    # another search: the same points, met in another order, with other trial numbers
    other = [_trial(i, *pts[i], number=k) for k, i in enumerate(order)]
    rank = lambda ts: sorted(ts, key=lambda r: (-r.values["throughput"], r.number))  # noqa: E731
    a, ties_a = near_tie_choice(rank(trials), "throughput")
    b, ties_b = near_tie_choice(rank(other), "throughput")
    assert a.strategy == b.strategy
    top = max(tps for tps, _ in pts)
    assert a.values["throughput"] >= (1 - NEAR_TIE_FRACTION) * top - 1e-9
    tied = [r for r in trials if r.values["throughput"] >= (1 - NEAR_TIE_FRACTION) * top - 1e-9]
    assert a.values["headroom"] == max(r.values["headroom"] for r in tied)
    assert len(ties_a) == len(ties_b) == len(tied) - 1


def test_a_clear_winner_is_kept():
    # 3% faster is outside the 2% band: the faster point wins although it has less free memory
    fast, roomy = _trial(0, 1030.0, 5.0, 7), _trial(1, 1000.0, 30.0, 3)
    choice, ties = near_tie_choice([fast, roomy], "throughput")
    assert choice is fast and ties == []
    # 1% is inside it: the point with more free memory stands for both
    close = _trial(1, 1020.0, 30.0, 3)
    choice, ties = near_tie_choice([fast, close], "throughput")
    assert choice is close and ties == [fast]
