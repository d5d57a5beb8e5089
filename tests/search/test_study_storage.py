"""Stored studies are native Optuna: opened with plain `optuna.load_study` they show metric names,
per-trial user attrs, feasibility through Optuna's constraints, no made-up objective values and no
WAITING trials; `autopar study status/report` and `whatif --storage` read them back."""

from __future__ import annotations

import json
import time

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.errors import AutoparError
from autopar.search import optimize
from autopar.search.margin import band_margin
from autopar.search.storage import mask, open_storage
from autopar.specs import ClusterSpec, Workload
from autopar.units import GiB

L70 = get_model("Llama-3.1-70B")
H100x64 = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
WL = Workload(seq_len=8192, global_batch=512)
runner = CliRunner()


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_stored_study_is_native_optuna(tmp_path, kind):
    spec = str(tmp_path / "s.journal") if kind == "journal" else f"sqlite:///{tmp_path}/s.db"
    r = optimize(L70, H100x64, WL, budget=60, seed=0, storage=spec, study_name="n", min_headroom_gib=2.0)
    study = optuna.load_study(study_name="n", storage=open_storage(spec) if kind == "journal" else spec)
    # the objectives, then free memory as NSGA-II's helper objective on one hardware option (search/study.py)
    assert study.metric_names == ["throughput", "cost", "headroom"]
    states = [t.state for t in study.trials]
    assert set(states) <= {TrialState.COMPLETE, TrialState.PRUNED}  # nothing WAITING, RUNNING or FAIL
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 60 == r.stats["evaluated"]
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, "a 70B search on 64 GPUs proposes some invalid grids (tp*pp*cp not dividing 64)"
    for t in pruned:  # invalid layouts carry their reason and no objective values
        assert t.values is None and t.user_attrs["autopar_reason"].startswith("rule:")
    recs = {t.strategy.label(): t for t in r.trials if t.estimate is not None}
    for t in done:
        assert set(t.constraints) == {"memory_gib"}
        rec = recs[t.user_attrs["strategy"]]
        # The stored values are the model's own, not sentinels: they match the returned records.
        assert t.values == pytest.approx(
            [rec.values["throughput"], rec.values["cost"], rec.values["headroom"]]
        )
        assert t.values[0] > 0 and t.values[1] < 1e6 and t.values[2] > -1e4  # no 0, 1e12 or -1e6 sentinels
        # memory constraint = min headroom + (band factor - 1) x peak - headroom (search/margin.py); feasible
        # (<= 0) exactly when the record is
        peak = rec.estimate.peak_memory_bytes / GiB
        want = band_margin(None, 2.0, WL.framework).need_gib(rec.values["headroom"], peak)
        assert t.constraints["memory_gib"] == pytest.approx(want)
        assert (t.constraints["memory_gib"] <= 0) == rec.feasible
        assert t.user_attrs["memory_gib"] == pytest.approx(rec.estimate.peak_memory_bytes / GiB, abs=1e-3)
        assert t.user_attrs["usd_per_mtoken"] == pytest.approx(rec.values["cost"])
        assert t.user_attrs["bottleneck"] == rec.estimate.bottleneck
        assert t.user_attrs["knobs"]["tp"] == rec.strategy.tp
        assert "calibration_factor" in t.user_attrs and "headroom_gib" in t.user_attrs
    infeasible = [t for t in done if t.constraints["memory_gib"] > 0]
    assert all("autopar_reason" in t.user_attrs for t in infeasible)


def test_cost_cap_is_a_second_constraint(tmp_path):
    path = str(tmp_path / "c.journal")
    optimize(L70, H100x64, WL, budget=30, storage=path, study_name="c", max_cost=1.0, min_headroom_gib=2.0)
    study = optuna.load_study(study_name="c", storage=open_storage(path))
    for t in study.trials:
        if t.state == TrialState.COMPLETE:
            assert set(t.constraints) == {"memory_gib", "cost_excess"}
            assert t.constraints["cost_excess"] == pytest.approx((t.values[1] - 1.0) / 1.0)


