"""bench/data/memory_runs.csv: published peak-memory measurements beyond torchtitan (a dev set, not calibration
data): its schema and citations, what each row resolves to, and the memory mechanisms it checks by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from runfiles import cited_test_set

from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.records.specs import row_to_specs
from autopar.perf.estimate import estimate
from autopar.perf.layers import activation_bytes_per_layer

ROOT = Path(__file__).resolve().parents[2]
MEMORY_RUNS = ROOT / "bench" / "data" / "memory_runs.csv"
GiB = 2**30


def _rows() -> list[dict]:
    return read_run_records(MEMORY_RUNS).fillna("").to_dict("records")


def _row(rid: str) -> dict:
    return next(r for r in _rows() if r["id"] == rid)


def test_memory_runs_file_is_cited_and_not_calibration_data() -> None:
    df = cited_test_set(MEMORY_RUNS)
    mem = pd.to_numeric(df["measured_mem_gb_per_gpu"])
    assert mem.notna().all() and ((mem > 0) & (mem <= 80)).all()  # every row measured, on 80 GB GPUs
    # every row says what its memory figure is and which stack ran it
    assert (
        df["notes"].str.contains("allocated vs reserved").all() and df["notes"].str.contains("stack:").all()
    )


def test_every_row_resolves_to_its_stated_layout_and_schedule() -> None:
    names = {"ZB-2p": "zb-2p", "ZB-1p": "zb-h1", "1F1B": "1f1b", "ZB-V": "zb-v"}
    for row in _rows():
        s = row_to_specs(row)
        st = s.strategy.with_dp(s.cluster.num_gpus)
        assert st.tp * st.pp * st.cp * st.dp == s.cluster.num_gpus == int(row["num_gpus"]), row["id"]
        assert st.pp == s.cluster.num_gpus and st.dp == 1  # the paper runs one pipeline over every GPU
        sched = next(v for k, v in names.items() if f"-{k}-" in row["id"])
        assert st.pp_schedule == sched, row["id"]
        # the authors' Megatron-LM fork ran the unfused softmax with dropout: the record's columns say so
        assert s.workload.framework == "megatron" and s.model.dropout, row["id"]
        assert s.workload.attention_kernel == "unfused" and s.knobs.attention_kernel == "unfused", row["id"]
        assert int(row["global_batch"]) == st.micro_batch * int(row["id"].rsplit("-m", 1)[1])


def test_unfused_attention_layer_is_korthikantis_formula_by_hand() -> None:
    # 1.5B (Table 3): s = 1024, b = 6, h = 2304, a = 24, no TP, dropout on, unfused attention: Korthikanti et al.
    # 2022 eq. 1, s*b*h*(34 + 5*a*s/h) = 1024*6*2304*(34 + 53.33) = 1,236,271,104 B (1.15 GiB), which Table 12's
    # memory rise per kept layer-micro-batch matches (1.17-1.22 GB); FlashAttention would keep 0.48 GB.
    s = row_to_specs(_row("ZBPP-T12-1p5B-1F1B-b6-m2"))
    act = activation_bytes_per_layer(s.model, s.cluster, s.workload, s.strategy)
    assert act == pytest.approx(1024 * 6 * 2304 * 34 + 5 * 24 * 1024 * 1024 * 6, rel=1e-12)


def test_peak_tracks_the_kept_micro_batches_of_table_12() -> None:
    # 1F1B keeps min(p - 1, m) micro-batches on the second stage (3 of the 22 layers; the first and last stage
    # hold 2): m = 2 -> 4 -> 8 adds 6 and then 9 layer-micro-batches of 1.15 GiB: 6.9 and 10.4 GiB; measured
    # 11 -> 18 -> 29 GB (+7, +11).
    tot = []
    for m in (2, 4, 8):
        s = row_to_specs(_row(f"ZBPP-T12-1p5B-1F1B-b6-m{m}"))
        tot.append(estimate(s.model, s.cluster, s.workload, s.strategy).memory.total / GiB)
    layer = 1024 * 6 * 2304 * (34 + 5 * 24 * 1024 / 2304) / GiB
    assert tot[1] - tot[0] == pytest.approx(6 * layer * 1.05, rel=0.02)  # FRAGMENTATION 5% on activations
    assert tot[2] - tot[1] == pytest.approx(9 * layer * 1.05, rel=0.02)


def test_zb2p_keeps_twice_the_micro_batches_of_1f1b() -> None:
    # Table 4, 1.5B, m = 24: ZB-2p 59 GB against 1F1B's 30 (activation limit 2p vs p micro-batches)
    est = {}
    for sched in ("ZB-2p", "1F1B"):
        s = row_to_specs(_row(f"ZBPP-T4-1p5B-{sched}-b6-m24"))
        est[sched] = estimate(s.model, s.cluster, s.workload, s.strategy).memory
    assert est["ZB-2p"].activations == pytest.approx(2 * est["1F1B"].activations, rel=0.05)
    assert est["ZB-2p"].weights == est["1F1B"].weights


def test_zero_bubble_with_fewer_micro_batches_than_stages_by_hand() -> None:
    from autopar.perf.pipeline import bubble_fraction, few_microbatch_idle

    # Appendix H: with m <= p a ZB step takes (m + p - 1)(T_F + T_B) + T_W. T_F = T_B = T_W = 1 (t_b = 2 t_f,
    # half of it W): p = 8, m = 2 -> 9 * 2 + 1 = 19 against the ideal 2 * 3 = 6, bubble 13/6.
    assert few_microbatch_idle(8, 2) == pytest.approx(13.0)
    assert bubble_fraction("zb-2p", 8, 2) == pytest.approx(13 / 6)
    assert bubble_fraction("zb-h1", 8, 2) == pytest.approx(
        13 / 6
    )  # "ZB-1p and ZB-2p are essentially the same"
    # at m = p it is ZB-H1's own (p-1)(T_F + T_B - T_W) = 7; beyond p the closed forms stand
    assert few_microbatch_idle(8, 8) == pytest.approx(7.0) and few_microbatch_idle(8, 9) == 0.0
    assert bubble_fraction("zb-2p", 8, 32) == 0.0 and bubble_fraction("zb-h1", 8, 32) == pytest.approx(7 / 96)
    # never better than at m = p + 1, never worse than 1F1B's (p - 1)/m of the m(T_F + T_B + T_W) ideal
    for m in range(1, 9):
        assert bubble_fraction("zb-2p", 8, m) <= bubble_fraction("1f1b", 8, m) + 1e-12


def test_dtensor_sp_keeps_the_gathered_gemm_inputs_by_hand(monkeypatch) -> None:
    """torchtitan's TP plan hands the QKV and MLP linears (and the output projection) the all-gathered
    Replicate() input, which autograd saves for the weight gradient; Megatron keeps the SP shard. Llama-3.1-8B,
    TP8 + SP, micro-batch 1, seq 8192, no recompute: per layer 2 GEMM inputs x 2 B x h x T x (1 - 1/8)
    = 2 * 2 * 4096 * 8192 * 7/8 bytes more than with the flag off (117.44 MB)."""
    import dataclasses

    import autopar.perf.context as context
    from autopar.catalog import get_gpu, get_model
    from autopar.perf.efficiency import software_for
    from autopar.specs import ClusterSpec, Strategy, Workload

    model = get_model("llama-3.1-8b")
    cluster = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    w = Workload(seq_len=8192, global_batch=8, framework="torchtitan")
    st = Strategy(tp=8, sp=True, micro_batch=1, recompute="none")
    assert (
        software_for("torchtitan").sp_saves_gathered_inputs
        and not software_for("megatron").sp_saves_gathered_inputs
    )
    on = activation_bytes_per_layer(model, cluster, w, st)
    off_profile = dataclasses.replace(software_for("torchtitan"), sp_saves_gathered_inputs=False)
    monkeypatch.setattr(context, "stack_profile", lambda fw, kernel: off_profile)
    try:  # contexts are cached per (model, cluster, workload): rebuild with the patched profile, then drop it
        context._perf_context.cache_clear()
        context._LAST.clear()
        off = activation_bytes_per_layer(model, cluster, w, st)
    finally:
        monkeypatch.undo()
        context._perf_context.cache_clear()
        context._LAST.clear()
    assert on - off == pytest.approx(2 * 2 * 4096 * 8192 * 7 / 8, rel=1e-12)
    # without TP there is nothing to gather: the flag changes nothing
    st1 = Strategy(tp=1, micro_batch=1, recompute="none")
    assert activation_bytes_per_layer(model, cluster, w, st1) == activation_bytes_per_layer(
        model, cluster, w, st1
    )


def test_compiled_loss_keeps_bf16_logits_and_gradient_by_hand() -> None:
    """torchtitan from commit bbb1b616 (2025-04-02) compiles the loss under --training.compile: 4 B per logit
    (bf16 logits kept + bf16 gradient) against eager's 12. Llama-3.1-8B, micro-batch 2 x 8192 tokens, vocab
    128256, no TP: 16384 * 128256 * (12 - 4) bytes less (15.66 GiB)."""
    from autopar.catalog import get_gpu, get_model
    from autopar.data import published_runs_path
    from autopar.specs import ClusterSpec, Strategy, Workload

    model, cluster = get_model("llama-3.1-8b"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)
    st = Strategy(micro_batch=2, recompute="selective", zero=3)
    mem = {}
    for compiled in (False, True):
        w = Workload(seq_len=8192, global_batch=16, framework="torchtitan", compiled_loss=compiled)
        mem[compiled] = estimate(model, cluster, w, st).memory.logits
    assert mem[False] - mem[True] == pytest.approx(16384 * 128256 * 8, rel=1e-12)
    # only torchtitan's loss: another stack's flag changes nothing
    w_mg = [
        Workload(seq_len=8192, global_batch=16, framework="megatron", compiled_loss=c) for c in (False, True)
    ]
    assert len({estimate(model, cluster, w, st).memory.logits for w in w_mg}) == 1
    # the records: a row whose notes say the loss was compiled sets it; the shipped rows (identical to the
    # shared ground truth, test_records) do not say it, so they keep eager's 12 B
    rows = {r["id"]: r for r in read_run_records(published_runs_path()).fillna("").to_dict("records")}
    said = {**rows["TT25-H200-1"], "notes": rows["TT25-H200-1"]["notes"] + "; loss compiled"}
    assert row_to_specs(said).workload.compiled_loss
    assert not row_to_specs(rows["TT25-H200-1"]).workload.compiled_loss
    assert not row_to_specs(rows["TT24-T1-2"]).workload.compiled_loss
