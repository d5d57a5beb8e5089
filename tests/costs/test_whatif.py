"""run_whatif: hand-derived figures with a stub search, price overrides, deadlines, sensitivity;
and one end-to-end run against the real optimizer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autopar.catalog import get_model
from autopar.costs import default_price_book, load_price_book, run_whatif
from autopar.costs.figures import cost_figures
from autopar.costs.options import HardwareOption, parse_counts, parse_option
from autopar.errors import AutoparError, SpecError
from autopar.search.evaluate import resolve_price as resolve_search_price
from autopar.search.result import TrialRecord
from autopar.specs import Strategy, Workload

DAY = 86400.0
MODEL = get_model("Llama-3-8B")
WL = Workload(seq_len=4096, global_batch=512)
# Stub throughput per option (cluster tokens/s), and prices set in a user book:
#   H100-SXM:512 -> 1e6 tokens/s at $2.50 ; B200:128 -> 6e5 tokens/s at $5.00
TPS = {("H100-SXM", 512): 1e6, ("B200", 128): 6e5}


def fake_optimize(model, cluster, workload, **kw):
    """A search stub: three trials per option, the middle one fastest; one that does not fit."""
    tps = TPS[(cluster.gpu.name, cluster.num_gpus)]
    trials = []
    for i, (frac, fits) in enumerate([(0.8, True), (1.0, True), (1.3, False)]):
        est = SimpleNamespace(
            tokens_per_s=tps * frac, headroom_bytes=(5 if fits else -5) * 2**30, mfu=0.4 * frac
        )
        trials.append(
            TrialRecord(
                number=i,
                strategy=Strategy(tp=8, dp=cluster.num_gpus // 8),
                num_gpus=cluster.num_gpus,
                gpu=cluster.gpu.name,
                precision="bf16",
                estimate=est,
                values={"throughput": tps * frac},
                feasible=fits,
                reason="" if fits else "out of memory",
            )
        )
    return SimpleNamespace(trials=trials, clusters=[cluster])


def fake_estimate(model, cluster, workload, strategy):
    """H100 throughput halves with halved inter-node bandwidth; B200 is unaffected."""
    ratio = cluster.nic_bw / cluster.gpu.scaleout_bw
    return SimpleNamespace(tokens_per_s=100.0 * (ratio if cluster.gpu.name == "H100-SXM" else 1.0))


def book(h100=2.50, b200=5.00):
    return (
        default_price_book().with_price("H100-SXM", "on_demand", h100).with_price("B200", "on_demand", b200)
    )


def run(**kw):
    args = dict(token_budget=1e12, price_book=book(), optimize_fn=fake_optimize, estimate_fn=fake_estimate)
    args.update(kw)
    return run_whatif(MODEL, ["H100-SXM:512", "B200:128"], WL, **args)


def test_hand_derived_figures_per_option():
    r = run()
    h, b = r.by_label("H100-SXM:512"), r.by_label("B200:128")
    # H100: fastest fitting trial 1e6 tokens/s (the 1.3e6 one is out of memory); 512 x 2.50 = $1280/h;
    # 1e12 / 1e6 = 1e6 s; cost 1280 * 1e6 / 3600 = $355,555.56; $/Mtoken 1280/3600 = 0.35556
    assert h.tokens_per_s == pytest.approx(1e6)
    assert h.time_to_train_s == pytest.approx(1e6)
    assert h.total_cost_usd == pytest.approx(355_555.56, abs=0.01)
    assert h.usd_per_mtoken == pytest.approx(0.355556, rel=1e-5)
    assert h.headroom_gib == pytest.approx(5.0)
    # B200: 6e5 tokens/s; 128 x 5.00 = $640/h; 1e12 / 6e5 = 1,666,667 s (19.29 d);
    # cost 640 * 1,666,667 / 3600 = $296,296.30
    assert b.time_to_train_s == pytest.approx(1e12 / 6e5)
    assert b.total_cost_usd == pytest.approx(296_296.30, abs=0.01)
    # no deadline: the cheaper B200 wins; both are on the Pareto front (B200 cheaper, H100 faster)
    assert r.ranking == ["B200:128", "H100-SXM:512"]
    assert (b.rank, h.rank) == (1, 2)
    assert set(r.pareto) == {"B200:128", "H100-SXM:512"}
    assert h.meets_deadline is None


def test_price_override_changes_exactly_the_h100_money_figures(tmp_path):
    p = tmp_path / "prices.csv"
    p.write_text("gpu,tier,usd_per_gpu_hour,source\nH100-SXM,on_demand,3.00,contract\n")
    base = run()
    over = run(price_book=load_price_book(p).with_price("B200", "on_demand", 5.00))
    hb, ho = base.by_label("H100-SXM:512"), over.by_label("H100-SXM:512")
    # 512 x $3.00 = $1536/h; cost 1536 * 1e6 / 3600 = $426,666.67; $/Mtoken 1536/3600 = 0.42667
    assert ho.total_cost_usd == pytest.approx(426_666.67, abs=0.01)
    assert ho.usd_per_mtoken == pytest.approx(0.426667, rel=1e-5)
    assert ho.usd_per_hour == pytest.approx(1536.0)
    assert ho.price_source.startswith("contract")
    # time, speed and the other option do not move
    assert ho.time_to_train_s == hb.time_to_train_s and ho.tokens_per_s == hb.tokens_per_s
    bb, bo = base.by_label("B200:128"), over.by_label("B200:128")
    assert bo.figures == bb.figures


def test_goodput_is_applied_and_stated():
    r = run(goodput=0.8)
    h = r.by_label("H100-SXM:512")
    assert h.time_to_train_s == pytest.approx(1.25e6)  # 1e6 s / 0.8
    assert h.figures == cost_figures(1e6, 512, 2.5, 1e12, 0.8)
    assert any("goodput 0.8" in n and "20%" in n for n in r.notes)
    assert r.to_dict()["goodput"] == 0.8


def test_deadline_prefers_the_option_that_meets_it():
    r = run(deadline_s=15 * DAY)  # H100 11.6 d meets it, B200 19.3 d does not
    assert r.ranking == ["H100-SXM:512", "B200:128"]
    assert r.by_label("H100-SXM:512").meets_deadline is True
    assert r.by_label("B200:128").meets_deadline is False
    assert r.message.startswith(
        "Recommended: H100-SXM:512, the cheapest option that meets the 15.0 days deadline"
    )


def test_deadline_nobody_meets_says_so_and_names_the_fastest():
    r = run(deadline_s=5 * DAY)
    assert r.deadline_met is False
    assert r.message.startswith(
        "No option meets the 5.0 days deadline: the fastest is H100-SXM:512 at 11.6 days"
    )
    assert r.to_dict()["deadline_met"] is False


def test_sensitivity_rows():
    r = run(deadline_s=15 * DAY)
    names = [s.scenario for s in r.sensitivity]
    assert names == [
        "H100-SXM price +20%",
        "H100-SXM price -20%",
        "B200 price +20%",
        "B200 price -20%",
        "inter-node bandwidth halved",
    ]
    assert not any(s.winner_changed for s in r.sensitivity if s.kind == "price")
    bw = r.sensitivity[-1]
    # halved bandwidth halves the stub H100 throughput: 2e6 s = 23.1 d > 15 d; B200 (19.3 d) is now faster,
    # both miss the deadline, so the faster B200 ranks first and the winner changes
    h = next(o for o in bw.options if o.label == "H100-SXM:512")
    assert h.time_to_train_s == pytest.approx(2e6)
    assert h.total_cost_usd == pytest.approx(711_111.11, abs=0.01)
    assert bw.winner == "B200:128" and bw.winner_changed
    # +20% on B200 price: 296,296.30 x 1.2 = 355,555.56 in that scenario
    b_up = next(o for o in r.sensitivity[2].options if o.label == "B200:128")
    assert b_up.total_cost_usd == pytest.approx(355_555.56, abs=0.01)


def test_infeasible_option_is_reported_not_raised():
    def nothing_fits(model, cluster, workload, **kw):
        res = fake_optimize(model, cluster, workload)
        if cluster.gpu.name == "B200":
            for t in res.trials:
                t.feasible, t.reason = False, "out of memory: needs 200 GiB of 178 GiB"
        return res

    r = run(optimize_fn=nothing_fits)
    b = r.by_label("B200:128")
    assert not b.feasible and b.rank is None and b.figures is None
    assert "no strategy fits in 3 trials" in b.reason and "out of memory" in b.reason
    assert r.ranking == ["H100-SXM:512"]
    assert b.to_dict()["time_to_train_s"] is None


def test_json_shape_of_options():
    d = run(deadline_s=30 * DAY).to_dict()
    required = {
        "gpu",
        "count",
        "strategy",
        "tokens_per_s",
        "mfu",
        "time_to_train_s",
        "total_cost_usd",
        "usd_per_mtoken",
        "headroom_gib",
        "meets_deadline",
        "rank",
    }
    assert len(d["options"]) == 2
    for o in d["options"]:
        assert required <= set(o)
    assert d["options"][0]["strategy"] == "TP8 DP64/Z1 mb1"


def test_input_errors_before_any_search():
    def boom(*a, **k):
        raise AssertionError("search must not run")

    with pytest.raises(AutoparError, match="unknown GPU 'H900'"):
        run_whatif(MODEL, ["H900:8"], WL, token_budget=1e9, optimize_fn=boom)
    with pytest.raises(SpecError, match="GPU:COUNT"):
        run_whatif(MODEL, ["H100-SXM"], WL, token_budget=1e9, optimize_fn=boom)
    with pytest.raises(SpecError, match="multiple of"):
        run_whatif(MODEL, ["H100-SXM:12"], WL, token_budget=1e9, optimize_fn=boom)
    with pytest.raises(AutoparError, match="no spot price for GPU 'GB200'"):
        run_whatif(MODEL, ["GB200:72"], WL, token_budget=1e9, tier="spot", optimize_fn=boom)
    with pytest.raises(SpecError, match="tokens"):
        run_whatif(MODEL, ["H100-SXM:8"], WL, optimize_fn=boom)
    with pytest.raises(SpecError, match="goodput"):
        run_whatif(MODEL, ["H100-SXM:8"], WL, token_budget=1e9, goodput=0, optimize_fn=boom)


def test_option_parsing():
    assert parse_counts("256..2048") == [256, 512, 1024, 2048]
    assert parse_counts("96..800") == [96, 192, 384, 768]
    assert parse_counts("8,16,8") == [8, 16]
    assert parse_option("h100:8") == [HardwareOption("H100-SXM", 8)]
    for bad in ("0", "2048..256", "lots", "8..", ""):
        with pytest.raises(SpecError):
            parse_counts(bad)


def test_end_to_end_with_the_real_optimizer():
    """Real search (small budget): figures are exactly cost_figures of the chosen strategy's tokens/s."""
    r = run_whatif(MODEL, ["H100-SXM:8..16", "A100-80GB:16"], WL, token_budget=1e10, budget=25, seed=1)
    assert [o.label for o in r.options] == ["H100-SXM:8", "H100-SXM:16", "A100-80GB:16"]
    book = default_price_book()
    for o in r.options:
        assert o.feasible, o.reason
        assert o.headroom_gib >= 0
        assert o.usd_per_gpu_hour == book.price(o.gpu)
        assert o.figures == cost_figures(o.tokens_per_s, o.count, o.usd_per_gpu_hour, 1e10)
        best = max(t.values["throughput"] for t in o.search.trials if t.feasible)
        assert o.tokens_per_s == pytest.approx(best)
    assert sorted(o.rank for o in r.options) == [1, 2, 3]
    assert r.sensitivity and r.sensitivity[-1].kind == "internode_bw"
    # same seed, same answer
    r2 = run_whatif(
        MODEL, ["H100-SXM:8..16", "A100-80GB:16"], WL, token_budget=1e10, budget=25, seed=1, sensitivity=False
    )
    assert [o.strategy_label for o in r2.options] == [o.strategy_label for o in r.options]


