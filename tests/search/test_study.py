"""The study: determinism, NSGA-II vs exhaustive oracle, feasibility, cache, storage, notes, recommendations."""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.errors import AutoparError
from autopar.objectives import parse_objectives
from autopar.perf import estimate
from autopar.search import optimize as _optimize
from autopar.search.evaluate import RULE_PENALTY, Evaluator
from autopar.search.margin import band_margin
from autopar.search.pareto import nondominated_mask_slow, to_min_matrix
from autopar.search.recommend import NEAR_TIE_FRACTION
from autopar.search.space import Point, build_space
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload
from autopar.units import format_duration

ROOT = Path(__file__).resolve().parents[2]
TINY = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
TINY_CLUSTER = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=4, gpus_per_node=4)
TINY_WL = Workload(seq_len=2048, global_batch=8)
L8B = get_model("Llama-3.1-8B")
H100x8 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
WL8B = Workload(seq_len=8192, global_batch=64)

# This file tests the point-by-point NSGA-II study (trials, budget, seeds, storage); the default sampler
# is now `auto` (an exact sweep on spaces this small, tests/search/test_hybrid.py), so ask for NSGA-II.
optimize = functools.partial(_optimize, sampler="nsga2")


def front_set(result):
    cols = ["gpu", "num_gpus", "precision", "label", "throughput", "headroom", "cost"]
    return sorted(map(tuple, result.pareto[cols].itertuples(index=False)))


def test_same_seed_same_pareto_set():
    a = optimize(L8B, H100x8, WL8B, budget=120, seed=7)
    b = optimize(L8B, H100x8, WL8B, budget=120, seed=7)
    assert front_set(a) == front_set(b)
    assert [t.strategy for t in a.trials] == [t.strategy for t in b.trials]
    c = optimize(L8B, H100x8, WL8B, budget=120, seed=8)
    assert [t.strategy for t in a.trials] != [t.strategy for t in c.trials]


@pytest.mark.parametrize("local_search", [0.0, 0.7])
def test_nsga2_with_budget_of_space_size_finds_exhaustive_front(local_search):
    ex = optimize(TINY, TINY_CLUSTER, TINY_WL, sampler="exhaustive")
    n = 1020  # hand count in test_search_space.test_tiny_space_size_by_hand
    assert ex.space_size == len(ex.trials) == n and ex.space_valid == n
    ga = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=n, seed=3, local_search=local_search)
    assert ga.stats["evaluated"] == n
    assert front_set(ga) == front_set(ex)
    assert any(
        "exceeds the space size" in m for m in optimize(TINY, TINY_CLUSTER, TINY_WL, budget=n + 100).notes
    )


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    budget=st.integers(20, 150),
    objectives=st.sampled_from(
        [
            "throughput,headroom",
            "throughput,headroom,cost",
            "cost,mfu,headroom",
            "step_time,headroom,mfu,cost",
        ]
    ),
)
def test_returned_points_are_feasible_and_nondominated(seed, budget, objectives):
    """Every Pareto point is feasible and not dominated by any feasible trial (all-pairs oracle)."""
    r = optimize(
        get_model("Llama-3.1-70B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=32),
        Workload(seq_len=4096, global_batch=128),
        budget=budget,
        seed=seed,
        objectives=objectives,
        min_headroom_gib=2.0,
    )
    objs = parse_objectives(objectives)
    feas = [t for t in r.trials if t.feasible]
    front = [t for t in r.trials if not t.dominated]
    # a tight problem (70B on 32 GPUs) can leave a 20-trial search without a feasible point: then no front
    # (the table adds the front's near-ties, search/pareto.py near_front)
    assert len(front) == sum(not x for x in r.pareto["near_tie"]) and (len(front) > 0) == (len(feas) > 0)
    for t in front:
        assert t.feasible and t.estimate.fits and t.values["headroom"] >= 2.0
    F = to_min_matrix(front + feas, objs)
    mask = nondominated_mask_slow(F)
    assert mask[: len(front)].all()
    # ... and every feasible point the oracle keeps is on the returned front (same values).
    kept = {tuple(row) for row in F[mask]}
    assert kept == {tuple(row) for row in F[: len(front)]}


def test_duplicates_are_not_re_estimated():
    calls = []

    def counting(m, c, w, s):
        calls.append((c.num_gpus, s))
        return estimate(m, c, w, s, check=False)

    r = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=200, seed=1, estimate_fn=counting)
    assert len(calls) == len(set(calls)) and r.stats["evaluated"] == 200
    # NSGA-II's children are evaluated a generation at a time (population 20 at budget 200): when the
    # budget ends mid-generation, at most that generation's evaluations go unused
    assert 200 <= len(calls) <= 200 + 20
    assert r.stats["optuna_trials"] >= 200
    estimated = [t for t in r.trials if t.estimate is not None]
    assert len({t.strategy for t in estimated}) == len(estimated) == 200
    # the rest are grids outside the space (tp*pp*cp not dividing 4 GPUs): recorded as broken rules
    assert all(t.reason.startswith("rule:") and not t.feasible for t in r.trials if t.estimate is None)


