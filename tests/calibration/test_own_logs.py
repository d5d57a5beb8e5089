"""Getting a user's own training logs into the calibration (issue 46 item 3), one test group per friction:

1. examples/: the sample logs ingest and fit with exactly the commands examples/README.md gives;
2. a log that lacks fields is refused with ONE line naming all of them (and the invalid values given);
3. a run's source defaults to --group (or the sidecar's cluster), and ingest says which name it got;
4. `calibrate fit` says in plain words what it did (numbers from the fit) and its before -> after columns
   say why they are equal when they are;
5. a run far off the analytical prediction is stored with a warning naming it and its ratio;
6. a fit that predicts the user's held-out runs worse than the default calibration is not written
   unless --force, and runs in several groups without --group are said to refit everyone's band.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.calibration.evaluation.fit_summary import half_width_pct
from autopar.calibration.ingest.ingest import check_file
from autopar.calibration.records.plausibility import FAR_OFF_FACTOR, far_off_warning, is_far_off
from autopar.calibration.records.specs import row_to_specs
from autopar.calibration.store.run_store import RunStore
from autopar.cli import app
from autopar.cli.calibrate import SAME_AS_ANALYTICAL, _loso_table
from autopar.errors import DataError
from autopar.perf.estimate import estimate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LOGS = ROOT / "tests" / "data" / "logs"
MEG = LOGS / "megatron_gpt_tp2.log"
TT = LOGS / "torchtitan_llama3_8b.log"
# what the Megatron fixture's sidecar leaves to flags (as tests/calibration/test_logs.py passes them)
MEG_FLAGS = ["--gpu", "H100-SXM", "--gpus", "8", "--tp", "2", "--pp", "1", "--dp", "4", "--micro-batch", "1"]
MEG_FLAGS += ["--precision", "bf16", "--recompute", "none"]
runner = CliRunner()


def _run(args: list[str], home: Path):
    return runner.invoke(app, args, env={"AUTOPAR_HOME": str(home), "COLUMNS": "400"})


def _flat(text: str) -> str:
    return " ".join(text.split())


def _predicted(rec: dict) -> float:
    """The analytical model's tokens/s per GPU for a record (the reference a run is compared with)."""
    sp = row_to_specs(rec)
    return estimate(sp.model, sp.cluster, sp.workload, sp.strategy, strict=False).tokens_per_s_per_gpu


