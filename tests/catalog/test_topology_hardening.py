"""Recorded-topology parsing is linear and bounded (issue 45): a long run of blanks or a 1 MiB line returns
at once, huge digit runs and impossible GPU counts or memory sizes are one-line DataErrors, and
`topology --from DIR` reads only regular files inside DIR."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.catalog.topology import (
    MAX_GPUS_PER_HOST,
    MAX_LINE_CHARS,
    RECORDED_FILES,
    gpu_list,
    host_topology,
    parse_fabric,
    parse_ibstat,
    parse_nvidia_topo,
    parse_rocm_topo,
    parse_sysfs_ib,
)
from autopar.cli import app
from autopar.cli.topology import parse_detect, read_recorded
from autopar.errors import DataError, SpecError

runner = CliRunner()
QUERY = {"nvidia-smi-query.csv": "0, NVIDIA B200, 183359\n"}
MIB_LINE = 2**20


def _timed(call: Callable[[], object], limit_s: float = 1.0) -> str:
    """Run `call`; it must return or raise a one-line DataError within limit_s. The outcome, for asserts."""
    start = time.perf_counter()
    try:
        call()
        outcome = "ok"
    except DataError as e:
        assert "\n" not in str(e)
        outcome = str(e)
    assert time.perf_counter() - start < limit_s, outcome
    return outcome


# The reproducers of issue 45: a line holding a long run of blanks before other text.
BLANKS = " " * 120_000
REPRODUCERS = {
    "nvidia-smi-q.txt": "Product Name: x{gap}y\n",
    "env.txt": "GPU 0: x{gap}y\n",
    "rocm-smi.txt": "GPU[0] : Card series: x{gap}y\n",
    "nvidia-smi-topo.txt": "\tGPU0\nGPU0\tX\n  NIC0: a{gap}y\n",
    "ibstat.txt": "CA 'a'\n\tPort 1:\n\t\tRate: 4{gap}y\n",
    "sysfs-infiniband.txt": "a 1 rate=4{gap}y link_layer=IB state=4: ACTIVE\n",
    "nvidia-smi-query.csv": "0, x{gap}y, 1\n",
}


@pytest.mark.parametrize("name", sorted(REPRODUCERS))
@pytest.mark.parametrize("gap", [BLANKS, " " * MIB_LINE, "\n" * 120_000, "\t \n" * 100_000])
def test_long_blank_runs_return_within_a_second(name, gap):
    files = {**QUERY, name: REPRODUCERS[name].format(gap=gap)}
    outcome = _timed(lambda: host_topology(files))
    if len(gap) > MAX_LINE_CHARS and "\n" not in gap:
        assert f"{name} line" in outcome and f"longer than the {MAX_LINE_CHARS}" in outcome


def test_a_1_mib_line_is_an_error_naming_the_file_and_line():
    text = "GPU 0: NVIDIA B200\n" + "x" * MIB_LINE + "\n"
    with pytest.raises(DataError, match=r"^env\.txt line 2: 1048576 characters, longer than the 4096"):
        host_topology({"env.txt": text})


def test_fb_memory_header_before_many_newlines_is_linear():
    _timed(
        lambda: host_topology(
            {"nvidia-smi-q.txt": "Product Name : NVIDIA B200\nFB Memory Usage" + "\n" * 10**6}
        )
    )


# ---------------------------------------------------------------------------------------------- numbers


def test_rocm_vram_of_thousands_of_digits_is_one_line_error():
    text = (
        "GPU[0]\t\t: Card series: \t\tAMD Instinct MI300X\nGPU[0]\t\t: VRAM Total Memory (B): "
        + "9" * 4000
        + "\n"
    )
    with pytest.raises(
        DataError, match=r"rocm-smi\.txt line 2: GPU\[0\] VRAM Total Memory \(B\): a 4000-digit"
    ):
        host_topology({"rocm-smi.txt": text})
    with pytest.raises(DataError, match="rocm-smi.txt line 1: GPU index: a 4000-digit"):
        host_topology({"rocm-smi.txt": "GPU[" + "9" * 4000 + "] : Card series: MI300X\n"})


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"rocm-smi.txt": "GPU[0] : Card series: MI300X\nGPU[0] : VRAM Total Memory (B): 0\n"}, "(B): 0 is"),
        (
            {"rocm-smi.txt": "GPU[0] : Card series: MI300X\nGPU[0] : VRAM Total Memory (B): -5\n"},
            "(B): -5 is",
        ),
        (
            {"rocm-smi.txt": f"GPU[0] : Card series: MI300X\nGPU[0] : VRAM Total Memory (B): {17 * 2**40}\n"},
            "impossible for one GPU's memory",
        ),
        ({"nvidia-smi-query.csv": "0, NVIDIA B200, 0\n"}, "line 1: memory.total: 0 is impossible"),
        ({"nvidia-smi-query.csv": "0, NVIDIA B200, -1\n"}, "line 1: memory.total: -1 is impossible"),
        ({"nvidia-smi-query.csv": "0, NVIDIA B200, 1" + "0" * 40 + "\n"}, "memory.total: a 41-digit number"),
        (
            {"nvidia-smi-q.txt": "Product Name : NVIDIA B200\nFB Memory Usage\n  Total : 0 MiB\n"},
            "FB Memory Usage Total: 0 is impossible",
        ),
    ],
)
def test_impossible_memory_is_refused(files, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        host_topology(files)
    assert "\n" not in str(e.value)


def test_real_memory_sizes_still_read():
    rocm = "GPU[0] : Card series: AMD Instinct MI300X\nGPU[0] : VRAM Total Memory (B): 205822885888\n"
    assert gpu_list({"rocm-smi.txt": rocm})[0] == [("AMD Instinct MI300X", 196288)]
    assert gpu_list({"nvidia-smi-query.csv": "0, NVIDIA B200, [N/A]\n"})[0] == [("NVIDIA B200", None)]


@pytest.mark.parametrize(
    "files",
    [
        {
            "nvidia-smi-query.csv": "".join(
                f"{i}, NVIDIA B200, 183359\n" for i in range(MAX_GPUS_PER_HOST + 1)
            )
        },
        {"env.txt": "".join(f"GPU {','.join(['0'] * 1000)}: NVIDIA B200\n" for _ in range(1000))},
        {"nvidia-smi-q.txt": "Product Name : NVIDIA B200\n" * 1_000_000},
        {"rocm-smi.txt": "GPU[0] : Card series: MI300X\n" * (MAX_GPUS_PER_HOST + 1)},
    ],
)
def test_a_million_gpus_on_one_host_is_refused(files):
    outcome = _timed(lambda: host_topology(files), limit_s=5.0)
    assert f"more than {MAX_GPUS_PER_HOST} GPUs on one host" in outcome


def test_ib_port_and_rate_digits_are_bounded():
    ib = "CA 'a'\n\tPort " + "9" * 4000 + ":\n\t\tState: Active\n\t\tRate: 400\n"
    with pytest.raises(DataError, match="port: a 4000-digit number"):
        parse_ibstat(ib)
    with pytest.raises(DataError, match="rate: a 4000-digit number"):
        parse_ibstat("CA 'a'\n\tPort 1:\n\t\tRate: " + "4" * 4000 + "\n")
    with pytest.raises(DataError, match="sysfs-infiniband.txt line 1: port: a 4000-digit"):
        parse_sysfs_ib("a " + "1" * 4000 + " rate=400 link_layer=IB state=4: ACTIVE\n")


def test_detect_count_of_thousands_of_digits_is_a_spec_error():
    with pytest.raises(SpecError, match="COUNT has 5000 digits"):
        parse_detect("detect:" + "9" * 5000)
    assert parse_detect("detect@/" + "d" * 500) == ("/" + "d" * 500, 1)


# ---------------------------------------------------------------------------------------------- the folder


def test_link_out_of_the_folder_is_refused_without_echoing_it(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:TOPSECRET\n", encoding="utf-8")
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "nvidia-smi-query.csv").symlink_to(secret)
    r = runner.invoke(app, ["topology", "--from", str(rec)])
    assert r.exit_code == 2 and "Traceback" not in r.output and r.output.count("\n") == 1
    assert "nvidia-smi-query.csv" in r.output and "leading outside the folder" in r.output
    assert "TOPSECRET" not in r.output and "root:x" not in r.output
    r = runner.invoke(app, ["estimate", "--cluster", f"detect@{rec}", "--model", "llama-3-8b"])
    assert r.exit_code == 2 and "leading outside the folder" in r.output and "TOPSECRET" not in r.output


def test_link_inside_the_folder_is_read(tmp_path):
    (tmp_path / "q.csv").write_text("0, NVIDIA B200, 183359\n", encoding="utf-8")
    (tmp_path / "nvidia-smi-query.csv").symlink_to(tmp_path / "q.csv")
    assert read_recorded(tmp_path) == {"nvidia-smi-query.csv": "0, NVIDIA B200, 183359\n"}


def test_broken_link_is_one_line(tmp_path):
    (tmp_path / "env.txt").symlink_to(tmp_path / "missing")
    with pytest.raises(DataError, match="recorded env.txt in .* is a broken or looping link"):
        read_recorded(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "nvidia-smi-q.txt")  # opening it for reading would block with no writer
    start = time.perf_counter()
    r = runner.invoke(app, ["topology", "--from", str(tmp_path)])
    assert time.perf_counter() - start < 5
    assert r.exit_code == 2 and "nvidia-smi-q.txt" in r.output and "not a regular file" in r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output


def test_device_and_folder_are_refused(tmp_path):
    if os.path.exists("/dev/zero"):
        (tmp_path / "ibstat.txt").symlink_to("/dev/zero")
        with pytest.raises(DataError, match="ibstat.txt .* leading outside the folder"):
            read_recorded(tmp_path)
        (tmp_path / "ibstat.txt").unlink()
    (tmp_path / "env.txt").mkdir()
    with pytest.raises(DataError, match="env.txt .* not a regular file"):
        read_recorded(tmp_path)


def test_cli_long_line_is_one_line_error(tmp_path):
    (tmp_path / "env.txt").write_text("GPU 0: x" + " " * MIB_LINE + "y\n", encoding="utf-8")
    start = time.perf_counter()
    r = runner.invoke(app, ["topology", "--from", str(tmp_path)])
    assert time.perf_counter() - start < 2
    assert r.exit_code == 2 and "env.txt line 1:" in r.output and r.output.count("\n") == 1


# ---------------------------------------------------------------------------------------------- property


def _parsers() -> dict[str, Callable[[str], object]]:
    return {
        "query": lambda t: gpu_list({"nvidia-smi-query.csv": t}),
        "q": lambda t: gpu_list({"nvidia-smi-q.txt": t}),
        "rocm": lambda t: gpu_list({"rocm-smi.txt": t}),
        "env": lambda t: gpu_list({"env.txt": t}),
        "topo": lambda t: parse_nvidia_topo(t, "nvidia-smi-topo.txt"),
        "rocm_topo": parse_rocm_topo,
        "fabric": parse_fabric,
        "ibstat": parse_ibstat,
        "sysfs": parse_sysfs_ib,
        **{name: (lambda t, n=name: host_topology({**QUERY, n: t})) for name in RECORDED_FILES},
    }


PIECES = [
    "GPU0",
    "GPU[0] : ",
    "Card series: ",
    "VRAM Total Memory (B): ",
    "GPU 0,1: ",
    "Product Name : ",
    "FB Memory Usage\n",
    "Total : ",
    " MiB",
    "Fabric\n",
    "State : Completed\n",
    "CA 'a'\n",
    "\tPort 1:\n",
    "\t\tRate: ",
    "  NIC0: ",
    "a 1 rate=",
    " link_layer=",
    " state=",
    "NV18",
    "X",
    ", ",
    "\t",
    "\n",
    ":",
]
_BIG = st.sampled_from([" " * MIB_LINE, "9" * 100_000, " " * 120_000, "\n" * 100_000, "x" * MIB_LINE])
_LINE = st.one_of(
    st.sampled_from(PIECES),
    st.text(max_size=40),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    _BIG,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    parser=st.sampled_from(sorted(_parsers())),
    text=st.lists(_LINE, max_size=12).map("".join)
    | st.binary(max_size=2000).map(lambda b: b.decode("latin-1")),
)
def test_every_parser_returns_or_raises_data_error_quickly(parser, text):
    _timed(lambda: _parsers()[parser](text), limit_s=2.0)