def test_rule_violation_and_oom_are_outcomes_not_exceptions():
    space = build_space(TINY, TINY_CLUSTER, TINY_WL)
    ev = Evaluator(TINY, space.hardware, prices=[2.0])
    bad = ev(Point(0, Strategy(tp=2, pp=4, dp=1)))  # 2*4 = 8 > 4 GPUs, and pp=4 with tp=2
    assert not bad.feasible and bad.reason.startswith("rule:") and bad.violation >= RULE_PENALTY
    assert bad.estimate is None and bad.values == {}
    big = get_model("Llama-3.1-70B")
    c8 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    wl = Workload(seq_len=8192, global_batch=64)
    space = build_space(big, c8, wl)
    ev = Evaluator(big, space.hardware, prices=[2.0])
    oom = ev(Point(0, Strategy(tp=1, pp=1, dp=8, zero=0, micro_batch=8)))
    assert not oom.feasible and "out of memory" in oom.reason
    # violation = memory shortfall in GiB: peak - capacity
    e = oom.estimate
    assert oom.violation == pytest.approx((e.peak_memory_bytes - e.capacity_bytes) / 2**30)


def test_constraints_min_headroom_and_max_cost():
    r = optimize(L8B, H100x8, WL8B, budget=150, seed=0, min_headroom_gib=20, max_cost=5.0)
    assert not r.pareto.empty
    assert (r.pareto["headroom"] >= 20).all() and (r.pareto["cost"] <= 5.0).all()
    assert any("headroom" in t.reason and "(memory margin)" in t.reason for t in r.trials if not t.feasible)
    # the margin for this stack is on top of the 20 GiB: every feasible point leaves what it asks free (a
    # Megatron search: the shipped band never saw a Megatron peak, so 20 + the fixed 2 GiB)
    m = band_margin(None, 20, WL8B.framework)
    assert m.required_free_gib(50.0) >= 20
    assert (r.pareto["headroom"] >= [m.required_free_gib(x) - 1e-9 for x in r.pareto["mem_gib"]]).all()
    assert any(n.startswith("memory margin: a strategy fits at ") for n in r.notes)


