"""Hand-made SearchResult / Estimate / calibration HeldOut objects for the report tests (no estimator or search needed).

The numbers are synthetic but internally consistent: memory and time breakdowns sum to the
Estimate's totals, objective values follow from the estimate, and the Pareto flags are computed
here by brute force.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autopar.calibration.evaluation.validation import HeldOut, held_out
from autopar.calibration.models.features import TrainingSet
from autopar.perf.types import Estimate, MemoryBreakdown, TimeBreakdown
from autopar.search.result import ObjectiveInfo, Recommendation, SearchResult, TrialRecord
from autopar.specs import ClusterSpec, GPUSpec, ModelSpec, Strategy, Workload

GiB = 2**30
PRICE = 2.5  # $/GPU-hour

H100 = GPUSpec(
    name="H100-SXM",
    family="hopper",
    memory_bytes=80e9,
    bf16_flops=989e12,
    fp8_flops=1979e12,
    hbm_bw=3.35e12,
    scaleup_bw=450e9,
    scaleup_domain=8,
    scaleout_bw=50e9,
)
LLAMA8B = ModelSpec(
    name="Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256
)
OBJECTIVES = [
    ObjectiveInfo("throughput", "maximize", "tokens/s", "Throughput (tokens/s, cluster)"),
    ObjectiveInfo("headroom", "maximize", "GiB", "Memory headroom (GiB per GPU)"),
    ObjectiveInfo("cost", "minimize", "$/Mtoken", "Cost ($/Mtoken)"),
]


def make_estimate(s: Strategy, num_gpus: int, workload: Workload, capacity: float = 79.0 * GiB) -> Estimate:
    """A synthetic but self-consistent estimate: totals are the sums of their breakdowns."""
    shard = s.tp * s.pp
    zdiv = s.dp if s.zero >= 1 else 1
    weights = 16e9 / shard * (1 / s.dp if s.zero == 3 else 1)
    grads = 32e9 / shard / (s.dp if s.zero >= 2 else 1)
    optim = 96e9 / shard / zdiv
    act_factor = {"none": 1.0, "selective": 0.45, "full": 0.12}[s.recompute]
    acts = 34e9 * s.micro_batch * act_factor / s.tp * (1 if s.pp == 1 else 1.3)
    mem = MemoryBreakdown(
        weights=weights,
        grads=grads,
        optimizer=optim,
        activations=acts,
        logits=2.1e9 * s.micro_batch / s.tp,
        buffers=0.6e9,
        overhead=2.5e9,
    )
    compute = 9.0 * 16 / num_gpus * (1 + {"none": 0, "selective": 0.05, "full": 0.33}[s.recompute])
    recompute = compute - compute / (1 + {"none": 0, "selective": 0.05, "full": 0.33}[s.recompute])
    t = TimeBreakdown(
        compute=compute,
        recompute=recompute,
        tp_comm=0.04 * (s.tp - 1),
        cp_comm=0.0,
        ep_comm=0.0,
        pp_comm=0.01 * (s.pp - 1),
        dp_comm=0.08 if s.zero == 3 else 0.03,
        bubble=0.12 * (s.pp - 1) / s.micro_batch,
        optimizer=0.02,
    )
    step = t.total
    tokens = workload.tokens_per_step
    tps = tokens / step
    peak = H100.bf16_flops
    mfu = 6 * 8e9 * tokens / step / num_gpus / peak
    return Estimate(
        memory=mem,
        time=t,
        step_time_s=step,
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / num_gpus,
        model_flops_per_step=6 * 8e9 * tokens,
        model_flops_per_step_full_attn=6.2 * 8e9 * tokens,
        hw_flops_per_step=8 * 8e9 * tokens,
        model_tflops_per_gpu=mfu * peak / 1e12,
        hw_tflops_per_gpu=mfu * peak / 1e12 * 1.1,
        mfu=mfu,
        mfu_causal=mfu * 0.97,
        hfu=mfu * 1.1,
        peak_flops=peak,
        capacity_bytes=capacity,
        headroom_bytes=capacity - mem.total,
        fits=mem.total <= capacity,
        bottleneck="compute",
    )


def objective_values(e: Estimate, num_gpus: int) -> dict[str, float]:
    """Objective values in display units from an estimate."""
    usd_per_s = PRICE * num_gpus / 3600
    return {
        "throughput": e.tokens_per_s,
        "headroom": e.headroom_bytes / GiB,
        "cost": usd_per_s / e.tokens_per_s * 1e6,
    }


def _dominates(a: dict[str, float], b: dict[str, float]) -> bool:
    better = [a["throughput"] >= b["throughput"], a["headroom"] >= b["headroom"], a["cost"] <= b["cost"]]
    strictly = [a["throughput"] > b["throughput"], a["headroom"] > b["headroom"], a["cost"] < b["cost"]]
    return all(better) and any(strictly)


def make_result(with_number_column: bool = True, num_gpus: int = 16) -> SearchResult:
    """A SearchResult over a small grid of strategies for Llama-3-8B on 16 H100s."""
    cluster = ClusterSpec(gpu=H100, num_gpus=num_gpus, price_usd_per_gpu_hour=PRICE)
    workload = Workload(seq_len=4096, global_batch=64, token_budget=1e12)
    trials: list[TrialRecord] = []
    grid = itertools.product((1, 2, 4, 8), (1, 2), (1, 3), (1, 2), ("none", "selective", "full"))
    for n, (tp, pp, zero, mb, rc) in enumerate(grid):
        s = Strategy(tp=tp, pp=pp, zero=zero, micro_batch=mb, recompute=rc, sp=tp > 1).with_dp(num_gpus)
        e = make_estimate(s, num_gpus, workload)
        values = objective_values(e, num_gpus)
        trials.append(
            TrialRecord(
                number=n,
                strategy=s,
                num_gpus=num_gpus,
                gpu=H100.name,
                precision="bf16",
                estimate=e,
                values=values,
                feasible=e.fits,
                reason="" if e.fits else "out of memory",
            )
        )
    # One strategy that broke a rule before the model ran (no estimate, no values).
    trials.append(
        TrialRecord(
            number=len(trials),
            strategy=Strategy(tp=3).with_dp(num_gpus),
            num_gpus=num_gpus,
            gpu=H100.name,
            precision="bf16",
            estimate=None,
            values={},
            feasible=False,
            reason="tp=3 does not divide heads=32",
        )
    )
    feas = [t for t in trials if t.feasible]
    for t in feas:
        t.dominated = any(_dominates(o.values, t.values) for o in feas if o is not t)
    front = [t for t in feas if not t.dominated]
    rows = []
    for t in front:
        s, e = t.strategy, t.estimate
        # Same layout as autopar.search.pareto.record_row; the variant without the trial/label
        # columns makes the report match rows to trials by strategy and hardware.
        row = {"trial": t.number, "label": s.label()} if with_number_column else {}
        row.update(
            {
                "tp": s.tp,
                "pp": s.pp,
                "dp": s.dp,
                "cp": s.cp,
                "ep": s.ep,
                "vpp": s.vpp,
                "sp": s.sp,
                "zero": s.zero,
                "micro_batch": s.micro_batch,
                "recompute": s.recompute,
                "pp_schedule": s.pp_schedule,
                "gpu": t.gpu,
                "num_gpus": t.num_gpus,
                "precision": t.precision,
                **t.values,
                "mem_gib": e.memory.total / GiB,
                "step_s": e.step_time_s,
                "mfu_pct": 100 * e.mfu,
                "bottleneck": e.bottleneck,
            }
        )
        rows.append(row)
    fastest = max(front, key=lambda t: t.values["throughput"])
    roomy = max(front, key=lambda t: t.values["headroom"])
    cheapest = min(front, key=lambda t: t.values["cost"])
    balanced = sorted(front, key=lambda t: t.values["throughput"])[len(front) // 2]
    recs = [
        Recommendation("fastest", fastest, "Highest predicted throughput that fits in memory."),
        Recommendation("cheapest", cheapest, "Lowest cost per million tokens."),
        Recommendation("most_headroom", roomy, "Most free memory per GPU: safest against OOM."),
        Recommendation("balanced", balanced, "Within 10 % of the fastest with 3x the headroom."),
    ]
    return SearchResult(
        model=LLAMA8B,
        clusters=[cluster],
        workload=workload,
        objectives=OBJECTIVES,
        space_size=len(trials),
        trials=trials,
        pareto_rows=rows,
        recommended=recs,
        seed=0,
        budget=len(trials),
        sampler="exhaustive",
        wall_s=1.23,
        inputs={"tier": "on_demand"},
        notes=["cost collapses onto throughput: fixed cluster and price"],
        calibration=None,
    )


def synthetic_training_set(
    X: np.ndarray, y: np.ndarray, groups: list[str], predicted: np.ndarray | None = None
) -> TrainingSet:
    """A synthetic training set: log-ratio targets `y` on `predicted` (1 by default), one cohort per i % 4."""
    n = len(y)
    predicted = np.ones(n) if predicted is None else predicted
    return TrainingSet(
        X=X,
        y=y,
        ids=[f"r{i}" for i in range(n)],
        sources=groups,
        groups=groups,
        cohorts=[str(i % 4) for i in range(n)],
        gpus=["H100-SXM"] * n,
        families=["hopper"] * n,
        measured=predicted * np.exp(y),
        predicted=predicted,
        how=["measured"] * n,
        skipped=[],
    )


def make_held_out(n_sources: int = 4, runs: int = 30) -> HeldOut:
    """Synthetic held-out predictions: `runs` runs from each of `n_sources` sources (the shipped public
    set has 106 runs from 8 sources)."""
    rng = np.random.default_rng(0)
    n = n_sources * runs
    groups = [f"src{i % n_sources}" for i in range(n)]
    X, y = rng.normal(size=(n, 2)), rng.normal(0, 0.2, n)
    predicted = rng.uniform(1e3, 1e4, n)
    ts = synthetic_training_set(X, y, groups, predicted)
    return held_out(ts, alpha=1.0, shrink=1.0)


@pytest.fixture
def result() -> SearchResult:
    return make_result()


def test_fixture_is_consistent(result: SearchResult) -> None:
    """The fixture itself: a non-trivial front, some infeasible trials, breakdowns that add up."""
    front = [t for t in result.trials if t.feasible and not t.dominated]
    assert 3 <= len(front) == len(result.pareto)
    assert any(not t.feasible and t.estimate is not None for t in result.trials)  # OOM points exist
    for t in result.trials:
        if t.estimate is not None:
            assert t.estimate.step_time_s == pytest.approx(t.estimate.time.total)
