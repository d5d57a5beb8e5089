"""`autopar optimize` command line: JSON document, tables, exit codes, hardware dimensions, --out wiring."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import autopar.reports
from autopar.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["optimize", *args])


def test_json_default_problem():
    r = run("--budget", "60", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"inputs", "space_size", "trials", "pareto", "recommended"} <= set(d)
    assert d["inputs"]["model"] == "Llama-3.1-70B" and d["inputs"]["gpus"] == [64]
    assert d["inputs"]["seq_len"] == 8192 and d["inputs"]["global_batch"] == 512
    # the default sampler sweeps this 92,700-point space exactly (search/hybrid.py): every point estimated
    assert d["space_size"] > 1000 and d["trials"]["evaluated"] == d["space_size"]
    assert 0 < d["trials"]["feasible"] <= d["space_size"] and d["inputs"]["sampler"] == "auto"
    assert d["pareto"] and {
        "tp",
        "pp",
        "dp",
        "throughput",
        "headroom",
        "cost",
        "mem_gib",
        "bottleneck",
    } <= set(d["pareto"][0])
    roles = [x["role"] for x in d["recommended"]]
    # free memory is a constraint by default (issue 46), and one fixed cluster has no knee
    assert roles == ["fastest", "cheapest"]
    assert all(len(x["why"]) > 100 for x in d["recommended"])
    assert any(n.startswith("cost collapses") for n in d["notes"])


def test_tables_and_hardware_dimension():
    r = run(
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "H100-SXM,H200",
        "--gpus",
        "8..16",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--budget",
        "80",
        "--objectives",
        "throughput,cost",
        "--top",
        "5",
    )
    assert r.exit_code == 0, r.output
    assert "Pareto set" in r.stdout and "hardware" in r.stdout
    assert "fastest" in r.stdout and "cheapest" in r.stdout and "balanced" in r.stdout
    assert "cost collapses" not in r.stdout


def test_min_headroom_constraint_in_json():
    r = run(
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--budget",
        "60",
        "--min-headroom",
        "30GiB",
        "--json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["inputs"]["min_headroom_gib"] == 30.0
    assert all(p["headroom"] >= 30.0 for p in d["pareto"])


def test_nothing_fits_exits_1():
    r = run("--model", "Llama-3.1-405B", "--gpus", "8", "--global-batch", "64", "--sampler", "exhaustive")
    assert r.exit_code == 1
    assert "nothing fits in memory: the smallest need found is" in r.output
    assert "more GPUs" in r.output


@pytest.mark.parametrize(
    "args, field",
    [
        (("--objectives", "throughput"), "objectives"),
        (("--model", "llama-9000"), "model"),
        (("--sampler", "random"), "sampler"),
        (("--min-headroom", "lots"), "min-headroom"),
        (("--gpus", "12"), "gpus"),
    ],
)
def test_bad_input_exits_2(args, field):
    r = run(*args, "--budget", "5")
    assert r.exit_code == 2
    assert field in r.output and "Traceback" not in r.output


def test_out_calls_the_report_writer(tmp_path, monkeypatch):
    seen = {}

    def fake_writer(result, path, *, plotlyjs="inline"):
        seen["result"] = result
        p = tmp_path / "r.html"
        p.write_text("<html></html>")
        return p

    monkeypatch.setattr(autopar.reports, "write_search_report", fake_writer, raising=False)
    r = run(
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--budget",
        "30",
        "--out",
        str(tmp_path / "r.html"),
    )
    assert r.exit_code == 0, r.output
    assert "report:" in r.stdout and (tmp_path / "r.html").exists()
    assert len(seen["result"].pareto) > 0


def test_a_point_with_several_roles_is_printed_once():
    # One fixed cluster: cost is price x GPUs / throughput, so the fastest point is the cheapest. The text
    # output names both roles on one header and prints the point's why once (plus the cheapest role's reason).
    from typer.testing import CliRunner

    from autopar.cli import app

    res = CliRunner().invoke(
        app, ["optimize", "--model", "llama-3-8b", "--gpus", "8", "--budget", "30", "--explain"]
    )
    assert res.exit_code == 0, res.output
    out = res.stdout
    flat = " ".join(out.split())  # paragraphs wrap at a fixed width, possibly inside the phrases counted
    assert "fastest = cheapest: " in out
    assert flat.count("Fastest: best throughput") == 1 and flat.count("Cheapest: best cost") == 1
    assert "\ncheapest: " not in out