def test_nothing_fits_message():
    r = optimize(
        get_model("Llama-3.1-405B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
        Workload(seq_len=8192, global_batch=64),
        sampler="exhaustive",
    )
    assert r.pareto.empty and r.recommended == [] and r.n_feasible == 0
    msg = r.notes[-1]
    assert msg.startswith("nothing fits in memory: the smallest need found is")
    assert "more GPUs" in msg and "GiB" in msg
    # The smallest need is really the minimum over every evaluated strategy.
    need = min(t.estimate.peak_memory_bytes for t in r.trials if t.estimate is not None) / 2**30
    assert f"{need:.1f} GiB" in msg


def test_cost_collapse_note_only_for_a_fixed_cluster():
    fixed = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=30)
    assert any(n.startswith("cost collapses onto throughput") for n in fixed.notes)
    clusters = [ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=n) for n in (8, 16)]
    multi = optimize(L8B, clusters, WL8B, budget=100, seed=0)
    assert not any(n.startswith("cost collapses") for n in multi.notes)
    assert set(multi.pareto["num_gpus"]) <= {8, 16} and len(multi.clusters) == 2
    # cost = price x GPUs / throughput on every row (price from the stats of that hardware option)
    for row in multi.pareto.to_dict("records"):
        price = multi.stats["prices"][f"{row['num_gpus']}x {row['gpu']} bf16"]["usd_per_gpu_hour"]
        assert row["cost"] == pytest.approx(price * row["num_gpus"] / 3600 / row["throughput"] * 1e6)


def test_recommendations():
    from autopar.calibration.evaluation import novelty

    m, c = get_model("Llama-3.1-70B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    w = Workload(seq_len=8192, global_batch=512)
    r = optimize(m, c, w, budget=150, seed=0, objectives="throughput,headroom,cost")
    roles = {x.role: x for x in r.recommended}
    assert set(roles) == {"fastest", "most_headroom", "cheapest", "balanced"}
    df = r.pareto
    # The roles rank by what each point's band defends (search/evidence.py: throughput at the band's low end,
    # cost at its high end; the band widened by novelty), then near-ties (recommend.NEAR_TIE_FRACTION) by free
    # memory.
    front = [t for t in r.trials if t.feasible and t.strategy.label() in set(df["label"])]

    def low(t) -> float:  # uncalibrated: the novelty widening alone
        s = t.estimate.strategy or t.strategy
        steps = novelty.published_reference().evidence(novelty.point(m, c, w, s)).steps
        return math.exp(-novelty.widening(steps))

    tps = {t.strategy.label(): t.values["throughput"] * low(t) for t in front}
    cost = {t.strategy.label(): t.values["cost"] / low(t) for t in front}
    top, cheapest = max(tps.values()), min(cost.values())
    fastest = roles["fastest"].trial.strategy.label()
    assert tps[fastest] >= (1 - NEAR_TIE_FRACTION) * top
    ties = [t for t in front if tps[t.strategy.label()] >= (1 - NEAR_TIE_FRACTION) * top]
    assert roles["fastest"].trial.values["headroom"] == max(t.values["headroom"] for t in ties)
    # most headroom among the points with >= 90% of the best throughput (the extreme point is uselessly slow)
    safe = df[df["throughput"] >= 0.9 * df["throughput"].max()]
    assert roles["most_headroom"].trial.values["headroom"] == safe["headroom"].max()
    assert roles["most_headroom"].trial.values["throughput"] >= 0.9 * df["throughput"].max()
    cheap = [t for t in front if cost[t.strategy.label()] <= (1 + NEAR_TIE_FRACTION) * cheapest]
    assert roles["cheapest"].trial.values["headroom"] == max(t.values["headroom"] for t in cheap)
    # balanced: min Euclidean distance to the ideal after scaling each objective to [0, 1] over the front
    Z = np.column_stack(
        [
            (df["throughput"].max() - df["throughput"]) / np.ptp(df["throughput"]),
            (df["headroom"].max() - df["headroom"]) / np.ptp(df["headroom"]),
            (df["cost"] - df["cost"].min()) / np.ptp(df["cost"]),
        ]
    )
    best = df.iloc[int(np.argmin(np.linalg.norm(Z, axis=1)))]
    assert roles["balanced"].trial.strategy.label() == best["label"]
    phrase = {"compute": "compute-bound", "tp_comm": "tensor-parallel", "dp_comm": "data-parallel"}
    phrase |= {
        "bubble": "pipeline bubble",
        "pp_comm": "pipeline point-to-point",
        "cp_comm": "context-parallel",
    }
    phrase |= {"ep_comm": "expert all-to-all", "optimizer": "optimizer step"}
    for rec in r.recommended:
        e = rec.trial.estimate
        # the paragraph names this point's own step time and its bottleneck
        assert f"Its {format_duration(e.step_time_s)} step is " in rec.why
        assert phrase[e.bottleneck] in rec.why
        assert "runner-up" in rec.why or "only point" in rec.why


def test_calibration_scales_throughput():
    class Half:
        def throughput_factor(self, model, cluster, workload, strategy, est):
            return 0.5, 0.4, 0.6

    base = optimize(TINY, TINY_CLUSTER, TINY_WL, sampler="exhaustive")
    cal = optimize(TINY, TINY_CLUSTER, TINY_WL, sampler="exhaustive", calibration=Half())
    a = {t.strategy: t.values["throughput"] for t in base.trials}
    b = {t.strategy: t.values["throughput"] for t in cal.trials}
    assert all(b[s] == pytest.approx(0.5 * a[s]) for s in a)
    assert cal.calibration == {"name": "Half"}


def test_timeout_and_bad_inputs():
    r = optimize(L8B, H100x8, WL8B, budget=100_000, timeout=0.3)
    assert any("stopped by --timeout" in n for n in r.notes) and r.stats["evaluated"] < 100_000
    with pytest.raises(AutoparError, match="sampler"):
        optimize(TINY, TINY_CLUSTER, TINY_WL, sampler="random")
    with pytest.raises(AutoparError, match="budget"):
        optimize(TINY, TINY_CLUSTER, TINY_WL, budget=0)


def test_journal_storage_resume_and_fingerprint(tmp_path):
    path = tmp_path / "study.journal"
    a = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=40, seed=0, storage=str(path), study_name="s")
    b = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=80, seed=1, storage=str(path), study_name="s")
    sa = {t.strategy for t in a.trials if t.estimate is not None}
    sb = {t.strategy for t in b.trials if t.estimate is not None}
    assert len(sa) == 40
    # the budget counts the study's COMPLETE trials: the resumed run adds 40 more distinct strategies
    assert len(sb) == 80 and sa < sb and b.stats["evaluated_here"] == 40
    c = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=80, seed=2, storage=str(path), study_name="s")
    assert c.stats["evaluated_here"] == 0 and c.stats["evaluated"] == 80  # budget met: nothing to do
    with pytest.raises(AutoparError, match="created for other inputs"):
        optimize(
            TINY,
            TINY_CLUSTER,
            TINY_WL.model_copy(update={"seq_len": 4096}),
            budget=5,
            storage=str(path),
            study_name="s",
        )


