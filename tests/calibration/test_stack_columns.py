"""Issue 44: stack knobs as record columns (vocabularies, contradictions, the legacy-notes upgrade), peaks compared
as measured, MaxText remat policies, torch.compile and FSDP reshard-after-forward, by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.records.estimate import estimate_row
from autopar.calibration.records.legacy_notes import notes_only_knobs, upgrade
from autopar.calibration.records.specs import row_to_specs
from autopar.calibration.records.stack_columns import ATTENTION_KERNELS, MEMORY_METRICS, stack_knobs
from autopar.catalog import get_gpu, get_model
from autopar.errors import DataError
from autopar.perf.estimate import estimate
from autopar.perf.layers import CUDA_CONTEXT_BYTES, NCCL_BYTES, activation_bytes_per_layer
from autopar.perf.memory import as_measured
from autopar.specs import ClusterSpec, Strategy, Workload

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30


def _zb_row() -> dict:
    df = read_run_records(ROOT / "bench" / "data" / "memory_runs.csv").fillna("")
    return df.iloc[0].to_dict()


def test_a_value_outside_the_vocabulary_names_row_column_and_close_match():
    row = {**_zb_row(), "attention_kernel": "flsh"}
    with pytest.raises(
        DataError, match=r"row 'ZBPP-.*column 'attention_kernel' = 'flsh'.*did you mean flash"
    ):
        stack_knobs(row)
    assert "error: row" in estimate_row(row)["status"]  # a batch says it and goes on
    with pytest.raises(DataError, match="did you mean allocated"):  # the short names are accepted and hinted
        stack_knobs({**_zb_row(), "memory_metric": "alocated"})
    assert stack_knobs({**row, "attention_kernel": "Flash", "memory_metric": "reserved"}).memory_metric == (
        "max_memory_reserved"
    )


@pytest.mark.parametrize(
    ("cells", "words"),
    [
        ({"measured_mem_gb_per_gpu": "40", "measured_mem_reserved_gb_per_gpu": "38"}, "cannot be smaller"),
        ({"reshard_after_forward": "false", "zero": "1"}, "'reshard_after_forward' = false and 'zero' = 1"),
        ({"remat_policy": "save_qkv_proj", "recompute": "selective"}, "'remat_policy' = save_qkv_proj"),
        ({"recompute_method": "block", "recompute": "selective"}, "'recompute_method' and 'recompute'"),
        (
            {"attention_kernel": "unfused", "framework": "Megatron-LM (FlashAttention-2)"},
            "names a FlashAttention",
        ),
    ],
)
def test_contradictory_columns_are_one_line_errors(cells, words):
    with pytest.raises(DataError) as e:
        stack_knobs({"id": "r1", **cells})
    assert words in str(e.value) and "\n" not in str(e.value) and "row 'r1'" in str(e.value)


def test_recompute_spread_by_hand():
    """Llama-3.1-8B, 32 layers on one rank, one 8192-token micro-batch, Megatron: block 8 checkpoints 8 layers
    (their inputs) and keeps the other 24 whole; every 4th layer is the same share; uniform 4 keeps every 4th
    input and re-runs 4 layers at once. Recompute time scales with the share re-run."""
    from autopar.perf.context import perf_context
    from autopar.perf.layers import strategy_layer_costs

    model, cluster, w = _llama8b("megatron")
    s = Strategy(tp=1, pp=1, zero=1, micro_batch=1, recompute="full", vpp=1)
    lc = strategy_layer_costs(perf_context(model, cluster, w), s.with_dp(8), s.knobs())
    inp, whole, work = lc.act_dense, lc.act_dense_full, lc.act_dense_full - lc.pp_bytes

    def run(method: str, n: int):
        wl = w.model_copy(update={"recompute_method": method, "recompute_num_layers": n})
        return estimate(model, cluster, wl, s)

    full = estimate(model, cluster, w, s)
    assert full.memory.activations == pytest.approx(32 * inp + work)
    block = run("block", 8)
    assert block.memory.activations == pytest.approx(8 * inp + 24 * whole + work)
    assert run("every_nth", 4).memory.activations == pytest.approx(block.memory.activations)
    assert run("uniform", 4).memory.activations == pytest.approx(8 * inp + 4 * work)
    assert block.time.recompute == pytest.approx(full.time.recompute / 4)
    assert run("uniform", 4).time.recompute == pytest.approx(full.time.recompute)


def test_spread_columns_reach_the_workload():
    row = {**_zb_row(), "recompute": "", "recompute_method": "block", "recompute_num_layers": "2"}
    spec = row_to_specs(row)
    assert spec.strategy.recompute == "full" and spec.workload.recompute_method == "block"
    assert spec.workload.recompute_num_layers == 2 and estimate_row(row)["status"] == "ok"


def test_legacy_notes_move_into_their_columns_once():
    old = pd.DataFrame(
        [{"id": "a", "pp": "4", "notes": "stage=last; dropout 0.1; attention unfused", "vpp": ""}]
    )
    new, filled = upgrade(old)
    assert filled == 3 and new.loc[0, "memory_stage"] == "last" and new.loc[0, "dropout"] == "true"
    assert new.loc[0, "attention_kernel"] == "unfused"
    again, filled2 = upgrade(new)
    assert filled2 == 0 and again.astype(str).equals(new.astype(str))
    assert notes_only_knobs(new.loc[0].to_dict()) == {}
    # the words "interleaved" / "1f1b" never override virtual stages
    assert "pp_schedule" not in notes_only_knobs({"pp": "4", "vpp": "2", "notes": "1f1b overlap"})


def test_calibrate_upgrade_cli(tmp_path):
    src = tmp_path / "old.csv"
    pd.DataFrame([{"id": "a", "pp": "2", "notes": "stage=first"}]).to_csv(src, index=False)
    out = tmp_path / "new.csv"
    cmd = [sys.executable, "-m", "autopar", "calibrate", "upgrade", str(src), "--out", str(out), "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert json.loads(res.stdout)["cells_filled"] == 1
    assert pd.read_csv(out, dtype=str).loc[0, "memory_stage"] == "first"


def test_as_measured_by_hand():
    spec = row_to_specs(_zb_row())
    mem = estimate(spec.model, spec.cluster, spec.workload, spec.strategy).memory
    assert as_measured(mem, "max_memory_allocated").total == pytest.approx(mem.total - mem.overhead)
    reserved = as_measured(mem, "max_memory_reserved").total
    assert reserved == pytest.approx(mem.total - CUDA_CONTEXT_BYTES - NCCL_BYTES)
    assert as_measured(mem, "nvidia_smi") is mem and as_measured(mem, None) is mem


@given(st.sampled_from(MEMORY_METRICS), st.sampled_from(ATTENTION_KERNELS))
def test_allocated_never_exceeds_reserved_never_exceeds_whole(metric, kernel):
    spec = row_to_specs({**_zb_row(), "attention_kernel": kernel})
    mem = estimate(spec.model, spec.cluster, spec.workload, spec.strategy).memory
    seen = [as_measured(mem, m).total for m in MEMORY_METRICS]
    assert seen == sorted(seen) and as_measured(mem, metric).total <= mem.total


def _llama8b(framework: str = "torchtitan", **w) -> tuple:
    return (
        get_model("llama-3.1-8b"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
        Workload(seq_len=8192, global_batch=8, framework=framework, **w),
    )


def test_maxtext_save_qkv_proj_keeps_input_and_qkv_by_hand():
    # Llama-3.1-8B, one 8192-token micro-batch, no TP: layer input 2h = 8192 B/token, q/k/v 2*128*(32 + 2*8)
    # = 12288 B/token (MaxText decoders.py save_qkv_proj: save_only_these_names query/key/value_proj)
    model, cluster, w = _llama8b("megatron", stack="maxtext")
    s = Strategy(tp=1, pp=1, zero=3, micro_batch=1, recompute="remat:save_qkv_proj")
    assert activation_bytes_per_layer(model, cluster, w, s) == pytest.approx(8192 * (8192 + 12288))
    minimal = activation_bytes_per_layer(
        model, cluster, w, s.model_copy(update={"recompute": "remat:minimal"})
    )
    # minimal adds out_proj 2h, mlpwo 2h and gate/up 4f
    assert minimal == pytest.approx(8192 * (8192 + 12288 + 4 * 4096 + 4 * 14336))
    off = s.model_copy(update={"recompute": "remat:qkv_proj_offloaded"})
    assert activation_bytes_per_layer(model, cluster, w, off) == pytest.approx(8192 * 8192)


def test_remat_policy_column_sets_the_recompute_mode():
    row = {**_zb_row(), "remat_policy": "save_dot_except_mlp", "attention_kernel": "", "recompute": ""}
    assert row_to_specs(row).strategy.recompute == "remat:save_dot_except_mlp"
    assert row_to_specs({**row, "remat_policy": "none"}).strategy.recompute == "full"


def test_torch_compile_drops_the_eager_silu_output_by_hand():
    # eager SwiGLU keeps w1 x, silu(w1 x), w3 x and the product; compiled, the SiLU output is recomputed:
    # 2 B x f = 28672 B per token per layer less (no recompute, 8192 tokens)
    model, cluster, eager = _llama8b()
    s = Strategy(tp=1, pp=1, zero=3, micro_batch=1, recompute="none")
    compiled = eager.model_copy(update={"torch_compile": True})
    diff = activation_bytes_per_layer(model, cluster, eager, s) - activation_bytes_per_layer(
        model, cluster, compiled, s
    )
    assert diff == pytest.approx(2 * 14336 * 8192)
    with pytest.raises(ValueError, match="does not compile its model"):
        Workload(seq_len=8192, global_batch=8, framework="megatron", torch_compile=True)


def test_keeping_gathered_parameters_through_the_forward_by_hand():
    # reshard_after_forward=False: the whole model's bf16 parameters stay gathered (2 B x N), instead of the
    # current and prefetched units; the difference is 2 N - 2 x units x (largest layer)
    model, cluster, w = _llama8b()
    s = Strategy(tp=1, pp=1, zero=3, micro_batch=1, recompute="full")
    base = estimate(model, cluster, w, s).memory.buffers
    kept = estimate(model, cluster, w.model_copy(update={"reshard_after_forward": False}), s).memory.buffers
    assert kept - base > 14 * GiB  # ~2 B x 8.0 B parameters, less two layers' units
    assert kept - base < 2 * 8.1e9


def test_memory_bench_reports_each_left_out_source(monkeypatch):
    import importlib.util

    path = ROOT / "bench" / "memory.py"
    spec = importlib.util.spec_from_file_location("bench_memory", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    spec.loader.exec_module(mod)
    files = [ROOT / "bench" / "data" / f for f in ("memory_runs_mcore.csv", "memory_runs_mcore_ft.csv")]
    ev = mod.loso_bands(mod.load(files))
    tab = mod.table(ev).set_index("source")
    assert list(tab.index) == ["megatron_lm_functional_tests", "megatron_lm_golden_values", "ALL"]
    assert tab.loc["megatron_lm_golden_values", "n"] == 11
    # the golden values are allocated peaks of the last stage: every one within 10% once compared like for like
    assert tab.loc["megatron_lm_golden_values", "within 10 %"] == 100
    # each source's band comes from the other sources only: doubling one source's measurements leaves its own
    # band as it was and moves the other's
    raw = mod.load(files)
    held = raw["source"] == "megatron_lm_golden_values"
    raw.loc[held, "meas"] *= 2.0
    raw.loc[held, "resid"] += np.log(2.0)
    moved = mod.loso_bands(raw)
    assert np.allclose(moved.loc[held, "lo"], ev.loc[held, "lo"])
    assert not np.allclose(moved.loc[~held, "lo"], ev.loc[~held, "lo"])


def test_a_measured_oom_is_a_lower_bound_the_memory_calibration_learns():
    from autopar.calibration.models.features import OOM_EVIDENCE, build_training_set

    base = {**_zb_row(), "measured_mem_gb_per_gpu": "", "measured_oom": "true", "memory_metric": ""}
    base = {**base, "notes": "", "memory_stage": "", "dropout": "true", "attention_kernel": "unfused"}
    ts = build_training_set([base], target="memory")
    # the model puts this run's whole peak under usable memory: the OOM says the truth is at least usable
    assert ts.how == [OOM_EVIDENCE] and ts.y[0] > 0
    assert ts.measured[0] == pytest.approx(ts.predicted[0] * np.exp(ts.y[0]))
    spec = row_to_specs(base)
    usable = estimate(spec.model, spec.cluster, spec.workload, spec.strategy).capacity_bytes / GiB
    assert ts.measured[0] == pytest.approx(usable)
    # a run the model already calls out of memory teaches nothing: skipped, with the reason
    big = {**base, "micro_batch": "48", "global_batch": "1152"}
    ts2 = build_training_set([big], target="memory")
    assert len(ts2.y) == 0 and "nothing to learn" in ts2.skipped[0][1]
    with pytest.raises(DataError, match="a run that ran out of memory has no peak"):
        stack_knobs({**base, "measured_mem_gb_per_gpu": "40"})


def test_logs_fill_the_stack_columns():
    from autopar.calibration.ingest.log_config import megatron_config, torchtitan_config

    dump = (
        "------------------------ arguments ------------------------\n"
        "  attention_backend ............................... AttnBackend.unfused\n"
        "  recompute_granularity ........................... full\n"
        "  recompute_method ................................ block\n"
        "  recompute_num_layers ............................ 4\n"
        "-------------------- end of arguments ---------------------\n"
    )
    cfg = megatron_config(dump)
    assert cfg["attention_kernel"] == "unfused" and cfg["recompute"] == "full"
    assert cfg["recompute_method"] == "block" and cfg["recompute_num_layers"] == 4
    assert (
        megatron_config(dump.replace("AttnBackend.unfused", "AttnBackend.fused"))["attention_kernel"]
        == "cudnn"
    )
    tt = (
        "[titan] 2026-02-11 00:53:31,870 - root - INFO - Applied selective activation checkpointing to the model\n"
        "[titan] 2026-02-11 00:53:31,871 - root - INFO - Compiling each TransformerBlock with torch.compile\n"
    )
    assert torchtitan_config(tt) == {"torch_compile": "true", "recompute": "selective"}
    assert "torch_compile" not in torchtitan_config(tt.splitlines()[0])  # absence proves nothing


def test_hsdp_shard_group_column_by_hand():
    """HSDP (FSDP2 shards over dp_shard ranks, replicates over dp / dp_shard): Llama-3.1-8B on 128 GPUs with
    dp_shard 8 keeps 1/8 of the 16 B/parameter states, not 1/128: 16 times as much."""
    import csv

    from autopar.data import published_runs_path

    with Path(published_runs_path()).open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == "TT24-T3-2")
    full = row_to_specs(row)
    hsdp = row_to_specs({**row, "dp_shard": "8"})
    assert full.strategy.dp_shard is None and hsdp.strategy.dp_shard == 8
    m = [estimate(s.model, s.cluster, s.workload, s.strategy).memory for s in (full, hsdp)]
    states = [x.weights + x.grads + x.optimizer for x in m]
    assert states[1] / states[0] == pytest.approx(128 / 8, rel=1e-9)  # every state term: 1/8 for 1/128
    assert "must divide dp" in estimate_row({**row, "dp_shard": "7"})["status"]
    assert "ZeRO-3 / FSDP only" in estimate_row({**row, "dp_shard": "8", "zero": "1"})["status"]


def test_torchtitan_mesh_line_gives_the_hsdp_shard_group():
    from autopar.calibration.ingest.log_config import torchtitan_config

    line = "[titan] INFO - Building 2-D device mesh with ['dp_replicate', 'dp_shard'], [16, 8]"
    cfg = torchtitan_config(line)
    assert cfg["num_gpus"] == 128 and cfg["dp"] == 128 and cfg["dp_shard"] == 8 and cfg["zero"] == 3
    assert "dp_shard" not in torchtitan_config(line.replace("[16, 8]", "[1, 8]"))