def test_cli_counts_and_study_commands(tmp_path):
    path = str(tmp_path / "cli.journal")
    args = [
        "optimize",
        "--budget",
        "40",
        "--no-calibration",
        "--storage",
        path,
        "--study-name",
        "x",
        "--json",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    t = doc["trials"]
    assert t["total"] == t["evaluated"] + t["rule_violations"] and t["evaluated"] == 40
    assert doc["study"]["states"]["COMPLETE"] == 40
    assert doc["study"]["states"].get("PRUNED", 0) == t["rule_violations"]
    r = runner.invoke(app, ["study", "status", "--storage", path, "--json"])
    assert r.exit_code == 0, r.output
    st = json.loads(r.stdout)
    assert st["complete"] == 40 and st["budget"] == 40 and st["study_name"] == "x"
    r = runner.invoke(app, ["study", "report", "--storage", path, "--json"])
    assert r.exit_code == 0, r.output
    again = json.loads(r.stdout)
    assert again["pareto"] == doc["pareto"] and again["trials"] == {
        **doc["trials"],
        "optuna_trials": 0,
        "duplicates": 0,
    }
    r = runner.invoke(app, ["study", "status", "--storage", path, "--study-name", "y"])
    assert r.exit_code == 2 and "no such study" in r.output and "x" in r.output


def test_workers_on_one_journal(tmp_path):
    path = str(tmp_path / "w.journal")
    args = ["optimize", "--budget", "60", "--no-calibration", "--storage", path, "--workers", "2", "--json"]
    t0 = time.perf_counter()
    r = runner.invoke(app, args)
    elapsed = time.perf_counter() - t0
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    states = doc["study"]["states"]
    # batches are written under a file lock against the study: the budget exactly, no strategy twice
    assert states["COMPLETE"] == 60 and set(states) <= {"COMPLETE", "PRUNED"}
    study = optuna.load_study(study_name=doc["study"]["name"], storage=open_storage(path))
    done = [tuple(sorted(t.params.items())) for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(set(done)) == 60
    assert 0.8 * elapsed <= doc["wall_s"] <= elapsed  # the whole run, not the final read of the study


@pytest.mark.parametrize(
    "args, words",
    [
        (["--workers", "2"], "--storage"),
        (["--study-name", "a"], "--storage"),
        (["--storage", "/no/such/folder/s.journal"], "does not exist"),
        (["--storage", "mysql://u:pw@127.0.0.1:9/db"], "driver is not installed"),
        (["--storage", "postgresql+pg8000://u:pw@127.0.0.1:9/db"], "driver is not installed"),
        (["--storage", "sqlite:////no/such/folder/x.db"], "does not exist"),
        (["--storage", "x.journal", "--heartbeat", "5"], "heartbeat"),
        (["--storage", "x.journal", "--sampler", "exhaustive"], "exhaustive"),
    ],
)
def test_storage_errors_are_one_line(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["optimize", "--budget", "5", "--no-calibration", *args])
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output and "pw@" not in r.output


def test_mask_hides_passwords():
    assert mask("postgresql://me:s3cret@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert mask("postgresql://me@db/x") == "postgresql://me@db/x"
    with pytest.raises(AutoparError, match="not a database URL|cannot open"):
        open_storage("postgresql://me:pw@:notaport/x")


def test_whatif_keeps_one_study_per_option_and_resumes(tmp_path):
    path = str(tmp_path / "wi.journal")
    base = ["whatif", "-m", "Llama-3.1-8B", "-o", "H100-SXM:8", "-o", "H200:8", "-t", "1T", "--budget", "30"]
    base += ["--no-sensitivity", "--no-calibration", "--storage", path, "--study-name", "wi", "--json"]
    first = runner.invoke(app, base)
    assert first.exit_code == 0, first.output
    names = sorted(optuna.get_all_study_names(storage=open_storage(path)))
    assert names == ["wi-H100-SXM:8", "wi-H200:8"]
    again = runner.invoke(app, base)  # every option's study is complete: read back, nothing new
    assert again.exit_code == 0, again.output
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert [(o["strategy"], o["tokens_per_s"]) for o in a["options"]] == [
        (o["strategy"], o["tokens_per_s"]) for o in b["options"]
    ]
    for n in names:
        s = optuna.load_study(study_name=n, storage=open_storage(path))
        assert sum(t.state == TrialState.COMPLETE for t in s.trials) == 30
