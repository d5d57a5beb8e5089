"""AMD CDNA4 (MI355X/MI350X) and Huawei Ascend (910B/910C) catalog entries: figures against their cited
sources, the product strings tools print, systems, efficiency families, prices, and the CLI end to end."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.records.specs import row_to_specs
from autopar.catalog import get_gpu, gpu_notes
from autopar.catalog.clusters import ClusterShape, parse_cluster
from autopar.catalog.pricefile import default_price_book
from autopar.cli import app
from autopar.perf.efficiency import efficiency_for
from autopar.specs import ClusterSpec

runner = CliRunner()

# The Da Vinci cube core does a 16x16x16 multiply-accumulate per clock: 2 x 16**3 = 8,192 FLOP.
CUBE_FLOP_PER_CLOCK = 2 * 16**3


def test_mi355x_against_amd_figures():
    # AMD product page / ROCm GPU specifications: 288 GB HBM3E, 8 TB/s, 256 CUs, 1400 W; 2.4 GHz peak clock,
    # 4,096 dense BF16 FLOP per clock per CU; 7 Infinity Fabric links of 153.6 GB/s bidirectional.
    g = get_gpu("MI355X")
    assert (g.memory_bytes, g.hbm_bw, g.tdp_watts, g.vendor) == (288e9, 8e12, 1400, "amd")
    assert g.bf16_flops == pytest.approx(256 * 2.4e9 * 4096, rel=1e-4)  # "2.5 PF dense BF16"
    assert g.fp8_flops == pytest.approx(2 * g.bf16_flops, rel=1e-4)  # "5 PF dense FP8"
    assert g.scaleup_bw == pytest.approx(7 * 153.6e9 / 2)
    assert g.scaleup_domain == 8


def test_mi350x_is_mi355x_at_2_2_ghz_and_1000_w():
    a, b = get_gpu("MI350X"), get_gpu("MI355X")
    assert a.bf16_flops == pytest.approx(256 * 2.2e9 * 4096, rel=1e-4)
    assert a.bf16_flops / b.bf16_flops == pytest.approx(2.2 / 2.4, rel=1e-4)  # "about 8 percent" less
    assert (a.memory_bytes, a.hbm_bw, a.scaleup_bw) == (b.memory_bytes, b.hbm_bw, b.scaleup_bw)
    assert a.tdp_watts == 1000


def test_ascend_910b_against_cann_guide():
    # CANN migration guide, Atlas A2 (Ascend910B2): 24 cube cores at 1.8 GHz, 353T BF16, 64 GB, 1.6 TB/s; no FP8.
    g = get_gpu("Ascend-910B")
    assert g.bf16_flops == pytest.approx(24 * 1.8e9 * CUBE_FLOP_PER_CLOCK, rel=1e-4)
    assert round(g.bf16_flops / 1e12) == 354
    assert (g.memory_bytes, g.hbm_bw, g.fp8_flops, g.vendor) == (64e9, 1.6e12, None, "huawei")
    assert g.peak_flops("fp8") == g.bf16_flops
    assert get_gpu("Ascend-910B3").bf16_flops == pytest.approx(20 * 1.8e9 * CUBE_FLOP_PER_CLOCK, rel=1e-4)
    assert "estimate" in gpu_notes("Ascend-910B") and "estimate" in gpu_notes("Ascend-910B3")


def test_ascend_910c_die_against_cloudmatrix_paper():
    # CloudMatrix384 paper (arXiv 2506.12708): per package 752 TF BF16, 128 GB at 3.2 TB/s, two dies; per die
    # 7 UB links of 224 Gb/s per direction and 200 Gb/s RDMA; 384 packages, 8 per node. The entry is one die.
    g = get_gpu("Ascend-910C")
    assert (2 * g.bf16_flops, 2 * g.memory_bytes, 2 * g.hbm_bw) == (752e12, 128e9, 3.2e12)
    assert g.scaleup_bw == pytest.approx(7 * 224e9 / 8)
    assert g.scaleout_bw == pytest.approx(200e9 / 8)
    assert (g.scaleup_domain, g.host_size, g.fp8_flops) == (2 * 384, 2 * 8, None)
    c = ClusterSpec(gpu=g, num_gpus=256)
    assert (c.host_size, c.node_size, c.nodes, c.domains) == (16, 768, 16, 1)


@pytest.mark.parametrize(
    ("printed", "entry"),
    [
        ("AMD Instinct MI355X", "MI355X"),  # rocm-smi / amd-smi product name
        ("AMD Instinct MI350X", "MI350X"),
        ("mi355x", "MI355X"),
        ("Ascend910B2", "Ascend-910B"),  # torch_npu.npu.get_device_name() / npu-smi "SoC Name"
        ("Ascend910B", "Ascend-910B"),
        ("Ascend910B1", "Ascend-910B1"),
        ("Ascend910B3", "Ascend-910B3"),
        ("ascend910b3", "Ascend-910B3"),  # CANN SOC_VERSION
        ("Ascend910_9391", "Ascend-910C"),  # Atlas A3 SoC name
        ("ascend 910c", "Ascend-910C"),
    ],
)
def test_product_strings_resolve(printed, entry):
    assert get_gpu(printed).name == entry


def test_system_shorthands():
    assert parse_cluster("cloudmatrix384:1") == ClusterShape("Ascend-910C", 768, 16, 768)
    assert parse_cluster("atlas-800t-a2:4") == ClusterShape("Ascend-910B", 32, 8, 8)
    assert parse_cluster("mi355x-8:16") == ClusterShape("MI355X", 128, 8, 8)


def test_new_families_inherit_measured_fractions_not_fitted_ones():
    # Only the wave size is each family's own (256 CUs; 24 cube cores); every fraction is the named family's.
    for fam, base, sms in (("cdna4", "cdna3", 256), ("davinci", "hopper", 24)):
        e, b = efficiency_for(fam), efficiency_for(base)
        assert e is not b and e.sms == sms
        assert dataclasses.replace(e, sms=b.sms, source=b.source) == b


def test_prices_are_the_documented_stand_ins():
    book = default_price_book()
    for gpu, stand_in in (("MI355X", "MI325X"), ("MI350X", "MI325X"), ("Ascend-910C", "A100-80GB")):
        for tier in ("on_demand", "reserved"):
            assert book.price(gpu, tier) == book.price(stand_in, tier), (gpu, tier)


def test_estimate_on_mi355x_end_to_end():
    r = runner.invoke(
        app,
        ["estimate", "--gpu", "AMD Instinct MI355X", "--model", "llama-3.1-70b", "--gpus", "64"]
        + ["--seq-len", "8192", "--global-batch", "512", "--tp", "8", "--pp", "2"]
        + ["--json", "--no-calibration"],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["inputs"]["gpu"] == "MI355X" and d["inputs"]["gpus_per_node"] == 8
    e = d["estimate"]
    assert e["fits"] and 0 < e["mfu"] < 1
    # MFU is against the MI355X BF16 peak: model TFLOP/s per GPU / 2516.6
    assert e["mfu"] == pytest.approx(e["model_tflops_per_gpu"] / 2516.6, rel=1e-3)


def test_optimize_on_ascend_910c_end_to_end():
    r = runner.invoke(
        app,
        ["optimize", "--model", "llama-3.1-8b", "--gpu", "Ascend-910C", "--gpus", "32"]
        + ["--seq-len", "4096", "--global-batch", "128", "--budget", "30", "--json"],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["inputs"]["gpu"] == ["Ascend-910C"] and d["inputs"]["gpus"] == [32]
    best = d["recommended"][0]
    assert best["gpu"] == "Ascend-910C" and best["mem_gib"] <= best["capacity_gib"] < 64  # one 64 GB die
    assert best["tp"] * best["pp"] * best["cp"] * best["dp"] == 32


def test_ascend_dev_set_records_resolve():
    # bench/data/ascend_runs.csv: ModelLink's published Atlas 900 A2 runs, a dev set (not in the calibration).
    path = Path(__file__).resolve().parents[2] / "bench" / "data" / "ascend_runs.csv"
    rows = read_run_records(path).fillna("").to_dict("records")
    assert len(rows) == 7
    for row in rows:
        s = row_to_specs(row)
        assert s.cluster.gpu.name == "Ascend-910B" and s.workload.framework == "megatron", row["id"]
        st = s.strategy.with_dp(s.cluster.num_gpus)
        assert st.tp * st.pp * st.cp * st.dp == s.cluster.num_gpus == int(row["num_gpus"]), row["id"]
        assert s.model.name == row["model"], row["id"]


def test_fp8_on_ascend_is_refused_in_one_line():
    r = runner.invoke(
        app,
        ["estimate", "--model", "llama-3.1-8b", "--gpu", "Ascend910B3", "--gpus", "8", "--tp", "8"]
        + ["--seq-len", "8192", "--global-batch", "64", "--precision", "fp8"],
    )
    assert r.exit_code == 2
    assert "precision=fp8" in r.output and "Ascend-910B3 has none" in r.output and "Traceback" not in r.output
