"""Ranges and evidence in procurement answers (issue 46 item 2): every time and cost of `whatif` (ranked and
sizing) and `compare` carries the model's 80% band; options whose bands overlap are a tie; the measured runs
behind each option are said up front; the model's error is a sensitivity row; sizing writes its HTML report
and prefers recipe-style layouts; `compare` takes several GPUs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.catalog.pricefile import default_price_book
from autopar.cli import app
from autopar.costs.bands import (
    Banded,
    duration_range,
    figure_band,
    find_ties,
    relative_band,
    usd_range,
)
from autopar.costs.figures import cost_figures
from autopar.costs.recipe_style import prefer_recipe_style, recipe_style_gaps, verify_text
from autopar.costs.sensitivity import MODEL_ERROR, winner_swing
from autopar.costs.sizing import SizingOption, run_sizing
from autopar.costs.whatif import run_whatif
from autopar.search.result import TrialRecord
from autopar.specs import ClusterSpec, Strategy, Workload

runner = CliRunner()
DAY = 86400.0
ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------------------ a stub what-if
# Two options priced in a user book: H100-SXM:512 at 1e6 tokens/s and $2.50/GPU-h, B200:128 at 6e5 tokens/s and
# $5.00/GPU-h, each estimate with a throughput band of +-BAND around its centre.
MODEL = get_model("Llama-3-8B")
WL = Workload(seq_len=4096, global_batch=512)
TPS = {("H100-SXM", 512): 1e6, ("B200", 128): 6e5}


def stub_optimize(band: float):
    def optimize(model, cluster, workload, **kw):
        tps = TPS[(cluster.gpu.name, cluster.num_gpus)]
        est = SimpleNamespace(
            tokens_per_s=tps,
            tokens_per_s_band=(tps * (1 - band), tps * (1 + band)),
            headroom_bytes=5 * 2**30,
            mfu=0.4,
        )
        trial = TrialRecord(
            number=0,
            strategy=Strategy(tp=8, dp=cluster.num_gpus // 8),
            num_gpus=cluster.num_gpus,
            gpu=cluster.gpu.name,
            precision="bf16",
            estimate=est,
            values={"throughput": tps},
            feasible=True,
        )
        return SimpleNamespace(trials=[trial], clusters=[cluster])

    return optimize


def flat_estimate(model, cluster, workload, strategy):
    return SimpleNamespace(tokens_per_s=100.0)


def stub_whatif(band: float, **kw):
    book = default_price_book().with_price("H100-SXM", "on_demand", 2.5).with_price("B200", "on_demand", 5.0)
    return run_whatif(
        MODEL,
        ["H100-SXM:512", "B200:128"],
        WL,
        token_budget=1e12,
        price_book=book,
        optimize_fn=stub_optimize(band),
        estimate_fn=flat_estimate,
        **kw,
    )


# ------------------------------------------------------------------------------------ 1. bands


def test_time_and_cost_band_by_hand():
    # 512 GPUs x $2.50 = $1280/h at 1e6 tokens/s, band x0.8..x1.25, 1e12 tokens:
    # centre 1e6 s, $355,555.56; fast end 1e12 / 1.25e6 = 8e5 s, 1280 x 8e5 / 3600 = $284,444.44;
    # slow end 1e12 / 8e5 = 1.25e6 s, 1280 x 1.25e6 / 3600 = $444,444.44.
    figs = cost_figures(1e6, 512, 2.5, 1e12)
    band = figure_band(figs, (0.8, 1.25))
    assert band.tokens_per_s == pytest.approx((8e5, 1.25e6))
    assert band.time_to_train_s == pytest.approx((8e5, 1.25e6))
    assert band.total_cost_usd == pytest.approx((284_444.44, 444_444.44), abs=0.01)
    assert band.time_to_train_days == pytest.approx((8e5 / DAY, 1.25e6 / DAY))
    # $/Mtoken = 1280 / 3600 / T x 1e6: 0.28444 at the fast end, 0.44444 at the slow end
    assert band.usd_per_mtoken == pytest.approx((0.284444, 0.444444), rel=1e-5)


def test_relative_band_brackets_the_centre_and_none_without_a_band():
    assert relative_band(
        SimpleNamespace(tokens_per_s=100.0, tokens_per_s_band=(80.0, 110.0))
    ) == pytest.approx((0.8, 1.1))
    assert relative_band(SimpleNamespace(tokens_per_s=100.0, tokens_per_s_band=None)) is None
    assert relative_band(SimpleNamespace(tokens_per_s=100.0)) is None  # an estimate stub without the field
    # a band that misses its centre is stretched to include it
    assert relative_band(SimpleNamespace(tokens_per_s=100.0, tokens_per_s_band=(105.0, 120.0)))[0] == 1.0


@settings(max_examples=60, deadline=None)
@given(
    tps=st.floats(1e3, 1e8),
    lo=st.floats(0.3, 1.0),
    hi=st.floats(1.0, 3.0),
    n=st.integers(1, 4096),
    price=st.floats(0.5, 20.0),
    goodput=st.floats(0.3, 1.0),
    tokens=st.floats(1e9, 1e14),
)
def test_band_ends_follow_from_the_opposite_throughput_end(tps, lo, hi, n, price, goodput, tokens):
    figs = cost_figures(tps, n, price, tokens, goodput)
    b = figure_band(figs, (lo, hi))
    t_lo, t_hi = b.time_to_train_s
    assert t_lo <= figs.time_to_train_s * (1 + 1e-12) and figs.time_to_train_s <= t_hi * (1 + 1e-12)
    # time = tokens / (T x goodput): the fast end of time is the high end of throughput
    assert t_lo == pytest.approx(tokens / (tps * hi * goodput), rel=1e-9)
    assert t_hi == pytest.approx(tokens / (tps * lo * goodput), rel=1e-9)
    # cost = N x price x time / 3600 at both ends (the cluster's $/h does not move)
    assert b.total_cost_usd[0] == pytest.approx(n * price * t_lo / 3600, rel=1e-9)
    assert b.total_cost_usd[1] == pytest.approx(n * price * t_hi / 3600, rel=1e-9)


def test_whatif_json_has_low_and_high_beside_each_field():
    doc = stub_whatif(0.15).to_dict()
    h = next(o for o in doc["options"] if o["label"] == "H100-SXM:512")
    keys = list(h)
    for f in ("tokens_per_s", "time_to_train_s", "time_to_train_days", "total_cost_usd", "usd_per_mtoken"):
        i = keys.index(f)
        assert keys[i + 1 : i + 3] == [f"{f}_low", f"{f}_high"], f
    # by hand: T = 1e6 +-15%; time low = 1e12 / 1.15e6 = 869,565.2 s; high = 1e12 / 0.85e6 = 1,176,470.6 s
    assert h["tokens_per_s_low"] == pytest.approx(8.5e5) and h["tokens_per_s_high"] == pytest.approx(1.15e6)
    assert h["time_to_train_s_low"] == pytest.approx(869_565.2, abs=0.1)
    assert h["time_to_train_s_high"] == pytest.approx(1_176_470.6, abs=0.1)
    # cost: $1280/h x those times: $309,178.74 and $418,300.65
    assert h["total_cost_usd_low"] == pytest.approx(309_178.74, abs=0.01)
    assert h["total_cost_usd_high"] == pytest.approx(418_300.65, abs=0.01)


def test_table_cells_show_the_band():
    # 28.5 d centre, band 24.6..33.4 d; $2.07M, band $1.8M..$2.4M (the brief's examples)
    assert duration_range(28.5 * DAY, (24.6 * DAY, 33.4 * DAY)) == "28.5 d (25–33)"
    assert usd_range(2.07e6, (1.8e6, 2.4e6)) == "$2.07M (1.8–2.4M)"
    assert usd_range(958_733, (860_000, 1_183_000)) == "$959K (0.86–1.2M)"  # the band in its high end's unit
    assert duration_range(28.5 * DAY, None) == "28.5 d" and usd_range(2.07e6, None) == "$2.07M"


def test_whatif_html_shows_the_bands_as_ranges_and_error_bars():
    from autopar.reports.whatif_html import (
        cost_time_info,
        options_table_info,
        plot_cost_time,
        whatif_report_html,
    )

    r = stub_whatif(0.15)
    info = options_table_info(r)
    row = dict(zip([c.key for c in info.columns], info.rows[0], strict=True))
    assert row["label"][0] == "B200:128"
    # B200: 1e12 / 6e5 s = 19.29 d; band 1e12 / 6.9e5 = 16.77 d .. 1e12 / 5.1e5 = 22.69 d;
    # cost $640/h: $296,296, band $257,649 .. $348,584
    assert row["days"][0] == "19.3 (16.8–22.7)"
    assert row["cost"][0] == "296,296 (257,649–348,584)"
    points = cost_time_info(r)
    i = points.labels.index("B200:128")
    trace = plot_cost_time(points).data[1]
    assert trace.error_x.array[i] == pytest.approx((1e12 / 5.1e5 - 1e12 / 6e5) / DAY)
    assert trace.error_x.arrayminus[i] == pytest.approx((1e12 / 6e5 - 1e12 / 6.9e5) / DAY)
    assert trace.error_y.array[i] == pytest.approx(640 * (1e12 / 5.1e5 - 1e12 / 6e5) / 3600)
    page = whatif_report_html(r, plotlyjs="cdn")
    assert 'id="evidence-list"' in page and "a tie on cost within the model" in page


# ------------------------------------------------------------------------------------ 2. ties


def test_overlapping_cost_bands_are_a_tie_in_the_verdict_and_json():
    # B200 (cheaper: $296,296.30) band +-15% on T: cost $296,296.30 / 1.15 .. / 0.85 = $257,649 .. $348,584;
    # H100 cost $355,555.56: $309,179 .. $418,301. They overlap: a tie on cost. Times 1.667e6 s (B200:
    # 1.449e6..1.961e6) against H100's 0.870e6..1.176e6: no overlap, no tie on time.
    r = stub_whatif(0.15)
    assert r.ranking[0] == "B200:128"
    assert [t.on for t in r.ties] == ["cost"]
    assert r.ties[0].labels == ("B200:128", "H100-SXM:512")
    # half-width of the widest band: (1/0.85 - 1/1.15) / 2 = 15.3% -> "±15%"
    assert r.ties[0].half_width_pct == pytest.approx(100 * (1 / 0.85 - 1 / 1.15) / 2)
    assert (
        "B200:128 and H100-SXM:512: a tie on cost within the model's band (±15%); measure before buying"
        in (r.message)
    )
    doc = r.to_dict()
    assert doc["ties"] == [
        {"on": "cost", "options": ["B200:128", "H100-SXM:512"], "band_pct": pytest.approx(15.345, abs=1e-3)}
    ]
    assert {o["label"]: o["tie"] for o in doc["options"]} == {"H100-SXM:512": ["cost"], "B200:128": ["cost"]}


def test_separate_bands_are_no_tie():
    # +-5%: B200 cost $282,187 .. $311,891; H100 $338,624 .. $374,269: apart
    r = stub_whatif(0.05)
    assert r.ties == [] and "tie" not in r.message
    assert all(o["tie"] == [] for o in r.to_dict()["options"])


def test_no_band_no_tie():
    a = Banded("a", {"total_cost_usd": 100.0, "time_to_train_s": 1.0}, {})
    b = Banded("b", {"total_cost_usd": 100.5, "time_to_train_s": 1.0}, {"total_cost_usd": (90.0, 110.0)})
    assert find_ties([a, b], "a") == []  # the winner has no band: nothing to tie within


# ------------------------------------------------------------------------------------ 3. evidence


def _published_rows() -> list[dict[str, str]]:
    with (ROOT / "autopar" / "data" / "published_runs.csv").open() as f:
        return list(csv.DictReader(f))


def test_evidence_counts_the_calibration_runs_by_family_stack_and_scale():
    from autopar.calibration.apply import load_default_calibration
    from autopar.costs.evidence import option_evidence

    rows = _published_rows()
    hopper = [r for r in rows if get_gpu(r["gpu"]).family.lower() == "hopper"]
    # the record's free-text framework: NeMo's Megatron-Core rows are the megatron stack (Megatron-LM 2021-22 rows,
    # all on A100, are megatron-legacy)
    megatron_hopper = [r for r in hopper if "Megatron-Core" in r["framework"]]
    assert len(megatron_hopper) > 0
    calib = load_default_calibration()
    wl = Workload(seq_len=8192, global_batch=512)
    m = get_model("Llama-3.1-70B")
    h = option_evidence(m, ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64), wl, None, calib)
    assert h.family_runs == len(hopper) and h.family_stack_runs == len(megatron_hopper)
    counts = [int(r["num_gpus"]) for r in hopper]
    assert h.scale == (min(counts), max(counts)) and h.within_scale is True
    mi = option_evidence(m, ClusterSpec(gpu=get_gpu("MI300X"), num_gpus=1024), wl, None, calib)
    assert not any(get_gpu(r["gpu"]).family.lower() == "cdna3" for r in rows)  # the premise
    assert mi.family_runs == 0 and mi.gpu_runs == 0
    assert mi.sentence().startswith("MI300X: no measured run of this GPU family (cdna3) in the calibration")
    all_counts = [int(r["num_gpus"]) for r in rows]
    assert mi.scale == (min(all_counts), max(all_counts))
    unc = option_evidence(m, ClusterSpec(gpu=get_gpu("MI300X"), num_gpus=64), wl, None, None)
    assert "uncalibrated" in unc.sentence() and unc.calibrated is False


def test_widening_is_claimed_only_where_the_band_widened():
    from autopar.calibration.apply import load_default_calibration
    from autopar.calibration.evaluation import novelty
    from autopar.costs.evidence import option_evidence

    calib = load_default_calibration()
    m, wl = get_model("Llama-3.1-70B"), Workload(seq_len=8192, global_batch=512)
    s = Strategy(tp=2, sp=True, zero=2, micro_batch=1).with_dp(64)
    ev = option_evidence(m, ClusterSpec(gpu=get_gpu("MI300X"), num_gpus=64), wl, s, calib)
    # novelty's own rule: KNEE_STEPS 3.5 free, then SLOPE_PER_STEP per step of log half-width
    want = 100 * math.expm1(0.03 * max(ev.steps - 3.5, 0.0))
    assert (novelty.KNEE_STEPS, novelty.SLOPE_PER_STEP) == (3.5, 0.03)
    assert ev.widened_pct == pytest.approx(want)
    assert ev.family_differs  # every measured run is hopper or ampere
    if want > 0:
        assert "band widened" in ev.sentence() and "2 of them for another GPU family" in ev.sentence()


def test_whatif_cli_says_the_evidence_first_and_in_json():
    base = ["whatif", "--tokens", "100B", "--model", "Llama-3-8B", "--budget", "30", "--no-sensitivity"]
    opts = ["--option", "H100-SXM:16", "--option", "MI300X:16"]
    r = runner.invoke(app, [*base, *opts], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    out = r.stdout
    mi = out.index("MI300X:16: no measured run of this GPU family (cdna3)")
    assert mi < out.index("Hardware options, best first")  # before the table
    doc = json.loads(runner.invoke(app, [*base, *opts, "--json"]).stdout)
    ev = {o["label"]: o["evidence"] for o in doc["options"]}
    hopper = sum(get_gpu(r["gpu"]).family.lower() == "hopper" for r in _published_rows())
    assert ev["MI300X:16"]["runs_on_family"] == 0 and ev["H100-SXM:16"]["runs_on_family"] == hopper
    for o in doc["options"]:  # calibrated by default: each figure within its band
        for f in ("time_to_train_s", "total_cost_usd", "usd_per_mtoken"):
            assert o[f"{f}_low"] <= o[f] <= o[f"{f}_high"], f
        # the time band's low end from the throughput band's high end: 1e11 / T_high (goodput 1)
        assert o["time_to_train_s_low"] == pytest.approx(1e11 / o["tokens_per_s_high"], rel=1e-9)


# ------------------------------------------------------------------------------------ 4. model error row


def test_model_error_is_a_sensitivity_row_in_time_and_cost():
    r = stub_whatif(0.15)
    row = next(s for s in r.sensitivity if s.kind == "model_error")
    assert row.scenario == MODEL_ERROR == "model error (80% band)"
    # the winner (B200) at its slow end $348,584 against H100 at its fast end $309,179: H100 wins
    assert row.winner == "H100-SXM:512" and row.winner_changed
    b = next(o for o in row.options if o.label == "B200:128")
    # B200: 1e12 / 6e5 = 1.667e6 s; band 1e12 / 6.9e5 = 1,449,275 s .. 1e12 / 5.1e5 = 1,960,784 s
    assert (b.time_to_train_s_low, b.time_to_train_s_high) == pytest.approx(
        (1_449_275.4, 1_960_784.3), abs=0.1
    )
    assert b.time_to_train_s == pytest.approx(1e12 / 6e5)
    # 16.8..22.7 days and $257,649..$348,584, in the table's units
    assert winner_swing(row, r.winner) == "17–23 d, $258–349K"
    assert not next(s for s in stub_whatif(0.05).sensitivity if s.kind == "model_error").winner_changed


def test_no_band_no_model_error_row():
    def no_band(model, cluster, workload, **kw):
        s = stub_optimize(0.1)(model, cluster, workload)
        s.trials[0].estimate.tokens_per_s_band = None
        return s

    book = default_price_book().with_price("H100-SXM", "on_demand", 2.5).with_price("B200", "on_demand", 5.0)
    r = run_whatif(
        MODEL, ["H100-SXM:512", "B200:128"], WL, token_budget=1e12, price_book=book, optimize_fn=no_band,
        estimate_fn=flat_estimate,
    )  # fmt: skip
    assert [s.kind for s in r.sensitivity] == ["price"] * 4 + ["internode_bw"]
    assert r.options[0].band is None and r.to_dict()["options"][0]["time_to_train_s_low"] is None


# ------------------------------------------------------------------------------------ 5. recipe style, sizing


def test_recipe_style_rule_by_hand():
    llama70 = get_model("Llama-3.1-70B")  # 80 layers
    h100 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=864)  # NVLink domain of 8
    pp27 = Strategy(tp=4, sp=True, pp=27, pp_account_loss=True, cp=4, dp=2)
    gaps = recipe_style_gaps(llama70, h100, pp27)
    assert any("PP27: deeper than published recipes go" in g for g in gaps)
    assert any("not a divisor-style split" in g for g in gaps)
    assert verify_text(gaps).startswith("verify: PP27") and verify_text(gaps).endswith(
        "measure it (autopar tune)"
    )
    assert recipe_style_gaps(llama70, h100, Strategy(tp=8, pp=4, dp=27)) == ()  # 80 / 4 = 20 layers a stage
    assert recipe_style_gaps(llama70, h100, Strategy(tp=8, pp=5, dp=27)) == ()  # 80 / 5 = 16: a divisor
    assert recipe_style_gaps(llama70, h100, Strategy(tp=2, pp=7, pp_first_layers=10, pp_last_layers=10))
    assert recipe_style_gaps(llama70, h100, Strategy(tp=16, pp=1))  # TP across NVLink domains
    # Llama 3.1 405B: 126 layers; PP8 with embedding and loss counted = 128 / 8 (Megatron-Bridge's presets)
    l405 = get_model("Llama-3.1-405B")
    assert (
        recipe_style_gaps(l405, h100, Strategy(tp=8, pp=8, pp_account_embedding=True, pp_account_loss=True))
        == ()
    )
    assert recipe_style_gaps(
        l405, h100, Strategy(tp=8, pp=32, pp_account_embedding=True, pp_account_loss=True)
    )


def _trial(speed: float, usual: bool) -> SimpleNamespace:
    return SimpleNamespace(speed=speed, usual=usual)


def test_prefer_recipe_style_only_within_the_near_tie():
    def speed(t):
        return t.speed

    def gaps(t):
        return () if t.usual else ("odd",)

    fastest = _trial(100.0, False)
    near = _trial(98.5, True)  # 1.5% slower: within NEAR_TIE_FRACTION (2%)
    far = _trial(97.0, True)  # 3% slower: not
    assert prefer_recipe_style(fastest, [fastest, near, far], speed, gaps) is near
    assert prefer_recipe_style(fastest, [fastest, far], speed, gaps) is fastest
    # a deadline the fastest meets: the preferred layout must meet it too
    assert prefer_recipe_style(fastest, [fastest, near], speed, gaps, min_speed=99.0) is fastest
    assert prefer_recipe_style(fastest, [fastest, near], speed, gaps, min_speed=98.0) is near
    usual_fastest = _trial(100.0, True)
    assert prefer_recipe_style(usual_fastest, [usual_fastest, near], speed, gaps) is usual_fastest


def test_whatif_prefers_the_recipe_style_near_tie_on_a_real_search():
    # Llama 3.1 405B on 128 H100s, global batch 1024: the fastest point is PP32 (deeper than any recipe); a
    # PP16 layout runs within 2% of it, so the what-if picks PP16.
    from autopar.calibration.apply import load_default_calibration
    from autopar.costs.whatif import _speed, choose_trial
    from autopar.search import optimize

    m, c = get_model("Llama-3.1-405B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=128)
    res = optimize(
        m, c, Workload(seq_len=8192, global_batch=1024), budget=300, objectives=("throughput", "headroom", "cost"),
        calibration=load_default_calibration(), min_headroom_gib=2.0,
    )  # fmt: skip
    feasible = [t for t in res.trials if t.feasible]
    fastest = max(feasible, key=_speed)
    chosen = choose_trial(res)
    assert recipe_style_gaps(m, c, fastest.strategy) and fastest.strategy.pp == 32  # the premise
    assert recipe_style_gaps(m, c, chosen.strategy) == ()
    assert _speed(chosen) >= 0.98 * _speed(fastest)


def _sizing_optimize(plain_32: float):
    """Counts 8..32: an odd layout (PP3 with first/last stage sizes) at 1100 tokens/s per GPU, and a plain DP
    layout at 1000 per GPU on 16 GPUs, `plain_32` per GPU on 32, 500 per GPU on 8 and 24."""

    def optimize(model, cluster, workload, **kw):
        n = cluster.num_gpus
        odd = Strategy(tp=1, pp=3, pp_first_layers=10, pp_last_layers=10, dp=max(n // 3, 1))
        plain = Strategy(tp=1, pp=1, dp=n)
        per_gpu = {16: 1000.0, 32: plain_32}.get(n, 500.0)
        trials = []
        for i, (s, tps) in enumerate(((odd, 1100.0 * n), (plain, per_gpu * n))):
            est = SimpleNamespace(
                tokens_per_s=tps, tokens_per_s_band=(0.9 * tps, 1.1 * tps), headroom_bytes=2**30, mfu=0.5
            )
            trials.append(
                TrialRecord(
                    number=i, strategy=s, num_gpus=n, gpu=cluster.gpu.name, precision="bf16", estimate=est,
                    values={"throughput": tps}, feasible=True,
                )
            )  # fmt: skip
        return SimpleNamespace(model=model, clusters=[cluster], trials=trials)

    return optimize


def _size(plain_32: float):
    return run_sizing(
        get_model("Llama-3-8B"), [SizingOption("H100-SXM", 8, "host")], Workload(seq_len=4096, global_batch=512),
        token_budget=1e9, deadline_s=1e9 / 16_800, max_gpus=64, optimize_fn=_sizing_optimize(plain_32),
    )  # fmt: skip


def test_sizing_flags_an_unusual_answer_and_finds_the_recipe_style_count():
    # 1e9 tokens in 1e9 / 16,800 s: 16 GPUs meet it only with the odd layout (17,600 tokens/s; the plain one
    # gives 16,000); 24 GPUs' plain layout gives 12,000; 32 GPUs' plain layout 32,000: the recipe-style answer.
    res = _size(1000.0)
    row = res.rows[0]
    assert row.answer.count == 16 and row.answer.verify
    assert row.answer.strategy.pp == 3
    assert (
        row.recipe_style.count == 32
        and row.recipe_style.strategy.pp == 1
        and row.recipe_style.strategy.dp == 32
    )
    assert row.recipe_style.time_to_train_s == pytest.approx(1e9 / 32_000)
    assert row.recipe_style_searched == [24, 32]
    d = res.to_dict()["sizing"][0]
    assert d["answer"]["verify"] and d["recipe_style_answer"]["count"] == 32
    # cost = N x price x tokens / (N x per-GPU rate): $/GPU-h x 1e9 / 1000 / 3600 at 32 GPUs against
    # $/GPU-h x 1e9 / 1100 / 3600 at 16: the recipe-style answer is the dearer one, and the verdict says nothing
    price = row.answer.usd_per_gpu_hour
    assert row.recipe_style.total_cost_usd == pytest.approx(price * 1e9 / 1000 / 3600)
    assert row.answer.total_cost_usd == pytest.approx(price * 1e9 / 1100 / 3600)
    assert "recipe-style" not in res.message


def test_sizing_verdict_names_a_cheaper_recipe_style_count():
    # at 1200 tokens/s per GPU on 32 GPUs the plain layout costs $/GPU-h x 1e9 / 1200 / 3600 < the odd 16's
    res = _size(1200.0)
    assert "H100-SXM:32 (a recipe-style layout on more GPUs) costs less than H100-SXM:16" in res.message


def test_sizing_writes_a_real_html_report(tmp_path: Path):
    out = tmp_path / "sizing.html"
    base = ["whatif", "--tokens", "1B", "--model", "GPT-3-1.3B", "--seq-len", "2048", "--global-batch", "16"]
    args = ["--deadline", "2h", "--option", "H100-SXM", "--gpus-per-node", "2", "--max-gpus", "4"]
    r = runner.invoke(app, [*base, *args, "--budget", "30", "--out", str(out), "--plotly", "cdn"])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    doc = json.loads(runner.invoke(app, [*base, *args, "--budget", "30", "--json"]).stdout)
    answer = doc["sizing"][0]["answer"]
    for needle in (
        "Sizing: training GPT-3-1.3B",
        'id="sizing-table"',
        'id="fig-cost-time"',
        'id="evidence-list"',
    ):
        assert needle in page, needle
    assert f"{answer['count']:,} (" in page  # the answer's row
    assert '"arrayminus"' in page  # the cost-vs-time points carry error bars to their band's ends
    lo, hi = answer["total_cost_usd_low"], answer["total_cost_usd_high"]
    assert f"({lo:,.0f}–{hi:,.0f})" in page  # the cost cell shows its band


# ------------------------------------------------------------------------------------ 6. compare on several GPUs

LABELS = ["TP8+SP DP8/Z1 mb1", "TP4+SP PP2 CP2-allgather DP4/Z1 mb1"]


def _json(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_compare_across_gpus_is_estimate_on_each_gpu():
    docs = _json(["compare", "--gpu", "H100-SXM,B200", *LABELS, "--json"])
    assert [(d["inputs"]["gpu"], d["label"]) for d in docs] == [
        ("H100-SXM", LABELS[0]), ("H100-SXM", LABELS[1]), ("B200", LABELS[0]), ("B200", LABELS[1]),
    ]  # fmt: skip
    assert (
        _json(["compare", "--gpu", "H100-SXM", "--gpu", "B200", *LABELS, "--json"]) == docs
    )  # repeated --gpu
    for d in docs:
        est = _json(["estimate", "--gpu", d["inputs"]["gpu"], "--strategy", d["label"], "--json"])
        assert {k: v for k, v in d.items() if k != "best_on"} == est
    # the best mark on throughput goes to the highest tokens/s of the four
    tps = [d["estimate"]["tokens_per_s"] for d in docs]
    assert [("throughput" in d["best_on"]) for d in docs] == [t == max(tps) for t in tps]


def test_compare_bands_by_hand():
    (d,) = _json(["compare", LABELS[0], "--json"])
    lo, hi = d["calibration"]["tokens_per_s_band"]
    tps, step, usd = d["estimate"]["tokens_per_s"], d["estimate"]["step_s"], d["cost"]["usd_per_mtoken"]
    # step time and $/Mtoken fall as tokens/s rises: low end = value x T / T_high, high end = value x T / T_low
    assert d["estimate"]["step_s_low"] == pytest.approx(step * tps / hi)
    assert d["estimate"]["step_s_high"] == pytest.approx(step * tps / lo)
    assert d["cost"]["usd_per_mtoken_low"] == pytest.approx(usd * tps / hi)
    assert d["cost"]["usd_per_mtoken_high"] == pytest.approx(usd * tps / lo)
    r = runner.invoke(app, ["compare", LABELS[0], LABELS[1]], env={"COLUMNS": "250"})
    cell = f"{step:.3f} ({step * tps / hi:.3f}–{step * tps / lo:.3f})"
    assert cell in r.stdout and "step time (s; 80% band)" in r.stdout


def test_a_label_that_cannot_run_on_a_gpu_is_marked_not_dropped(tmp_path: Path):
    args = ["compare", "--gpu", "H100-SXM,A100-80GB", "--precision", "fp8", LABELS[0]]
    docs = _json([*args, "--json"])
    assert [d["inputs"]["gpu"] for d in docs] == ["H100-SXM", "A100-80GB"]
    assert docs[1]["runs"] is False and "FP8" in docs[1]["error"]
    r = runner.invoke(
        app, [*args, "--out", str(tmp_path / "c.html"), "--plotly", "cdn"], env={"COLUMNS": "250"}
    )
    assert r.exit_code == 0, r.output
    assert "cannot run" in r.stdout and "A100-80GB: TP8+SP DP8/Z1 mb1" in r.stdout
    assert "cannot run" in (tmp_path / "c.html").read_text()
    # on the only GPU an invalid label stays an error, as before
    bad = runner.invoke(app, ["compare", "--gpu", "A100-80GB", "--precision", "fp8", LABELS[0]])
    assert bad.exit_code != 0 and "Traceback" not in bad.output
