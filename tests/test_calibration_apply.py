"""Calibration objects: persistence with version checks, the default model, LOSO on published runs, CLI."""

from __future__ import annotations

import csv
from pathlib import Path

import joblib
import numpy as np
import pytest
from typer.testing import CliRunner

from autopar.calibration import apply as apply_mod
from autopar.calibration.apply import (
    Calibration,
    CalibrationVersionError,
    fit_calibration,
    load_calibration,
    load_default_calibration,
)
from autopar.calibration.evaluate import error_table, leave_one_source_out
from autopar.calibration.features import build_training_set
from autopar.calibration.runs import check_file
from autopar.catalog import get_gpu, get_model
from autopar.cli import app
from autopar.data import published_runs_path
from autopar.errors import DataError
from autopar.perf import estimate
from autopar.specs import ClusterSpec, Strategy, Workload

runner = CliRunner()


@pytest.fixture(scope="module")
def published() -> list[dict[str, object]]:
    return check_file(published_runs_path()).records


@pytest.fixture(scope="module")
def small_cal(published) -> Calibration:
    """A quick model on three sources (no LOSO table)."""
    recs = [
        r for r in published if r["source"] in ("nemo_perf_summary", "mosaic_llmfoundry", "korthikanti2022")
    ]
    return fit_calibration(recs, name="small", evaluate=False)


def _specs():
    m, g = get_model("llama-3.1-8b"), get_gpu("H100-SXM")
    c = ClusterSpec(gpu=g, num_gpus=16)
    w = Workload(seq_len=8192, global_batch=64)
    s = Strategy(tp=2, sp=True, micro_batch=1, recompute="selective").with_dp(16)
    return m, c, w, s, estimate(m, c, w, s)


def test_throughput_factor_and_band(small_cal):
    f, lo, hi = small_cal.throughput_factor(*_specs())
    assert lo <= f <= hi and 0.3 < f < 3.0
    assert small_cal.meta.n_train == 51 and small_cal.meta.sources == [
        "korthikanti2022",
        "mosaic_llmfoundry",
        "nemo_perf_summary",
    ]


def test_save_load_roundtrip(tmp_path, small_cal):
    p = small_cal.save(tmp_path / "m.joblib")
    back = load_calibration(p)
    assert back.throughput_factor(*_specs()) == pytest.approx(small_cal.throughput_factor(*_specs()))
    assert back.meta == small_cal.meta


def _tamper(path: Path, **meta: object) -> Path:
    payload = joblib.load(path)
    payload["meta"].update(meta)
    joblib.dump(payload, path)
    return path


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("sklearn_version", "0.24.2", "scikit-learn 0.24.2"),
        ("autopar_version", "9.9.0", "autopar 9.9.0"),
        ("feature_schema_version", "0", "feature schema 0"),
    ],
)
def test_incompatible_version_is_a_clear_error(tmp_path, small_cal, field, value, needle):
    p = _tamper(small_cal.save(tmp_path / "m.joblib"), **{field: value})
    with pytest.raises(CalibrationVersionError, match=needle) as ei:
        load_calibration(p)
    assert "autopar calibrate fit --out" in str(ei.value)


def test_not_a_model_file(tmp_path):
    junk = tmp_path / "junk.joblib"
    junk.write_bytes(b"\x00not a pickle")
    with pytest.raises(DataError, match="not an autopar calibration model"):
        load_calibration(junk)
    other = tmp_path / "other.joblib"
    joblib.dump({"hello": 1}, other)
    with pytest.raises(DataError, match="no 'autopar-calibration' header"):
        load_calibration(other)
    with pytest.raises(DataError, match="not found"):
        load_calibration(tmp_path / "missing.joblib")


def test_default_calibration_is_built_then_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path))
    monkeypatch.setattr(apply_mod, "default_artifact_path", lambda: tmp_path / "no-packaged-artifact.joblib")
    load_default_calibration.cache_clear()
    try:
        cal = load_default_calibration()
        assert cal.meta.n_train == 106 and len(cal.meta.sources) == 6 and cal.meta.memory_n_train == 20
        assert "published runs" in cal.describe() and "leave-one-source-out" in cal.describe()
        cached = list((tmp_path / "cache").glob("default_calibration-*.joblib"))
        assert len(cached) == 1
        load_default_calibration.cache_clear()
        monkeypatch.setattr(apply_mod, "fit_training_set", lambda *a, **k: pytest.fail("refit despite cache"))
        again = load_default_calibration()
        assert again.meta.training_fingerprint == cal.meta.training_fingerprint
    finally:
        load_default_calibration.cache_clear()


