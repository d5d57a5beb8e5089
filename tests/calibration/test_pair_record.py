"""calibration/evaluation/pairs.py: the model's record on measured layout pairs, grouped by predicted gain; the shipped
table is what bench/ranking.py derives from the sweeps now; the recipe comparison quotes it."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runfiles import load_bench

from autopar.calibration.evaluation import pairs
from autopar.data import data_path
from autopar.reports.decision import RecipeView, pair_sentence


def _pair(pred: float, meas: float, source: str = "a", problem: str = "p") -> pairs.MeasuredPair:
    return pairs.MeasuredPair(source, problem, pred, meas)


def test_orient_takes_the_models_order() -> None:
    # the model calls b faster (200 vs 100 predicted, gain 2); measured b/a = 90/120 = 0.75: order wrong
    p = pairs.orient("s", "x", 100.0, 200.0, 120.0, 90.0)
    assert p is not None and p.predicted_gain == pytest.approx(2.0) and p.measured_gain == pytest.approx(0.75)
    same = pairs.orient("s", "x", 200.0, 100.0, 90.0, 120.0)
    assert same is not None and same.predicted_gain == pytest.approx(2.0)
    assert same.measured_gain == pytest.approx(0.75)
    assert pairs.orient("s", "x", 100.0, 100.0 * (1 + 1e-12), 1.0, 2.0) is None  # no predicted order
    assert pairs.orient("s", "x", 100.0, 0.0, 1.0, 2.0) is None


def test_groups_hand_computed() -> None:
    # 3-10%: gains 1.05 (measured 1.10), 1.04 (0.90), 1.08 (1.20), 1.06 (1.00: not faster)
    # -> held 2 of 4; median of 0.90 1.00 1.10 1.20 = 1.05; p20 at position 0.6 -> 0.90 + 0.6*0.10 = 0.96
    # 10-20%: none; 20-40%: one pair; below 3%: a near-tie, in no group
    ps = [_pair(1.05, 1.10), _pair(1.04, 0.90), _pair(1.08, 1.20), _pair(1.06, 1.00, "b", "q")]
    ps += [_pair(1.3, 1.5), _pair(1.01, 0.5)]
    g = pairs.group_pairs(ps)
    assert [(x.lo, x.hi, x.pairs) for x in g] == [(1.03, 1.10, 4), (1.20, 1.40, 1)]
    assert g[0].held_share == 0.5 and g[0].problems == 2 and g[0].sources == ("a", "b")
    assert g[0].realised_median == pytest.approx(1.05) and g[0].realised_low == pytest.approx(0.96)
    assert not g[0].holds  # 50% < HOLDS_SHARE, and 4 < MIN_PAIRS pairs


def test_holds_needs_pairs_sources_and_share() -> None:
    many = [_pair(1.5, 1.4, source=f"s{i % 2}", problem=str(i)) for i in range(pairs.MIN_PAIRS)]
    assert pairs.group_pairs(many)[0].holds
    one_source = [_pair(1.5, 1.4, problem=str(i)) for i in range(pairs.MIN_PAIRS)]
    assert not pairs.group_pairs(one_source)[0].holds
    assert "one source" in pairs.group_pairs(one_source)[0].sentence()
    few = many[: pairs.MIN_PAIRS - 1]
    assert not pairs.group_pairs(few)[0].holds
    # 2 of 10 wrong: 80% held is enough; 3 of 10 is not
    mixed = [_pair(1.5, 0.9 if i < 2 else 1.2, f"s{i % 2}", str(i)) for i in range(10)]
    assert pairs.group_pairs(mixed)[0].holds
    worse = [_pair(1.5, 0.9 if i < 3 else 1.2, f"s{i % 2}", str(i)) for i in range(10)]
    assert not pairs.group_pairs(worse)[0].holds
    assert "held in only 70%" in pairs.group_pairs(worse)[0].sentence()


def test_holds_needs_no_dominant_source() -> None:
    # 9 pairs of s0 and 1 of s1: two sources, but s0 supplies 90% > MAX_SOURCE_SHARE: its record, not a broad one
    lopsided = [_pair(1.5, 1.4, "s0" if i < 9 else "s1", str(i)) for i in range(10)]
    g = pairs.group_pairs(lopsided)[0]
    assert g.sources == ("s0", "s1") and g.largest_source_share == pytest.approx(0.9)
    assert not g.holds and "90% of the pairs from one source" in g.sentence()
    # 8 and 2: 80% is at the limit, so the record holds
    even = [_pair(1.5, 1.4, "s0" if i < 8 else "s1", str(i)) for i in range(10)]
    assert pairs.group_pairs(even)[0].holds


@given(
    st.lists(
        st.tuples(st.floats(1.0001, 5.0), st.floats(0.2, 5.0), st.sampled_from("abc")),
        min_size=1,
        max_size=40,
    )
)
def test_groups_partition_the_ordered_pairs(raw: list[tuple[float, float, str]]) -> None:
    ps = [_pair(g, m, s) for g, m, s in raw]
    groups = pairs.group_pairs(ps)
    assert sum(g.pairs for g in groups) == sum(p.predicted_gain >= pairs.GAIN_EDGES[0] for p in ps)
    for g in groups:
        assert 0.0 <= g.held_share <= 1.0 and g.realised_low <= g.realised_median
    doc = pairs.record_document(groups, "x.csv")
    back = pairs.from_document(json.loads(json.dumps(doc)))
    assert [(g.lo, g.hi, g.pairs, g.sources) for g in back.groups] == [
        (g.lo, g.hi, g.pairs, g.sources) for g in groups
    ]


def test_shipped_record_is_current() -> None:
    # the shipped table is what the sweeps give with today's model (regenerate: python bench/ranking.py
    # --export-pairs autopar/data/pair_record.json)
    rk = load_bench("ranking")
    probs = rk.load_problems([rk.SWEEPS], seen=False)
    fresh = pairs.record_document(pairs.group_pairs(rk.measured_pairs(probs)), "bench/data/sweeps.csv")
    shipped = json.loads(data_path(pairs.PAIRS_FILE).read_text(encoding="utf-8"))
    assert shipped == json.loads(json.dumps(fresh))
    record = pairs.pair_record()
    assert record is not None and record.for_gain(1.01) is None
    assert record.for_gain(1.05) is record.for_gain(1 / 1.05)  # the other order, same size


def test_recipe_comparison_quotes_the_record() -> None:
    group = pairs.pair_record().for_gain(1.5)
    view = RecipeView("R", "src", "TP1", 1000.0, None, 1.5, (), (), pair_sentence(1.5))
    assert group is not None and group.sentence() in view.sentence()
    assert "the pick is predicted 50.0% faster" in view.sentence()
    near = RecipeView("R", "src", "TP1", 1000.0, None, 1.01, (), (), pair_sentence(1.01))
    assert pair_sentence(1.01) == "" and "near-tie" in near.sentence()
    assert not math.isnan(group.realised_low)


def test_optimize_json_carries_the_recipe_and_its_record() -> None:
    # the default problem has a published preset (LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1, bench/recipes.py)
    from typer.testing import CliRunner

    from autopar.cli import app

    r = CliRunner().invoke(app, ["optimize", "--budget", "50", "--json"])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)["recipe"]
    assert rec["id"] == "LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1"
    pick = json.loads(r.output)["recommended"][0]
    assert rec["pick_over_recipe"] == pytest.approx(pick["throughput"] / rec["tokens_per_s"], rel=1e-6)
    group = pairs.pair_record().for_gain(rec["pick_over_recipe"])
    if group is None:
        assert rec["record"] is None
    else:
        assert rec["record"]["pairs"] == group.pairs and rec["record"]["holds"] is group.holds
