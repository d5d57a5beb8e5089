"""bench/ranking.py: its metrics on hand-computed toy tables, its data file, and a run on the data."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from runfiles import cited_test_set, load_bench

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "bench" / "data" / "sweeps.csv"


rk = load_bench("ranking")


def test_spearman_hand_computed() -> None:
    # ranks x 1 2 3 4, y 1 3 2 4: d^2 = 0+1+1+0 = 2, rho = 1 - 6*2/(4*15) = 0.8
    assert rk.spearman([10, 20, 30, 40], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)
    assert rk.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # tie: y ranks 1.5 1.5 3 -> Pearson of (1,2,3) and (1.5,1.5,3) = 0.75 / sqrt(2 * 1.5) = sqrt(3)/2
    assert rk.spearman([1, 2, 3], [5, 5, 9]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(rk.spearman([1], [2]))
    assert math.isnan(rk.spearman([1, 2, 3], [4, 4, 4]))


def test_average_ranks_share_ties() -> None:
    assert rk.average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


def test_top1_regret_hand_computed() -> None:
    measured = [100.0, 90.0, 80.0]
    assert rk.top1_regret(measured, [1.0, 2.0, 3.0]) == pytest.approx(0.2)  # picks 80 of best 100
    assert rk.top1_regret(measured, [3.0, 2.0, 1.0]) == 0.0
    # a predicted tie between the 100 and the 90 layout counts against the model: regret 10%
    assert rk.top1_regret(measured, [5.0, 5.0, 1.0]) == pytest.approx(0.1)


@given(
    st.lists(
        st.tuples(st.floats(1, 1e4), st.floats(1, 1e4)),
        min_size=2,
        max_size=12,
    )
)
def test_metrics_bounds_and_perfect_order(pairs: list[tuple[float, float]]) -> None:
    m = [a for a, _ in pairs]
    p = [b for _, b in pairs]
    assert 0.0 <= rk.top1_regret(m, p) < 1.0
    rho = rk.spearman(m, p)
    assert math.isnan(rho) or -1.0 - 1e-9 <= rho <= 1.0 + 1e-9
    assert rk.top1_regret(m, m) == 0.0  # ranking by the measurement itself has no regret
    if len(set(m)) == len(m):
        assert rk.spearman(m, [2 * x + 1 for x in m]) == pytest.approx(1.0)


def test_sweeps_file_is_cited_and_not_calibration_data() -> None:
    df = cited_test_set(SWEEPS)
    assert len(set(df["source"])) >= 2 and (df["arch"] == "moe").any()
    # every tokens/s is what the row's own step time, batch, sequence and GPU count give
    timed = df[df.measured_step_s != ""]
    tps = (
        timed.global_batch.astype(float)
        * timed.seq_len.astype(float)
        / (timed.measured_step_s.astype(float) * timed.num_gpus.astype(float))
    )
    assert (tps / timed.measured_tokens_per_s_per_gpu.astype(float) - 1).abs().max() < 1e-3
    # the rest (Megatron-MoE-ModelZoo's TFLOPS-only tables, Qwen3-235B-A22B) convert TFLOPS under Megatron-LM's
    # num_floating_point_operations: 3 (fwd + bwd) x 2 (FMA) x [per layer: QKV and output projections
    # h(q + k + v) + q·h, causal core attention q·s, 8 routed SwiGLU experts 3·h·f_e·8; logits h·V]
    untimed = df[df.measured_step_s == ""]
    assert set(untimed.model) == {"Qwen3-235B-A22B"} and len(untimed) >= 12
    h, q, kv, fe, vocab = 4096, 64 * 128, 4 * 128, 1536, 151936
    s_ = untimed.seq_len.astype(float)
    per_token = 6 * (94 * (h * (q + 2 * kv) + q * h + q * s_ + 3 * h * fe * 8) + h * vocab)
    derived = untimed.measured_tflops_per_gpu.astype(float) * 1e12 / per_token
    assert (derived / untimed.measured_tokens_per_s_per_gpu.astype(float) - 1).abs().max() < 1e-3
    # the same count gives the readme's four timed H100 rows (MZSW-Q235-01..04: TF/GPU over tokens/s from their
    # step times; TF rounded to 1, steps to 0.1 s)
    zoo = timed[timed.id.str.startswith("MZSW-Q235-")]
    ratio = zoo.measured_tflops_per_gpu.astype(float) * 1e12 / zoo.measured_tokens_per_s_per_gpu.astype(float)
    at_4k = 6 * (94 * (h * (q + 2 * kv) + q * h + q * 4096 + 3 * h * fe * 8) + h * vocab)
    assert len(zoo) == 4 and at_4k == pytest.approx(ratio.mean(), rel=3e-3)


def test_ranking_bench_runs_on_the_data(capsys) -> None:
    assert rk.main(["--explain"]) == 0
    out = capsys.readouterr().out
    for needle in (
        "bigscience_tr11_prequel",
        "megatron_moe_modelzoo",
        "torchtitan_bench (seen)",
        "ALL independent",
    ):
        assert needle in out
    assert "top-1 regret" in out and "first vs best (predicted)" in out


def test_ranking_bench_bad_row(tmp_path, capsys) -> None:
    df = pd.read_csv(SWEEPS, dtype=str, keep_default_na=False).head(3)
    df.loc[df.index[1], "precision"] = "int4"
    bad = tmp_path / "bad.csv"
    df.to_csv(bad, index=False)
    assert rk.main(["--data", str(bad), "--no-seen"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "BLSW-0221A-02" in err and "precision" in err


def test_first_pick_skips_layouts_predicted_out_of_memory() -> None:
    measured = [100.0, 90.0, 80.0]
    # the model ranks the 80 layout first but thinks it does not fit: the pick is the 90 one
    assert rk.top1_regret(measured, [1.0, 2.0, 3.0], [True, True, False]) == pytest.approx(0.1)
    # nothing fits: the ranking alone decides
    assert rk.top1_regret(measured, [1.0, 2.0, 3.0], [False, False, False]) == pytest.approx(0.2)


def test_sweep_rows_read_as_stated() -> None:
    """The bench's own reading of a row: EP overlap from the notes, a stated 'none' recompute kept, a
    layout's options part of the layout (the AWS Qwen3-30B sweep: 2 EP degrees x mb/overlap x 2 dispatchers).
    Its overlap=off rows ran the Megatron-Bridge recipe's full recompute (bench_qwen3_pretrain.py clears it only
    for overlap=on), so they state full."""
    df = pd.read_csv(SWEEPS, dtype=str, keep_default_na=False)
    rows = {r["id"]: r for r in df.to_dict("records")}
    on, off = rk._specs(rows["AWSW-Q30-07"]), rk._specs(rows["AWSW-Q30-01"])
    assert on.workload.moe_ep_overlap and not off.workload.moe_ep_overlap
    assert on.strategy.recompute == "none" and off.strategy.recompute == "full"
    assert (
        off.workload.moe_dispatcher == "alltoall"
        and rk._specs(rows["AWSW-Q30-02"]).workload.moe_dispatcher == "flex"
    )
    (q30,) = [p for p in rk.load_problems([SWEEPS], seen=False, only="AWSW-Q30")]
    # 17 rows; UCCL and NVSHMEM are both DeepEP (flex) for the model, so each pair is one layout: 12 layouts
    assert len(q30.layouts) == 12


def test_bands_table_counts_layouts_inside_the_widened_band() -> None:
    """--bands: per source, the share of measured layouts inside the shipped calibration's 80% band as
    `estimate --batch` widens it. The H800 sweep's 10 layouts are all far from the published runs (the steps
    median exceeds the widening's knee), and the table counts exactly the rows with a measurement."""
    from autopar.calibration.evaluation import novelty

    table = rk.band_table([SWEEPS], no_seen=True)
    df = pd.read_csv(SWEEPS, dtype=str, keep_default_na=False)
    assert int(table["layouts"].sum()) == len(df)
    xt = table.loc["xtuner_megatron_moe"]
    assert int(xt["layouts"]) == 10 and xt["steps"] > novelty.KNEE_STEPS
    assert ((table["cover"] >= 0) & (table["cover"] <= 1)).all()
    assert rk.band_lines(table)[0].startswith("The shipped calibration's 80% band")


def test_bands_on_a_file_with_no_measurement_says_so(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model\nx,Nope\n", encoding="utf-8")
    assert rk.main(["--data", str(bad), "--no-seen", "--bands"]) == 0
    assert "no row with a measurement could be evaluated" in capsys.readouterr().out


def test_export_pairs_into_a_missing_directory_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert rk.main(["--export-pairs", "/nonexistent-dir/pairs.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --export-pairs /nonexistent-dir/pairs.json: directory /nonexistent-dir does not exist"
    ]