@pytest.mark.xfail(
    strict=True,
    reason="issue 11 (pipe): completion of unset knobs and the per-unit DP/FSDP/CP model lowered the analytical "
    "median APE to 5.9%; this HGB corrector no longer improves held-out sources (issue 12 replaces it with a "
    "no-worse-gated model and rewrites this test)",
)
def test_leave_one_source_out_on_published_runs(published):
    """Done criterion: calibrated median APE <= 10% overall and lower than uncalibrated for most sources."""
    ts = build_training_set(published)
    assert len(ts) == 106 and ts.skipped == []
    table = error_table(leave_one_source_out(ts))
    per_source = table[table.source != "all"]
    overall = table[table.source == "all"].iloc[0]
    improved = int((per_source.median_ape_after < per_source.median_ape_before).sum())
    assert overall.median_ape_after <= 0.10
    assert improved > len(per_source) / 2, table.to_string()
    assert overall.median_ape_after < overall.median_ape_before


def _small_csv(tmp_path: Path, published, sources: tuple[str, ...]) -> Path:
    rows = [r for r in published if r["source"] in sources]
    cols = list(rows[0])
    p = tmp_path / "small.csv"
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None else v for k, v in r.items()})
    return p


def test_cli_fit_and_report(tmp_path, published):
    data = _small_csv(tmp_path, published, ("nemo_perf_summary", "korthikanti2022", "bloom176b"))
    db = tmp_path / "runs.db"
    assert runner.invoke(app, ["calibrate", "ingest", str(data), "--store", str(db)]).exit_code == 0
    out = tmp_path / "m.joblib"
    r = runner.invoke(
        app, ["calibrate", "fit", "--store", str(db), "--no-public", "--out", str(out), "--model", "ridge"]
    )
    assert r.exit_code == 0, r.output
    assert "saved" in r.output and "ridge corrector on 30 runs" in " ".join(r.output.split())
    cal = load_calibration(out)
    assert cal.meta.model_name == "ridge" and cal.meta.n_train == 30
    html = tmp_path / "rep.html"
    r2 = runner.invoke(
        app,
        [
            "calibrate",
            "report",
            "--store",
            str(db),
            "--no-public",
            "--out",
            str(html),
            "--plotlyjs",
            "cdn",
            "--model",
            "ridge",
        ],
    )
    assert r2.exit_code == 0, r2.output
    text = html.read_text()
    assert "Per source" in text and "korthikanti2022" in text and "plotly" in text
    assert "leave-one-source-out" in r2.output


def test_cli_fit_errors(tmp_path):
    r = runner.invoke(app, ["calibrate", "fit", "--out", str(tmp_path / "m.joblib"), "--model", "forest"])
    assert r.exit_code == 2 and "ridge" in r.output
    r2 = runner.invoke(
        app,
        [
            "calibrate",
            "fit",
            "--out",
            str(tmp_path / "m.joblib"),
            "--no-public",
            "--store",
            str(tmp_path / "none.db"),
        ],
    )
    assert r2.exit_code == 2 and "no run store" in r2.output
    r3 = runner.invoke(app, ["calibrate", "report", "--no-public", "--store", str(tmp_path / "none.db")])
    assert r3.exit_code == 2 and "Traceback" not in r3.output


def test_factors_batch_matches_single(small_cal):
    m, c, w, s, e = _specs()
    from autopar.calibration.features import features

    x = features(m, c, w, s, e)
    f, lo, hi = small_cal.factors(np.vstack([x, x]))
    assert f[0] == f[1] == pytest.approx(small_cal.throughput_factor(m, c, w, s, e)[0])


def test_memory_factor(tmp_path, published, small_cal):
    # the three small sources report no memory: no memory corrector, no correction
    assert small_cal.memory_corrector is None and small_cal.memory_factor(*_specs()) == (1.0, 1.0, 1.0)
    tt = [r for r in published if r["source"] in ("torchtitan_bench", "nemo_perf_summary")]
    cal = fit_calibration(tt, name="with-memory", evaluate=False)
    # torchtitan_bench publishes max-reserved memory for 20 runs (README: GiB, max across ranks)
    assert cal.meta.memory_n_train == 20 and cal.meta.memory_sources == ["torchtitan_bench"]
    f, lo, hi = cal.memory_factor(*_specs())
    assert lo <= f <= hi and 0.5 < f < 2.0
    assert "memory corrector on 20 runs" in cal.describe()
    back = Calibration.load(cal.save(tmp_path / "mem.joblib"))
    assert back.memory_factor(*_specs()) == pytest.approx((f, lo, hi))


def test_shipped_default_artifact_matches_current_model():
    # The committed autopar/data/default_calibration.joblib must be trained on the current analytical
    # model's predictions; otherwise every user pays a ~3 s refit. Regenerate with
    # `python -c "from autopar.calibration.apply import write_default_calibration as w; w()"`.
    from autopar.calibration.apply import (
        _published_training_sets,
        _try_load,
        default_artifact_path,
        training_fingerprint,
    )

    fp = training_fingerprint(*_published_training_sets())
    assert _try_load(default_artifact_path(), fp) is not None
