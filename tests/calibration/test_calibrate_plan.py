"""`autopar calibrate plan`: the Gaussian model's algebra by hand, and the README's worked example end to end
(plan -> the simulated runs' logs -> ingest -> plan again: the pick's band narrows by the derived amount)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.calibration.planning.plan import (
    NOISE_SD,
    SHORT_RUN_MEASURED,
    SHORT_RUN_WARMUP,
    Z80,
    Prior,
    condition,
    covariance,
    decision_uncertainty,
    posterior,
    prior_from_model,
    propose,
)
from autopar.cli import app

PLAN = Path(__file__).parents[1] / "fixtures" / "plan"
sys.path.insert(0, str(PLAN))
import simulate  # noqa: E402  (the worked example's simulated cluster)

runner = CliRunner()
CANDIDATES = (
    "TP1 DP16/Z1 mb1",
    "TP2+SP DP8/Z1 mb1",
    "TP4+SP DP4/Z1 mb1",
    "TP1 PP2 DP8/Z1 mb1",
    "TP2+SP PP2 DP4/Z1 mb1",
)
PROBLEM = ["--model", "Llama-3.1-8B", "--gpus", "16", "--seq-len", "8192", "--global-batch", "128"]


def _plan(*extra: str) -> dict:
    args = [
        "calibrate",
        "plan",
        *PROBLEM,
        *(a for c in CANDIDATES for a in ("--strategy", c)),
        *extra,
        "--json",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_prior_splits_the_band_into_offset_and_configuration_parts():
    p = prior_from_model((-0.2, 0.2), [0.1, -0.1, 0.0])
    total = 0.2 / Z80  # an 80% band of +-0.2 is +-Z80 sd
    assert p.offset_sd == pytest.approx(0.1)  # sample sd of 0.1, -0.1, 0
    assert p.config_sd == pytest.approx(math.sqrt(total**2 - 0.01))
    assert prior_from_model((-0.2, 0.2), [0.5, -0.5]).offset_sd == pytest.approx(total)  # capped at the total


def test_one_run_at_a_candidate_gives_the_textbook_posterior_variance():
    prior = Prior(offset_sd=0.1, config_sd=0.08)
    z = np.array([[0.0, 0.0], [3.0, 0.0]])
    mean, cov = posterior(z, z[:1], np.array([-0.2]), prior)
    v = 0.1**2 + 0.08**2  # prior variance at a point
    assert cov[0, 0] == pytest.approx(v * NOISE_SD**2 / (v + NOISE_SD**2))
    assert mean[0] == pytest.approx(-0.2 * v / (v + NOISE_SD**2))
    k01 = 0.1**2 + 0.08**2 * math.exp(-9 / (2 * 2.0**2))  # the other candidate, 3 feature-sd away
    assert cov[1, 1] == pytest.approx(v - k01**2 / (v + NOISE_SD**2))


def test_a_common_offset_cancels_in_the_decision_between_candidates():
    # only the offset is uncertain: measuring anywhere fixes it for everyone, and no pair is uncertain
    prior = Prior(offset_sd=0.1, config_sd=1e-6)
    z = np.array([[0.0], [1.0]])
    cov = covariance(z, z, prior)
    w = np.array([0.0, 1.0])
    assert decision_uncertainty(cov, 0, w) == pytest.approx(0.01, rel=1e-6)  # Var(y_p) only
    after = condition(cov, [1], prior.noise_sd)  # measure the other candidate
    assert decision_uncertainty(after, 0, w) == pytest.approx(
        0.01 * NOISE_SD**2 / (0.01 + NOISE_SD**2), rel=1e-3
    )


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=2, max_size=6), st.integers(0, 5))
def test_a_run_never_widens_any_band(xs, j):
    prior = Prior(offset_sd=0.1, config_sd=0.1)
    z = np.array(xs)[:, None]
    cov = covariance(z, z, prior)
    after = condition(cov, [j % len(xs)], prior.noise_sd)
    assert np.all(np.diag(after) <= np.diag(cov) + 1e-12)


def test_propose_measures_the_pick_then_its_closest_rival():
    prior = Prior(offset_sd=0.05, config_sd=0.1)
    z = np.array([[0.0], [10.0], [20.0]])  # unrelated configurations
    log_pred = np.array([1.0, 0.99, 0.0])  # pick 0, rival 1 overlaps it, 2 is far below
    props = propose(log_pred, np.zeros(3), covariance(z, z, prior), prior, 3)
    assert [p.index for p in props][:2] == [0, 1]
    assert 2 not in [p.index for p in props]  # far below the pick: no overlap, not worth a run


def test_simulated_logs_are_what_the_simulator_writes():
    for n, label in enumerate(simulate.RUNS, 1):
        assert (PLAN / f"run{n}.log").read_text() == simulate.log_text(simulate.record(label))


def test_worked_example_plan_ingest_plan(tmp_path):
    before = _plan()
    assert [r["strategy"] for r in before["runs"]] == list(simulate.RUNS)  # the runs the fixtures simulate
    assert before["pick"] == "TP1 DP16/Z1 mb1" and all(
        r["steps"] == SHORT_RUN_WARMUP + SHORT_RUN_MEASURED for r in before["runs"]
    )
    db = tmp_path / "runs.db"
    logs = [str(PLAN / f"run{n}.log") for n in range(1, len(simulate.RUNS) + 1)]
    r = runner.invoke(
        app,
        ["calibrate", "ingest", *logs, "--store", str(db), "--model", "Llama-3.1-8B", "--gpu", "H100-SXM"]
        + ["--gpus-per-node", "8", "--source", "mycluster", "--warmup", str(SHORT_RUN_WARMUP)],
    )
    assert r.exit_code == 0, r.output
    after = _plan("--store", str(db), "--group", "mycluster")
    pick_before = next(c for c in before["candidates"] if c["strategy"] == before["pick"])
    pick_after = next(c for c in after["candidates"] if c["strategy"] == after["pick"])
    assert after["pick"] == before["pick"] and after["own_runs"] == len(simulate.RUNS)
    # derived: the Gaussian model's posterior variance does not depend on what the runs measure, so the
    # band after ingesting the proposed runs is the one the plan announced for them ...
    assert pick_after["band_pct"] == pytest.approx(before["runs"][-1]["pick_band_pct_after"], abs=0.05)
    # ... and, since the pick itself was measured, at most the one-run textbook value: prior variance
    # v = (band / Z80)^2 shrinks to v n^2 / (v + n^2) with n = NOISE_SD
    v = (math.log1p(pick_before["band_pct"] / 100) / Z80) ** 2
    bound = 100 * math.expm1(Z80 * math.sqrt(v * NOISE_SD**2 / (v + NOISE_SD**2)))
    assert pick_after["band_pct"] <= bound + 1e-9 and pick_before["band_pct"] / pick_after["band_pct"] > 5
    # the center moved to the simulated truth (analytical x exp(-0.15 - 0.5 share_comm)), over the median
    # of the logs' +-1% step-time jitter on the measured steps 11..30
    jitter = float(np.median([1 + 0.01 * math.sin(i) for i in range(11, 31)]))
    truth = 128 * 8192 / (simulate.true_step_s(simulate.record(before["pick"])) * jitter * 16)
    assert pick_after["tokens_per_s_per_gpu"] == pytest.approx(truth, rel=0.01)


@pytest.mark.skipif(not os.environ.get("AUTOPAR_RUN_SLOW"), reason="calibrate fit on the shipped runs: ~15 s")
def test_worked_example_refit_keeps_the_band_narrow(tmp_path):
    db = tmp_path / "runs.db"
    logs = [str(PLAN / f"run{n}.log") for n in range(1, len(simulate.RUNS) + 1)]
    runner.invoke(
        app,
        ["calibrate", "ingest", *logs, "--store", str(db), "--model", "Llama-3.1-8B"]
        + ["--gpu", "H100-SXM", "--gpus-per-node", "8", "--source", "mycluster", "--warmup", "10"],
    )
    model = tmp_path / "my.json"
    r = runner.invoke(
        app, ["calibrate", "fit", "--store", str(db), "--group", "mycluster", "--out", str(model)]
    )
    assert r.exit_code == 0, r.output
    before = _plan()
    after = _plan("--store", str(db), "--group", "mycluster", "--calibration", str(model))
    pb = next(c for c in before["candidates"] if c["strategy"] == before["pick"])["band_pct"]
    pa = next(c for c in after["candidates"] if c["strategy"] == after["pick"])["band_pct"]
    assert pa < pb / 5


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--runs", "0"], "--runs=0: must be >= 1"),
        (["--store", "x.db"], "--store has no effect without --group"),
        (["--strategy", "TP3 DP5"], "--strategy 'TP3 DP5'"),
    ],
)
def test_plan_errors_are_one_line(extra, needle):
    args = ["calibrate", "plan", *PROBLEM, "--strategy", "TP1 DP16/Z1 mb1", *extra]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and needle in r.output and r.output.count("\n") == 1, r.output


def test_group_without_runs_is_an_error(tmp_path):
    db = tmp_path / "empty.db"
    r = runner.invoke(
        app,
        [
            "calibrate",
            "plan",
            *PROBLEM,
            "--strategy",
            "TP1 DP16/Z1 mb1",
            "--store",
            str(db),
            "--group",
            "nope",
        ],
    )
    assert r.exit_code == 2 and "--group 'nope': the run store has no measured runs" in r.output
