"""Confidence where the evidence is (issue 21): novelty against the measured runs, the band it widens, a
recommendation ranked by what its band defends, and the published recipe shown beside the pick."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopar.calibration.evaluation import novelty
from autopar.calibration.planning.recipes import match, recipes
from autopar.catalog import get_gpu, get_model
from autopar.objectives import REGISTRY
from autopar.perf import estimate
from autopar.reports.comparison import STEP_SPLIT
from autopar.reports.decision import recipe_view
from autopar.search.evidence import RecipeBeside
from autopar.search.recommend import recommend
from autopar.search.result import TrialRecord
from autopar.specs import ClusterSpec, Strategy, Workload

LLAMA70 = get_model("Llama-3.1-70B")
H100_64 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
W8K = Workload(seq_len=8192, global_batch=512, framework="megatron", tp_comm_overlap=True)


# ------------------------------------------------------------------------------------------ novelty
def test_point_knobs_by_hand():
    p = novelty.point(LLAMA70, H100_64, W8K, Strategy(tp=4, pp=2, cp=2, micro_batch=1, cp_comm="a2a"))
    # TP 4, PP 2, CP 2, 8192/2 = 4096 tokens per CP rank, EP 1, dense: 4096 tokens per "expert", 64/8 domains
    assert p.knobs == (2.0, 1.0, 1.0, 12.0, 0.0, 12.0, 3.0)
    assert (p.family, p.stack, p.precision, p.cp_variant) == ("hopper", "megatron", "bf16", "a2a")


def test_moe_tokens_per_expert_by_hand():
    moe = get_model("DeepSeek-V3")  # 256 routed experts, top-8
    c = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=256)
    p = novelty.point(moe, c, Workload(seq_len=4096, global_batch=1024), Strategy(ep=8, micro_batch=1))
    # 4096 tokens x top-8 routed copies spread over 256/8 = 32 local experts: 1024 tokens per expert
    assert p.knobs[4] == 3.0 and p.knobs[5] == 10.0


def test_distance_adds_doublings_and_mismatches():
    a = novelty.point(LLAMA70, H100_64, W8K, Strategy(tp=4, pp=2, cp=2, micro_batch=1))
    b = novelty.point(LLAMA70, H100_64, W8K, Strategy(tp=8, pp=1, cp=1, micro_batch=1), label="ref")
    # |2-3| TP + |1-0| PP + |1-0| CP + |12-13| tokens/CP rank + |12-13| tokens/expert = 5, + CP exchange p2p vs none
    ev = novelty.evidence(a, [b])
    assert ev.steps == pytest.approx(5 + novelty.CATEGORY_STEPS["cp_variant"])
    assert ev.differences[:3] == ("TP 8 → 4", "PP 1 → 2", "CP 1 → 2")
    a100 = ClusterSpec(gpu=get_gpu("A100-80GB"), num_gpus=64)
    c = novelty.point(LLAMA70, a100, W8K, Strategy(tp=8, pp=1, cp=1, micro_batch=1))
    assert novelty.evidence(c, [b]).steps == pytest.approx(novelty.CATEGORY_STEPS["family"])


def test_zero_sharding_and_recompute_classes_by_hand(monkeypatch):
    assert [novelty.sharding_class(z) for z in (None, 0, 1, 2, 3)] == [
        "",
        "states",
        "states",
        "grads",
        "params",
    ]
    assert [novelty.recompute_class(r) for r in (None, "none", "selective", "sel:moe_act", "full")] == [
        "",
        "none",
        "selective",
        "selective",
        "full",
    ]
    monkeypatch.setitem(novelty.CATEGORY_STEPS, "sharding", 1.0)
    monkeypatch.setitem(novelty.CATEGORY_STEPS, "recompute", 1.0)
    ref = novelty.point(LLAMA70, H100_64, W8K, Strategy(tp=8, micro_batch=1, zero=1, recompute="none"), "r")
    same = Strategy(tp=8, micro_batch=1, zero=None, recompute=None)  # unstated
    # Z1 -> Z3 and no recompute -> full: two mismatches; Z1 -> Z0 shards the same (optimizer states only)
    z3 = novelty.point(LLAMA70, H100_64, W8K, same.model_copy(update={"zero": 3, "recompute": "full"}))
    assert novelty.evidence(z3, [ref]).steps == 2.0
    assert novelty.evidence(z3, [ref]).differences == ("ZeRO shards states → params", "recompute none → full")
    z0 = novelty.point(LLAMA70, H100_64, W8K, same.model_copy(update={"zero": 0, "recompute": "none"}))
    assert novelty.evidence(z0, [ref]).steps == 0.0
    # an unstated knob on either side is no difference
    unknown = novelty.point(LLAMA70, H100_64, W8K, same)
    assert novelty.evidence(unknown, [ref]).steps == 0.0
    ref_unknown = novelty.point(LLAMA70, H100_64, W8K, same, "u")
    assert novelty.evidence(z3, [ref_unknown]).steps == 0.0


def test_a_never_seen_gpu_family_is_at_least_its_mismatch_away():
    ascend = ClusterSpec(gpu=get_gpu("Ascend-910B"), num_gpus=8)
    p = novelty.point(get_model("Llama-2-7B"), ascend, Workload(seq_len=4096, global_batch=256), Strategy())
    assert {r.family for r in novelty.published_points()}.isdisjoint({"davinci"})
    assert novelty.published_reference().evidence(p).steps >= novelty.CATEGORY_STEPS["family"]


@given(st.floats(0, 40), st.floats(0, 40))
def test_widening_is_zero_up_to_the_knee_then_grows(a, b):
    lo, hi = sorted((a, b))
    assert novelty.widening(lo) <= novelty.widening(hi)
    if hi <= novelty.KNEE_STEPS:
        assert novelty.widening(hi) == 0.0
    else:
        assert novelty.widening(hi) == pytest.approx(novelty.SLOPE_PER_STEP * (hi - novelty.KNEE_STEPS))


def test_widen_scales_the_band_and_says_why():
    est = estimate(LLAMA70, H100_64, W8K, Strategy(tp=8, pp=2, micro_batch=1)).calibrated(1.0, 0.9, 1.1)
    far = novelty.Evidence(novelty.KNEE_STEPS + 5, None)
    out = novelty.widen(est, far)
    k = math.exp(5 * novelty.SLOPE_PER_STEP)
    assert out.tokens_per_s_band == pytest.approx((0.9 * est.tokens_per_s / k, 1.1 * est.tokens_per_s * k))
    assert out.tokens_per_s == est.tokens_per_s and "band widened" in out.notes[-1]
    assert novelty.widen(est, novelty.Evidence(novelty.KNEE_STEPS, None)) is est


def test_the_sentence_names_the_nearest_run_and_how_it_differs():
    near = novelty.LayoutPoint((0.0,) * 7, "hopper", "megatron", "bf16", "", "RUN-1 (a run)")
    far = novelty.LayoutPoint((0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0), "hopper", "megatron", "bf16", "p2p")
    ev = novelty.Evidence(novelty.KNEE_STEPS + 1, near, far)
    assert ev.sentence().startswith("No published run resembles this layout: the nearest, RUN-1 (a run)")
    assert "(CP 1 → 8; CP exchange none → p2p)" in ev.sentence()
    assert novelty.Evidence(novelty.KNEE_STEPS, near, far).sentence() == ""


# ---------------------------------------------------------------------------------- recommendation
LAYOUTS = [Strategy(tp=t, pp=p) for t in (1, 2, 4, 8) for p in (1, 2, 4)]
OBJS = [REGISTRY["throughput"], REGISTRY["headroom"]]


def _trial(i: int, tps: float, free: float, number: int) -> TrialRecord:
    values = {"throughput": tps, "headroom": free, "cost": 1e6 / tps}
    return TrialRecord(number, LAYOUTS[i], 64, "H100-SXM", "bf16", None, values, True, dominated=False)


def _evidence(steps: dict[str, float]):
    return lambda t: novelty.Evidence(steps[t.strategy.label()], None)


def test_an_optimistic_blind_spot_loses_to_a_defended_point():
    blind, known = _trial(0, 1000.0, 10.0, 0), _trial(1, 950.0, 5.0, 1)
    steps = {blind.strategy.label(): novelty.KNEE_STEPS + 5, known.strategy.label(): 1.0}
    # uncalibrated: the blind spot's 1000 is worth 1000 * exp(-5 * slope) = 607 at its pessimistic end
    picked = recommend([blind, known], OBJS)[0]
    assert picked.trial is blind  # without evidence: the optimistic centre wins
    picked = recommend([blind, known], OBJS, evidence=_evidence(steps))[0]
    assert picked.role == "fastest" and picked.trial is known
    assert "Ranked by what the evidence defends" in picked.why


points = st.lists(
    st.tuples(st.floats(900.0, 1100.0), st.floats(0.0, 40.0), st.floats(0.0, 15.0)),
    min_size=1,
    max_size=len(LAYOUTS),
)


@given(points, st.randoms(use_true_random=False))
def test_same_points_same_pick_in_any_order(pts, rnd):
    steps = {LAYOUTS[i].label(): s for i, (_, _, s) in enumerate(pts)}
    order = list(range(len(pts)))
    rnd.shuffle(order)
    a = [_trial(i, tps, free, i) for i, (tps, free, _) in enumerate(pts)]
    b = [_trial(i, pts[i][0], pts[i][1], k) for k, i in enumerate(order)]
    ra = recommend(a, OBJS, evidence=_evidence(steps))[0]
    rb = recommend([b[k] for k in range(len(b))], OBJS, evidence=_evidence(steps))[0]
    assert ra.trial.strategy == rb.trial.strategy
    # the pick defends within the near-tie band of the best defended value
    defended = [tps * math.exp(-novelty.widening(s)) for tps, _, s in pts]
    mine = ra.trial.values["throughput"] * math.exp(-novelty.widening(steps[ra.trial.strategy.label()]))
    assert mine >= 0.98 * max(defended) - 1e-9


# ---------------------------------------------------------------------------------------- recipes
def test_quick_start_problem_matches_the_megatron_bridge_preset():
    r = match(LLAMA70, H100_64, W8K)  # Llama 3.1 and Llama 3 70B: one shape
    assert r is not None and r.id == "LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1"
    assert (r.tp, r.pp, r.cp, r.vpp, r.global_batch) == (4, 4, 2, 5, 256)
    assert r.strategy().pp_schedule == "interleaved"
    # FP8: the measured Megatron-Bridge row (1,664 tokens/s/GPU, TP4 PP8 VP5) wins over the preset
    fp8 = match(LLAMA70, H100_64, W8K.model_copy(update={"precision": "fp8"}))
    assert fp8 is not None and fp8.measured == 1664.0 and (fp8.tp, fp8.pp, fp8.vpp) == (4, 8, 5)
    assert match(LLAMA70, ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=48), W8K) is None


def test_every_recipe_cites_its_source():
    assert len(recipes()) > 90 and all(r.source for r in recipes())


def test_recipe_view_names_the_components_that_differ():
    pick_s = Strategy(tp=4, sp=True, pp=2, cp=2, cp_comm="a2a", zero=2, micro_batch=1)
    pick = estimate(LLAMA70, H100_64, W8K, pick_s)
    rec = match(LLAMA70, H100_64, W8K)
    rest = estimate(LLAMA70, H100_64, W8K, rec.strategy(), check=False)
    trial = TrialRecord(0, pick_s, 64, "H100-SXM", "bf16", pick, {"throughput": pick.tokens_per_s}, True)
    result = SimpleNamespace(recipe=RecipeBeside(rec, rest, None), workload=W8K)
    view = recipe_view(result, trial)
    assert view.ratio == pytest.approx(pick.tokens_per_s / rest.tokens_per_s)
    # the largest |pick - recipe| step-time component (as `autopar compare` names it) is named first
    gaps = {name: abs(getattr(pick.time, f) - getattr(rest.time, f)) for f, name in STEP_SPLIT}
    first = max(gaps, key=lambda k: gaps[k]).split(" (")[0]
    assert view.reasons[0].startswith(first + " ")
    assert len(view.reasons) <= 3
    assert "global batch 256 (this problem: 512)" in view.sentence()
    assert view.sentence().startswith("Published recipe for this problem: TP4+SP PP4v5")


def test_report_block_shows_the_evidence_sentence_and_the_recipe():
    from autopar.reports.decision import Card, Decision, RecipeView
    from autopar.reports.html import _evidence_html

    trial = TrialRecord(0, Strategy(tp=8), 64, "H100-SXM", "bf16", None, {"throughput": 1.0}, True)
    view = RecipeView("PRESET_X", "vendor <docs>", "TP4 PP4", 90.0, (80.0, 95.0), 1.1, ("compute 1 s",), ())
    d = Decision(
        Card(("fastest",), trial, ()), "", 100.0, None, None, None, None, 1e12, False, None, None, (),
        evidence="No published run resembles this layout: the nearest, R <1>, is 9.0 steps away (TP 1 → 8).",
        recipe=view,
    )  # fmt: skip
    html = _evidence_html(d)
    assert 'id="evidence"' in html and "R &lt;1&gt;" in html and "<1>" not in html
    assert 'id="recipe"' in html and "vendor &lt;docs&gt;" in html and "<li>compute 1 s</li>" in html
    assert "the pick is predicted 10.0% faster" in html
    from dataclasses import replace

    assert _evidence_html(replace(d, evidence="", recipe=None)) == ""


def test_shipped_recipe_table_is_what_the_bench_exports(tmp_path, monkeypatch):
    # one source: autopar/data/recipes.csv is `python bench/recipes.py --export` (published + dev runs + presets)
    import importlib.util

    from autopar.data import data_path

    path = Path(__file__).resolve().parents[2] / "bench" / "recipes.py"
    spec = importlib.util.spec_from_file_location("bench_recipes", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    mod.export(tmp_path / "recipes.csv")
    assert (tmp_path / "recipes.csv").read_text() == data_path("recipes.csv").read_text()


def test_shipped_layout_table_is_current_and_read_without_pandas():
    # The published runs' LayoutPoints ship as data (build_default writes them) so that finding the nearest
    # run costs no pandas import; the shipped table must equal what the records give today.
    from autopar.calibration.build_default import _layouts_current

    assert _layouts_current(), "re-run python -m autopar.calibration.build_default"
    code = (
        "import sys\nfrom autopar.calibration.evaluation import novelty\n"
        "pts = novelty.published_points()\nassert len(pts) > 100, len(pts)\n"
        "assert 'pandas' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------- a team's own runs count
def test_a_calibrations_own_runs_are_evidence():
    """Runs a calibration was fitted on are measured evidence: a layout equal to one of them is 0 steps
    away, where against the published runs alone (no Blackwell GPU among them) it is at least a GPU
    family away."""
    from autopar.calibration.apply import fit_calibration
    from autopar.calibration.ingest.ingest import check_file
    from autopar.data import published_runs_path
    from autopar.search.evidence import reference_for

    dev = Path(__file__).resolve().parents[2] / "bench" / "data" / "frontier_runs.csv"
    team = [r for r in check_file(dev).records if r["source"] == "mbridge_perf_summary"][:12]
    team = [r for r in team if str(r["gpu"]).startswith("GB")]
    assert len(team) >= 3
    pub = [r for r in check_file(published_runs_path()).records if r["source"] == "nemo_perf_summary"]
    cal = fit_calibration(pub + team, name="team", evaluate=False)
    assert len(cal.meta.layouts) == cal.meta.n_train  # one layout per used run
    p = novelty.record_point(team[0])
    assert reference_for(None).evidence(p).steps >= novelty.CATEGORY_STEPS["family"]
    ev = reference_for(cal).evidence(p)
    assert ev.steps == 0.0 and str(team[0]["id"]) in ev.nearest.label
    # kept through the JSON model file
    back = type(cal).load(cal.save(Path(pytest.importorskip("tempfile").mkdtemp()) / "team.json"))
    assert reference_for(back).evidence(p).steps == 0.0


def test_a_recipe_keeps_the_recompute_its_source_states():
    """xtuner's tuned optimum for Qwen3-235B on 256 H800 at global batch 4,096 ran full recompute (its table:
    'tp1, ep8, pp32, vpp3, mbs=4, recompute=full'); the recipe beside the pick is that layout, not one with a
    recompute the estimate would complete. A preset that states none leaves it to the estimate."""
    from autopar.catalog import get_model

    qwen = get_model("Qwen3-235B-A22B")
    h800 = ClusterSpec(gpu=get_gpu("H800"), num_gpus=256)
    r = match(qwen, h800, Workload(seq_len=4096, global_batch=4096, framework="megatron"))
    assert r is not None and r.id == "XTSW-4096-01" and r.measured == 1540.68
    assert r.strategy().recompute == "full" and r.strategy().label().endswith("mb4 full-AC")
    preset = match(LLAMA70, H100_64, W8K)
    assert preset is not None and preset.strategy().recompute is None
