"""bench/knob_pairs.py: one-knob pairs and their summary on hand-made layouts, and a run on the sweeps."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runfiles import load_bench

kp = load_bench("knob_pairs")

from autopar.specs import Strategy  # noqa: E402


def _layout(row_id: str, measured: float, predicted: float, label_extra: str = "", **strategy):
    st_ = Strategy(**strategy)
    est = SimpleNamespace(strategy=st_)
    label = " ".join([st_.label(), label_extra]).strip()
    return kp.Layout(row_id, label, measured, predicted, est)


def _problem(*layouts):
    return kp.Problem("P-1: toy", "toy", False, list(layouts))


def test_pairs_differ_in_exactly_one_knob_and_order_by_value() -> None:
    a = _layout("a", 100.0, 200.0, tp=8, pp=2, micro_batch=4)
    b = _layout("b", 300.0, 500.0, tp=8, pp=2, micro_batch=1)
    c = _layout("c", 150.0, 260.0, tp=4, pp=2, micro_batch=1)  # differs from a in tp AND micro-batch
    p = _problem(a, b, c)
    pairs = list(kp.pairs_of(p, kp.layout_options(p)))
    assert {(q.knob, q.a.row_id, q.b.row_id) for q in pairs} == {("micro_batch", "b", "a"), ("tp", "c", "b")}
    mb = next(q for q in pairs if q.knob == "micro_batch")
    # mb 1 -> 4: measured 100/300, predicted 200/500
    assert (mb.value_a, mb.value_b) == (1, 4)
    assert mb.measured == pytest.approx(1 / 3)
    assert mb.predicted == pytest.approx(0.4)


def test_workload_options_from_the_label_count_as_knobs() -> None:
    a = _layout("a", 100.0, 100.0, "moe_dispatcher=alltoall", tp=2)
    b = _layout("b", 80.0, 110.0, "moe_dispatcher=flex", tp=2)
    p = _problem(a, b)
    (q,) = kp.pairs_of(p, kp.layout_options(p))
    assert (q.knob, q.value_a, q.value_b) == ("moe_dispatcher", "alltoall", "flex")


def test_summary_by_hand() -> None:
    a1, b1 = _layout("a1", 100.0, 100.0, micro_batch=1), _layout("b1", 200.0, 150.0, micro_batch=4)
    a2, b2 = _layout("a2", 100.0, 100.0, micro_batch=1), _layout("b2", 90.0, 120.0, micro_batch=2)
    p1, p2 = _problem(a1, b1), _problem(a2, b2)
    pairs = [*kp.pairs_of(p1, kp.layout_options(p1)), *kp.pairs_of(p2, kp.layout_options(p2))]
    # pair 1: measured x2.0, predicted x1.5 (same sign), ratio 0.75; pair 2: x0.9 vs x1.2 (opposite), 1.333
    n, agree, med = kp.summary(pairs)
    assert (n, agree) == (2, 1)
    assert med == pytest.approx((0.75 + 1.2 / 0.9) / 2)
    assert math.isnan(kp.summary([])[2])


@given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=6, unique=True))
def test_a_perfect_model_agrees_everywhere(mbs_speed) -> None:
    lays = [_layout(f"r{i}", s, 3.0 * s, micro_batch=i + 1) for i, s in enumerate(mbs_speed)]
    p = _problem(*lays)
    pairs = list(kp.pairs_of(p, kp.layout_options(p)))
    n, agree, med = kp.summary(pairs)
    assert n == len(lays) * (len(lays) - 1) // 2
    assert agree == n and med == pytest.approx(1.0)


def test_knob_pairs_runs_on_the_sweeps(capsys) -> None:
    assert kp.main(["--no-seen", "--knob", "micro_batch"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["knob", "pairs"]
    assert out.splitlines()[1].split()[0] == "micro_batch"
    assert kp.main(["--knob", "nosuch"]) == 2
    assert kp.main(["--knob", "micro-batch"]) == 2
    assert "did you mean micro_batch?" in capsys.readouterr().err
