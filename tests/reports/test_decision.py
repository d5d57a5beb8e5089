"""The search report shows the answer first: recommendation cards (one per distinct point, what each buys),
the decision figures (time and cost to train), what would do better, a bounded trial cloud, the study
panel, and one stylesheet for every report."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_fixtures import OBJECTIVES, PRICE, make_estimate, make_held_out, make_result
from test_report_whatif import result as whatif_result  # noqa: F401 - a fixture, used by name

from autopar.reports.common import MODEBAR_MARGIN, PLOT_CONFIG
from autopar.reports.decision import MATERIAL_FRACTION, decision_info, recommendation_cards
from autopar.reports.figures import MAX_DOMINATED_POINTS, even_sample, pareto_plot_info
from autopar.reports.html import search_report_html
from autopar.reports.plots import plot_pareto
from autopar.search.result import Recommendation, TrialRecord
from autopar.search.storage import mask
from autopar.specs import Strategy, Workload

GiB = 2**30
WL = Workload(seq_len=4096, global_batch=64)


def _trial(number: int, tps: float, headroom: float, cost: float, tp: int = 1) -> TrialRecord:
    s = Strategy(tp=tp, sp=tp > 1).with_dp(16)
    return TrialRecord(
        number=number,
        strategy=s,
        num_gpus=16,
        gpu="H100-SXM",
        precision="bf16",
        estimate=make_estimate(s, 16, WL),  # capacity 79 GiB
        values={"throughput": tps, "headroom": headroom, "cost": cost},
        feasible=True,
        dominated=False,
    )


# --------------------------------------------------------------------------- cards


def test_one_point_in_two_roles_is_one_card_with_both_names() -> None:
    a = _trial(0, 100.0, 20.0, 1.0)
    twin = dataclasses.replace(a, number=7)  # the same point found as another trial
    other = _trial(1, 80.0, 40.0, 1.25, tp=2)
    recs = [
        Recommendation("fastest", a, "fast"),
        Recommendation("most_headroom", other, "roomy"),
        Recommendation("cheapest", twin, "cheap"),
    ]
    cards = recommendation_cards(recs, OBJECTIVES)
    assert [c.roles for c in cards] == [("fastest", "cheapest"), ("most_headroom",)]
    assert cards[0].title == "Fastest · Cheapest" and cards[0].whys == ("fast", "cheap")
    assert cards[0].buys == ""
    # 40 - 20 = +20 GiB; 80/100 - 1 = -20%; 1.25/1 - 1 = +25%
    assert (
        cards[1].buys
        == "Against fastest · cheapest: buys +20.0 GiB headroom for −20.0% throughput and +25.0% cost."
    )


def test_balanced_that_buys_nothing_has_no_card() -> None:
    a = _trial(0, 100.0, 20.0, 1.0)
    # +1.0 GiB is under MATERIAL_FRACTION of the 79 GiB GPU (1.58 GiB); -0.5% and +0.5% under 2%
    meh = _trial(1, 99.5, 21.0, 1.005, tp=2)
    assert MATERIAL_FRACTION * 79.0 > 1.0
    cards = recommendation_cards(
        [Recommendation("fastest", a, ""), Recommendation("balanced", meh, "")], OBJECTIVES
    )
    assert [c.roles for c in cards] == [("fastest",)]


def test_balanced_says_what_it_buys() -> None:
    a = _trial(0, 100.0, 20.0, 1.0)
    knee = _trial(1, 92.0, 30.0, 1.0 / 0.92, tp=2)  # same cluster: cost = price x GPUs / throughput
    cards = recommendation_cards(
        [Recommendation("fastest", a, ""), Recommendation("balanced", knee, "")], OBJECTIVES
    )
    assert len(cards) == 2
    # 1/0.92 - 1 = 8.6957% more per token
    assert cards[1].buys == "Against fastest: buys +10.0 GiB headroom for −8.0% throughput and +8.7% cost."


def test_non_balanced_role_keeps_its_card_even_when_close() -> None:
    a = _trial(0, 100.0, 20.0, 1.0)
    close = _trial(1, 99.5, 21.0, 1.005, tp=2)
    cards = recommendation_cards(
        [Recommendation("fastest", a, ""), Recommendation("most_headroom", close, "")], OBJECTIVES
    )
    assert len(cards) == 2 and cards[1].buys == "Within 2% of fastest on every objective."


def test_fixture_cards_match_the_figures_stars() -> None:
    """The stars on the Pareto plot are exactly the cards' points, labelled with the cards' titles, the first
    (the verdict's pick, which a near-tie may place left of the fastest centre) as the pick."""
    r = make_result()
    cards = recommendation_cards(r.recommended, r.objectives)
    panel = pareto_plot_info(r).panels[0]
    assert dict(zip(panel.recommended.numbers, panel.recommended.text, strict=True)) == {
        c.trial.number: ("Pick · " if i == 0 else "") + c.title for i, c in enumerate(cards)
    }


# --------------------------------------------------------------------------- decision


def test_decision_time_and_cost_to_train_by_hand() -> None:
    r = make_result()  # 16 GPUs at $2.5/GPU-h, token budget 1e12
    cards = recommendation_cards(r.recommended, r.objectives)
    d = decision_info(r, cards)
    assert d is not None and d.card is cards[0] and d.budget_given and d.tokens == 1e12
    tps = cards[0].trial.estimate.tokens_per_s
    seconds = 1e12 / tps
    assert d.train_days == pytest.approx(seconds / 86400)
    assert d.train_usd == pytest.approx(16 * PRICE * seconds / 3600)  # GPUs x $/GPU-h x hours
    assert d.capacity_gib == pytest.approx(79.0)


def test_decision_without_budget_uses_a_reference_and_says_so() -> None:
    r = make_result()
    r.workload = r.workload.model_copy(update={"token_budget": None})
    d = decision_info(r, recommendation_cards(r.recommended, r.objectives))
    assert d is not None and not d.budget_given and d.tokens == 1e12
    page = search_report_html(r, plotlyjs="cdn")
    assert "No --token-budget was given: time and cost are for 1T tokens." in page


def test_better_hints_name_bottleneck_memory_and_the_front_leaders() -> None:
    r = make_result()
    d = decision_info(r, recommendation_cards(r.recommended, r.objectives))
    assert d is not None
    assert d.better[0].startswith("The step is compute-bound")  # the fixture's estimates are compute-bound
    free = d.headroom_gib
    assert (f"{free:.1f} of 79.0 GiB free per GPU") in d.better[1]
    assert d.better[1].startswith("Memory binds" if free < 7.9 else "Memory does not bind")
    # the most headroom among front points within 90% of the best throughput is named with what it trades
    front = [t for t in r.trials if t.feasible and not t.dominated]
    best = max(t.values["throughput"] for t in front)
    roomiest = max(
        (t for t in front if t.values["throughput"] >= 0.9 * best), key=lambda t: t.values["headroom"]
    )
    lead = next(b for b in d.better if "GiB headroom:" in b)
    assert roomiest.strategy.label() in lead and "throughput" in lead
    assert d.better[-1].startswith("Only 16 × H100-SXM was searched")


def test_no_recommendation_no_decision() -> None:
    r = make_result()
    assert decision_info(r, []) is None


# --------------------------------------------------------------------------- page order


def test_the_answer_comes_before_the_figures_and_the_inputs() -> None:
    r = make_result()
    r.calibration = {"name": "default", "description": "a long paragraph " * 30}
    page = search_report_html(r, plotlyjs="cdn")
    pos = {k: page.index(k) for k in ('id="recommended-strategy"', 'id="pareto"', 'id="inputs"')}
    assert pos['id="recommended-strategy"'] < pos['id="pareto"'] < pos['id="inputs"']
    # the calibration paragraph sits closed in a <details> under the inputs
    m = re.search(r'<details class="meta"><summary>default</summary><p>([^<]*)</p></details>', page)
    assert m and "a long paragraph" in m.group(1)


# --------------------------------------------------------------------------- size


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 400), limit=st.integers(1, 120))
def test_even_sample_is_bounded_deterministic_and_keeps_the_ends(n: int, limit: int) -> None:
    trials = [_trial(i, 1.0, 1.0, 1.0) for i in range(0, 3 * n, 3)]
    got = even_sample(list(reversed(trials)), limit)
    assert len(got) == min(n, limit)
    assert len({t.number for t in got}) == len(got)  # no point twice
    assert [t.number for t in got] == sorted(t.number for t in got)
    if n and limit >= 2:
        assert got[0].number == 0 and got[-1].number == 3 * (n - 1)
    assert [t.number for t in got] == [t.number for t in even_sample(trials, limit)]


