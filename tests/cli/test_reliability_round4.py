"""Issue 45 (reliability round 4): each cause with its reproducer, as a one-line error and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.cli import app
from autopar.errors import AutoparError
from autopar.inputs import parse_yaml

runner = CliRunner()


def _one_line_error(res, *words: str) -> None:
    assert res.exit_code != 0, res.output
    text = res.output.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for w in words:
        assert w in text, text


def test_a_yaml_integer_of_5000_digits_is_one_line():
    with pytest.raises(AutoparError, match="more than 4300 digits"):
        parse_yaml("x: " + "9" * 5000 + "\n", "model file 'm.yaml'")


def test_model_and_prices_files_with_huge_integers(tmp_path):
    big = "9" * 5000
    model = tmp_path / "m.yaml"
    model.write_text(f"layers: {big}\n")
    _one_line_error(runner.invoke(app, ["estimate", "--model", str(model)]), "digits")
    prices = tmp_path / "p.yaml"
    prices.write_text(f"H100-SXM:\n  on_demand: {big}\n")
    _one_line_error(runner.invoke(app, ["optimize", "--prices", str(prices), "--budget", "10"]), "digits")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("H100-SXM:\n  on_demand: 5e-324\n", ("5e-324", ">= 0.001")),
        (
            "prices:\n  - {gpu: H100-SXM, tier: on_demand, usd_per_gpu_hour: 3}\n"
            "  - {gpu: H100-SXM, tier: on_demand, usd_per_gpu_hour: 4}\n",
            ("row 2", "a second price for H100-SXM on_demand"),
        ),
        ("H100-SXM:\n  on_demand: 3\n  on-demand: 4\n", ("tier on_demand given twice",)),
        ("H100-SXM:\n  on_demand: 3\nH100:\n  spot: 2\n", ("priced twice",)),
        ("H999X:\n  on_demand: 3\n", ("unknown GPU 'H999X'",)),
    ],
)
def test_price_bounds_duplicates_and_unknown_gpus(tmp_path, text, words):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    _one_line_error(runner.invoke(app, ["optimize", "--prices", str(p), "--budget", "10"]), *words)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["optimize", "--timeout", "nan", "--budget", "10"], ("--timeout=nan",)),
        (["optimize", "--max-cost", "inf", "--budget", "10"], ("--max-cost=inf",)),
        (["estimate", "--internode-gbps", "0"], ("--internode-gbps=0",)),
        (["estimate", "--internode-gbps", "nan"], ("--internode-gbps=nan",)),
    ],
)
def test_numbers_that_used_to_mean_unset(args, words):
    _one_line_error(runner.invoke(app, args), *words)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_ingest_of_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    cmd = [
        sys.executable,
        "-m",
        "autopar",
        "calibrate",
        "ingest",
        str(fifo),
        "--store",
        str(tmp_path / "s.db"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "not a regular file" in res.stderr + res.stdout


def test_an_impossible_throughput_is_named_with_a_readable_mfu(tmp_path):
    import csv

    from autopar.data import published_runs_path

    with Path(published_runs_path()).open() as fh:
        rows = list(csv.DictReader(fh))
    row = {**next(r for r in rows if r["id"] == "TT24-T1-1"), "id": "bad", "source": "mine"}
    row["measured_tokens_per_s_per_gpu"] = "1e308"
    f = tmp_path / "bad.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    res = runner.invoke(app, ["calibrate", "ingest", str(f), "--store", str(tmp_path / "s.db")])
    assert res.exit_code != 0 and "implies MFU" in res.output and "e+305%" in res.output


def test_an_implausible_stored_run_is_listed_and_removed(tmp_path):
    """A store written by an older autopar may hold a run today's ingest refuses (1e9 tokens/s per GPU):
    `calibrate list --implausible` names it with the reason, `calibrate remove` deletes it (all or nothing)."""
    import csv
    import json

    from autopar.calibration.records.record import fingerprint
    from autopar.calibration.store.run_store import RunStore
    from autopar.data import published_runs_path

    with Path(published_runs_path()).open() as fh:
        good = next(r for r in csv.DictReader(fh) if r["id"] == "TT24-T1-1")
    bad = {**good, "id": "old-bad", "measured_tokens_per_s_per_gpu": 1e9}
    good = {**good, "id": "old-good"}
    db = tmp_path / "s.db"
    RunStore(db).add([(fingerprint(r), r, "old.csv") for r in (good, bad)])
    res = runner.invoke(app, ["calibrate", "list", "--implausible", "--json", "--store", str(db)])
    doc = json.loads(res.stdout)
    assert [r["id"] for r in doc["runs"]] == ["old-bad"] and "implies MFU" in doc["runs"][0]["_problem"]
    _one_line_error(
        runner.invoke(app, ["calibrate", "remove", "old-bad", "nope", "--store", str(db)]), "'nope'"
    )
    assert RunStore(db).count() == 2  # one unknown id: nothing removed
    res = runner.invoke(app, ["calibrate", "remove", "old-bad", "--store", str(db), "--json"])
    assert json.loads(res.stdout)["removed"] == ["old-bad"] and RunStore(db).count() == 1


_READERS = {
    "json": lambda t: __import__("autopar.inputs", fromlist=["parse_json"]).parse_json(t, "f"),
    "csv": lambda t: __import__("autopar.inputs", fromlist=["csv_rows"]).csv_rows(t, "f"),
    "yaml": lambda t: parse_yaml(t, "f"),
}


def _log_readers() -> dict:
    from autopar.calibration.ingest import log_config, log_steps

    return {
        "megatron-log": log_steps.parse_megatron_log,
        "torchtitan-log": log_steps.parse_torchtitan_log,
        "megatron-args": log_config.megatron_config,
        "torchtitan-lines": log_config.torchtitan_config,
        "sniff": log_steps.sniff_log_format,
    }


_EXTREMES = {
    "blanks then text": " " * 262_144 + "x",
    "a 256 KiB line": "a" * 262_144,
    "a 100,000-digit number": "9" * 100_000,
    "a keyed 100,000-digit number": "x: " + "9" * 100_000,
    "a JSON 100,000-digit number": '{"x": ' + "9" * 100_000 + "}",
    "a step line padded with blanks": " iteration 1/ 10 | "
    + " " * 262_144
    + "elapsed time per iteration (ms): 1.0",
    "an argument line of dots": "---- arguments ----\n  x "
    + "." * 262_144
    + " 1\n---- end of arguments ----",
    "newlines": "\n" * 262_144,
}


@pytest.mark.parametrize("case", sorted(_EXTREMES))
def test_every_text_reader_returns_or_says_one_line_within_a_bounded_time(case):
    """Each reader of user text (JSON, CSV, YAML, the Megatron and torchtitan log parsers) returns a result or
    one line of error, in time linear in the input (here: under 5 s for 256 KiB)."""
    import time

    text = _EXTREMES[case]
    for name, read in {**_READERS, **_log_readers()}.items():
        t0 = time.perf_counter()
        try:
            read(text)
        except AutoparError as e:
            assert "\n" not in str(e), (name, case)
        assert time.perf_counter() - t0 < 5.0, (name, case)


def test_a_megatron_iteration_with_an_infinite_nan_count_is_skipped_not_a_traceback():
    from autopar.calibration.ingest.log_steps import parse_megatron_log

    line = (
        " [2024-01-01 00:00:00] iteration        5/      10 | consumed samples:          40 | elapsed time per "
        "iteration (ms): 1000.0 | learning rate: 1.0E-04 | global batch size:     8 | loss: 1.0E+01 | "
        "number of skipped iterations:   0 | number of nan iterations: {} |"
    )
    assert parse_megatron_log(line.format("inf")).steps == []  # a NaN step is no timing sample
    assert parse_megatron_log(line.format("0")).steps == [5]
    with pytest.raises(AutoparError, match="is not a number"):
        parse_megatron_log(line.format("many"))
