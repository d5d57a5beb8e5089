"""bench/graph_memory.py: the coefficient intervals on hand-made rows, and its cited cases."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runfiles import load_bench

gm = load_bench("graph_memory")


def _row(free: float, fits: bool, act: float = 1.0, n_mb: float = 1.0) -> dict:
    return {"free": free, "fits": fits, "act": act, "n_mb": n_mb}


def test_interval_hand_computed() -> None:
    # An OOM with 40 GiB free needs X > 40; a run with 50 free allows X < 50: a constant in (40, 50).
    rows = [_row(40.0, False), _row(50.0, True)]
    assert gm.interval(rows, "one") == (40.0, 50.0)
    # Per micro-batch: OOM at 32 micro-batches with 80 free -> c > 2.5; run at 16 with 48 free -> c < 3.
    rows = [_row(80.0, False, n_mb=32), _row(48.0, True, n_mb=16)]
    assert gm.interval(rows, "n_mb") == pytest.approx((2.5, 3.0))
    # The same rows rule a constant out: it would need X > 80 and X < 48.
    lo, hi = gm.interval(rows, "one")
    assert lo > hi


@given(st.lists(st.tuples(st.floats(0.1, 500), st.booleans(), st.floats(0.1, 100)), min_size=1, max_size=8))
def test_interval_separates_every_row(rows) -> None:
    """Any coefficient strictly inside the interval puts every fit below and every OOM above its free."""
    table = [_row(f, fits, n_mb=n) for f, fits, n in rows]
    lo, hi = gm.interval(table, "n_mb")
    if lo >= hi:
        return
    coef = (lo + hi) / 2 if hi != float("inf") else lo + 1.0
    for r in table:
        x = coef * r["n_mb"]
        assert (x < r["free"]) if r["fits"] else (x > r["free"])


def test_cases_cite_their_source() -> None:
    """Every case names where its outcome was published; the B200 OOMs are PR #5356's four layouts."""
    assert all(c.source for c in gm.CASES)
    ooms = {(c.tp, c.micro_batch) for c in gm.CASES if not c.fits}
    assert ooms == {(1, 4), (1, 2), (2, 4), (2, 2)}
    assert all(c.row == "MBR-051" for c in gm.CASES if not c.fits)
