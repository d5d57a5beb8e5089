"""Calibration objects (issue 12): JSON model files that cannot run code, the default model, the CLI,
the published-runs gate, calibrated batch output."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from autopar.calibration.apply import (
    Calibration,
    CalibrationVersionError,
    fit_calibration,
    load_calibration,
    load_default_calibration,
)
from autopar.calibration.apply import default as default_mod
from autopar.calibration.apply.default import REGENERATE
from autopar.calibration.ingest.ingest import check_file
from autopar.calibration.models.adapter import AdaptedCorrector
from autopar.calibration.models.features import FEATURE_NAMES, build_training_set
from autopar.calibration.models.modelfile import write_model_doc
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
    assert small_cal.meta.n_train == 51
    assert small_cal.meta.sources == ["korthikanti2022", "mosaic_llmfoundry", "nemo_perf_summary"]


def test_save_load_roundtrip_is_json(tmp_path, small_cal):
    p = small_cal.save(tmp_path / "m.json")
    doc = json.loads(p.read_text())
    assert doc["format"] == "autopar-calibration" and doc["meta"]["sklearn_version"]
    assert doc["meta"]["feature_names"] == list(FEATURE_NAMES)
    back = load_calibration(p)
    assert back.throughput_factor(*_specs()) == pytest.approx(small_cal.throughput_factor(*_specs()))
    assert back.meta == small_cal.meta


class _Boom:
    """Unpickling this creates a marker file: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("wrap", ["raw", "json-header"])
def test_pickle_payload_is_refused_without_running(tmp_path, wrap):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"format": "autopar-calibration", "x": _Boom(marker)})
    if wrap == "json-header":  # a pickle hiding behind leading whitespace
        payload = b"  \n" + payload
    bad = tmp_path / "model.joblib"
    bad.write_bytes(payload)
    with pytest.raises(DataError, match="pickle") as ei:
        load_calibration(bad)
    assert not marker.exists() and "\n" not in str(ei.value)
    r = runner.invoke(app, ["estimate", "--calibration", str(bad), "--json"])
    assert r.exit_code == 2 and "pickle" in r.output and not marker.exists() and "Traceback" not in r.output


def test_foreign_corrupt_and_incompatible_files(tmp_path, small_cal):
    cases = {
        "junk.json": (b"\x00\x01not json", "not valid JSON"),
        "other.json": (b'{"hello": 1}', "no 'autopar-calibration' header"),
        "nan.json": (b'{"format": "autopar-calibration", "x": NaN}', "not valid JSON"),
    }
    for name, (content, needle) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(DataError, match=needle):
            load_calibration(tmp_path / name)
    with pytest.raises(DataError, match="not found"):
        load_calibration(tmp_path / "missing.json")
    doc = small_cal.to_doc()
    p = small_cal.save(tmp_path / "m.json")
    d = json.loads(p.read_text())
    d["meta"]["feature_schema_version"] = "0"
    p.write_text(json.dumps(d))
    with pytest.raises(CalibrationVersionError, match="feature schema 0"):
        load_calibration(p)
    d = json.loads(json.dumps({"format": "autopar-calibration", "format_version": 2, **doc}))
    d["throughput"]["coef"] = d["throughput"]["coef"][:-1]
    p.write_text(json.dumps(d))
    with pytest.raises(DataError, match="corrupt"):
        load_calibration(p)
    d["format_version"] = 1
    p.write_text(json.dumps(d))
    with pytest.raises(CalibrationVersionError, match="format version 1"):
        load_calibration(p)


def test_default_calibration_never_reads_a_planted_cache_file(tmp_path, monkeypatch):
    """A stale packaged model means a refit on the shipped data; a model file planted under
    $AUTOPAR_HOME/cache with the right training fingerprint is never loaded as the default (issue: it
    used to replace the default corrector under its "(default)" label)."""
    shipped = Calibration.load(default_mod.default_artifact_path())
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path))
    monkeypatch.setattr(default_mod, "default_artifact_path", lambda: tmp_path / "none.json")
    fp = shipped.meta.training_fingerprint
    planted = json.loads(json.dumps(shipped.to_doc()))
    planted["throughput"]["intercept"] = 3.0  # within bounds: a hostile but well-formed model
    planted["meta"]["name"] = "planted"
    (tmp_path / "cache").mkdir()
    write_model_doc(tmp_path / "cache" / f"default_calibration-{fp[:16]}.json", planted)
    refit = object()
    monkeypatch.setattr(default_mod, "fit_training_set", lambda *a, **k: refit)
    monkeypatch.setattr(default_mod, "_default_fingerprint", lambda *a: fp)
    monkeypatch.setattr(default_mod, "published_training_sets", lambda: (None, None))
    load_default_calibration.cache_clear()
    try:
        assert load_default_calibration() is refit
    finally:
        load_default_calibration.cache_clear()


