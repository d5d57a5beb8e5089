"""`autopar dryrun`: the slice plan, the parallel layers against the unsharded model, the CPU run end to end,
its run record through `calibrate ingest`, and the errors (bad label, no torch).

Two launches of gloo processes (on two shared cores: ~15 s for four ranks, ~8 s for two): one runs the
numerical check of nine layouts, one runs the CLI end to end. Everything else is pure and fast.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.calibration.records.checks import learnable, validate_rows
from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.dryrun.errors import INSTALL_HINT, require_torch
from autopar.dryrun.plan import fit_degrees, plan_slice
from autopar.dryrun.record import Measured, predict_slice, run_record
from autopar.errors import MissingExtraError, SpecError
from autopar.launch.labels import parse_strategy_label
from autopar.specs import ModelSpec, Workload

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2] / "autopar"
WORKLOAD = Workload(seq_len=4096, global_batch=64)
# An MoE model with a leading dense layer and a shared expert (no catalog model has both without MLA).
MOE = ModelSpec(
    name="moe-test",
    layers=4,
    hidden=1024,
    heads=16,
    kv_heads=4,
    ffn_hidden=2816,
    vocab=32000,
    experts=8,
    topk=2,
    shared_experts=1,
    moe_ffn_hidden=704,
    dense_layers=1,
)


def _plan(model: ModelSpec | str, label: str, ranks: int = 2, device: str = "cpu"):
    m = get_model(model) if isinstance(model, str) else model
    s = parse_strategy_label(label)
    if m.is_moe and s.etp is None:
        s = s.model_copy(update={"etp": s.tp})
    return plan_slice(m, WORKLOAD, s.with_dp(8), ranks, device)


# ------------------------------------------------------------------------------------------- the plan
def test_the_slice_is_the_busiest_stage_with_the_degrees_that_fit():
    plan = _plan("llama-3.1-70b", "TP8+SP PP2 CP2 DP2/Z1 mb1 sel-AC", ranks=8, device="cuda")
    assert plan.stage_model.layers == 40  # 80 layers over PP2
    d = plan.degrees
    assert (d.tp, d.sp, d.cp, d.dp, d.world) == (8, True, 1, 1, 8)  # TP8 fills the host: CP2 -> CP1
    assert any(n.startswith("CP2 reduced to CP1") for n in plan.notes)
    assert any(n.startswith("PP2 not run") for n in plan.notes)
    assert d.zero == 0  # ZeRO-1 over one rank is ZeRO-0


def test_degrees_fold_ep_over_what_is_left_and_zero2_is_said_to_be_unsliced():
    m = get_model("mixtral-8x7b")
    deg, notes = fit_degrees(m, parse_strategy_label("TP2 EP8 DP32/Z3 mb1"), 8)
    assert (deg.tp, deg.dp, deg.ep, deg.zero) == (2, 4, 8, 3)  # EP8 folds over TP2 x DP4
    assert any("ZeRO-3 run as FSDP2" in n for n in notes)
    deg, notes = fit_degrees(m, parse_strategy_label("TP2 EP8 DP32/Z2 mb1"), 8)
    assert deg.zero == 1 and any("ZeRO-2 not sliced" in n for n in notes)
    deg, notes = fit_degrees(m, parse_strategy_label("TP2 EP8 DP3 mb1"), 8)  # 6 ranks: EP must divide 6 too
    assert (deg.dp, deg.ep) == (3, 2) and any(n.startswith("EP8 reduced to EP2") for n in notes)


def test_vocabulary_padded_for_tp_and_widths_that_do_not_split_refused():
    gpt2 = MOE.model_copy(
        update={"vocab": 50257, "experts": 0, "topk": 0, "shared_experts": 0, "dense_layers": 0}
    )
    plan = plan_slice(gpt2, WORKLOAD, parse_strategy_label("TP2 mb1").with_dp(8), 8, "cuda")
    assert plan.stage_model.vocab == 50432  # ceil(50257 / 256) x 256
    assert any("padded from 50257 to 50432" in n for n in plan.notes)
    mqa = gpt2.model_copy(update={"kv_heads": 1})
    with pytest.raises(SpecError, match=r"kv_heads=1 not divisible by TP2"):
        plan_slice(mqa, WORKLOAD, parse_strategy_label("TP2 mb1").with_dp(8), 8, "cuda")


def test_layers_cuts_the_stage_and_the_prediction_follows():
    s = parse_strategy_label("TP2 EP8 DP32/Z1 mb1").model_copy(update={"etp": 2}).with_dp(64)
    m = get_model("mixtral-8x7b")
    whole = plan_slice(m, WORKLOAD, s, 8, "cuda")
    cut = plan_slice(m, WORKLOAD, s, 8, "cuda", layers=4)
    assert (whole.stage_model.layers, cut.stage_model.layers, cut.stage_model.dense_layers) == (32, 4, 0)
    assert any("stage cut to 4 of its 32 layers" in n for n in cut.notes)
    gpu = get_gpu("H100-SXM")
    w, c = predict_slice(whole, gpu, "megatron"), predict_slice(cut, gpu, "megatron")
    # eight times fewer layers: weights, gradients and optimizer states drop 8x less the embedding/output layers
    assert c.memory.weights < w.memory.weights / 6 and c.step_time_s < w.step_time_s / 4


def test_the_tiny_rule():
    # Llama-3.1-70B (64 heads, 8 KV heads, hidden 8192, FFN 28672) on TP2: 2 KV heads x group 4 x 16 = 128
    m = _plan("llama-3.1-70b", "TP2 DP4/Z1 mb1").model
    assert (m.kv_heads, m.heads, m.head_dim, m.hidden) == (2, 8, 16, 128)
    assert m.ffn_hidden == 28672 * 128 // 8192 == 448
    assert (m.layers, m.vocab) == (2, 512)


# --------------------------------------------------------------------- the layers against the reference
# Four ranks (MAX_CPU_RANKS), so that TP, CP, EP and DP combine: every parallel layer and gradient sum.
CHECKED = [
    (
        "llama-3.1-8b",
        "TP2 DP2/Z1 mb2 sel-AC",
    ),  # TP without SP, GQA, two sequences, selective recompute; DP sum
    ("llama-3.1-8b", "TP2+SP CP2 mb1 full-AC"),  # SP reduce-scatter/all-gather; K/V all-gathered over CP
    ("llama-3.1-8b", "TP1 CP2 DP2/Z1 mb1"),  # causal attention across CP chunks; sum over DP x CP
    ("mixtral-8x7b", "TP1 EP4 DP4 mb1"),  # tokens of four DP ranks exchanged over EP
    (MOE, "TP2 EP2 DP2 mb1"),  # MoE without SP: each TP rank routes its share; shared expert TP-parallel
    (MOE, "TP2+SP CP2 EP4 mb1 sel-AC"),  # EP over TP x CP ranks (parallel folding)
    ("llama-3.1-8b", "TP2 DP2/Z3 mb1"),  # FSDP2: gradients reduce-scattered over DP, TP inside
    (MOE, "TP1 CP2 EP2 DP2/Z3 mb1"),  # experts sharded over their 2 replicas (edp)
    (MOE, "TP1 EP4 DP4/Z3 mb1"),  # experts on one replica each: a one-rank mesh
]


def test_parallel_layers_compute_the_unsharded_loss_and_gradients():
    from autopar.dryrun.launch import run_ranks

    plans = [_plan(m, label, ranks=4) for m, label in CHECKED]
    assert all(p.degrees.world == 4 for p in plans)
    out = run_ranks([("check", p) for p in plans], timeout_s=180)
    for i, (_, label) in enumerate(CHECKED):
        for rank in out:
            r = rank[i]
            assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-5), label
            assert r["max_rel_grad_err"] < 1e-4, (label, r)
            assert r["max_rel_weight_err"] < 1e-4, (label, r)  # after one AdamW step: ZeRO shards, gathers
        # the untrained model's loss is close to ln(vocab): an independent sanity check of the loss itself
        assert abs(out[0][i]["ref_loss"] - math.log(512)) < 0.5


# -------------------------------------------------------------------------- the CLI on CPU, end to end
def test_cpu_dryrun_end_to_end_and_its_record_ingests_once(tmp_path, monkeypatch):
    record = tmp_path / "dryrun.csv"
    args = ["dryrun", "--model", "llama-3.1-8b", "--gpus", "8", "--seq-len", "4096", "--global-batch", "64"]
    args += ["--strategy", "TP2+SP DP4/Z1 mb1", "--steps", "2", "--warmup", "1", "--micro-batches", "2"]
    res = runner.invoke(app, [*args, "--check", "--record", str(record), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["device"] == "cpu" and doc["check"]["passed"]
    s = doc["slice"]
    assert s["degrees"]["world"] == 2 and s["global_batch"] == 1 * 1 * 2  # mb x dp x micro-batches
    m = doc["measured"]
    assert m["tokens_per_s_per_rank"] == pytest.approx(s["global_batch"] * s["seq_len"] / m["step_s"] / 2)
    assert m["max_allocated_gib"] is None and m["cpu_peak_rss_gib"] > 0  # no GPU figure made up on CPU
    assert all(r["ratio"] is None for r in doc["rows"])  # a tiny CPU model is compared with nothing
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path / "home"))
    first = runner.invoke(app, ["calibrate", "ingest", str(record), "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["added"] == 1
    again = json.loads(runner.invoke(app, ["calibrate", "ingest", str(record), "--json"]).stdout)
    assert (again["added"], again["duplicates"]) == (0, 1)
    # stored, listed, but never learned from: a store holding only it has nothing to fit
    listed = json.loads(runner.invoke(app, ["calibrate", "list", "--json"]).stdout)
    assert listed["count"] == 1 and listed["runs"][0]["gpu"] == "cpu"
    fit = runner.invoke(app, ["calibrate", "fit", "--no-public", "--out", str(tmp_path / "m.json")])
    assert fit.exit_code == 2 and "left out 1 CPU smoke record" in fit.output
    assert "no runs to learn from" in fit.output


# ------------------------------------------------------------------------------------------ the records
def _gpu_record(scale: float = 1.0) -> dict:
    plan = _plan("llama-3.1-8b", "TP2+SP DP4/Z1 mb1", ranks=8, device="cuda")
    pred = predict_slice(plan, get_gpu("H100-SXM"), "megatron")
    step = pred.step_time_s / scale
    m = Measured(step, plan.tokens_per_step / step / 8, 60.0, 62.0, None, 10.4)
    return run_record(
        plan,
        m,
        model=get_model("llama-3.1-8b"),
        gpu="H100-SXM",
        framework="megatron",
        label="x",
        torch="2.13",
    )


def test_a_gpu_record_of_a_slice_ingests_as_is():
    good, errors = validate_rows([_gpu_record(0.8)])
    assert errors == [] and len(good) == 1


def test_the_gates_still_hold_for_gpu_records():
    _, errors = validate_rows([_gpu_record(0.05)])  # 20x below the prediction: a unit error, refused
    assert errors and "at most 10x" in errors[0].reason
    _, errors = validate_rows([_gpu_record(100.0)])  # above the GPU's peak
    assert errors and "MFU" in errors[0].reason
    _, errors = validate_rows([{**_gpu_record(), "device": "cpu"}])  # a smoke mark on a GPU record
    assert errors and errors[0].field == "gpu"


def test_smoke_records_need_the_cpu_and_never_train_the_corrector():
    rec = {**_gpu_record(), "gpu": "cpu", "device": "cpu", "measured_mem_gb_per_gpu": None}
    good, errors = validate_rows([rec])
    assert errors == [] and learnable(good) == ([], 1)
    _, errors = validate_rows([{**rec, "device": None}])  # without the mark, gpu=cpu is an unknown GPU
    assert errors and errors[0].field == "gpu"
    _, errors = validate_rows([{**rec, "measured_mem_gb_per_gpu": 3.0}])  # no GPU memory on a CPU
    assert errors and errors[0].field == "measured_mem_gb_per_gpu"


# ----------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--strategy", "TP2 XX9 mb1"], "XX9"),
        (["--strategy", "TP2 mb1", "--device", "tpu"], "--device"),
        (["--strategy", "TP2 mb1", "--device", "cpu", "--ranks", "8"], "--ranks 8"),
        (["--strategy", "TP2 mb1", "--record", "r.txt"], "--record"),
    ],
)
def test_bad_input_is_one_line(extra, named):
    res = runner.invoke(app, ["dryrun", "--model", "llama-3.1-8b", *extra])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], res.output


def test_without_torch_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(MissingExtraError, match=r"\[dryrun\]'"):
        require_torch()
    res = runner.invoke(app, ["dryrun", "--strategy", "TP2 mb1"])
    assert res.exit_code == 2
    assert INSTALL_HINT in res.output and len(res.output.strip().splitlines()) == 1


TORCH_MODULES = {"comm", "layers", "model", "train", "check", "launch", "worker"}


def test_only_the_dryrun_runtime_imports_torch():
    importers = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "torch" or n.startswith("torch.") for n in names):
                importers.add(path.relative_to(ROOT).as_posix())
    assert importers == {f"dryrun/{m}.py" for m in TORCH_MODULES}


def test_a_failing_rank_is_one_line_and_the_others_are_stopped():
    from autopar.dryrun.errors import DryrunFailed
    from autopar.dryrun.launch import run_ranks

    gpu_plan = _plan("llama-3.1-8b", "TP2 mb1", ranks=2, device="cuda")  # this host has no GPU: ranks fail
    with pytest.raises(DryrunFailed) as e:
        run_ranks([("measure", gpu_plan)], steps=1, warmup=1, timeout_s=60)
    msg = str(e.value)
    assert msg.startswith("rank ") and " failed: " in msg and "\n" not in msg
    assert e.value.exit_code == 4


def test_a_run_past_its_timeout_is_stopped(monkeypatch):
    res = runner.invoke(app, ["dryrun", "--model", "llama-3.1-8b", "--strategy", "TP2 mb1", "--timeout", "1"])
    assert res.exit_code == 4
    assert "did not finish within 1 s" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_record_names_its_model_so_that_ingest_reads_the_stage_it_ran():
    from autopar.dryrun.record import record_model_name

    # 4 layers, the first dense. PP2 split evenly: stage 0 = dense + MoE (the model's own mix; first on ties)
    even = _plan(MOE, "TP1 PP2 DP4 mb1", ranks=8, device="cuda")
    assert (even.stage, even.stage_model.layers, even.stage_model.dense_layers) == (0, 2, 1)
    assert record_model_name(even, MOE) == "moe-test"
    # first stage 1 layer: the busiest is stage 1, three MoE layers, no dense one: a name of its own
    skewed = _plan(MOE, "TP1 PP2 first1 DP4 mb1", ranks=8, device="cuda")
    assert (skewed.stage, skewed.stage_model.layers, skewed.stage_model.dense_layers) == (1, 3, 0)
    assert record_model_name(skewed, MOE) == "moe-test dryrun-slice"
