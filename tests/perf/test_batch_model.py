"""One model for one strategy and for a block: `estimate_columns` on n strategies gives exactly (bit for
bit) the n single `estimate`s.

The formulas are written once (perf/estimate.py, memory.py, fsdp.py, pipeline.py, ... on floats or arrays,
perf/arith.py), so this no longer guards a second copy of the arithmetic; it guards what the batch adds:
grouping rows by distinct key for the per-key functions (layer costs, CP, stage specs, collectives), the
stage-slot layout and the peak/slowest selection over slots, the split by ZeRO stage, the fallback of rows
with unset knobs to the completion search, and the columns a Space generates. Seeded random samples of
whole search spaces (dense, MoE, MLA/MoE, CP-heavy long context, FP8 on B200 and GB200, every memory saver,
the torchtitan and DeepSpeed stacks, LoRA), schedule what-ifs the spaces do not offer (ZB-H1, DualPipe),
the pinned-estimate corpus, and properties of the output (hypothesis). No timing asserts (bench/vector.py).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopar.catalog import get_gpu, get_model
from autopar.perf import estimate
from autopar.perf.types import Estimate
from autopar.perf.vector import (
    BOTTLENECK_PARTS,
    TIME_PARTS,
    StrategyColumns,
    VectorEstimates,
    columns_of,
    estimate_columns,
)
from autopar.perf.vector_memory import MEMORY_PARTS
from autopar.search import build_space
from autopar.search.space import Space
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

REL = 0.0  # exact: a block row is the single estimate, bit for bit
SAMPLE = 200
SAVERS = ("offload", "bf16_states", "8bit_states", "act_offload", "recompute_modules")

# name -> (model, gpu, gpus, workload keywords)
PROBLEMS: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "dense-70B-64xH100": ("Llama-3.1-70B", "H100-SXM", 64, {"seq_len": 8192, "global_batch": 512}),
    "moe-mixtral-256xH100": ("Mixtral-8x7B", "H100-SXM", 256, {"seq_len": 4096, "global_batch": 1024}),
    "mla-moe-deepseek-v3-256xH100": ("DeepSeek-V3", "H100-SXM", 256, {"seq_len": 4096, "global_batch": 1024}),
    "recompute-modules-deepseek-v3-fp8-B200": (  # Megatron's selective recompute modules (the saver offers them)
        "DeepSeek-V3", "B200", 256,
        {"seq_len": 4096, "global_batch": 4096, "precision": "fp8", "fp8_recipe": "mxfp8",
         "memory_savers": ("recompute_modules",)},
    ),
    "cp-long-8B-seq128k": ("Llama-3.1-8B", "H100-SXM", 64, {"seq_len": 131072, "global_batch": 64}),
    "fp8-70B-64xB200": ("Llama-3.1-70B", "B200", 64, {"seq_len": 8192, "global_batch": 512, "precision": "fp8"}),
    "fp8-mxfp8-70B-72xGB200": (
        "Llama-3.1-70B", "GB200", 72,
        {"seq_len": 8192, "global_batch": 576, "precision": "fp8", "fp8_recipe": "mxfp8"},
    ),
    "savers-70B-megatron": ("Llama-3.1-70B", "H100-SXM", 64, {"seq_len": 8192, "global_batch": 512, "memory_savers": SAVERS}),
    "torchtitan-8B-seq128k": (
        "Llama-3.1-8B", "H100-SXM", 64,
        {"seq_len": 131072, "global_batch": 64, "framework": "torchtitan", "memory_savers": SAVERS},
    ),
    "deepspeed-70B": (
        "Llama-3.1-70B", "H100-SXM", 64,
        {"seq_len": 8192, "global_batch": 512, "framework": "deepspeed", "memory_savers": SAVERS},
    ),
    "deepspeed-bf16-optimizer-8B": (
        "Llama-3.1-8B", "A100-80GB", 32,
        {"seq_len": 2048, "global_batch": 256, "framework": "deepspeed", "bf16_optimizer": True},
    ),
    "bf16-grads-70B-64xH100": (
        "Llama-3.1-70B", "H100-SXM", 64, {"seq_len": 8192, "global_batch": 512, "grad_reduce_dtype": "bf16"},
    ),
    "lora-70B-16xH100": ("Llama-3.1-70B", "H100-SXM", 16, {"seq_len": 4096, "global_batch": 64, "finetune": "lora"}),
    "moe-flex-overlap-qwen3": (
        "Qwen3-30B-A3B", "H100-SXM", 64,
        {"seq_len": 4096, "global_batch": 512, "moe_dispatcher": "flex", "moe_ep_overlap": True,
         "tp_comm_overlap": True, "memory_savers": SAVERS},
    ),
    "moe-flex-efa-qwen3": (  # AWS p5: EFA (the flex dispatcher's RDMA rate: perf/moe.py)
        "Qwen3-30B-A3B", "H100-SXM", 64, {"seq_len": 4096, "global_batch": 256, "moe_dispatcher": "flex"},
        {"transport": "efa"},
    ),
}  # fmt: skip


def _build(spec: tuple) -> tuple[ModelSpec, ClusterSpec, Workload, Space]:
    model, gpu, n, wl, *fabric = spec
    c = ClusterSpec(gpu=get_gpu(gpu), num_gpus=n, **(fabric[0] if fabric else {}))
    m, w = get_model(model), Workload(**wl)
    return m, c, w, build_space(m, c, w)


@cache
def problem(name: str) -> tuple[ModelSpec, ClusterSpec, Workload, Space]:
    """(model, cluster, workload, space) of a named problem, built once per test session."""
    return _build(PROBLEMS[name])


def sample(space: Space, k: int, seed: int) -> list[Strategy]:
    """k uniformly random strategies of a space (seeded)."""
    rng = random.Random(seed)
    return [space.sample(rng).strategy for _ in range(k)]


def _scalar_figures(e: Estimate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step_time_s": e.step_time_s,
        "tokens_per_s": e.tokens_per_s,
        "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
        "peak_memory_bytes": e.memory.total,
        "headroom_bytes": e.headroom_bytes,
        "mfu": e.mfu,
        "mfu_causal": e.mfu_causal,
        "hfu": e.hfu,
        "model_tflops_per_gpu": e.model_tflops_per_gpu,
        "hw_tflops_per_gpu": e.hw_tflops_per_gpu,
    }
    out.update({f"time.{k}": getattr(e.time, k) for k in TIME_PARTS})
    out.update({f"mem.{k}": getattr(e.memory, k) for k in MEMORY_PARTS})
    return out


def _vector_figures(v: VectorEstimates, i: int) -> dict[str, Any]:
    keys = (
        "step_time_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "peak_memory_bytes",
        "headroom_bytes",
        "mfu",
    )
    keys += ("mfu_causal", "hfu", "model_tflops_per_gpu", "hw_tflops_per_gpu")
    out: dict[str, Any] = {k: float(getattr(v, k)[i]) for k in keys}
    out.update({f"time.{k}": float(v.time[k][i]) for k in TIME_PARTS})
    out.update({f"mem.{k}": float(v.mem[k][i]) for k in MEMORY_PARTS})
    return out


def mismatches(m: ModelSpec, c: ClusterSpec, w: Workload, strategies: list[Strategy]) -> list[str]:
    """Every figure where a block row differs from the single estimate (REL; fits and bottleneck exactly)."""
    v = estimate_columns(m, c, w, columns_of(strategies))
    assert len(v) == len(strategies)
    out = []
    for i, s in enumerate(strategies):
        e = estimate(m, c, w, s, check=False)
        want, got = _scalar_figures(e), _vector_figures(v, i)
        bad = [k for k in want if not math.isclose(got[k], want[k], rel_tol=REL, abs_tol=0.0)]
        if bool(v.fits[i]) != e.fits:
            bad.append("fits")
        if BOTTLENECK_PARTS[int(v.bottleneck[i])] != e.bottleneck:
            bad.append("bottleneck")
        out += [f"{s.label()}: {k} scalar {want.get(k)!r} vector {got.get(k)!r}" for k in bad]
    assert v.capacity_bytes == estimate(m, c, w, strategies[0], check=False).capacity_bytes
    return out


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_block_equals_single_estimates_on_a_sample_of_the_space(name: str):
    m, c, w, space = problem(name)
    bad = mismatches(m, c, w, sample(space, SAMPLE, seed=len(name)))
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def test_samples_cover_the_branches():
    # The problems above exercise what the batch path branches on (else the comparison proves less).
    seen: set[str] = set()
    for name in PROBLEMS:
        for s in sample(problem(name)[3], SAMPLE, seed=len(name)):
            seen |= {f"zero{s.zero}", f"rc:{s.recompute}", f"sched:{s.pp_schedule}", f"cp:{s.cp_comm}"}
            seen |= {"pp>2"} if s.pp > 2 else {"pp2"} if s.pp == 2 else {"pp1"}
            seen |= {"hsdp"} if s.dp_shard else set()
            seen |= {"opt-offload"} if s.optimizer_offload else set()
            seen |= {"states"} if s.optimizer_states else set()
            seen |= {"act-offload"} if s.activation_offload_layers else set()
            seen |= {"split"} if s.pp_first_layers or s.pp_account_embedding else set()
    want = {"zero0", "zero1", "zero2", "zero3", "rc:none", "rc:selective", "rc:full", "sched:1f1b"}
    want |= {"sched:interleaved", "cp:p2p", "cp:a2a", "cp:allgather", "cp:a2a+p2p", "pp>2", "pp2", "pp1"}
    want |= {"hsdp", "opt-offload", "states", "act-offload", "split"}
    assert want <= seen, want - seen


@pytest.mark.parametrize("name", ["mla-moe-deepseek-v3-256xH100", "dense-70B-64xH100", "savers-70B-megatron"])
@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipe"])
def test_schedule_what_ifs(name: str, schedule: str):
    # The stacks the spaces model do not ship ZB-H1 / DualPipe, but an explicit strategy may name them.
    m, c, w, space = problem(name)
    piped = [s for s in sample(space, 3 * SAMPLE, seed=7) if s.pp > 1][:SAMPLE]
    what_if = [s.model_copy(update={"pp_schedule": schedule, "vpp": 1}) for s in piped]
    bad = mismatches(m, c, w, what_if)
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def _pinned_cases() -> list[dict[str, Any]]:
    path = Path(__file__).parents[1] / "data" / "pinned_estimates.py"
    spec = importlib.util.spec_from_file_location("pinned_estimates_vector", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return json.loads(json.dumps(mod.cases()))


@pytest.mark.parametrize("case", _pinned_cases(), ids=lambda c: c["name"])
def test_block_equals_single_estimates_on_the_pinned_corpus(case: dict[str, Any]):
    # Hand-picked strategies of every kind, including unset knobs (completed by the scalar fallback).
    m = get_model(case["model"])
    c = ClusterSpec(gpu=get_gpu(case["gpu"]), num_gpus=case["gpus"])
    w, s = Workload(**case["workload"]), Strategy(**case["strategy"])
    assert not mismatches(m, c, w, [s, s])


def test_unset_knobs_fall_back_to_the_scalar_estimate():
    m, c, w, space = problem("moe-mixtral-256xH100")
    some = sample(space, 20, seed=3)
    unset = [
        some[0].model_copy(update={"micro_batch": None}),
        some[1].model_copy(update={"etp": None}),
        some[2].model_copy(update={"recompute": None, "zero": None}),
    ]
    strategies = some[3:] + unset
    v = estimate_columns(m, c, w, columns_of(strategies))
    assert v.n_fallback == len(unset)
    assert not mismatches(m, c, w, strategies)


def test_dp_unset_is_derived_from_the_cluster():
    m, c, w, space = problem("dense-70B-64xH100")
    strategies = [s.model_copy(update={"dp": 0}) for s in sample(space, 50, seed=5)]
    assert not mismatches(m, c, w, strategies)
    assert estimate_columns(m, c, w, columns_of(strategies)).n_fallback == 0


def test_empty_block():
    m, c, w, _ = problem("dense-70B-64xH100")
    v = estimate_columns(m, c, w, columns_of([]))
    assert len(v) == 0 and v.n_fallback == 0


# ---- columns generated from the space ------------------------------------------------------------------
SMALL = {
    "deepseek-v3-16": ("DeepSeek-V3", "H100-SXM", 16, {"seq_len": 4096, "global_batch": 4}),
    "qwen3-8B-8-savers": ("Qwen3-8B", "H100-SXM", 8, {"seq_len": 4096, "global_batch": 8, "memory_savers": SAVERS}),
    "8B-8-torchtitan": ("Llama-3.1-8B", "H100-SXM", 8, {"seq_len": 8192, "global_batch": 32, "framework": "torchtitan"}),
}  # fmt: skip


@cache
def small_space(name: str) -> tuple[ModelSpec, ClusterSpec, Workload, Space]:
    return _build(SMALL[name])


def _same(a: StrategyColumns, b: StrategyColumns) -> list[str]:
    """Knobs whose columns differ (values or dtype)."""
    out = []
    for f in fields(StrategyColumns):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x.dtype != y.dtype or not np.array_equal(x, y):
            out.append(f.name)
    return out


@pytest.mark.parametrize("name", list(SMALL))
def test_layout_columns_row_j_is_strategy_j(name: str):
    space = small_space(name)[3]
    assert space.size > 3000
    for lay in space.layouts:
        cols = lay.columns()
        strategies = [lay.strategy(j) for j in range(lay.size)]
        assert not _same(cols, columns_of(strategies)), lay
        assert all(cols.strategy_at(j) == s for j, s in enumerate(strategies))
        if lay.size > 3:
            assert not _same(lay.columns(2, lay.size - 1), columns_of(strategies[2:-1]))


@pytest.mark.parametrize(
    ("name", "chunk"), [("8B-8-torchtitan", 1), ("deepseek-v3-16", 777), ("deepseek-v3-16", 8192)]
)
def test_column_blocks_walk_the_space_in_index_order(name: str, chunk: int):
    space = small_space(name)[3]
    blocks = list(space.column_blocks(chunk))
    assert all(0 < len(b.columns) <= chunk for b in blocks)
    assert [b.start for b in blocks] == list(np.cumsum([0] + [len(b.columns) for b in blocks[:-1]]))
    assert sum(len(b.columns) for b in blocks) == space.size
    points = list(space)
    every = StrategyColumns.concat([b.columns for b in blocks])
    assert not _same(every, columns_of([p.strategy for p in points]))
    assert all(b.hw == points[b.start].hw for b in blocks)


def test_column_blocks_split_by_hardware_option():
    m = get_model("Llama-3.1-8B")
    clusters = [ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=n) for n in (8, 16)]
    space = build_space(m, clusters, Workload(seq_len=4096, global_batch=64))
    blocks = list(space.column_blocks(100_000))
    assert [b.hw for b in blocks] == [0, 1]
    for b in blocks:
        hw = space.hardware[b.hw]
        v = estimate_columns(m, hw.cluster, hw.workload, b.columns)
        i = len(b.columns) // 2
        e = estimate(m, hw.cluster, hw.workload, space.point(b.start + i).strategy, check=False)
        assert math.isclose(v.step_time_s[i], e.step_time_s, rel_tol=REL)


# ---- properties ------------------------------------------------------------------------------------------
PROPERTY_PROBLEMS = list(SMALL)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(PROPERTY_PROBLEMS),
    picks=st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), min_size=1, max_size=60),
)
def test_vector_estimate_properties(name: str, picks: list[float]):
    m, c, w, space = small_space(name)
    idx = [int(p * space.size) for p in picks]
    cols = columns_of([space.point(i).strategy for i in idx])
    v = estimate_columns(m, c, w, cols)
    step = v.step_time_s
    assert np.all(np.isfinite(step)) and np.all(step > 0)
    np.testing.assert_array_equal(v.headroom_bytes, v.capacity_bytes - v.peak_memory_bytes)
    np.testing.assert_array_equal(v.fits, v.headroom_bytes >= 0)
    np.testing.assert_allclose(v.tokens_per_s * step, w.tokens_per_step, rtol=1e-12)
    np.testing.assert_allclose(v.tokens_per_s_per_gpu * c.num_gpus, v.tokens_per_s, rtol=1e-12)
    parts = sum(v.time[k] for k in TIME_PARTS if k != "recompute")
    np.testing.assert_allclose(parts, step, rtol=1e-12)
    np.testing.assert_allclose(sum(v.mem[k] for k in MEMORY_PARTS), v.peak_memory_bytes, rtol=1e-12)
    assert np.all(v.time["recompute"] <= v.time["compute"])
    # A row's figures do not depend on the other rows of its block (grouping by distinct keys is exact).
    rev = np.arange(len(idx))[::-1]
    again = estimate_columns(m, c, w, cols.take(rev))
    np.testing.assert_array_equal(again.step_time_s, step[rev])
    np.testing.assert_array_equal(again.peak_memory_bytes, v.peak_memory_bytes[rev])


def test_distinct_keys_with_and_without_the_int64_code():
    # Keys are coded into one int64 when the value ranges allow, else grouped over the stacked rows.
    from autopar.perf.vector_keys import distinct

    rng = np.random.default_rng(0)
    small = [
        rng.integers(0, 3, 500),
        rng.integers(-1, 2, 500),
        rng.random(500).round(1),
        rng.random(500) > 0.5,
    ]
    huge = [rng.integers(0, 2**40, 500) * np.int64(i % 3) for i in range(3)]  # ranges multiply past 2^62
    for cols in (small, huge):
        first, inv = distinct(cols)
        rows = list(zip(*(c.tolist() for c in cols), strict=True))
        assert len(set(rows)) == len(first)
        assert all(rows[first[k]] == row for k, row in zip(inv, rows, strict=True))
