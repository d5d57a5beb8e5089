"""Activation CPU offload (perf/act_offload.py): Transformer Engine's offload windows, exposed host-link time
on NVLink-C2C vs PCIe, memory saved, Megatron's rules, completion, records, label and launch flags."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.records.specs import row_to_specs
from autopar.catalog import get_gpu, get_model
from autopar.errors import InvalidStrategyError
from autopar.launch.labels import parse_strategy_label
from autopar.launch.schema import check_megatron
from autopar.launch.settings import launch_settings
from autopar.perf import estimate
from autopar.perf.act_offload import candidate_layers, offload_cost, resident_saving_layers, windows
from autopar.perf.offload import host_link_bw
from autopar.specs import ClusterSpec, Strategy, Workload

FRONTIER = "bench/data/frontier_runs.csv"


def test_windows_follow_te_layer_window_map():
    # TE layer_window_map[i] = (L//N)(i+1) - 1 (+ i+1 for the first L%N windows, else + L%N).
    # L=10, N=3: window ends 3, 6, 9 -> group 0 overlaps layers 1..3, group 1 4..6, group 2 7..9.
    assert windows(10, 3) == (3, 3, 3)
    # L=80, N=20: ends 3, 7, ..., 79 -> group 0 overlaps 3 layers, the others 4.
    assert windows(80, 20) == (3,) + (4,) * 19
    assert windows(8, 0) == ()


def test_host_link_per_gpu_c2c_shared_by_a_superchip_vs_pcie():
    # GB200/GB300 superchip: 900 GB/s bidirectional C2C for one Grace and two GPUs -> 225 GB/s each way per GPU
    assert host_link_bw(get_gpu("GB300")) == pytest.approx(225e9)
    assert host_link_bw(get_gpu("B200")) == pytest.approx(50e9)  # PCIe Gen5 x16 achievable


def test_exposed_time_golden_c2c_vs_pcie():
    # L=8, N=4 -> windows (1, 2, 2, 2); one layer keeps 9 GB; forward 10 ms, backward 20 ms per layer.
    act, f, b = 9e9, 0.010, 0.020
    # C2C 225 GB/s: copy 40 ms. Forward: (40-10) + 3*(40-20) = 90 ms; backward: (40-20) + 3*0 = 20 ms.
    c2c = offload_cost(8, 4, act, f, b, 225e9)
    assert c2c.bytes_each_way == pytest.approx(36e9)
    assert c2c.exposed_s == pytest.approx(0.110)
    # PCIe 50 GB/s: copy 180 ms. Forward: 170 + 3*160 = 650 ms; backward: 160 + 3*140 = 580 ms.
    assert offload_cost(8, 4, act, f, b, 50e9).exposed_s == pytest.approx(1.230)
    # fast enough compute hides it all
    assert offload_cost(8, 4, act, 1.0, 2.0, 50e9).exposed_s == 0.0


def test_saving_is_the_offloaded_layers_less_the_one_in_flight():
    assert [resident_saving_layers(n) for n in (0, 1, 2, 20)] == [0, 0, 1, 19]
    assert candidate_layers(80) == [79, 70, 60, 50, 40, 30, 20, 10]


def _llama70b(gpu: str, n: int, **kw) -> tuple:
    m = get_model("Llama-3-70B")
    cl = ClusterSpec(gpu=get_gpu(gpu), num_gpus=64)
    w = Workload(seq_len=8192, global_batch=256, precision="fp8", **kw)
    s = Strategy(tp=1, pp=1, zero=3, micro_batch=2, recompute="none", activation_offload_layers=n)
    return m, cl, w, s


def test_estimate_saves_n_minus_one_layers_and_charges_the_exposed_transfer():
    m, cl, w, s0 = _llama70b("B200", 0)
    base = estimate(m, cl, w, s0, check=False)
    off = estimate(m, cl, w, s0.model_copy(update={"activation_offload_layers": 40}), check=False)
    per_layer = base.memory.activations / m.layers
    assert base.memory.activations - off.memory.activations == pytest.approx(39 * per_layer)
    assert off.time.act_offload > 0  # PCIe: a 2-layer window does not hide a 3.5 GB copy
    assert off.step_time_s == pytest.approx(base.step_time_s + off.time.act_offload)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["B200", "GB300", "H100-SXM"]), st.integers(0, 78), st.integers(1, 79))
def test_more_offload_never_raises_memory_nor_beats_no_offload(gpu, a, b):
    lo, hi = sorted((a, b))
    m, cl, w, s = _llama70b(gpu, 0)
    ests = [
        estimate(m, cl, w, s.model_copy(update={"activation_offload_layers": n}), check=False)
        for n in (0, lo, hi)
    ]
    assert ests[2].memory.activations <= ests[1].memory.activations <= ests[0].memory.activations
    assert ests[1].step_time_s >= ests[0].step_time_s and ests[2].step_time_s >= ests[0].step_time_s


def test_megatron_rules():
    m, cl, w, s = _llama70b("B200", 20)
    bad = {
        "pp=1": s.model_copy(update={"pp": 2}),
        "recompute=none": s.model_copy(update={"recompute": "full"}),
        "must be < layers=80": s.model_copy(update={"activation_offload_layers": 80}),
    }
    for words, strat in bad.items():
        with pytest.raises(InvalidStrategyError, match=words):
            estimate(m, cl, w, strat, strict=False)
    # a stack without it (layouts.STACKS): still estimated, as a what-if the notes name
    tt = estimate(m, cl, w.model_copy(update={"framework": "torchtitan"}), s, strict=False)
    assert tt.time.act_offload > 0 or tt.memory.total > 0
    assert any("framework=torchtitan has no layer-wise activation CPU offload" in n for n in tt.notes)


def test_grace_host_memory_bounds_the_offload():
    # GB300: 480 GB LPDDR5X per Grace shared by 2 GPUs; 79 layers of ~3.6 GB do not fit in 240 GB.
    m, cl, w, s = _llama70b("GB300", 79)
    with pytest.raises(InvalidStrategyError, match="CPU memory per GPU"):
        estimate(m, cl, w, s, strict=False)
    assert estimate(m, cl, w, s.model_copy(update={"activation_offload_layers": 20}), strict=False).fits


def _frontier(rid: str) -> dict:
    df = read_run_records(FRONTIER).fillna("")
    return df[df["id"] == rid].iloc[0].to_dict()


def test_completion_picks_offload_over_full_recompute_for_the_gb300_70b_row():
    # MBR-029: Megatron-Bridge 26.04.01, Llama-3-70B, 64 GB300, FSDP, fp8, mbs 2: 5,248 tokens/s/GPU measured
    # (docs/performance-summary-archive.md); its config sets cpu_offloading_num_layers=20
    # (scripts/performance/configs/llama3 LLAMA3_70B GB300 FP8-CS). The record is silent on both.
    spec = row_to_specs(_frontier("MBR-029"))
    assert spec.strategy.activation_offload_layers is None and "act_offload" in spec.workload.memory_savers
    e = estimate(spec.model, spec.cluster, spec.workload, spec.strategy, strict=False)
    assert e.strategy.activation_offload_layers > 0 and e.strategy.recompute == "none"
    assert e.tokens_per_s_per_gpu == pytest.approx(5248, rel=0.10)
    # without the saver the completion must fall back to recompute (the model does not fit otherwise)
    w = spec.workload.model_copy(update={"memory_savers": ()})
    e0 = estimate(spec.model, spec.cluster, w, spec.strategy, strict=False)
    assert e0.strategy.activation_offload_layers == 0 and e0.strategy.recompute != "none"
    assert e0.tokens_per_s_per_gpu < e.tokens_per_s_per_gpu


def test_records_column_notes_and_rule_outs():
    row = _frontier("MBR-029")
    assert row_to_specs({**row, "cpu_offloading_num_layers": 20}).strategy.activation_offload_layers == 20
    noted = row_to_specs({**row, "notes": "config: cpu_offloading_num_layers=30"})
    assert noted.strategy.activation_offload_layers == 30 and noted.workload.memory_savers == ()
    assert row_to_specs({**row, "recompute": "full"}).strategy.activation_offload_layers == 0
    assert row_to_specs({**row, "pp": 2, "dp": 32}).strategy.activation_offload_layers == 0


def test_label_round_trip_and_megatron_flag_in_the_vendored_schema():
    m, cl, w, s = _llama70b("GB300", 20)
    s = s.model_copy(update={"dp": 64})
    assert s.label() == "TP1 DP64/Z3 mb2 AO20"
    assert parse_strategy_label(s.label()) == s
    ls = launch_settings(m, cl, w, s)
    assert "--cpu-offloading-num-layers 20" in ls.megatron_args
    assert check_megatron(ls.megatron_args, ls.versions["megatron"], list(ls.placeholders)) == []
    assert any("no layer-wise activation CPU offload" in n for n in ls.framework_notes["torchtitan"])