WORKER = """
import json, sys
from autopar.catalog import get_gpu
from autopar.search import optimize
from autopar.specs import ClusterSpec, ModelSpec, Workload
m = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
c = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=4, gpus_per_node=4)
r = optimize(m, c, Workload(seq_len=2048, global_batch=8), budget=60, seed=int(sys.argv[2]),
             storage=sys.argv[1], study_name="shared")
print(json.dumps({"trials": r.stats["optuna_trials"], "evaluated": r.stats["evaluated_here"]}))
"""


def test_two_processes_share_one_journal(tmp_path):
    import optuna

    path = str(tmp_path / "shared.journal")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, path, str(seed)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="shared", storage=JournalStorage(JournalFileBackend(path)))
    states = [t.state for t in study.trials]
    complete = states.count(optuna.trial.TrialState.COMPLETE)
    # Two file workers share the budget (study-wide COMPLETE trials) exactly: batches are written under a
    # file lock against the study, so a strategy the other worker stored first, or one past the budget,
    # is dropped (evaluated here, not stored); every stored trial is COMPLETE or PRUNED.
    assert complete == 60 and complete <= sum(s["evaluated"] for s in stats)
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert set(states) <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    assert all(t.values is None and t.user_attrs["autopar_reason"].startswith("rule:") for t in pruned)
    # Reloading gives the union: every stored strategy once (two workers may both have evaluated the
    # same strategy before they synced; the records hold it once).
    r = optimize(TINY, TINY_CLUSTER, TINY_WL, budget=1, storage=path, study_name="shared")
    n = len([t for t in r.trials if t.estimate is not None])
    assert n == complete
    assert r.stats["study_states"]["COMPLETE"] == complete


