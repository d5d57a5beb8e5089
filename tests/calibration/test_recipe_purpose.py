"""Tuned recipes and demonstrations (issue 21): a page that fixed its layout to show something else
published a measurement, not a layout its team swept; the recipe table, the bench and `optimize` say
which is which."""

from __future__ import annotations

import pytest

from autopar.calibration.planning.recipes import DEMONSTRATION_PAGES, demonstration_of, recipes


def test_each_torchtitan_benchmark_page_is_a_demonstration_and_no_vendor_summary_is():
    """The three torchtitan benchmark pages (Dec 2024 1D-4D, Jun 2025 async TP, Trainy H200 baseline) are the
    shipped table's demonstrations; every NVIDIA summary, preset and the xtuner guide's optimum are tuned."""
    table = recipes()
    demos = {r.id for r in table if r.demonstration}
    assert demos == {r.id for r in table if "pytorch/torchtitan benchmarks/" in r.source}
    assert {r.id.split("-")[0] for r in table if r.demonstration} == {"TT24", "TT25"}
    tuned_sources = {r.source.split()[0].strip('"') for r in table if not r.demonstration}
    assert not any("torchtitan" in s for s in tuned_sources)
    # every page is used by some row: a renamed page would otherwise turn its rows tuned without notice
    for page in DEMONSTRATION_PAGES:
        assert any(page in r.source for r in table), page


@pytest.mark.parametrize(
    ("source", "demo"),
    [
        ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 6", True),
        ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md", True),
        (
            "docs.nvidia.com/nemo-framework/user-guide/24.12/nemotoolkit/performance/performance_summary.html",
            False,
        ),
        ("InternLM/xtuner docs/en/benchmark/megatron_moe_benchmark.md (commit 79f2136)", False),
        ("", False),
    ],
)
def test_demonstration_of_a_source(source, demo):
    assert bool(demonstration_of(source)) is demo


def test_optimize_says_a_demonstration_is_not_a_tuned_recipe():
    """`optimize` on the 405B 32k problem of torchtitan's Table 6 (TP 8, PP 8, plain 1F1B fixed to show 4D
    parallelism) says the layout is not a tuned recipe, in the text and in --json; on a NeMo problem it
    says nothing of the kind."""
    from autopar.catalog import get_gpu, get_model
    from autopar.reports.recipe import recipe_json, recipe_text
    from autopar.search import optimize
    from autopar.specs import ClusterSpec, Workload

    cluster = ClusterSpec(gpu=get_gpu("H100-SXM-96GB-500W"), num_gpus=512)
    wl = Workload(seq_len=32768, global_batch=64, precision="fp8", framework="torchtitan")
    res = optimize(get_model("Llama-3.1-405B"), cluster, wl, budget=30, seed=0)
    js = recipe_json(res)
    assert js is not None and js["id"] == "TT24-T6-1" and js["tuned"] is False
    assert "Not a tuned recipe" in recipe_text(res)

    nemo = optimize(
        get_model("Nemotron-22B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64),
        Workload(seq_len=4096, global_batch=256, precision="fp8", framework="megatron"),
        budget=30,
        seed=0,
    )
    js = recipe_json(nemo)
    assert js is not None and js["id"] == "NEMO2412-09" and js["tuned"] is True
    assert "Not a tuned recipe" not in recipe_text(nemo)


def test_recipe_bench_keeps_demonstrations_apart(capsys):
    """bench/recipes.py classifies each problem by its recipe's page and prints the two headlines apart."""
    from runfiles import load_bench

    mod = load_bench("recipes")
    (demo,) = mod.load_problems("TT24-T6-1")
    (tuned,) = mod.load_problems("NEMO2412-09")
    assert demo.demonstration and not tuned.demonstration
    assert mod.main(["--only", "NEMO2412-09"]) == 0
    out = capsys.readouterr().out
    assert "dev      tuned recipes: n=1" in out and "demonstrations" not in out
