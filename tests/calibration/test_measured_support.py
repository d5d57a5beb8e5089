"""A recipe is the measured best of its problem unless a run of the same family ran faster per GPU
(calibration/planning/support.py): checked on published figures, then on the family's bounds one by one."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.planning.support import (
    BATCH_DOUBLINGS,
    SCALE_DOUBLINGS,
    MeasuredRun,
    measured_support,
    other_stack,
    same_family,
)
from autopar.calibration.records.specs import row_to_specs
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
from autopar.data import published_runs_path

ROOT = Path(__file__).resolve().parents[2]
TORCHTITAN_2024 = ROOT / "bench" / "data" / "torchtitan_2024_runs.csv"
FRONTIER = ROOT / "bench" / "data" / "frontier_runs.csv"


def _runs(*paths: Path) -> dict[str, MeasuredRun]:
    out = {}
    for path in paths:
        for row in read_run_records(path).fillna("").to_dict("records"):
            meas = measured_tokens_per_s_per_gpu(row)[0]
            if meas is None:
                continue
            s = row_to_specs(row)
            rid = str(row["id"])
            out[rid] = MeasuredRun(
                rid, s.model, s.cluster, s.workload, s.strategy, meas, str(row["framework"])
            )
    return out


@pytest.fixture(scope="module")
def runs() -> dict[str, MeasuredRun]:
    return _runs(published_runs_path(), TORCHTITAN_2024)


def _support(runs: dict[str, MeasuredRun], rid: str):
    r = runs[rid]
    return measured_support(r.model, r.cluster, r.workload, r.measured, runs.values(), rid, r.software)


def test_async_tp_8b_layout_is_not_torchtitans_measured_best(runs):
    """torchtitan's async-TP page runs Llama-3.1-8B as FSDP8 x TP8 on 64 H100 (float8 tensorwise, 5,570.1
    tokens/s/GPU); its Dec-2024 page measured FSDP alone on 128 of the same GPUs at 8,380 (Table 3)."""
    sup = _support(runs, "TT25-ATP-10")
    assert sup is not None and sup.id == "TT24-T3-3"
    assert sup.gain == pytest.approx(8380 / 5570.1)


def test_405b_without_pipeline_stages_measured_faster(runs):
    """Llama-3.1-405B on H100 96 GB, fp8, seq 8192: interleaved TP8 PP8 FSDP8 on 512 GPUs measured 128
    tokens/s/GPU (Dec-2024 Table 5); the Aug-2024 page measured FSDP16 x TP8 (no pipeline) on 128 GPUs at
    185 (Float8 + async TP)."""
    sup = _support(runs, "TT24-T5-2")
    assert sup is not None and sup.id == "TTP24-405B-3"
    assert sup.gain == pytest.approx(185 / 128)


def test_long_sequence_405b_has_no_support(runs):
    """No run of 405B at 32k tokens but the recipe's own: its pick's gain is backed by nothing measured."""
    assert _support(runs, "TT24-T6-1") is None


def test_another_stack_on_the_same_system_backs_a_recipe():
    """Qwen3-30B-A3B on H100 at 4k: Megatron-Bridge's FP8 recipe EP16 on 16 GPUs measured 8,960 tokens/s/GPU
    (26.04.01 summary); NeMo AutoModel measured EP8 x FSDP8 at micro-batch 4 on 8 of the same GPUs at 12,040
    in BF16 (its performance summary): support from another stack at a slower precision, gain 12040/8960."""
    runs = _runs(FRONTIER)
    sup = _support(runs, "MBR-052")
    assert sup is not None and sup.id == "NAM-003" and sup.gain == pytest.approx(12040 / 8960)
    assert sup.stack.startswith("NeMo AutoModel") and sup.stack.endswith(", bf16")
    assert "on another stack (NeMo AutoModel" in sup.sentence()


def test_other_stack_bounds(runs):
    """A run on another stack backs a recipe only at a precision no faster than the recipe's, and never on
    the recipe's own stack (another release of it is not taken, same_family's software rule)."""
    base = runs["TT24-T3-3"]  # torchtitan, fp8
    g, b = base.cluster.num_gpus, base.workload.global_batch
    bf16_other = _scaled(base, "x", g, b, 1.0, precision="bf16", framework="megatron")
    fp8_other = _scaled(base, "x", g, b, 1.0, framework="megatron")
    same_stack = _scaled(base, "x", g, b, 1.0, precision="bf16")
    args = (base.model, base.cluster, base.workload)
    assert other_stack(bf16_other, *args) and other_stack(fp8_other, *args)
    assert not other_stack(same_stack, *args)
    bf16_recipe = base.workload.model_copy(update={"precision": "bf16"})
    assert not other_stack(fp8_other, base.model, base.cluster, bf16_recipe)
    assert other_stack(bf16_other, base.model, base.cluster, bf16_recipe)


def _scaled(r: MeasuredRun, rid: str, gpus: int, batch: int, measured: float, **wl) -> MeasuredRun:
    cluster = r.cluster.model_copy(update={"num_gpus": gpus})
    workload = r.workload.model_copy(update={"global_batch": batch, **wl})
    return MeasuredRun(rid, r.model, cluster, workload, r.strategy, measured, r.software)


def test_bounds_of_the_family(runs):
    """TT24-T3-2 (8B, 128 H100, gb256: 2 sequences per GPU) against copies moved one bound at a time."""
    base = runs["TT24-T3-2"]
    g, b = base.cluster.num_gpus, base.workload.global_batch
    in_scale = _scaled(base, "x", g * 2**SCALE_DOUBLINGS, b * 2**SCALE_DOUBLINGS, 1.0)
    out_scale = _scaled(base, "x", g * 2 ** (SCALE_DOUBLINGS + 1), b * 2 ** (SCALE_DOUBLINGS + 1), 1.0)
    in_batch = _scaled(base, "x", g, b * 2**BATCH_DOUBLINGS, 1.0)
    out_batch = _scaled(base, "x", g, b * 2 ** (BATCH_DOUBLINGS + 1), 1.0)
    longer = _scaled(base, "x", g, b, 1.0, seq_len=2 * base.workload.seq_len)
    fp8 = _scaled(base, "x", g, b, 1.0, precision="fp8")
    args = (base.model, base.cluster, base.workload, base.software)
    assert same_family(in_scale, *args) and same_family(in_batch, *args)
    assert not any(same_family(x, *args) for x in (out_scale, out_batch, longer, fp8))
    other_release = MeasuredRun("x", base.model, base.cluster, base.workload, base.strategy, 1.0, "other")
    assert not same_family(other_release, *args)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(1000, 20000), min_size=1, max_size=6), st.randoms())
def test_support_is_the_fastest_faster_run_whatever_the_order(runs, speeds, rnd):
    base = runs["TT24-T3-2"]
    cands = [_scaled(base, f"r{i}", 128, 256, v) for i, v in enumerate(speeds)]
    rnd.shuffle(cands)
    sup = measured_support(base.model, base.cluster, base.workload, base.measured, cands, "", base.software)
    faster = [v for v in speeds if v > base.measured]
    if not faster:
        assert sup is None
    else:
        assert sup is not None and sup.gain > 1
        assert sup.measured == max(faster)


def test_optimize_says_the_recipe_is_not_the_measured_best():
    """`optimize` on TT25-ATP-10's problem shows torchtitan's faster FSDP-only run beside the recipe, in the
    text and in --json (gain 8,380 / 5,570.1 from the two published tables)."""
    from autopar.catalog import get_gpu, get_model
    from autopar.reports.recipe import recipe_json, recipe_text
    from autopar.search import optimize
    from autopar.specs import ClusterSpec, Workload

    cluster = ClusterSpec(gpu=get_gpu("H100-SXM-96GB-500W"), num_gpus=64)
    wl = Workload(seq_len=8192, global_batch=96, precision="fp8", framework="torchtitan")
    res = optimize(get_model("Llama-3.1-8B"), cluster, wl, budget=60, seed=0)
    js = recipe_json(res)
    assert js is not None and js["id"] == "TT25-ATP-10"
    assert js["measured_support"]["id"] == "TT24-T3-3"
    sup = js["measured_support"]
    assert sup["over_recipe"] == pytest.approx(8380 / 5570.1)
    assert sup["pick_beyond"] == pytest.approx(js["pick_over_recipe"] / sup["over_recipe"])
    text = recipe_text(res)
    assert "not the measured best" in text
    if js["pick_over_recipe"] > 1:  # the claim beyond the measurement, as the paragraph rounds it
        assert f"beyond it the pick claims {100 * (sup['pick_beyond'] - 1):+.0f}%" in text


def test_shipped_recipe_table_carries_the_support():
    """The tool reads the support from its recipe table (no run record at run time): a preset (no measured
    row) has none; TT25-ATP-08 carries torchtitan's FSDP-only run, gain 6,514 / 4,809.4 from the tables."""
    from autopar.calibration.planning.recipes import recipes

    table = {r.id: r for r in recipes()}
    assert table["LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1"].support is None
    sup = table["TT25-ATP-08"].support
    assert sup is not None and sup.id == "TT24-T3-2"
    assert sup.gain == pytest.approx(6514 / 4809.4)


