"""`autopar topology` and `--cluster detect`: recorded tool outputs of real hosts parse to the cluster they
are (values checked by hand against tests/fixtures/topology/*, see PROVENANCE.md there), detect@DIR plans
like the explicit flags in estimate/optimize/whatif, and bad or partial outputs are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog.topology import (
    RECORDED_FILES,
    catalog_gpu,
    describe,
    host_topology,
    link_groups,
    parse_fabric,
    parse_ibstat,
    parse_nvidia_topo,
    parse_rocm_topo,
)
from autopar.cli import app
from autopar.cli.topology import parse_detect, sysfs_infiniband
from autopar.errors import AutoparError, DataError, SpecError

FIX = Path(__file__).parents[1] / "fixtures" / "topology"
runner = CliRunner()


def recorded(system: str) -> dict[str, str]:
    d = FIX / system
    return {p.name: p.read_text(encoding="utf-8") for p in d.iterdir() if p.name in RECORDED_FILES}


# ---------------------------------------------------------------------------------------------- fixtures


def test_hgx_h100_is_one_dgx_h100_node():
    # env.txt: "GPU 0,1,2,3,4,5,6,7: NVIDIA H100 80GB HBM3"; GPU0's row is NV18 to GPU1..GPU7 -> one group of 8.
    host = host_topology(recorded("hgx-h100"))
    assert (host.product, host.gpu, host.gpus_per_host, host.nvlink_domain) == (
        "NVIDIA H100 80GB HBM3",
        "H100-SXM",
        8,
        8,
    )
    assert host.internode_gbps is None and "catalog default" in host.nic_basis  # no ibstat was published
    assert host.numa == ("GPU0: CPUs 0-55,112-167, NUMA 0",)
    d = describe(host, 4)
    assert d.shorthand == "dgx-h100:4" and d.num_gpus == 32
    assert d.flags() == "--gpu H100-SXM --gpus 32 --gpus-per-node 8 --nvlink-domain 8"


def test_hgx_b200_is_one_dgx_b200_node():
    host = host_topology(recorded("hgx-b200"))
    assert (host.gpu, host.gpus_per_host, host.nvlink_domain) == ("B200", 8, 8)
    assert describe(host, 2).shorthand == "dgx-b200:2"


def test_gb200_tray_is_four_gpus_in_a_72_gpu_domain_inferred_from_the_model():
    # 4 GPUs NV18 to each other on the tray; no Fabric section, so the 72 comes from the GB200 model.
    host = host_topology(recorded("gb200-nvl72-tray"))
    assert (host.gpu, host.gpus_per_host, host.nvlink_domain) == ("GB200", 4, 72)
    assert "inferred from the GPU model" in host.domain_basis and "Fabric" in host.domain_basis
    assert host.numa[2] == "GPU2: CPUs 72-143, NUMA 1,19-25,27-33"
    assert describe(host, 18).shorthand == "gb200-nvl72:1"  # 18 trays x 4 = one 72-GPU rack
    assert describe(host, 4).shorthand is None  # 16 GPUs is not a whole rack


def test_pcie_box_matrix_has_no_nvlink_and_no_gpu_name():
    files = recorded("pcie-l40s")
    topo = parse_nvidia_topo(files["nvidia-smi-topo.txt"], "nvidia-smi-topo.txt")
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3") and topo.nic_legend == {
        "NIC0": "mlx5_0",
        "NIC1": "mlx5_1",
    }
    assert [len(g) for g in link_groups(topo)] == [1, 1, 1, 1]  # NODE/SYS only: PCIe
    assert topo.affinity["GPU2"] == ("96-191,288-383", "1")
    with pytest.raises(
        DataError, match=r"no GPU model found: looked in nvidia-smi-query.csv.*got nvidia-smi-topo.txt"
    ):
        host_topology(files)


def test_pcie_box_with_a_gpu_the_catalog_lacks_names_it_and_the_closest():
    # The recorded matrix plus a query line built here (not recorded): an L40 (not the L40S) is not in the catalog.
    files = {
        **recorded("pcie-l40s"),
        "nvidia-smi-query.csv": "".join(f"{i}, NVIDIA L40, 46068\n" for i in range(4)),
    }
    with pytest.raises(DataError, match=r"detected GPU 'NVIDIA L40' is not in the GPU catalog \(closest: "):
        host_topology(files)


@pytest.mark.parametrize(
    ("product", "name"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA GB200", "GB200"),
        ("AMD Instinct MI300X OAM", "MI300X"),
    ],
)
def test_product_strings_map_to_catalog_names(product, name):
    assert catalog_gpu(product) == name


def test_mi100_rocm_link_types_are_two_xgmi_hives_of_four():
    topo = parse_rocm_topo(recorded("mi100-xgmi")["rocm-smi.txt"])
    assert topo is not None
    assert [sorted(g) for g in link_groups(topo)] == [
        ["GPU0", "GPU2", "GPU3", "GPU7"],
        ["GPU1", "GPU4", "GPU5", "GPU6"],
    ]


def test_roce_ibstat_ports():
    nics = parse_ibstat(recorded("roce-cx7")["ibstat.txt"])
    assert [(n.name, n.port, n.rate_gbps, n.link_layer, n.active) for n in nics] == [
        ("mlx5_0", 1, 200.0, "Ethernet", True),
        ("mlx5_1", 1, 200.0, "Ethernet", True),
    ]


def test_nic_rate_per_gpu_from_rail_nics():
    # Built here: 8 GPUs, each PIX to its own 400 Gb/s NDR port, plus a storage port on the CPU (NODE):
    # 8 x 400 Gb/s / 8 GPUs / 8 bits = 50 GB/s per GPU per direction (the catalog's H100 figure).
    head = (
        "\t" + "\t".join([f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(9)]) + "\tCPU Affinity\n"
    )
    rows = []
    for i in range(8):
        cells = ["X" if j == i else "NV18" for j in range(8)] + [
            "PIX" if j == i else "NODE" for j in range(9)
        ]
        rows.append(f"GPU{i}\t" + "\t".join(cells) + "\t0-55\t0\n")
    legend = "NIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(9))
    ib = "".join(
        f"CA 'mlx5_{i}'\n\tPort 1:\n\t\tState: Active\n\t\tRate: {400 if i < 8 else 200}\n\t\tLink layer: InfiniBand\n"
        for i in range(9)
    )
    files = {
        "nvidia-smi-topo.txt": head + "".join(rows) + "\n" + legend,
        "nvidia-smi-query.csv": "".join(f"{i}, NVIDIA H100 80GB HBM3, 81559\n" for i in range(8)),
        "ibstat.txt": ib,
    }
    host = host_topology(files)
    assert host.internode_gbps == 50.0 and "rail NICs" in host.nic_basis
    assert host.memory_mib == 81559
    assert describe(host).flags().endswith("--internode-gbps 50")


def test_fabric_section():
    # Built from the field names of nvidia-smi -q's Fabric section (State, Status, CliqueId, ClusterUUID).
    up = "    Fabric\n        State : Completed\n        Status : Success\n        CliqueId : 4026\n        ClusterUUID : 9c6f5af3-53bf-49b5-a436-b66766c413c3\n"
    down = "    Fabric\n        State : Completed\n        Status : Insufficient Resources\n        CliqueId : 0\n        ClusterUUID : 00000000-0000-0000-0000-000000000000\n"
    assert [f.up for f in parse_fabric(up * 2 + down)] == [True, True, False]
    tray = recorded("gb200-nvl72-tray")
    assert host_topology({**tray, "nvidia-smi-q.txt": up * 4}).nvlink_domain == 72
    broken = host_topology({**tray, "nvidia-smi-q.txt": down * 4})
    assert broken.nvlink_domain == 4 and "not up" in broken.domain_basis


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"nvidia-smi-query.csv": "0, NVIDIA H100 80GB HBM3, 81559, extra, cells\n"},
            "nvidia-smi-query.csv line 1",
        ),
        ({"ibstat.txt": "CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n"}, "no GPU model found"),
        (
            {
                "nvidia-smi-query.csv": "0, NVIDIA H100 80GB HBM3, 81559\n",
                "ibstat.txt": "CA 'x'\n\tPort 1:\n\t\tState: Active\n",
            },
            "ibstat.txt: CA 'x' port 1 has no 'Rate:' line",
        ),
        (
            {"nvidia-smi-query.csv": "0, NVIDIA H100 80GB HBM3, 1\n1, NVIDIA H200, 1\n"},
            "mixed GPU models on one host",
        ),
        (
            {
                "nvidia-smi-query.csv": "0, NVIDIA B200, 1\n",
                "nvidia-smi-topo.txt": "\tGPU0\tGPU1\nGPU0\tX\tNV18\n",
            },
            "lists 1 GPUs but nvidia-smi-topo.txt has 2",
        ),
        (
            {
                "nvidia-smi-query.csv": "0, NVIDIA B200, 1\n",
                "rocm-smi.txt": "Link Type between two GPUs\nnothing\n",
            },
            "rocm-smi.txt",
        ),
    ],
)
def test_bad_or_partial_outputs_are_one_line_errors(files, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        host_topology(files)
    assert "\n" not in str(e.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(RECORDED_FILES)),
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)
    | st.lists(
        st.sampled_from(
            [
                "GPU0",
                "GPU1",
                "NV18",
                "X",
                "SYS",
                "\t",
                " ",
                "\n",
                "CA 'a'",
                "Port 1:",
                "Rate: x",
                "GPU 0,1: NVIDIA B200",
                "Fabric",
                "State : Completed",
                "0, NVIDIA GB200, 1",
            ]
        ),
        max_size=40,
    ).map("".join),
)
def test_arbitrary_text_raises_only_autopar_errors(name, text):
    base = {"nvidia-smi-query.csv": "0, NVIDIA B200, 183359\n"} if name != "nvidia-smi-query.csv" else {}
    try:
        host = host_topology({**base, name: text})
    except AutoparError:
        return
    assert host.gpus_per_host >= 1 and host.nvlink_domain >= 1


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=40))
def test_detect_forms_never_raise_anything_else(tail):
    try:
        parsed = parse_detect("detect" + tail)
    except AutoparError:
        return
    assert parsed is None or (isinstance(parsed[1], int) and parsed[0] != "")


# ---------------------------------------------------------------------------------------------- CLI


def test_parse_detect_forms():
    assert parse_detect("detect") == (None, 1)
    assert parse_detect("detect:4") == (None, 4)
    assert parse_detect("detect@/x/y") == ("/x/y", 1)
    assert parse_detect("detect@/x:y:3") == ("/x:y", 3)
    assert parse_detect("dgx-h100:4") is None
    assert parse_detect("detectx") is None  # not a detect form: left to the cluster catalog (unknown name)
    with pytest.raises(SpecError, match="expected detect, detect:COUNT, detect@DIR"):
        parse_detect("detect:x")
    with pytest.raises(SpecError, match="needs a folder"):
        parse_detect("detect@:2")


def test_topology_command_from_folder_text_and_json():
    r = runner.invoke(app, ["topology", "--from", str(FIX / "hgx-h100")])
    assert r.exit_code == 0, r.output
    assert (
        "--gpu H100-SXM --gpus 8 --gpus-per-node 8 --nvlink-domain 8" in r.output and "dgx-h100:1" in r.output
    )
    assert f"--cluster  dgx-h100:1; or --cluster detect@{FIX / 'hgx-h100'}:1" in r.output
    r = runner.invoke(app, ["topology", "--from", str(FIX / "gb200-nvl72-tray"), "--hosts", "18", "--json"])
    doc = json.loads(r.stdout)
    assert doc["host"]["nvlink_domain"] == 72 and doc["cluster"]["shorthand"] == "gb200-nvl72:1"
    assert doc["cluster"]["num_gpus"] == 72


def test_topology_on_a_host_without_gpus_says_what_it_looked_for(monkeypatch):
    monkeypatch.setattr("autopar.cli.topology.run_tool", lambda argv: None)
    monkeypatch.setattr("autopar.cli.topology.sysfs_infiniband", lambda root=None: None)
    r = runner.invoke(app, ["topology"])
    assert r.exit_code == 2
    assert "no GPU found on this host: looked for nvidia-smi, rocm-smi" in r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output


def test_topology_bad_folder_is_one_line(tmp_path):
    r = runner.invoke(app, ["topology", "--from", str(tmp_path)])
    assert r.exit_code == 2 and "holds none of the recorded files" in r.output and r.output.count("\n") == 1


def test_save_then_from_round_trip(monkeypatch, tmp_path):
    files = recorded("hgx-b200")
    monkeypatch.setattr("autopar.cli.topology.probe_host", lambda: dict(files))
    r = runner.invoke(app, ["topology", "--save", str(tmp_path / "rec"), "--json"])
    assert r.exit_code == 0, r.output
    again = runner.invoke(app, ["topology", "--from", str(tmp_path / "rec"), "--json"])
    assert json.loads(again.stdout)["cluster"] == json.loads(r.stdout)["cluster"]


def test_sysfs_reader(tmp_path):
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (port / "state").write_text("4: ACTIVE\n")
    text = sysfs_infiniband(tmp_path)
    assert text == "mlx5_0 1 rate=400 Gb/sec (4X NDR) link_layer=InfiniBand state=4: ACTIVE\n"
    from autopar.catalog.topology import parse_sysfs_ib

    (nic,) = parse_sysfs_ib(text)
    assert (nic.rate_gbps, nic.link_layer, nic.active) == (400.0, "InfiniBand", True)


def _json(args: list[str]) -> dict:
    """The command's JSON document without its wall-clock time (the one field two runs never share)."""
    r = runner.invoke(app, [*args, "--json", "--no-calibration"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    doc.pop("wall_s", None)
    return doc


def test_estimate_detect_equals_explicit_flags():
    det = _json(["estimate", "--cluster", f"detect@{FIX / 'hgx-h100'}:4"])
    flags = _json(
        ["estimate", "--gpu", "H100-SXM", "--gpus", "32", "--gpus-per-node", "8", "--nvlink-domain", "8"]
    )
    assert det == flags


def test_detect_count_must_be_whole_hosts():
    for bad, msg in (("0", "must be at least 1 host"), ("x", "hgx-h100:x' does not exist")):
        r = runner.invoke(app, ["estimate", "--cluster", f"detect@{FIX / 'hgx-h100'}:{bad}"])
        assert r.exit_code == 2 and msg in r.output and r.output.count("\n") == 1, r.output


def test_estimate_detect_from_environment_variable(monkeypatch):
    monkeypatch.setenv("AUTOPAR_TOPOLOGY_DIR", str(FIX / "gb200-nvl72-tray"))
    det = _json(["estimate", "--cluster", "detect:18", "--model", "llama-3.1-8b", "--global-batch", "576"])
    flags = _json(
        [
            "estimate",
            "--model",
            "llama-3.1-8b",
            "--global-batch",
            "576",
            "--gpu",
            "GB200",
            "--gpus",
            "72",
            "--gpus-per-node",
            "4",
            "--nvlink-domain",
            "72",
        ]
    )
    assert det == flags and det["inputs"]["nvlink_domain"] == 72


def test_detect_sets_internode_from_nics(tmp_path):
    # Recorded B200 host + an ibstat built here (2 x 200 Gb/s RoCE ports, recorded in roce-cx7):
    # 400 Gb/s / 8 GPUs / 8 bits = 6.25 GB/s per GPU.
    for name, text in {**recorded("hgx-b200"), **recorded("roce-cx7")}.items():
        (tmp_path / name).write_text(text)
    det = _json(["estimate", "--cluster", f"detect@{tmp_path}:2", "--model", "llama-3.1-8b"])
    flags = _json(
        [
            "estimate",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "B200",
            "--gpus",
            "16",
            "--gpus-per-node",
            "8",
            "--nvlink-domain",
            "8",
            "--internode-gbps",
            "6.25",
        ]
    )
    assert det == flags


def test_optimize_and_whatif_take_detect():
    common = ["--model", "Llama-3.1-8B", "--budget", "2", "--seed", "1"]
    det = _json(["optimize", *common, "--cluster", f"detect@{FIX / 'hgx-b200'}:2"])
    flags = _json(
        ["optimize", *common, "--gpu", "B200", "--gpus", "16", "--gpus-per-node", "8", "--nvlink-domain", "8"]
    )
    assert det == flags
    w = ["whatif", "-m", "Llama-3.1-8B", "-t", "1T", "--budget", "2", "--seed", "1"]
    wdet = _json([*w, "--cluster", f"detect@{FIX / 'hgx-b200'}:2"])
    wflags = _json([*w, "-o", "B200:16", "--gpus-per-node", "8", "--nvlink-domain", "8"])
    assert wdet == wflags
