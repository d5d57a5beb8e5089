"""The problem config tree (autopar/problem.py) and the CLI's one builder of it (autopar/cli/options.py)."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from autopar.cli import app
from autopar.problem import ClusterConfig, Problem, SearchSettings, WorkloadConfig

FIXTURE = Path(__file__).parents[1] / "fixtures" / "studies" / "main_2bf4533.journal"
runner = CliRunner()


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_default_problem_is_the_readme_one():
    m, c, w = Problem().build_one()
    assert (m.name, c.gpu.name, c.num_gpus) == ("Llama-3.1-70B", "H100-SXM", 64)
    assert (w.seq_len, w.global_batch, w.precision, w.framework) == (8192, 512, "bf16", "megatron")


@pytest.mark.parametrize(
    ("framework", "stated", "expected"),
    [("megatron", None, True), ("torchtitan", None, False), ("megatron", False, False), ("fsdp", True, True)],
)
def test_tp_comm_overlap_unset_means_the_stacks_default(framework, stated, expected):
    # One resolution (defaults.tp_comm_overlap_default): megatron's recipes overlap, the other stacks do not.
    m, _, _ = Problem().build_one()
    wl = WorkloadConfig(framework=framework, tp_comm_overlap=stated).build(m)
    assert wl.tp_comm_overlap is expected


def test_estimate_cli_and_tree_build_the_same_problem():
    doc = _json(["estimate", "--tp", "8", "--framework", "torchtitan", "--gpus", "32", "--json"])
    m, c, w = Problem(
        cluster=ClusterConfig(gpus="32"), workload=WorkloadConfig(framework="torchtitan")
    ).build_one()
    assert doc["inputs"]["num_gpus"] == c.num_gpus == 32 and doc["inputs"]["framework"] == w.framework


def test_search_settings_by_object_or_keywords_search_alike():
    from autopar.search import optimize

    m, c, w = Problem(model="Llama-3.1-8B", cluster=ClusterConfig(gpus="16")).build_one()
    a = optimize(m, c, w, SearchSettings(budget=25, seed=2, sampler="nsga2"))
    b = optimize(m, c, w, budget=25, seed=2, sampler="nsga2")
    assert [r["label"] for r in a.pareto_rows] == [r["label"] for r in b.pareto_rows]
    assert a.inputs == b.inputs and a.inputs["seed"] == 2
    with pytest.raises(ValidationError):
        optimize(m, c, w, budgett=25)  # a misspelled setting is an error, never ignored


def test_each_problem_option_is_declared_once():
    # The commands' signatures hold the registry's own Parameter objects (autopar/cli/options.py).
    from autopar.cli.compare import compare_cmd
    from autopar.cli.estimate import estimate_cmd
    from autopar.cli.optimize import optimize_cmd
    from autopar.cli.options import OPTIONS
    from autopar.cli.whatif import whatif

    sigs = [inspect.signature(f).parameters for f in (estimate_cmd, compare_cmd, optimize_cmd, whatif)]
    for name in ("seq_len", "global_batch", "framework", "tp_comm_overlap", "calibration"):
        assert all(s[name] is OPTIONS[name] for s in sigs), name
    assert sigs[2]["gpus"] is OPTIONS["gpus"] and sigs[0]["gpus"] is OPTIONS["gpus:one"]


def test_a_study_written_by_main_resumes(tmp_path: Path):
    # Written by main at 2bf4533 (optimize --model Llama-3.1-8B --gpus 16 --budget 10 --sampler nsga2 --seed 5
    # --storage F --study-name from-main); main resumed its copy to --budget 16 with the figures asserted here
    # (the model has changed since only where a comment says).
    store = tmp_path / "study.journal"
    shutil.copy(FIXTURE, store)
    report = _json(["study", "report", "--storage", str(store), "--json"])
    assert report["trials"]["evaluated"] == 10 and report["pareto"]
    args = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "16", "--sampler", "nsga2", "--seed", "5"]
    # main searched with the fixed 2 GiB margin, before the memory band (issue 21): resumed with the same margin;
    # and with fp32 main gradients, megatron's default before it took the performance recipes' bf16 (the
    # fingerprint differs otherwise: a study is resumed only for the inputs it was created for)
    args += ["--no-memory-band", "--min-headroom", "2GiB", "--grad-reduce-dtype", "fp32"]
    resume = ["--budget", "16", "--storage", str(store), "--study-name", "from-main", "--json"]
    # main searched free memory as an objective, its default before issue 46: the refusal says how to resume
    refused = runner.invoke(app, [*args, *resume])
    assert refused.exit_code == 2
    assert "searched with --objectives throughput,headroom,cost (add it to resume" in refused.output
    args += ["--objectives", "throughput,headroom,cost"]
    doc = _json([*args, *resume])
    assert (doc["trials"]["total"], doc["trials"]["evaluated"], doc["trials"]["rule_violations"]) == (
        18,
        16,
        2,
    )
    assert [r["label"] for r in doc["pareto"] if not r["near_tie"]] == [
        # main had only the Z2 twin: ZeRO-2 now reduce-scatters every micro-batch (perf/fsdp.py
        # grad_reductions), so the Z1 layout is faster and Z2 stays on the front for its memory
        "TP1 PP2v4 CP2-a2a DP4/Z1 mb1 full-AC",
        "TP1 PP2v4 CP2-a2a DP4/Z2 mb1 full-AC",
        "TP2+SP PP2v4 CP2-a2a DP2/Z2 mb1 full-AC",
        # main had TP2+SP PP4v2 CP2-a2a here; the Ulysses copies (perf/cp.py, issue 21) made a2a CP slower
        "TP2+SP PP4v4 CP2-allgather DP1/Z2 mb1 full-AC",
        # back on the front for its memory under Megatron-Core's per-rank interleaved warm-up count
        # (perf/pipeline.py interleaved_inflight): 64.61 GiB free against PP4v4's 64.52
        "TP2+SP PP4v2 CP2-a2a DP1/Z2 mb1 full-AC",
    ]


def test_a_stored_study_keeps_its_settings(tmp_path: Path):
    store = tmp_path / "s.journal"
    args = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "16", "--budget", "12", "--sampler", "nsga2"]
    _json([*args, "--seed", "7", "--max-cost", "9.5", "--storage", str(store), "--json"])
    inputs = _json(["study", "report", "--storage", str(store), "--json"])["inputs"]
    assert (inputs["seed"], inputs["max_cost"], inputs["sampler"], inputs["budget"]) == (7, 9.5, "nsga2", 12)