def _bench_recipes():
    from runfiles import load_bench

    return load_bench("recipes")


def test_recipe_bench_backs_a_problem_and_divides_its_claim():
    """bench/recipes.py: TT25-ATP-10's problem is backed by TT24-T3-3 (the bench searches the published runs,
    dev files, sweeps and torchtitan's 2024 page), and the second headline divides each ratio by its
    support: ratios 1.5 and 1.2 with gains 1.5 and 1 leave 1.0 and 1.2 (median 1.1, one above 1.10)."""
    mod = _bench_recipes()
    (p,) = mod.load_problems("TT25-ATP-10")
    sup = mod.support_for(p, mod.measured_runs())
    assert sup is not None and sup.id == "TT24-T3-3"
    line = mod.beyond_headline([{"ratio": 1.5, "support_gain": 1.5}, {"ratio": 1.2, "support_gain": 1.0}])
    assert (
        "median x1.100" in line
        and ">1.10: 1, >1.25: 0" in line
        and "(1 recipe(s) not the measured best)" in line
    )


def test_recipe_bench_refuses_an_output_path_it_cannot_write_before_searching(capsys):
    """A --csv or --export path in a missing directory: one line, exit 2, before minutes of search are lost."""
    mod = _bench_recipes()
    for flag in ("--csv", "--export"):
        assert mod.main([flag, "/nonexistent-dir/out.csv"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {flag} /nonexistent-dir/out.csv: directory /nonexistent-dir does not exist"]
