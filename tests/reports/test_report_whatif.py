"""What-if report: option table, cost-vs-time chart data and sensitivity table, from a hand-made result."""

from __future__ import annotations

import pytest
from test_report_fixtures import H100, LLAMA8B

from autopar.costs.figures import cost_figures
from autopar.costs.whatif import OptionResult, ScenarioOption, SensitivityRow, WhatIfResult
from autopar.reports.whatif_html import (
    cost_time_info,
    options_table_info,
    plot_cost_time,
    sensitivity_table_info,
    whatif_report_html,
    write_whatif_report,
)
from autopar.specs import ClusterSpec, Strategy, Workload

DAY = 86400.0
TOKENS = 1e12


def _option(
    label: str, count: int, price: float, tps: float | None, rank: int | None, pareto: bool
) -> OptionResult:
    gpu = label.split(":")[0]
    o = OptionResult(
        label=label,
        gpu=gpu,
        count=count,
        tier="on_demand",
        usd_per_gpu_hour=price,
        price_source="test",
        feasible=tps is not None,
        cluster=ClusterSpec(gpu=H100, num_gpus=count, price_usd_per_gpu_hour=price),
    )
    if tps is None:
        o.reason = "no strategy fits in 40 trials"
        return o
    o.strategy = Strategy(tp=2, sp=True, zero=1).with_dp(count)
    o.strategy_label, o.precision = o.strategy.label(), "bf16"
    o.tokens_per_s, o.mfu, o.headroom_gib = tps, 0.45, 20.0
    o.figures = cost_figures(tps, count, price, TOKENS)
    o.rank, o.on_pareto, o.meets_deadline = rank, pareto, o.figures.time_to_train_s <= 40 * DAY
    o.n_trials, o.n_feasible = 40, 30
    return o


@pytest.fixture
def result() -> WhatIfResult:
    # 1e12 tokens at 400k tokens/s = 2.5e6 s = 28.94 days; 64 GPUs x $3/h x 694.4 h = $133,333.
    a = _option("H100-SXM:64", 64, 3.0, 400_000.0, 1, True)
    # 1e12 / 220k = 4.545e6 s = 52.6 days; 32 x $3 x 1262.6 h = $121,212 (cheaper, slower: on the front).
    b = _option("H100-SXM:32", 32, 3.0, 220_000.0, 2, True)
    # 1e12 / 150k = 77.2 days; 64 x $2 x 1851.9 h = $237,037: dominated by both.
    c = _option("A100-80GB:64", 64, 2.0, 150_000.0, 3, False)
    d = _option("A100-40GB:8", 8, 1.5, None, None, False)
    sens = [
        SensitivityRow(
            scenario="H100-SXM price +20%",
            kind="price",
            gpu="H100-SXM",
            factor=1.2,
            winner="H100-SXM:64",
            runner_up="H100-SXM:32",
            winner_changed=False,
            options=[
                ScenarioOption("H100-SXM:64", 2.5e6, 160_000.0, True, 1),
                ScenarioOption("H100-SXM:32", 4.545e6, 145_454.0, False, 2),
            ],
        ),
        SensitivityRow(
            scenario="inter-node bandwidth halved",
            kind="internode_bw",
            gpu=None,
            factor=0.5,
            winner="H100-SXM:32",
            runner_up="H100-SXM:64",
            winner_changed=True,
            options=[ScenarioOption("H100-SXM:64", 5e6, 266_666.0, False, 2)],
        ),
    ]
    return WhatIfResult(
        model=LLAMA8B,
        workload=Workload(seq_len=4096, global_batch=256, token_budget=TOKENS),
        token_budget=TOKENS,
        tier="on_demand",
        goodput=1.0,
        deadline_s=40 * DAY,
        max_cost_usd=200_000.0,
        options=[a, b, c, d],
        ranking=["H100-SXM:64", "H100-SXM:32", "A100-80GB:64"],
        pareto=["H100-SXM:64", "H100-SXM:32"],
        sensitivity=sens,
        message="H100-SXM:64 trains 1T tokens in 28.9 days for $133,333.",
        seed=0,
        search_budget=40,
        wall_s=2.0,
        notes=["prices are examples"],
    )


