"""`autopar estimate` end to end: tables, JSON, batch mode and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from autopar.cli import app
from autopar.data import published_runs_path

runner = CliRunner()


def test_estimate_json_matches_library():
    from autopar.catalog import get_gpu, get_model
    from autopar.perf import estimate
    from autopar.specs import ClusterSpec, Strategy, Workload

    r = runner.invoke(
        app,
        [
            "estimate",
            "--model",
            "llama-3.1-70b",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--pp",
            "2",
            "--recompute",
            "selective",
            "--json",
            "--no-calibration",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    e = estimate(
        get_model("Llama-3.1-70B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64),
        # The CLI runs megatron as its recipes do: TP comm overlap on unless --no-tp-comm-overlap.
        Workload(seq_len=8192, global_batch=512, tp_comm_overlap=True),
        # Options left out are unset: the library completes them the same way.
        Strategy(
            tp=8,
            pp=2,
            sp=True,
            recompute="selective",
            vpp=None,
            zero=None,
            micro_batch=None,
            pp_schedule=None,
        ),
    )
    assert doc["estimate"]["step_s"] == pytest.approx(e.step_time_s)
    assert doc["strategy"]["dp"] == 4
    assert doc["strategy"]["recompute"] == "selective"  # explicit, never overridden
    assert {a.split("=")[0] for a in doc["assumed"]} == {"vpp", "zero", "micro_batch", "pp_schedule"}
    assert sum(v for k, v in doc["memory_gib"].items() if k != "total") == pytest.approx(
        doc["memory_gib"]["total"]
    )


def test_calibrated_estimate_scales_throughput_and_keeps_breakdown_consistent():
    args = ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--json"]
    raw = json.loads(runner.invoke(app, [*args, "--no-calibration"]).stdout)
    cal = json.loads(runner.invoke(app, args).stdout)
    f = cal["calibration"]["factor"]
    assert cal["calibration"]["analytical_tokens_per_s"] == pytest.approx(raw["estimate"]["tokens_per_s"])
    assert cal["estimate"]["tokens_per_s"] == pytest.approx(raw["estimate"]["tokens_per_s"] * f)
    assert cal["estimate"]["tokens_per_s_low"] <= cal["estimate"]["tokens_per_s_high"]
    assert cal["time_s"]["total"] == pytest.approx(cal["estimate"]["step_s"])
    assert sum(v for k, v in cal["time_s"].items() if k not in ("total", "recompute")) == pytest.approx(
        cal["estimate"]["step_s"]
    )
    assert "published runs" in cal["calibration"]["description"]


def test_estimate_table_output():
    r = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--zero", "3"])
    assert r.exit_code == 0, r.output
    assert "tokens/s" in r.stdout and "Memory per GPU" in r.stdout and "MFU" in r.stdout


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--model", "lama3-70b"], "did you mean Llama-3-70B"),
        (["--gpu", "H1OO"], "unknown GPU"),
        (["--tp", "3"], "tp=3 does not divide heads=64"),
        (["--gpus", "-4"], "num_gpus=-4"),
        (["--recompute", "sometimes"], "recompute"),
        (["--precision", "fp4"], "precision"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, fragment):
    r = runner.invoke(app, ["estimate", *args])
    assert r.exit_code == 2
    out = r.output.strip()
    assert fragment in out
    assert "Traceback" not in out and len(out.splitlines()) == 1


def test_batch_writes_predictions_and_survives_bad_rows(tmp_path: Path):
    df = pd.read_csv(published_runs_path(), dtype=str, keep_default_na=False).head(5)
    df.loc[1, "tp"] = "abc"  # malformed
    df.loc[2, "gpu"] = "TPU-v9"  # unknown GPU
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "preds.csv"
    r = runner.invoke(app, ["estimate", "--batch", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    preds = pd.read_csv(out)
    assert list(preds["id"]) == list(df["id"])
    assert preds.loc[1, "status"].startswith("error:") and "'tp'" in preds.loc[1, "status"]
    assert "unknown GPU 'TPU-v9'" in preds.loc[2, "status"]
    ok = preds[preds["status"] == "ok"]
    assert len(ok) == 3 and (ok["pred_tokens_per_s_per_gpu"] > 0).all()
    for col in (
        "pred_step_s",
        "pred_tflops_per_gpu",
        "pred_hw_tflops_per_gpu",
        "pred_mfu",
        "pred_mem_gib_per_gpu",
        "pred_fits",
        "assumed",
        "time_compute_s",
        "mem_activations_gib",
    ):
        assert col in preds.columns


def test_batch_with_no_evaluable_row_reports_each_and_exits_2(tmp_path: Path):
    """Every row malformed: the table still says why per row, the error names the first row's reason,
    nothing is written (a failed command leaves no file), exit 2, no traceback."""
    df = pd.read_csv(published_runs_path(), dtype=str, keep_default_na=False).head(2)
    df["num_gpus"] = "abc"
    src, out = tmp_path / "runs.csv", tmp_path / "preds.csv"
    df.to_csv(src, index=False)
    r = runner.invoke(app, ["estimate", "--batch", str(src), "--out", str(out)])
    assert r.exit_code == 2 and "none of its 2 rows could be evaluated" in r.output
    assert "Traceback" not in r.output and not out.exists()
    assert r.output.count("'num_gpus' = 'abc' is not a number") == 3  # two table rows and the error line
    js = runner.invoke(app, ["estimate", "--batch", str(src), "--json"])
    preds = pd.DataFrame(json.loads(js.stdout.splitlines()[0]))
    assert js.exit_code == 2 and (preds["status"].str.contains("'num_gpus' = 'abc' is not a number")).all()
    assert (preds["pred_memory_verdict"] == "").all()


def test_batch_jsonl_and_missing_file(tmp_path: Path):
    df = pd.read_csv(published_runs_path(), dtype=str, keep_default_na=False).head(3)
    src = tmp_path / "runs.jsonl"
    df.to_json(src, orient="records", lines=True)
    r = runner.invoke(app, ["estimate", "--batch", str(src), "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)) == 3
    r = runner.invoke(app, ["estimate", "--batch", str(tmp_path / "nope.csv")])
    assert r.exit_code == 2 and "not found" in r.output


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["estimate", "--zero", "abc"], "Invalid value for '--zero'"),
        (["estimat"], "No such command 'estimat'"),
        (["launch", "--gpus", "many"], "gpus='many' is not a GPU count"),  # counts are read by autopar (16K)
        (["optimize", "--gpu", "H1OO", "--budget", "5"], "unknown GPU 'H1OO'"),
    ],
)
def test_console_script_usage_errors_are_one_line(argv, fragment):
    # The real entry point (python -m autopar), not CliRunner: typer's usage errors become one line too.
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "autopar", *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    err = p.stderr.strip()
    assert fragment in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_tp_comm_overlap_hides_tp_time():
    from autopar.catalog import get_gpu, get_model
    from autopar.perf import estimate
    from autopar.specs import ClusterSpec, Strategy, Workload

    m, cl = get_model("Llama-3.1-70B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
    st = Strategy(tp=8, pp=2, sp=True)
    base = estimate(m, cl, Workload(seq_len=8192, global_batch=512, tp_comm_overlap=False), st)
    over = estimate(m, cl, Workload(seq_len=8192, global_batch=512, tp_comm_overlap=True), st)
    # TE userbuffers (megatron profile): every chunk but the first hides, exposed = tp * (1 - 7/8) = tp / 8
    # when GEMMs are long enough (perf/efficiency.py tp_overlap_hidden)
    assert over.time.tp_comm == pytest.approx(base.time.tp_comm * (1 - 1.0 * 7 / 8), rel=1e-9)
    assert over.step_time_s < base.step_time_s
    no_sp = estimate(
        m, cl, Workload(seq_len=8192, global_batch=512, tp_comm_overlap=True), Strategy(tp=8, pp=2)
    )
    assert any("needs sequence parallelism" in n for n in no_sp.notes)


@pytest.mark.parametrize(
    ("framework", "flag", "overlap"),
    [
        ("megatron", None, True),  # Megatron-Bridge recipes: CommOverlapConfig(tp_comm_overlap=tp > 1)
        ("megatron", "--no-tp-comm-overlap", False),
        ("megatron-legacy", None, False),  # Megatron-LM's own --tp-comm-overlap defaults to off
        ("torchtitan", None, False),  # enable_async_tensor_parallel defaults to false
        ("torchtitan", "--tp-comm-overlap", True),
    ],
)
def test_tp_comm_overlap_default_follows_the_stack(framework, flag, overlap):
    from autopar.catalog import get_gpu, get_model
    from autopar.perf import estimate
    from autopar.specs import ClusterSpec, Strategy, Workload

    args = ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "4", "--framework", framework]
    args += ["--micro-batch", "1", "--recompute", "none", "--json", "--no-calibration"]
    r = runner.invoke(app, args + ([flag] if flag else []))
    assert r.exit_code == 0, r.output
    wl = Workload(seq_len=8192, global_batch=512, framework=framework, tp_comm_overlap=overlap)
    s = Strategy(tp=4, sp=True, micro_batch=1, recompute="none", zero=None)
    e = estimate(get_model("Llama-3.1-8B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8), wl, s)
    other = estimate(
        get_model("Llama-3.1-8B"),
        ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8),
        wl.model_copy(update={"tp_comm_overlap": not overlap}),
        s,
    )
    assert e.step_time_s != pytest.approx(other.step_time_s)  # the flag matters for this strategy
    assert json.loads(r.stdout)["estimate"]["step_s"] == pytest.approx(e.step_time_s)