def test_optimize_cost_objective_uses_the_price_book():
    """The search's $/Mtoken objective reads `price_book.price(gpu, tier)` (formulas in figures.py)."""
    from autopar.catalog import get_gpu
    from autopar.search import optimize
    from autopar.search.evaluate import resolve_price
    from autopar.specs import ClusterSpec

    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    custom = default_price_book().with_price("H100-SXM", "reserved", 1.25)
    assert resolve_price(cluster, default_price_book(), "on_demand")[0] == default_price_book().price(
        "H100-SXM"
    )
    res = optimize(MODEL, cluster, WL, budget=10, seed=0, price_book=custom, tier="reserved")
    t = next(t for t in res.trials if t.feasible)
    # 8 GPUs x $1.25/h = $10/h; $/Mtoken = 10 / 3600 / tokens_per_s * 1e6
    assert t.values["cost"] == pytest.approx(10 / 3600 / t.values["throughput"] * 1e6, rel=1e-9)


def test_cluster_overrides_reach_the_search():
    seen = []

    def spy(model, cluster, workload, **kw):
        # the search prices the cluster from the same book and tier (no price set on the cluster, so its
        # source stays the book's, not "cluster override")
        price, source = resolve_search_price(cluster, kw["price_book"], kw["tier"])
        seen.append(
            (cluster.node_size, cluster.nic_bw, cluster.price_usd_per_gpu_hour, price, source, kw["budget"])
        )
        return fake_optimize(model, cluster, workload)

    run(optimize_fn=spy, internode_bw=25e9, gpus_per_node=4, budget=7, tier="on-demand", sensitivity=False)
    assert seen == [(4, 25e9, None, 2.5, "set in code", 7), (4, 25e9, None, 5.0, "set in code", 7)]


def test_transport_reaches_every_option_cluster():
    # --transport (WhatIfSettings.transport) is the scale-out NIC transport of every option's cluster;
    # unstated, the cluster keeps ClusterSpec's default (InfiniBand).
    seen: list[str] = []

    def spy(model, cluster, workload, **kw):
        seen.append(cluster.transport)
        return fake_optimize(model, cluster, workload, **kw)

    r = run(optimize_fn=spy, transport="efa", sensitivity=False)
    assert seen == ["efa", "efa"]
    assert any(n.startswith("scale-out transport efa:") for n in r.notes)  # the what-if says which it used
    seen.clear()
    r = run(optimize_fn=spy, sensitivity=False)
    assert seen == ["infiniband", "infiniband"]
    assert not any(n.startswith("scale-out transport") for n in r.notes)