def test_batched_calibration_equals_per_point_calibration():
    # Exhaustive mode calibrates a chunk of points with one prediction; it must match point-by-point.
    # The shipped default applies factor 1 outside its clusters (no global correction passes the no-worse
    # gate), so fit one that does correct: the published runs with no shrink toward 1.
    from autopar.calibration.apply import Calibration, CalibrationMeta
    from autopar.calibration.apply.default import published_training_sets
    from autopar.calibration.models.corrector import ThroughputCorrector

    ts, _ = published_training_sets()
    corrector = ThroughputCorrector(alpha=1.0, shrink=1.0).fit(ts.X, ts.y)
    cal = Calibration(corrector, CalibrationMeta("test", len(ts.y), sorted(set(ts.sources)), "test"))
    space = build_space(TINY, TINY_CLUSTER, TINY_WL)
    ev = Evaluator(TINY, space.hardware, prices=[2.0], calibration=cal)
    pts = list(space)[:200]
    batch = ev.evaluate_many(pts)
    factors = []
    for pt, out in zip(pts, batch, strict=True):
        one = ev(pt)
        assert out.feasible == one.feasible and out.reason == one.reason
        if out.estimate is not None:
            assert out.estimate.tokens_per_s == pytest.approx(one.estimate.tokens_per_s, rel=1e-9)
            assert out.estimate.tokens_per_s_band == pytest.approx(one.estimate.tokens_per_s_band, rel=1e-9)
            assert out.estimate.calibration_factor == pytest.approx(one.estimate.calibration_factor, rel=1e-9)
            factors.append(out.estimate.calibration_factor)
    # the comparison means something only if the corrector did correct: some factors differ from 1 and vary
    assert factors and any(abs(f - 1.0) > 1e-3 for f in factors) and len({round(f, 6) for f in factors}) > 1


def test_workers_never_store_one_strategy_twice_under_different_choices(tmp_path):
    # Decoding repairs vpp, the schedule, the CP variant and the micro-batch, so two workers' samplers can
    # propose different choices for one strategy (found as a rare 59-of-60 failure of the two-process test
    # above). The batch write dedups by the decoded strategy, not by the raw choices.
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from autopar.search.nsga2 import _strategy_key
    from autopar.search.shared import SharedStudy
    from autopar.search.space import build_space

    space = build_space(TINY, TINY_CLUSTER, TINY_WL)
    a = {
        "tp": 1,
        "pp": 1,
        "vpp": 2,
        "cp": 1,
        "sp": False,
        "zero": 3,
        "micro_batch": 4,
        "recompute": "selective",
    }
    b = {**a, "vpp": 1}
    assert a != b and space.decode(a).key == space.decode(b).key  # one strategy, two sets of choices
    dists = {k: CategoricalDistribution(v) for k, v in space.distributions().items() if k in a}

    def stored_after_two_workers(key) -> int:
        path = str(tmp_path / f"{key is None}.journal")
        workers = [SharedStudy(path, "s", ["maximize"], ["throughput"], "fp", key=key) for _ in range(2)]
        for w, params in zip(workers, (a, b), strict=True):
            w.add(create_trial(state=TrialState.COMPLETE, params=params, distributions=dists, values=[1.0]))
        for w in workers:
            w.flush()
        study = optuna.load_study(study_name="s", storage=workers[0].storage)
        return len(study.get_trials(states=[TrialState.COMPLETE]))

    assert stored_after_two_workers(None) == 2  # raw choices: the duplicate gets in
    assert stored_after_two_workers(_strategy_key(space)) == 1