def _big_result(n_dominated: int):
    """The fixture plus n_dominated copies of its slowest feasible point (dominated by the front)."""
    r = make_result()
    slow = min((t for t in r.trials if t.feasible), key=lambda t: t.values["throughput"])
    base = len(r.trials)
    extra = []
    for i in range(n_dominated):
        v = dict(slow.values)
        v["throughput"] *= 0.5 + 0.4 * i / n_dominated
        v["cost"] = slow.values["cost"] * slow.values["throughput"] / v["throughput"]
        extra.append(dataclasses.replace(slow, number=base + i, values=v, dominated=True))
    r.trials = r.trials + extra
    return r


def test_large_study_report_stays_small_and_says_what_it_drew() -> None:
    """20,000 dominated points: every front point is drawn, a bounded sample of the rest, and the page
    says how many of how many (the issue's 20k-trial report was 32 MB; drawing every point this one is
    12.3 MB)."""
    r = _big_result(20_000)
    info = pareto_plot_info(r)
    front = {t.number for t in r.trials if t.feasible and not t.dominated}
    assert all(set(p.pareto.numbers) == front for p in info.panels)
    assert info.n_dominated_drawn == MAX_DOMINATED_POINTS and info.n_dominated > 20_000
    assert all(len(p.dominated.numbers) == MAX_DOMINATED_POINTS for p in info.panels)
    page = search_report_html(r, plotlyjs="cdn")
    assert f"every front point and {MAX_DOMINATED_POINTS:,} of {info.n_dominated:,} dominated" in page
    assert len(page.encode()) < 1_500_000