def test_cost_time_points(result: WhatIfResult) -> None:
    info = cost_time_info(result)
    assert info.labels == ("H100-SXM:64", "H100-SXM:32", "A100-80GB:64")  # infeasible option not plotted
    assert info.days[0] == pytest.approx(1e12 / 400_000 / DAY) == pytest.approx(28.935, abs=1e-3)
    assert info.usd[0] == pytest.approx(64 * 3.0 * 1e12 / 400_000 / 3600) == pytest.approx(133_333.3, abs=0.1)
    assert info.front_labels == ("H100-SXM:64", "H100-SXM:32")
    assert info.on_pareto == (True, True, False)
    assert info.winner == "H100-SXM:64" and info.deadline_days == pytest.approx(40.0)
    assert info.infeasible == ("A100-40GB:8: no strategy fits in 40 trials",)
    fig = plot_cost_time(info)
    assert fig.layout.height == 460
    assert "days" in fig.layout.xaxis.title.text and "USD" in fig.layout.yaxis.title.text
    assert [t.name for t in fig.data] == ["Cost-time Pareto front", "Options", "Best: H100-SXM:64"]
    assert len(fig.layout.shapes) == 2  # deadline and cost cap lines


def test_options_table(result: WhatIfResult) -> None:
    info = options_table_info(result)
    assert len(info.rows) == 4
    assert [r[1][0] for r in info.rows] == ["H100-SXM:64", "H100-SXM:32", "A100-80GB:64", "A100-40GB:8"]
    assert info.roles[0] == "Best" and not any(info.roles[1:])
    first = dict(zip([c.key for c in info.columns], info.rows[0], strict=True))
    assert first["days"][0] == "28.9" and first["cost"][0] == "133,333" and first["deadline"][0] == "yes"
    last = dict(zip([c.key for c in info.columns], info.rows[3], strict=True))
    assert last["rank"][0] == "–" and last["note"][0] == "no strategy fits in 40 trials"


def test_sensitivity_table(result: WhatIfResult) -> None:
    info = sensitivity_table_info(result)
    assert len(info.rows) == 2
    assert [c.label for c in info.columns][4:] == [
        "H100-SXM:64 (days / USD)",
        "H100-SXM:32 (days / USD)",
        "A100-80GB:64 (days / USD)",
        "A100-40GB:8 (days / USD)",
    ]
    assert info.rows[0][4][0] == "28.9 d / $160,000"
    assert info.rows[1][3][0] == "yes" and info.roles[1] == "Winner changes"
    assert info.rows[1][5][0] == "–"  # option missing from the scenario


def test_whatif_page(result: WhatIfResult, tmp_path) -> None:
    p = write_whatif_report(result, tmp_path / "w.html")
    text = p.read_text()
    assert 500_000 < p.stat().st_size < 1_500_000  # partial plotly.js, gzip + base64 inline
    for needle in (
        "What-if: training Llama-3-8B on 1 T tokens",
        "fig-cost-time",
        "options-table",
        "sensitivity-table",
        "H100-SXM:64 trains 1T tokens",
        "#SBATCH --nodes=8",
        "Best option",
    ):
        assert needle in text, needle
    assert text.count("<tr") == 1 + 4 + 1 + 2  # two tables with headers


def test_whatif_page_without_feasible_options(result: WhatIfResult) -> None:
    for o in result.options:
        o.feasible, o.figures, o.rank = False, None, None
    result.ranking, result.pareto, result.sensitivity = [], [], []
    page = whatif_report_html(result, plotlyjs="cdn")
    assert "No option has a feasible strategy" in page and "Sensitivity analysis was not run" in page


def test_real_whatif_report(tmp_path) -> None:
    """End to end through autopar.costs.whatif.run_whatif (small searches)."""
    from autopar.catalog import get_model
    from autopar.costs.whatif import run_whatif

    r = run_whatif(
        get_model("llama-3-8b"),
        ["H100-SXM:16", "A100-80GB:16"],
        Workload(seq_len=4096, global_batch=128),
        token_budget=1e11,
        budget=30,
        seed=0,
    )
    info = cost_time_info(r)
    assert set(info.labels) == {o.label for o in r.options if o.feasible}
    assert len(options_table_info(r).rows) == 2
    assert len(sensitivity_table_info(r).rows) == len(r.sensitivity)
    assert "fig-cost-time" in write_whatif_report(r, tmp_path / "real.html", plotlyjs="cdn").read_text()
