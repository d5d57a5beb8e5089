"""Ranking hardware options, the cost-vs-time Pareto front and the headline sentence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autopar.costs.ranking import Candidate, headline, pareto, rank

DAY = 86400.0


def _c(label, days, kusd):
    return Candidate(label, days * DAY, kusd * 1e3)


OPTS = [_c("A", 20, 900), _c("B", 30, 600), _c("C", 35, 850), _c("D", 12, 1200)]


def test_rank_by_cost_without_limits():
    assert rank(OPTS) == ["B", "C", "A", "D"]


def test_rank_cheapest_meeting_deadline_first_then_by_time():
    # meeting 25 d: A (900K), D (1200K) -> by cost A, D; missing: B (30 d), C (35 d) -> by time B, C
    assert rank(OPTS, deadline_s=25 * DAY) == ["A", "D", "B", "C"]


def test_rank_with_deadline_and_cap():
    # within both (deadline 25 d, cap 1M): A only; one limit broken: D (cap), B, C (deadline) by time
    assert rank(OPTS, deadline_s=25 * DAY, max_cost_usd=1e6) == ["A", "D", "B", "C"]
    # cap 700K and deadline 40 d: B qualifies; A, C, D break the cap -> by time D, A, C
    assert rank(OPTS, deadline_s=40 * DAY, max_cost_usd=7e5) == ["B", "D", "A", "C"]


def test_pareto_front():
    # C (35 d, 850K) is dominated by B (30 d, 600K); the others trade time for money
    assert pareto(OPTS) == ["D", "A", "B"]


def test_headline_deadline_nobody_meets_names_fastest():
    msg = headline(OPTS, rank(OPTS, 5 * DAY), 5 * DAY, None)
    assert msg.startswith("No option meets the 5.0 days deadline")
    assert "fastest is D at 12.0 days ($1,200,000)" in msg


def test_headline_recommendation_and_fastest():
    msg = headline(OPTS, rank(OPTS, 25 * DAY), 25 * DAY, None)
    assert msg.startswith(
        "Recommended: A, the cheapest option that meets the 25.0 days deadline: 20.0 days, $900,000."
    )
    assert "Fastest is D" in msg


def test_headline_cap_nobody_meets():
    msg = headline(OPTS, rank(OPTS, None, 1e5), None, 1e5)
    assert msg.startswith("No option fits the $100,000 spending cap: the cheapest is B")


def test_headline_no_feasible_option():
    assert "no strategy fits in memory on X:8" in headline([], [], None, None, ["X:8"])


cands = st.lists(
    st.builds(Candidate, label=st.uuids().map(str), time_s=st.floats(1.0, 1e8), cost_usd=st.floats(1.0, 1e9)),
    min_size=1,
    max_size=12,
    unique_by=lambda c: c.label,
)


@given(cands, st.one_of(st.none(), st.floats(1.0, 1e8)), st.one_of(st.none(), st.floats(1.0, 1e9)))
def test_rank_properties(cs, deadline, cap):
    order = rank(cs, deadline, cap)
    assert sorted(order) == sorted(c.label for c in cs)
    by = {c.label: c for c in cs}
    ok = [c for c in cs if (deadline is None or c.time_s <= deadline) and (cap is None or c.cost_usd <= cap)]
    if ok:  # the winner is within every limit and is the cheapest such option
        assert by[order[0]] in ok
        assert by[order[0]].cost_usd == min(c.cost_usd for c in ok)
        assert set(order[: len(ok)]) == {c.label for c in ok}


@given(cands)
def test_pareto_properties(cs):
    front = set(pareto(cs))
    assert front

    def dominates(a, b):
        return (
            a.time_s <= b.time_s
            and a.cost_usd <= b.cost_usd
            and (a.time_s < b.time_s or a.cost_usd < b.cost_usd)
        )

    for c in cs:
        if c.label in front:
            assert not any(dominates(o, c) for o in cs)
        else:
            assert any(dominates(o, c) for o in cs if o.label in front)
    # the fastest and the cheapest option are always on the front
    assert min(cs, key=lambda c: (c.time_s, c.cost_usd)).label in front
    assert min(cs, key=lambda c: (c.cost_usd, c.time_s)).label in front
