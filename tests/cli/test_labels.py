"""`estimate --strategy LABEL` reads back every label `optimize` prints: for points drawn from real search
spaces (dense, MoE, CP variants, pipeline splits, savers; several stacks), the CLI's JSON equals estimating
the Strategy directly; a label given with knob flags is a one-line error."""

from __future__ import annotations

import functools
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.defaults import tp_comm_overlap_default
from autopar.perf import estimate
from autopar.search.space import build_space
from autopar.specs import ClusterSpec, Workload

runner = CliRunner()

# (model, GPUs, seq_len, global batch, framework): dense and MoE, CP at 16K and 32K, four stacks; Qwen2.5-7B's
# 28 layers give uneven pipeline splits, and its space offers every memory saver (SAVERS).
PROBLEMS = (
    ("Mixtral-8x7B", 64, 16384, 64, "megatron"),
    ("Qwen2.5-7B", 32, 8192, 64, "megatron"),
    ("Llama-3.1-8B", 32, 32768, 32, "megatron"),
    ("Llama-3.1-8B", 16, 8192, 64, "torchtitan"),
    ("Mixtral-8x7B", 32, 8192, 64, "deepspeed"),
    ("Llama-3.1-8B", 16, 16384, 32, "fsdp"),
)


def _workload(seq: int, batch: int, fw: str) -> Workload:
    """The workload `estimate` builds from these options (no other flag given)."""
    return Workload(
        seq_len=seq, global_batch=batch, framework=fw, tp_comm_overlap=tp_comm_overlap_default(fw)
    )


SAVERS = ("offload", "bf16_states", "act_offload")


@functools.cache
def _space(i: int):
    """The space optimize searches (memory savers allowed: they change what it offers, not an estimate)."""
    name, gpus, seq, batch, fw = PROBLEMS[i]
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=gpus)
    wl = _workload(seq, batch, fw).model_copy(update={"memory_savers": SAVERS})
    return build_space(get_model(name), cluster, wl)


def _cli_estimate(i: int, label: str) -> dict:
    name, gpus, seq, batch, fw = PROBLEMS[i]
    args = ["estimate", "--model", name, "--gpus", str(gpus), "--seq-len", str(seq)]
    args += [
        "--global-batch",
        str(batch),
        "--framework",
        fw,
        "--strategy",
        label,
        "--json",
        "--no-calibration",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, (label, r.output)
    return json.loads(r.stdout)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(PROBLEMS) - 1), st.integers(min_value=0, max_value=10**9))
def test_estimate_of_a_label_equals_the_strategy_estimated_directly(i, seed):
    space = _space(i)
    s = space.point(seed % space.size).strategy
    name, gpus, seq, batch, fw = PROBLEMS[i]
    direct = estimate(space.model, space.hardware[0].cluster, _workload(seq, batch, fw), s, strict=True)
    doc = _cli_estimate(i, s.label())
    assert doc["strategy"] == s.model_dump()  # the label parsed back to the same Strategy
    assert doc["label"] == s.label()
    assert doc["estimate"] == json.loads(json.dumps(direct.summary()))  # same numbers


def test_spaces_offer_what_the_labels_must_carry():
    """The drawn spaces hold every CP variant, interleaving, HSDP, uneven splits, savers, offload and EP."""
    pts = [_space(i).point(k) for i in range(len(PROBLEMS)) for k in range(0, _space(i).size, 97)]
    strategies = [p.strategy for p in pts]
    assert {s.cp_comm for s in strategies if s.cp > 1} == {"p2p", "a2a", "allgather", "a2a+p2p"}
    assert any(s.vpp and s.vpp > 1 for s in strategies) and any(s.dp_shard for s in strategies)
    assert any(s.pp_first_layers is not None or s.pp_last_layers is not None for s in strategies)
    assert any(s.optimizer_states for s in strategies) and any(s.optimizer_offload for s in strategies)
    assert any(s.activation_offload_layers for s in strategies)
    assert any(s.ep > 1 and s.etp != s.tp for s in strategies) and any(
        s.ep > 1 and s.etp == s.tp for s in strategies
    )


def test_label_with_knob_flags_is_one_line_error_naming_both():
    r = runner.invoke(app, ["estimate", "--strategy", "TP2 mb1", "--tp", "4", "--cp-comm", "a2a"])
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert "\n" not in err and "'TP2 mb1'" in err and "--tp" in err and "--cp-comm" in err


def test_bad_label_token_is_named():
    r = runner.invoke(app, ["estimate", "--strategy", "TP2 PQ3 mb1"])
    assert r.exit_code == 2 and "'PQ3'" in r.stderr and "\n" not in r.stderr.strip()


def test_cp_comm_flag_reaches_the_estimate():
    """--cp-comm a2a with knob flags equals the label 'CP2-a2a' (and differs from p2p in exposed CP time)."""
    base = [
        "estimate",
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "16",
        "--seq-len",
        "32768",
        "--global-batch",
        "32",
    ]
    knobs = [
        "--tp",
        "2",
        "--cp",
        "2",
        "--zero",
        "1",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
        "--vpp",
        "1",
    ]
    a2a = json.loads(
        runner.invoke(app, [*base, *knobs, "--cp-comm", "a2a", "--json", "--no-calibration"]).stdout
    )
    assert a2a["strategy"]["cp_comm"] == "a2a" and "CP2-a2a" in a2a["label"]
    lab = json.loads(
        runner.invoke(app, [*base, "--strategy", a2a["label"], "--json", "--no-calibration"]).stdout
    )
    assert lab["estimate"] == a2a["estimate"]


def test_optimize_rows_recheck_with_estimate_and_share_its_mfu_unit():
    """Every label optimize prints re-estimates to the same tokens/s and MFU: `mfu` is a fraction in both
    --json documents (`mfu_pct` the percent), and the objective's unit says so."""
    base = [
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "8",
        "--seq-len",
        "8192",
        "--global-batch",
        "16",
        "--no-calibration",
    ]
    r = runner.invoke(app, ["optimize", *base, "--objectives", "throughput,mfu", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {"name": "mfu", "direction": "maximize", "unit": "fraction"} in doc["objectives"]
    for row in doc["pareto"][:4] + doc["recommended"][:2]:
        est = json.loads(runner.invoke(app, ["estimate", *base, "--strategy", row["label"], "--json"]).stdout)
        assert math.isclose(row["throughput"], est["estimate"]["tokens_per_s"], rel_tol=1e-9)
        assert math.isclose(row["mfu"], est["estimate"]["mfu"], rel_tol=1e-9) and 0 < row["mfu"] < 1
        assert math.isclose(row["mfu_pct"], 100 * row["mfu"], rel_tol=1e-12)


def test_label_of_a_strategy_with_unset_recompute_omits_it():
    """An unset recompute (None, completed by `estimate`) has no AC token; it used to raise KeyError(None)
    (found by mypy: the token table is indexed by the knob's value)."""
    from autopar.specs import Strategy

    unset = Strategy(tp=2, recompute=None).label()
    assert unset == Strategy(tp=2, recompute="none").label() == "TP2 Z1 mb1"
    assert Strategy(tp=2, recompute="selective").label() == "TP2 Z1 mb1 sel-AC"