# --------------------------------------------------------------------------- legend and toolbar


def test_modebar_sits_in_the_right_margin_away_from_legends() -> None:
    assert PLOT_CONFIG["displayModeBar"] == "hover"
    fig = plot_pareto(pareto_plot_info(make_result()))
    assert fig.layout.modebar.orientation == "v" and fig.layout.margin.r >= MODEBAR_MARGIN
    assert fig.layout.legend.xanchor == "left" and fig.layout.legend.y > 1  # above the plot, from the left


# --------------------------------------------------------------------------- study and theme


def test_study_panel_names_study_storage_and_states_with_credentials_masked() -> None:
    r = make_result()
    r.inputs.update({"storage": "postgresql://me:s3cret@db/x?password=hunter2", "study_name": "llama70b"})
    r.stats["study_states"] = {"COMPLETE": 300, "PRUNED": 16, "FAIL": 1}
    page = search_report_html(r, plotlyjs="cdn")
    assert "s3cret" not in page and "hunter2" not in page
    assert "postgresql://me:***@db/x?password=***" in page
    assert "COMPLETE 300 · FAIL 1 · PRUNED 16" in page
    assert "autopar · study report" in page and "study llama70b" in page


def test_mask_hides_passwords_in_the_authority_and_the_query() -> None:
    assert mask("postgresql://u:p@ss@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert mask("postgresql://u@h/db?sslmode=require&Password=x&a=1") == (
        "postgresql://u@h/db?sslmode=require&Password=***&a=1"
    )
    assert mask("runs.journal") == "runs.journal"


def _style(page: str) -> str:
    return re.search(r"<style>.*?</style>", page, re.S).group(0)


def test_every_report_uses_one_stylesheet_and_header(request) -> None:
    whatif = request.getfixturevalue("whatif_result")
    from autopar.reports.calibration_html import report_html
    from autopar.reports.whatif_html import whatif_report_html

    pages = {
        "optimize report": search_report_html(make_result(), plotlyjs="cdn"),
        "what-if report": whatif_report_html(whatif, plotlyjs="cdn"),
        "calibration report": report_html(
            make_held_out(), title="Calibration", description="d", plotlyjs="cdn"
        ),
    }
    assert len({_style(p) for p in pages.values()}) == 1
    for kind, page in pages.items():
        assert f'<header class="top"><div class="wrap"><div class="brand">autopar · {kind}</div>' in page
        assert page.count("<footer>") == 1


def test_whatif_answer_comes_before_the_options_and_the_inputs(request) -> None:
    from autopar.reports.whatif_html import whatif_report_html

    page = whatif_report_html(request.getfixturevalue("whatif_result"), plotlyjs="cdn")
    order = [page.index(k) for k in ('id="recommended-option"', 'id="options"', 'id="inputs"')]
    assert order == sorted(order)