def test_default_model_is_no_worse_on_every_left_out_source():
    cal = load_default_calibration()
    rows = [r for r in cal.meta.loso if r["source"] != "all"]
    assert len(rows) == 6
    for r in rows:
        assert r["median_ape_after"] <= r["median_ape_before"] + 1e-9, r
        assert r["mean_ape_after"] <= r["mean_ape_before"] + 1e-9, r
    overall = next(r for r in cal.meta.loso if r["source"] == "all")
    assert 0.70 <= overall["band_coverage"] <= 0.90


def test_shipped_default_matches_a_fresh_fit():
    shipped = Calibration.load(default_mod.default_artifact_path())
    fresh = default_mod.build_default_calibration()
    hint = f"autopar/data/default_calibration.json is stale: regenerate it with `{REGENERATE}`"
    a, b = shipped.to_doc(), fresh.to_doc()
    assert a["meta"]["training_fingerprint"] == b["meta"]["training_fingerprint"], hint
    for part in ("throughput", "memory"):
        for k, v in b[part].items():
            if isinstance(v, list):
                assert np.allclose(a[part][k], v, rtol=1e-6, atol=1e-9), f"{part}.{k}: {hint}"
            elif isinstance(v, float):
                assert a[part][k] == pytest.approx(v, rel=1e-6, abs=1e-9), f"{part}.{k}: {hint}"


def _csv(tmp_path: Path, published, sources: tuple[str, ...]) -> Path:
    rows = [r for r in published if r["source"] in sources]
    p = tmp_path / "small.csv"
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None else v for k, v in r.items()})
    return p


