"""Start-up and batch speed-ups (issue 15) change nothing a user sees: the CLI's help and a calibrated
estimate load no heavy library they do not need, the scikit-learn-free corrector predicts exactly what
the fitted estimator does, the remembered default-model fingerprint is the computed one, and a batch
with repeated configurations gives every row what evaluating it alone gives."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopar.calibration.apply import default as default_mod
from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.models.corrector import ThroughputCorrector
from autopar.calibration.models.features import FEATURE_NAMES
from autopar.calibration.models.predictor import FittedCorrector
from autopar.calibration.records.estimate import batch_estimate, estimate_row, unique_rows
from autopar.data import published_runs_path

HEAVY = ("pandas", "sklearn", "scipy", "optuna", "plotly")


def _loaded_after(code: str) -> set[str]:
    """Heavy top-level packages in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split()) & set(HEAVY)


def test_help_imports_no_heavy_library():
    code = "import sys\nsys.argv = ['autopar', '--help']\nfrom autopar.cli import app\n"
    code += "try:\n    app(standalone_mode=False)\nexcept SystemExit:\n    pass"
    assert _loaded_after(code) == set()


def test_calibrated_estimate_needs_neither_sklearn_nor_pandas(tmp_path):
    code = (
        f"import os\nos.environ['AUTOPAR_HOME'] = {str(tmp_path)!r}\n"
        "from autopar.calibration.apply import load_default_calibration\n"
        "load_default_calibration()\n"  # first process: computes and remembers the fingerprint
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    code += (
        "from autopar.catalog import get_gpu, get_model\nfrom autopar.perf import estimate\n"
        "from autopar.specs import ClusterSpec, Strategy, Workload\n"
        "m, c = get_model('Llama-3.1-8B'), ClusterSpec(gpu=get_gpu('H100-SXM'), num_gpus=8)\n"
        "w, s = Workload(seq_len=4096, global_batch=64), Strategy(tp=2).with_dp(8)\n"
        "load_default_calibration().apply(m, c, w, s, estimate(m, c, w, s))"
    )
    assert _loaded_after(code) == set()


def test_optimize_json_loads_no_table_or_plotting_library(tmp_path):
    """The JSON path of a calibrated NSGA-II search needs optuna, never pandas, plotly, scikit-learn or
    scipy (the Pareto table is rows; SearchResult.pareto builds a DataFrame only when a caller asks); the
    default problem's exact sweep (auto sampler) needs none of them."""
    home = f"import os\nos.environ['AUTOPAR_HOME'] = {str(tmp_path)!r}\n"
    subprocess.run(
        [sys.executable, "-c", home + "from autopar.calibration.apply import load_default_calibration\n"
         "load_default_calibration()"],
        check=True,
    )  # fmt: skip
    for sampler, heavy in (("nsga2", {"optuna"}), ("auto", set())):
        argv = ["autopar", "optimize", "--gpus", "64", "--budget", "30", "--sampler", sampler, "--json"]
        code = home + f"import sys, io, contextlib\nsys.argv = {argv!r}\nfrom autopar.cli import main\n"
        code += "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main()\n    except SystemExit:\n        pass"
        assert _loaded_after(code) == heavy, sampler


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-4, 4), min_size=len(FEATURE_NAMES), max_size=len(FEATURE_NAMES)))
def test_fitted_corrector_predicts_exactly_as_the_estimator(x):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, len(FEATURE_NAMES)))
    y = 0.2 * X[:, 1] - 0.1 * X[:, 3] + rng.normal(0, 0.05, 40)
    fitted = ThroughputCorrector(alpha=1.0).fit(X, y, groups=["a", "b", "c", "d"] * 10)
    light = FittedCorrector.from_params(fitted.to_params(), len(FEATURE_NAMES))
    assert type(light) is FittedCorrector
    for groups in (None, ["b"], ["never-seen"]):
        for a, b in zip(
            light.predict_interval([x], groups), fitted.predict_interval([x], groups), strict=True
        ):
            assert a.tolist() == b.tolist()
    with pytest.raises(ValueError):
        light.predict([x[:-1]])
    with pytest.raises(ValueError):
        light.predict([[float("nan")] * len(FEATURE_NAMES)])