# --------------------------------------------------------------------------- 1. examples/README.md
def _readme_commands() -> list[list[str]]:
    text = (EXAMPLES / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [shlex.split(ln) for b in blocks for ln in b.splitlines() if ln.startswith("autopar ")]


def test_examples_readme_gives_one_line_per_log_and_one_fit() -> None:
    cmds = _readme_commands()
    ingests = [c for c in cmds if c[1:3] == ["calibrate", "ingest"]]
    fits = [c for c in cmds if c[1:3] == ["calibrate", "fit"]]
    logs = sorted(p.name for p in EXAMPLES.glob("*.log"))
    assert (
        sorted(Path(c[3]).name for c in ingests)
        == logs
        == ["megatron_llama3_8b.log", "torchtitan_llama3_8b.log"]
    )
    for c in ingests:  # each log with its own sidecar, which exists
        side = c[c.index("--sidecar") + 1]
        assert Path(side).stem == Path(c[3]).stem and (ROOT / side).is_file()
    assert len(fits) == 1 and "--group" in fits[0] and "--out" in fits[0]


@pytest.fixture(scope="module")
def examples_run(tmp_path_factory) -> tuple[Path, list]:
    """The README's commands, exactly as written, in a scratch folder holding a copy of examples/."""
    d = tmp_path_factory.mktemp("examples")
    shutil.copytree(EXAMPLES, d / "examples")
    results = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(d)
        for words in _readme_commands():
            results.append((words, _run(words[1:], d / "home")))
    return d, results


def test_examples_readme_commands_succeed(examples_run) -> None:
    d, results = examples_run
    for words, r in results:
        assert r.exit_code == 0, (words, r.output)
        assert "warning" not in r.output  # the samples are near their predictions, the fit no worse
    runs = RunStore(d / "examples.db").runs()
    assert sorted(r.source for r in runs) == ["mycluster", "mycluster"]  # --group named both runs
    assert (d / "my_calibration.json").is_file()
    fit = _flat(results[-1][1].output)
    assert fit.startswith("fit summary:") and "for cluster 'mycluster'" in fit


def test_examples_summary_ratio_by_hand(examples_run) -> None:
    """The fit's "measured N% below the prediction" is the median of measured / predicted over the two runs:
    measured by hand from the logs (Megatron: 128 x 4096 tokens over the median post-warm-up step time on 8
    GPUs; torchtitan: the median post-warm-up tps), predicted by the analytical model."""
    d, _ = examples_run
    meg = (EXAMPLES / "megatron_llama3_8b.log").read_text()
    steps = [float(x) / 1000 for x in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)", meg)]
    meg_tps = 128 * 4096 / 8 / statistics.median(steps[2:])  # 20 logged steps: 10% = 2 skipped
    tt = (EXAMPLES / "torchtitan_llama3_8b.log").read_text()
    tps = [float(x.replace(",", "")) for x in re.findall(r"(?<!validate )step:.*?tps: ([\d,]+)", tt)]
    tt_tps = statistics.median(tps[2:])  # 11 training steps: ceil(1.1) = 2 skipped
    assert tt_tps == 5762
    recs = {r.record["framework"]: r.record for r in RunStore(d / "examples.db").runs()}
    ratios = [meg_tps / _predicted(recs["Megatron-LM"]), tt_tps / _predicted(recs["torchtitan"])]
    summary = _fit_json(d)
    assert summary["measured_vs_predicted"] == pytest.approx(statistics.median(ratios), rel=1e-6)
    assert summary["own_runs"] == 2 and summary["group"] == "mycluster"


def _fit_json(d: Path) -> dict:
    """`calibrate fit --json`'s summary for the examples' store (a second model file, same fit)."""
    r = _run(
        ["calibrate", "fit", "--store", str(d / "examples.db"), "--group", "mycluster"]
        + ["--out", str(d / "again.json"), "--json"],
        d / "home",
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["summary"]


def test_examples_summary_band_and_margin_from_the_model_files(examples_run) -> None:
    """'was' figures from the shipped default model's file, 'now' figures from the fitted model's file."""
    d, results = examples_run
    default = json.loads((ROOT / "autopar" / "data" / "default_calibration.json").read_text())
    lo, hi = default["throughput"]["band"]  # a cluster it never saw, inside its training range
    was = 100 * math.expm1((hi - lo) / 2)
    mine = json.loads((d / "my_calibration.json").read_text())
    now_factor = math.exp(mine["memory"]["band"][1])  # the memory band's upper end: the margin's factor
    fit = _flat(results[-1][1].output)
    assert f"(±{was:.1f}% with the default calibration)" in fit
    # the default's memory band was fitted on torchtitan peaks only: megatron kept the fixed 2 GiB
    assert default["meta"]["memory_stacks"] == ["torchtitan"]
    assert f"memory margin on megatron now x{now_factor:.2f} (was +2 GiB) because your runs measured" in fit
    # the share of the ridge correction each model applies, as its file stores it
    shrinks = (mine["throughput"]["shrink"], default["throughput"]["shrink"])
    assert f"global correction now x{shrinks[0]:.1f} of the ridge (x{shrinks[1]:.1f} in the default" in fit


# --------------------------------------------------------------------- 2. all missing fields at once
def _bare_torchtitan(tmp_path: Path) -> Path:
    """The torchtitan example log without its mesh and trainer lines: it then states no config at all."""
    text = (EXAMPLES / "torchtitan_llama3_8b.log").read_text()
    keep = [ln for ln in text.splitlines() if "device mesh" not in ln and "Trainer is initialized" not in ln]
    p = tmp_path / "bare.log"
    p.write_text("\n".join(keep) + "\n")
    return p


COMPLETE = {"gpu": "H100-SXM", "num_gpus": 8, "seq_len": 8192, "global_batch": 16, "model": "Llama-3.1-8B"}


@settings(max_examples=12, deadline=None)
@given(st.sets(st.sampled_from(sorted(COMPLETE)), min_size=1))
def test_error_names_exactly_the_missing_fields_and_one_retry_is_enough(tmp_path_factory, absent) -> None:
    log = _bare_torchtitan(tmp_path_factory.mktemp("bare"))
    given_cfg = {k: v for k, v in COMPLETE.items() if k not in absent}
    with pytest.raises(DataError) as e:
        check_file(log, config=given_cfg)
    msg = str(e.value)
    named = re.search(r"give (.*?) — pass", msg).group(1)
    named = named.replace("model (or the arch: layers/hidden/ffn_hidden/heads)", "model")
    assert set(named.split(", ")) == absent and "\n" not in msg
    retry = {**given_cfg, **{k: COMPLETE[k] for k in absent}}  # what the one message asked for
    assert len(check_file(log, config=retry).records) == 1


def test_missing_fields_and_invalid_values_in_one_line(tmp_path) -> None:
    """Before: 'neither ... give gpu, num_gpus' first, the bad precision and the sidecar's misspelt keys only on
    later tries. Now one line names the missing fields, the invalid value and the keys that look like them."""
    side = tmp_path / "run.yaml"
    side.write_text("model: Llama-3.1-8B\ngpu_type: H100-SXM\nnum_gpu: 8\n")
    db = tmp_path / "runs.db"
    args = [
        "calibrate",
        "ingest",
        str(_bare_torchtitan(tmp_path)),
        "--store",
        str(db),
        "--sidecar",
        str(side),
    ]
    r = _run([*args, "--precision", "bf-16", "--seq-len", "8192"], tmp_path / "home")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "Traceback" not in r.output
    assert "give gpu, num_gpus, global_batch — pass --gpu/--gpus/--global-batch" in r.output
    assert "precision='bf-16'" in r.output
    assert "'gpu_type' is not read: did you mean gpu?" in r.output
    assert "'num_gpu' is not read: did you mean gpus?" in r.output
    assert not db.exists()  # nothing stored


def test_several_logs_missing_fields_are_reported_together(tmp_path) -> None:
    bare = _bare_torchtitan(tmp_path)
    r = _run(["calibrate", "ingest", str(MEG), str(bare), "--store", str(tmp_path / "r.db")], tmp_path / "h")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "megatron_gpt_tp2.log: neither the log nor the flags/--sidecar give gpu, model" in r.output
    assert "bare.log: neither the log nor the flags/--sidecar give gpu, num_gpus, seq_len" in r.output


# ------------------------------------------------------------------------------ 3. source defaults
def _ingest(tmp_path: Path, *extra: str, log: Path = TT, sidecar: Path | None = None):
    side = sidecar or LOGS / f"{log.stem}.yaml"
    args = ["calibrate", "ingest", str(log), "--store", str(tmp_path / "runs.db"), "--sidecar", str(side)]
    return _run([*args, *extra], tmp_path / "home")


def test_group_names_the_source_and_ingest_says_so(tmp_path) -> None:
    r = _ingest(tmp_path, "--group", "mine")
    assert r.exit_code == 0, r.output
    assert "torchtitan_llama3_8b.log: source 'mine' (--group)" in r.output
    assert [x.source for x in RunStore(tmp_path / "runs.db").runs()] == ["mine"]


def test_sidecar_cluster_is_the_default_source(tmp_path) -> None:
    side = tmp_path / "side.yaml"
    side.write_text((LOGS / "torchtitan_llama3_8b.yaml").read_text() + "cluster: lab-a\n")
    r = _ingest(tmp_path, sidecar=side)
    assert r.exit_code == 0, r.output
    assert "source 'lab-a' (the sidecar's cluster)" in r.output
    assert [x.source for x in RunStore(tmp_path / "runs.db").runs()] == ["lab-a"]


def test_without_group_the_source_is_the_format_and_ingest_says_so(tmp_path) -> None:
    r = _ingest(tmp_path, "--json")
    doc = json.loads(r.stdout)
    assert doc["files"][0]["default_source"] == "torchtitan-log"
    assert "no --group" in doc["files"][0]["default_source_from"]
    r2 = _ingest(tmp_path)  # the table too, even when nothing new is stored
    assert "source 'torchtitan-log' (named after the log format: no --group NAME given)" in r2.output


def test_source_and_group_disagreeing_is_one_line(tmp_path) -> None:
    r = _ingest(tmp_path, "--group", "a", "--source", "b")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--source 'b' and --group 'a'" in r.output


# ------------------------------------------------------------------- 4. before -> after columns
def _rows(after_equal: bool) -> pd.DataFrame:
    before = {"median_ape_before": 0.117, "mean_ape_before": 0.146, "spearman_before": 0.92}
    after = (
        {"median_ape_after": 0.117, "mean_ape_after": 0.146, "spearman_after": 0.92}
        if after_equal
        else {"median_ape_after": 0.092, "mean_ape_after": 0.146, "spearman_after": 0.92}
    )
    row = {"source": "a", "n": 3, **before, **after, "band_coverage": 0.8, "band_width": 0.25}
    return pd.DataFrame([row, {**row, "source": "all"}])


def _text(table) -> str:
    from rich.console import Console

    c = Console(width=400, record=True)
    c.print(table)
    return c.export_text()


def test_equal_before_after_columns_say_why_instead_of_repeating() -> None:
    same = _text(_loso_table(_rows(after_equal=True), "source"))
    assert SAME_AS_ANALYTICAL in _flat(same) and "→" not in same.split("\n", 3)[-1]
    assert "11.7%" in same and "11.7% → 11.7%" not in same
    moved = _text(_loso_table(_rows(after_equal=False), "source"))
    assert "analytical → corrected" in moved and "11.7% → 9.2%" in moved


def test_half_width_by_hand() -> None:
    # a band 0.8x .. 1.25x of its centre: log width log(1.5625) = 0.446, half 0.223, e^0.223 - 1 = 25%
    assert half_width_pct(0.8, 1.25) == pytest.approx(25.0)
    assert half_width_pct(1.0, 1.0) == 0.0


# ------------------------------------------------------------------------------ 5. far-off runs
def test_far_off_run_is_stored_with_a_warning_at_ingest(tmp_path) -> None:
    """The Megatron fixture: 128 x 2048 tokens in 6.1 s on 8 GPUs = 5,372 tokens/s per GPU, about half what
    the analytical model predicts for its layout."""
    r = _ingest(tmp_path, *MEG_FLAGS, log=MEG)
    assert r.exit_code == 0, r.output
    runs = RunStore(tmp_path / "runs.db").runs()
    assert len(runs) == 1  # stored: a warning, not an error
    measured = 128 * 2048 / 6.1 / 8
    ratio = measured / _predicted(runs[0].record)
    assert not 1 / FAR_OFF_FACTOR <= ratio <= FAR_OFF_FACTOR
    out = _flat(r.output)
    assert f"warning: megatron_gpt_tp2.log: measured {measured:,.0f} tokens/s per GPU is {ratio:.2f}x" in out
    assert "more GPUs stated than ran, a global batch below the one that ran" in out
    doc = json.loads(_ingest(tmp_path, *MEG_FLAGS, "--json", log=MEG).stdout)
    assert len(doc["warnings"]) == 1 and f"{ratio:.2f}x" in doc["warnings"][0]


def test_a_run_near_its_prediction_gets_no_warning(tmp_path) -> None:
    r = _ingest(tmp_path, "--json")  # the torchtitan fixture: 5,762 of a predicted ~7,600 (0.76x)
    assert json.loads(r.stdout)["warnings"] == []


@given(st.floats(1e-3, 1e3))
def test_far_off_is_symmetric_in_the_ratio(ratio) -> None:
    assert (
        is_far_off(ratio)
        == is_far_off(1 / ratio)
        == (abs(math.log(ratio)) > math.log(FAR_OFF_FACTOR) + 1e-12)
    )


def test_far_off_boundaries_and_the_gpu_count_hint() -> None:
    assert not is_far_off(1.5) and is_far_off(1.51) and not is_far_off(0.67) and is_far_off(0.66)
    line = far_off_warning("run.log", 8 * 1000.0, 1000.0, num_gpus=8)  # the job's tokens/s stored per GPU
    assert "8.00x" in line and "the ratio is about the GPU count (8)" in line and "for the whole job" in line


# ------------------------------------------------------- 6. worse held-out runs, and no --group
@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory) -> Path:
    """Both fixture logs ingested without --group: sources megatron-log and torchtitan-log."""
    d = tmp_path_factory.mktemp("store")
    assert _ingest(d, *MEG_FLAGS, log=MEG).exit_code == 0
    assert _ingest(d).exit_code == 0
    return d


def test_worse_fit_warns_and_never_silently_replaces_a_model(fixture_store) -> None:
    """Without --group the fixture runs are two groups: the refit predicts them worse, held out, than the
    default calibration. A new file is written with a warning naming both errors; an existing one (a model
    that may be in use) is left as it was, with one error line, unless --force."""
    d = fixture_store
    out = d / "m.json"
    base = ["calibrate", "fit", "--store", str(d / "runs.db"), "--out", str(out)]
    first = _run(base, d / "home")
    assert first.exit_code == 0 and out.is_file(), first.output
    text = _flat(first.output)
    assert "no --group: your runs are in 2 groups (megatron-log, torchtitan-log)" in text
    assert "--group NAME fits them as your one cluster NAME" in text
    m = re.search(
        r"warning: held out, your 2 run\(s\) are predicted within ([\d.]+)% \(median error\) by this "
        r"fit, ([\d.]+)% by the default calibration: worse than the default",
        text,
    )
    assert m and float(m.group(1)) > float(m.group(2)), text
    saved = out.read_bytes()
    again = _run(base, d / "home")
    err = next(ln for ln in again.output.splitlines() if ln.startswith("error:"))
    assert again.exit_code == 2 and out.read_bytes() == saved
    assert f"within {m.group(1)}% (median error) by this fit, {m.group(2)}% by the default" in err
    assert "m.json not replaced" in err and err.endswith("--force replaces it anyway")
    forced = _run([*base, "--force", "--json"], d / "home")
    assert forced.exit_code == 0, forced.output
    s = json.loads(forced.stdout)["summary"]
    assert s["worse"] and s["group"] is None
    assert (f"{100 * s['held_out_ape_after']:.1f}", f"{100 * s['held_out_ape_before']:.1f}") == m.groups()
    assert len(s["far_off"]) == 1 and s["far_off"][0].startswith("megatron-log-")  # named at fit too


def test_a_new_group_name_fits_all_your_runs_as_one_cluster(fixture_store) -> None:
    d = fixture_store
    out = d / "mine.json"
    r = _run(
        ["calibrate", "fit", "--store", str(d / "runs.db"), "--group", "mine", "--out", str(out), "--json"],
        d / "home",
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["summary"]
    assert s["group"] == "mine" and s["held_out_runs"] == 2 and not s["worse"]
    assert s["held_out_ape_after"] <= s["held_out_ape_before"]
    # both runs measured below the prediction: the cluster's factor lies between theirs and 1
    assert s["measured_vs_predicted"] < s["cluster_factor"] < 1
    assert json.loads(out.read_text())["meta"]["group"] == "mine"