def test_cli_fit_with_own_cluster_and_report(tmp_path, published):
    data = _csv(tmp_path, published, ("torchtitan_bench",))
    db = tmp_path / "runs.db"
    assert runner.invoke(app, ["calibrate", "ingest", str(data), "--store", str(db)]).exit_code == 0
    out = tmp_path / "m.json"
    r = runner.invoke(app, ["calibrate", "fit", "--store", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert (
        "leave-one-source-out" in text
        and "in 80%" in text
        and "adapted to cluster 'torchtitan_bench'" in text
        and "cluster offsets and slopes" in text  # the adapter, not the plain offsets
        and "learning curve of 'torchtitan_bench'" in text
    )
    cal = load_calibration(out)
    assert cal.meta.group == "torchtitan_bench"
    # the saved model carries the hierarchical adapter; the cluster's posterior (offset + slopes) moves
    # every prediction made with this model, and moves its own runs toward their measurements
    assert isinstance(cal.corrector, AdaptedCorrector)
    # posteriors for the team's group, for every other group by name, and for (group, GPU) clusters
    assert {"torchtitan_bench", "mosaic_llmfoundry", "mosaic_llmfoundry@H100-SXM"} <= set(
        cal.corrector.adapter_.posterior_
    )
    f, lo, hi = cal.throughput_factor(*_specs())
    assert lo < f < hi and abs(np.log(f / cal.throughput_factor(*_specs(), group="elsewhere")[0])) > 0.01
    ts = build_training_set([r for r in published if r["source"] == "torchtitan_bench"])
    own = cal.corrector.predict(ts.X, ["torchtitan_bench"] * len(ts))
    unseen = cal.corrector.predict(ts.X, ["elsewhere"] * len(ts))
    # (mean squared log error: what a posterior mean lowers; this cluster's residuals are bimodal). How much
    # it lowers it is the cluster's bias under the analytical model: 0.0362 -> 0.0267 before issue 21's seventh
    # session priced torchtitan's CP as PyTorch runs it, 0.0299 -> 0.0253 since (both sides smaller).
    assert np.mean((ts.y - own) ** 2) < 0.9 * np.mean((ts.y - unseen) ** 2)
    html = tmp_path / "rep.html"
    r2 = runner.invoke(
        app, ["calibrate", "report", "--store", str(db), "--out", str(html), "--plotlyjs", "cdn"]
    )
    assert r2.exit_code == 0, r2.output
    page = html.read_text()
    assert "Per source" in page and "Adapting to a cluster" in page and "adaptation k=3" in r2.output
    # the store's own cluster gets its learning curve (runs ingested -> error) on the page and the console
    assert "Learning curve of your cluster &#x27;torchtitan_bench&#x27;" in page or (
        "Learning curve of your cluster 'torchtitan_bench'" in page
    )
    assert "learning curve of 'torchtitan_bench'" in " ".join(r2.output.split())


def test_cli_fit_errors(tmp_path):
    r = runner.invoke(app, ["calibrate", "fit", "--out", str(tmp_path / "m.joblib")])
    assert r.exit_code == 2 and "JSON" in r.output
    r2 = runner.invoke(
        app,
        [
            "calibrate",
            "fit",
            "--out",
            str(tmp_path / "m.json"),
            "--no-public",
            "--store",
            str(tmp_path / "x.db"),
        ],
    )
    assert r2.exit_code == 2 and "no run store" in r2.output
    r3 = runner.invoke(app, ["calibrate", "fit", "--out", str(tmp_path / "m.json"), "--group", "nope"])
    assert r3.exit_code == 2 and "--group 'nope'" in r3.output


def test_batch_calibrated_vs_analytical(tmp_path):
    src = published_runs_path()
    a, c = tmp_path / "ana.csv", tmp_path / "cal.csv"
    assert (
        runner.invoke(app, ["estimate", "--batch", str(src), "--out", str(a), "--no-calibration"]).exit_code
        == 0
    )
    assert runner.invoke(app, ["estimate", "--batch", str(src), "--out", str(c)]).exit_code == 0
    ana, cal = pd.read_csv(a), pd.read_csv(c)
    tps = "pred_tokens_per_s_per_gpu"
    # analytical output: corrected == analytical, no band
    assert (ana[tps] == ana[tps + "_analytical"]).all() and ana[tps + "_lo"].isna().all()
    # the analytical columns agree between the two runs; the corrected ones equal analytical x factor
    assert np.allclose(cal[tps + "_analytical"], ana[tps])
    assert np.allclose(cal[tps], cal[tps + "_analytical"] * cal["calibration_factor"])
    assert np.allclose(cal["pred_step_s"] * cal["calibration_factor"], ana["pred_step_s"])
    assert ((cal[tps + "_lo"] <= cal[tps]) & (cal[tps] <= cal[tps + "_hi"])).all()
    # each published source gets its own cluster offset (the default model knows them): output differs
    assert not np.allclose(cal[tps], ana[tps])
    mem = "pred_mem_gib_per_gpu"
    assert ((cal[mem + "_lo"] <= cal[mem]) & (cal[mem] <= cal[mem + "_hi"])).all()


def test_cluster_offsets_reach_the_search_for_throughput_and_memory():
    """A model adapted to cluster 'mine' (offsets log 0.9 on tokens/s, log 1.1 on memory) scales every
    point the search evaluates, batched or one by one, and memory decides the fit."""
    import copy

    from autopar.search.evaluate import Evaluator
    from autopar.search.space import build_space

    cal = copy.deepcopy(load_default_calibration())
    cal.meta.group = "mine"
    cal.corrector.shrink = cal.memory_corrector.shrink = 0.0  # offsets only, whatever the gate chose
    cal.corrector.offsets_ = {**cal.corrector.offsets_, "mine": float(np.log(0.9))}
    cal.memory_corrector.offsets_ = {**cal.memory_corrector.offsets_, "mine": float(np.log(1.1))}
    assert cal.memory_moves()
    m, c, w, *_ = _specs()
    space = build_space(m, c, w)
    pts = list(space)[:60]
    plain = Evaluator(m, space.hardware, prices=[2.0]).evaluate_many(pts)
    ev = Evaluator(m, space.hardware, prices=[2.0], calibration=cal)
    for pt, base, out in zip(pts, plain, ev.evaluate_many(pts), strict=True):
        if base.estimate is None:
            continue
        one = ev(pt).estimate
        for e in (out.estimate, one):
            assert e.tokens_per_s == pytest.approx(0.9 * base.estimate.tokens_per_s)
            assert e.memory.total == pytest.approx(1.1 * base.estimate.memory.total)
            assert e.fits == (1.1 * base.estimate.memory.total <= e.capacity_bytes)


def test_batch_refuses_single_strategy_options():
    r = runner.invoke(app, ["estimate", "--batch", str(published_runs_path()), "--tp", "4", "--json"])
    assert r.exit_code == 2 and "--tp cannot apply with --batch" in r.output and "Traceback" not in r.output