def test_remembered_fingerprint_is_the_computed_one(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path))
    default_mod.load_default_calibration.cache_clear()
    try:
        cal = default_mod.load_default_calibration()
        fp = default_mod._default_fingerprint(*default_mod.published_training_sets())
        assert cal.meta.training_fingerprint == fp
        assert default_mod._known_fingerprint(default_mod.inputs_digest()) == fp
        default_mod.load_default_calibration.cache_clear()
        monkeypatch.setattr(default_mod, "published_training_sets", lambda: pytest.fail("recomputed"))
        assert default_mod.load_default_calibration().meta.training_fingerprint == fp
        # other inputs (another digest) have no remembered fingerprint: computed again
        monkeypatch.setattr(default_mod, "inputs_digest", lambda: "0" * 64)
        default_mod.load_default_calibration.cache_clear()
        with pytest.raises(pytest.fail.Exception, match="recomputed"):
            default_mod.load_default_calibration()
    finally:
        default_mod.load_default_calibration.cache_clear()


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    return read_run_records(published_runs_path())


def _repeated(df: pd.DataFrame, picks: list[int]) -> pd.DataFrame:
    out = df.iloc[picks].reset_index(drop=True).copy()
    out["id"] = [f"{rid}#{i}" for i, rid in enumerate(out["id"])]
    return out


def test_unique_rows_ignores_only_the_id(published):
    df = _repeated(published, [0, 1, 0, 2, 1, 0])
    codes, first = unique_rows(df)
    assert codes.tolist() == [0, 1, 0, 2, 1, 0] and first.tolist() == [0, 1, 3]
    df.loc[5, "recompute"] = "full" if df.loc[0, "recompute"] != "full" else "none"
    assert unique_rows(df)[0].tolist()[-1] == 3


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 105), min_size=1, max_size=25))
def test_batch_with_repeats_equals_each_row_alone(published, picks):
    df = _repeated(published, picks)
    alone = pd.DataFrame([estimate_row(r) for r in df.to_dict(orient="records")])
    batch = batch_estimate(df)
    pd.testing.assert_frame_equal(batch[alone.columns], alone, check_dtype=False)


def test_batch_sharing_completion_candidates_equals_each_row_alone(published):
    """Rows repeating a run with another recompute or micro-batch share their completions' candidate
    estimates inside a batch (perf.complete.shared_candidates): each row still gets what it gets alone."""
    df = _repeated(published, list(range(0, 100, 7)) * 3)
    n = len(df) // 3
    df.loc[n : 2 * n - 1, "recompute"] = "full"
    df.loc[2 * n :, "micro_batch"] = "1"
    alone = pd.DataFrame([estimate_row(r) for r in df.to_dict(orient="records")])
    assert (alone["status"] == "ok").sum() > n  # most rows are evaluated (some complete unset knobs)
    pd.testing.assert_frame_equal(batch_estimate(df)[alone.columns], alone, check_dtype=False)


def test_calibrated_batch_of_repeats_matches_the_plain_file(published):
    cal = default_mod.load_default_calibration()
    plain = calibrated_batch(published, cal).set_index("id")
    picks = [i % len(published) for i in range(3 * len(published))][::-1]
    rep = calibrated_batch(_repeated(published, picks), cal)
    rep["id"] = [rid.split("#")[0] for rid in rep["id"]]
    expect = plain.loc[rep["id"]].reset_index()
    pd.testing.assert_frame_equal(rep, expect, check_dtype=False)


def test_memoised_model_cells_build_what_the_row_builds(published):
    from autopar.calibration.records.model_spec import _build_model, model_from_row
    from autopar.calibration.records.stack_columns import stack_knobs

    for row in published.to_dict(orient="records"):
        a, b = [], []
        knobs = stack_knobs(row)
        said = {"dropout_stated": knobs.dropout, "tied_stated": knobs.tied_embeddings}
        try:
            direct = _build_model({**row, **said}, a)
        except Exception as e:  # noqa: BLE001 - the memoised path must fail the same way
            with pytest.raises(type(e)):
                model_from_row(row, knobs, b)
            continue
        assert model_from_row(row, knobs, b) == direct and a == b
