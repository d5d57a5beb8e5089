"""`autopar whatif` and `autopar prices` on the command line (real optimizer, small budgets)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autopar.cli import app

runner = CliRunner()
BASE = [
    "whatif",
    "--model",
    "llama-3-8b",
    "--tokens",
    "10B",
    "--seq-len",
    "4096",
    "--global-batch",
    "256",
    "--budget",
    "20",
]


def test_json_shape():
    res = runner.invoke(
        app,
        [
            *BASE,
            "--option",
            "H100-SXM:8",
            "--option",
            "B200:8",
            "--deadline",
            "30d",
            "--goodput",
            "0.9",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["tokens"] == 1e10 and d["goodput"] == 0.9 and d["deadline_s"] == 30 * 86400
    assert [o["label"] for o in d["options"]] == ["H100-SXM:8", "B200:8"]
    for o in d["options"]:
        for key in (
            "gpu",
            "count",
            "strategy",
            "tokens_per_s",
            "mfu",
            "time_to_train_s",
            "total_cost_usd",
            "usd_per_mtoken",
            "headroom_gib",
            "meets_deadline",
            "rank",
        ):
            assert key in o
        # money follows from speed and price: cost = $/h * time / 3600
        assert o["total_cost_usd"] == pytest.approx(
            o["count"] * o["usd_per_gpu_hour"] * o["time_to_train_s"] / 3600, rel=1e-9
        )
    assert sorted(o["rank"] for o in d["options"]) == [1, 2]
    assert isinstance(d["sensitivity"], list) and d["message"]


def test_table_output_and_impossible_deadline():
    res = runner.invoke(
        app,
        [
            *BASE,
            "--tokens",
            "1T",
            "--option",
            "H100-SXM:8",
            "--option",
            "A100-80GB:8",
            "--deadline",
            "1d",
            "--no-sensitivity",
        ],
    )
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "No option meets the 24.0 h deadline: the fastest is H100-SXM:8 at" in out
    assert "goodput 1" in out and "H100-SXM:8" in out and "A100-80GB:8" in out


def test_count_range_expands_to_doubling_options():
    res = runner.invoke(app, [*BASE, "--option", "H100-SXM:8..32", "--json", "--no-sensitivity"])
    assert res.exit_code == 0, res.output
    assert [o["count"] for o in json.loads(res.stdout)["options"]] == [8, 16, 32]


def test_user_errors_exit_2_with_one_line():
    cases = [
        (["--option", "H100-SXM:8", "--tokens", "lots"], "tokens='lots'"),
        (["--option", "H100-SXM:8", "--deadline", "30"], "deadline='30'"),
        (["--option", "H100-SMX:8"], "unknown GPU 'H100-SMX'"),
        (["--option", "H100-SXM:8", "--tier", "weekly"], "tier='weekly'"),
        (["--option", "H100-SXM:8", "--goodput", "1.5"], "goodput=1.5"),
        (["--option", "H100-SXM:8", "--max-spend", "lots"], "max-spend='lots'"),
        (["--option", "H100-SXM:8", "--min-headroom", "4 parsecs"], "min-headroom"),
        (["--option", "H100-SXM:8", "--prices", "/nonexistent/p.yaml"], "no such file"),
    ]
    for extra, msg in cases:
        res = runner.invoke(app, [*BASE, *extra])
        assert res.exit_code == 2, (extra, res.output)
        assert msg in res.output and "Traceback" not in res.output


def test_prices_file_is_used(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("gpu,tier,usd_per_gpu_hour,source\nH100-SXM,reserved,1.50,our contract\n")
    res = runner.invoke(
        app,
        [
            *BASE,
            "--option",
            "H100-SXM:8",
            "--tier",
            "reserved",
            "--prices",
            str(p),
            "--json",
            "--no-sensitivity",
        ],
    )
    assert res.exit_code == 0, res.output
    o = json.loads(res.stdout)["options"][0]
    assert o["usd_per_gpu_hour"] == 1.5 and o["price_source"].startswith("our contract")


def test_prices_command():
    res = runner.invoke(app, ["prices", "--gpu", "h200", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert {r["tier"] for r in rows} == {"on_demand", "reserved", "spot"}
    assert all(r["gpu"] == "H200" and r["quotes"] for r in rows)
    res = runner.invoke(app, ["prices", "--gpu", "B200", "--quotes"])
    assert res.exit_code == 0 and "Spheron" in res.stdout


def test_spending_cap_column_and_flag():
    res = runner.invoke(
        app,
        [
            *BASE,
            "--option",
            "H100-SXM:8",
            "--option",
            "A100-80GB:8",
            "--max-spend",
            "100",
            "--no-sensitivity",
        ],
    )
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert (
        "spending cap $100" in out
        and "No option fits the $100 spending cap: the cheapest is H100-SXM:8" in out
    )


def test_html_labels_a_borrowed_price(tmp_path):
    # B300 has no price in the built-in book; the what-if prices it with B200's (a price-book alias). The
    # HTML must say so wherever the price is shown (options table and best-option card), as the CLI does.
    out = tmp_path / "w.html"
    res = runner.invoke(app, [*BASE, "--option", "B300:8", "--option", "H100-SXM:8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "(B200&#x27;s)" in page or "(B200's)" in page  # the options table's price cell
    assert "H100-SXM" in page and page.count("B200") >= 1


def test_whatif_cluster_shorthand_keeps_its_transport():
    # An AWS shorthand runs over EFA (catalog systems), unless --transport says otherwise; a bad value is a
    # one-line error with the allowed values.
    from autopar.cli.whatif import _hardware_options
    from autopar.errors import SpecError

    assert _hardware_options(None, "p5:8", None, None, None, None).transport == "efa"
    assert _hardware_options(None, "p5:8", None, None, None, "infiniband").transport == "infiniband"
    assert _hardware_options(["H100-SXM:64"], None, None, None, None, "roce").transport == "roce"
    assert _hardware_options(["H100-SXM:64"], None, None, None, None, None).transport is None
    with pytest.raises(SpecError, match="transport='ib': expected one of infiniband, roce, efa"):
        _hardware_options(["H100-SXM:64"], None, None, None, None, "ib")
