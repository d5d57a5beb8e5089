"""Catalog GPUs teams train on (A800, H20, L40S) against their sources, the product strings nvidia-smi prints
for them, and a custom GPU read from a small YAML/JSON file (`--gpu FILE`): loading, the CLI end to end, and
one-line errors for impossible files."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from docs_pages import docs_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog import get_gpu, gpu_notes
from autopar.catalog.loader import efficiency_families, load_gpu_file
from autopar.catalog.topology import catalog_gpu
from autopar.cli import app
from autopar.errors import DataError
from autopar.perf.efficiency import families

runner = CliRunner()
README = docs_text()  # the README and docs/ pages

# A made-up Hopper-class part: every required field, bytes and FLOP/s as in gpus.yaml.
MY_GPU = {
    "name": "MyGPU",
    "family": "hopper",
    "memory_bytes": 96.0e9,
    "bf16_flops": 500.0e12,
    "fp8_flops": 1000.0e12,
    "hbm_bw": 3.0e12,
    "scaleup_bw": 300.0e9,
    "scaleout_bw": 50.0e9,
    "notes": "made up for a test",
}
ESTIMATE = ["estimate", "--model", "llama-3.1-8b", "--gpus", "16", "--no-calibration", "--json"]


def _write(tmp_path: Path, doc: dict, name: str = "mygpu.yaml") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc), encoding="utf-8")
    return p


# ------------------------------------------------------------------------------------ catalog entries


def test_a800_is_an_a100_80gb_with_nvlink_cut_to_400_gbps():
    # NVIDIA A100 data sheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), A100 80GB SXM: 312 TF dense
    # BF16, 80 GB HBM2e at 2,039 GB/s, 400 W; the A800 (NVIDIA, 2022-11) keeps all of it but NVLink, cut from
    # 600 to 400 GB/s bidirectional = 200e9 B/s per direction.
    a800, a100 = get_gpu("A800"), get_gpu("A100-80GB")
    assert (a800.memory_bytes, a800.bf16_flops, a800.fp8_flops, a800.hbm_bw) == (80e9, 312e12, None, 2.039e12)
    assert (a800.scaleup_bw, a800.tdp_watts, a800.family) == (200e9, 400, "ampere")
    assert a800.scaleup_bw == pytest.approx(a100.scaleup_bw * 400 / 600)
    assert get_gpu("a800-sxm4-80gb") is a800


def test_h20_against_nvidia_partner_spec_table():
    # NVIDIA's HGX H20 spec table as reported (TweakTown 2024-01, SemiAnalysis 2023-11): 96 GB HBM3 at 4.0 TB/s,
    # 148 TF dense FP16/BF16, 296 TF dense FP8, NVLink 900 GB/s bidirectional, 400 W, 8-way HGX.
    h20 = get_gpu("H20")
    assert (h20.memory_bytes, h20.hbm_bw, h20.bf16_flops, h20.fp8_flops) == (96e9, 4.0e12, 148e12, 296e12)
    assert (h20.scaleup_bw, h20.scaleup_domain, h20.tdp_watts, h20.family) == (450e9, 8, 400, "hopper")
    assert get_gpu("H20") is not get_gpu("H200")  # 'h20' and 'h200' stay apart
    assert "estimate" in gpu_notes("H20")


def test_l40s_against_its_data_sheet():
    # NVIDIA L40S data sheet (resources.nvidia.com/en-us-l40s/l40s-datasheet-28413): 48 GB GDDR6 at 864 GB/s,
    # BF16 362.05 TF and FP8 733 TF dense (733 / 1,466 with sparsity), PCIe Gen4 x16 64 GB/s bidirectional, no
    # NVLink, 350 W.
    g = get_gpu("L40S")
    assert (g.memory_bytes, g.hbm_bw, g.bf16_flops, g.fp8_flops) == (48e9, 864e9, 362.05e12, 733e12)
    assert (g.scaleup_bw, g.tdp_watts) == (32e9, 350)  # PCIe: 64 GB/s bidirectional
    assert g.scaleout_bw < g.scaleup_bw
    assert g.family in families() and "ampere" in gpu_notes("L40S")  # Ada mapped to ampere, said in notes


@pytest.mark.parametrize(
    ("product", "name"),
    [
        ("NVIDIA A800-SXM4-80GB", "A800"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA H200", "H200"),  # not taken by the H20 pattern
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ],
)
def test_nvidia_smi_names_map_to_the_new_entries(product, name):
    assert catalog_gpu(product) == name


@pytest.mark.parametrize("product", ["NVIDIA L40", "NVIDIA A800 80GB PCIe", "NVIDIA H20-3e"])
def test_near_miss_products_are_not_guessed(product):
    with pytest.raises(DataError, match="is not in the GPU catalog"):
        catalog_gpu(product)


def test_recorded_pcie_l40s_box_is_detected_as_l40s():
    # tests/fixtures/topology/pcie-l40s: a recorded 4-GPU PCIe box; the query line is built here (not recorded).
    from autopar.catalog.topology import RECORDED_FILES, host_topology

    d = Path(__file__).parents[1] / "fixtures" / "topology" / "pcie-l40s"
    files = {p.name: p.read_text(encoding="utf-8") for p in d.iterdir() if p.name in RECORDED_FILES}
    files["nvidia-smi-query.csv"] = "".join(f"{i}, NVIDIA L40S, 46068\n" for i in range(4))
    host = host_topology(files)
    assert (host.gpu, host.gpus_per_host) == ("L40S", 4)


def test_every_catalog_family_has_an_efficiency_profile():
    from autopar.catalog import list_gpus

    assert set(efficiency_families()) == set(families())
    assert {g.family for g in list_gpus()} <= set(families())


# ---------------------------------------------------------------------------------------- GPU files


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_gpu_file_loads_with_its_name_and_source(tmp_path, suffix):
    p = _write(tmp_path, MY_GPU, f"mygpu{suffix}")
    g = get_gpu(str(p))
    assert (g.name, g.family, g.hbm_bw, g.fp8_flops, g.source) == ("MyGPU", "hopper", 3e12, 1e15, str(p))
    assert gpu_notes(str(p)) == "made up for a test"


def test_gpu_file_name_defaults_to_the_stem_and_a_catalog_name_is_kept(tmp_path):
    anon = {k: v for k, v in MY_GPU.items() if k != "name"}
    assert get_gpu(str(_write(tmp_path, anon, "lab-accel.yaml"))).name == "lab-accel"
    clash = get_gpu(str(_write(tmp_path, MY_GPU | {"name": "H100-SXM", "bf16_flops": 1.0e12}, "h.yaml")))
    assert (clash.name, clash.bf16_flops) == ("H100-SXM", 1.0e12)  # the file wins, under its own name
    assert get_gpu("H100-SXM").bf16_flops == 989e12  # the catalog is untouched


def test_readme_gpu_file_example_loads(tmp_path):
    block = re.search(r"\*\*A GPU the catalog lacks\.\*\*.*?```yaml\n(.*?)```", README, re.S)
    assert block is not None
    p = tmp_path / "mygpu.yaml"
    p.write_text(block.group(1), encoding="utf-8")
    g = load_gpu_file(p)
    assert (g.name, g.family, g.memory_bytes, g.scaleout_bw) == ("MyGPU", "hopper", 96e9, 50e9)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_cli_estimate_on_a_gpu_file_is_finite(tmp_path, suffix):
    p = _write(tmp_path, MY_GPU, f"mygpu{suffix}")
    r = runner.invoke(app, [*ESTIMATE, "--gpu", str(p)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["inputs"]["gpu"] == "MyGPU"
    step, tps = doc["estimate"]["step_s"], doc["estimate"]["tokens_per_s"]
    assert math.isfinite(step) and step > 0 and math.isfinite(tps) and tps > 0


def test_cli_optimize_takes_a_gpu_file_in_a_comma_list(tmp_path):
    p = _write(tmp_path, MY_GPU)
    r = runner.invoke(
        app,
        ["optimize", "--model", "llama-3.1-8b", "--gpu", f"{p},H100-SXM", "--gpus", "16", "--budget", "20"]
        + ["--no-calibration", "--json"],
    )
    assert r.exit_code == 0, r.output
    assert "MyGPU" in r.stdout


BAD = [  # (change to MY_GPU, the field the message names, a value it shows)
    ({"hbm_bw": -3.0e12}, "hbm_bw", "-3000000000000.0"),
    ({"scaleup_bw": 0}, "scaleup_bw", "0"),
    ({"memory_bytes": 0}, "memory_bytes", "0"),
    ({"bf16_flops": "inf"}, "bf16_flops", "inf"),
    ({"hbm_bandwidth": 3.0e12}, "hbm_bandwidth", "did you mean hbm_bw"),
    ({"scaleout_bw": None}, "scaleout_bw", "missing"),
    ({"family": "hoper"}, "family", "did you mean hopper"),
    ({"family": "ada"}, "family", "known: ampere"),
    ({"vendor": "acme"}, "vendor", "acme"),
]


@pytest.mark.parametrize(("change", "field", "shown"), BAD, ids=[b[1] + "-" + b[2][:8] for b in BAD])
def test_bad_gpu_file_is_one_line_naming_the_field(tmp_path, change, field, shown):
    doc = {k: v for k, v in (MY_GPU | change).items() if v is not None}
    p = _write(tmp_path, doc)
    with pytest.raises(DataError) as err:
        get_gpu(str(p))
    assert field in str(err.value) and shown in str(err.value)
    r = runner.invoke(app, [*ESTIMATE, "--gpu", str(p)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.output, r.output


@pytest.mark.parametrize(
    ("text", "name", "field"),
    [
        ('{"name": "J", "family": "ampere", "hbm_bw": NaN}', "nan.json", "hbm_bw=nan"),
        ("family: hopper\nhbm_bw: .nan\n", "nan.yaml", "hbm_bw=nan"),
        ("- family: hopper\n", "list.yaml", "mapping"),
    ],
)
def test_non_finite_or_non_mapping_files_are_one_line(tmp_path, text, name, field):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    r = runner.invoke(app, [*ESTIMATE, "--gpu", str(p)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and field in r.output, r.output


def test_missing_gpu_file_is_one_line(tmp_path):
    r = runner.invoke(app, [*ESTIMATE, "--gpu", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.output and len(r.output.strip().splitlines()) == 1


def test_a_bare_name_is_a_catalog_name_even_if_such_a_file_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "H100").write_text("not yaml: [", encoding="utf-8")
    assert get_gpu("H100").name == "H100-SXM"


# ------------------------------------------------------------------------------------------ property

POSITIVE = st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False)
BANDWIDTHS = ("hbm_bw", "scaleup_bw", "scaleout_bw")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.fixed_dictionaries({k: POSITIVE for k in ("memory_bytes", "bf16_flops", *BANDWIDTHS)}),
    bad_field=st.sampled_from(BANDWIDTHS),
    bad=st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
)
def test_any_positive_numbers_load_and_any_non_positive_bandwidth_is_refused(
    tmp_path, values, bad_field, bad
):
    doc = {"name": "Prop", "family": "ampere", **values}
    g = load_gpu_file(_write(tmp_path, doc, "prop.json"))
    assert all(getattr(g, k) == v for k, v in values.items())
    with pytest.raises(DataError, match=rf"{bad_field}=.*greater than 0"):
        load_gpu_file(_write(tmp_path, doc | {bad_field: bad}, "prop.json"))
