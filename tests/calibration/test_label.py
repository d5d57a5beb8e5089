"""A custom calibration is named for what it is (issue 27: a user's model still printed "calibrated on
published runs"): the terminal, the JSON and the HTML report of optimize, estimate and whatif name the
model actually applied, its sources and its number of runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from autopar.calibration.apply.model import provenance
from autopar.data import published_runs_path

runner = CliRunner()
SOURCE = "narayanan2021"  # 22 of the shipped published runs (Megatron-LM, Narayanan et al. 2021)
LABEL = "TP8+SP PP4 DP2/Z1 mb1"


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> tuple[Path, int]:
    """A model fitted on one source's runs only, saved as team.json; and its number of runs."""
    d = tmp_path_factory.mktemp("cal")
    runs = pd.read_csv(published_runs_path())
    runs[runs["source"] == SOURCE].to_csv(d / "runs.csv", index=False)
    r = _invoke(
        ["calibrate", "fit", "--out", str(d / "team.json"), "--no-public", "--data", str(d / "runs.csv")], d
    )
    assert r.exit_code == 0, r.output
    return d / "team.json", int((runs["source"] == SOURCE).sum())


def _invoke(args: list[str], home: Path):
    from autopar.cli import app

    return runner.invoke(app, args, env={"AUTOPAR_HOME": str(home / "home"), "COLUMNS": "400"})


def test_provenance_by_hand():
    assert provenance("team", 22, [SOURCE]) == f"calibration 'team' (22 runs from 1 source: {SOURCE})"
    many = [f"s{i}" for i in range(8)]
    assert (
        provenance("x", 80, many)
        == "calibration 'x' (80 runs from 8 sources: s0, s1, s2, s3, s4, s5, +2 more)"
    )
    assert provenance("old", None, None) == "calibration 'old'"  # a stored study from before these fields


def test_optimize_names_the_custom_model_everywhere(team, tmp_path: Path):
    path, n = team
    named = f"calibration 'team' ({n} runs from 1 source: {SOURCE})"
    base = ["optimize", "--budget", "20", "--calibration", str(path)]
    out = tmp_path / "r.html"
    r = _invoke([*base, "--out", str(out), "--plotly", "cdn"], tmp_path)
    assert r.exit_code == 0, r.output
    assert f"tokens/s corrected by {named}" in r.stdout and "published runs" not in r.stdout
    page = out.read_text()
    assert named.replace("'", "&#x27;") in page and "published runs" not in page
    doc = json.loads(_invoke([*base, "--json"], tmp_path).stdout)["calibration"]
    assert (doc["name"], doc["n_runs"], doc["sources"]) == ("team", n, [SOURCE])
    assert doc["description"].startswith(named)


def test_estimate_and_whatif_name_the_custom_model(team, tmp_path: Path):
    path, n = team
    named = f"calibration 'team' ({n} runs from 1 source: {SOURCE})"
    est = ["estimate", "--strategy", LABEL, "--calibration", str(path)]
    r = _invoke(est, tmp_path)
    assert r.exit_code == 0 and named in r.stdout and "published runs" not in r.stdout
    doc = json.loads(_invoke([*est, "--json"], tmp_path).stdout)
    assert (doc["calibration"]["name"], doc["calibration"]["n_runs"], doc["calibration"]["sources"]) == (
        "team",
        n,
        [SOURCE],
    )
    assert "by calibration 'team'" in " ".join(doc["notes"])
    w = ["whatif", "--option", "H100-SXM:64", "--tokens", "1T", "--budget", "10", "--no-sensitivity"]
    notes = json.loads(_invoke([*w, "--calibration", str(path), "--json"], tmp_path).stdout)["notes"]
    assert any(f"corrected by {named}" in x for x in notes)


def test_default_model_is_named_the_published_runs(tmp_path: Path):
    doc = json.loads(_invoke(["estimate", "--strategy", LABEL, "--json"], tmp_path).stdout)["calibration"]
    assert doc["name"] == "published runs (default)" and doc["n_runs"] == len(
        pd.read_csv(published_runs_path())
    )
