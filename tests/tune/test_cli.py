"""`autopar tune` end to end on this CPU: the cmd: runner with a fake cluster (a script that answers like a
cluster would), the slurm runner with fake sbatch/squeue/scancel on PATH, the dryrun runner on gloo, resume
after an interruption, and bad input (issue 42)."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autopar.cli import app

runner = CliRunner()
# Llama-3.1-70B on 64 H100 (the default problem): four layouts, predicted within ~10% of each other
LABELS = ["TP8+SP PP2v4 DP4/Z1 mb1", "TP8+SP DP8/Z1 mb1", "TP4+SP PP4 DP4/Z1 mb1", "TP8+SP PP4 DP2/Z1 mb1"]
# What the fake cluster measures (tokens/s per GPU): the second label is the fastest, unlike the model's order
FAKE = {LABELS[0]: 900.0, LABELS[1]: 1010.0, LABELS[2]: 700.0, LABELS[3]: 880.0}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _script(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _fake_cluster(tmp: Path, extra: str = "") -> Path:
    table = json.dumps(FAKE)
    return _script(
        tmp / "fake.py",
        f"""\
        import json, os, sys
        label = os.environ["AUTOPAR_STRATEGY"]
        knobs = json.load(open(os.environ["AUTOPAR_STRATEGY_JSON"]))
        assert knobs["label"] == label and knobs["num_gpus"] == 64 and "tp" in knobs
        assert os.getcwd() == os.environ["AUTOPAR_RUN_DIR"]
        {extra}
        json.dump({{"status": "ok", "tokens_per_s_per_gpu": {table}[label], "peak_mem_gib": 60.0}},
                  open(os.environ["AUTOPAR_RESULT"], "w"))
        """,
    )


def _labels(tmp: Path, labels=LABELS) -> Path:
    p = tmp / "labels.txt"
    p.write_text("# shortlist\n" + "\n".join(labels) + "\n")
    return p


def _tune(*args: str):
    return runner.invoke(app, ["tune", *args])


def test_cmd_runner_finds_the_measured_best_stops_and_writes_report_and_store(home):
    fake = _fake_cluster(home)
    res = _tune(
        "--runner",
        f"cmd:{sys.executable} {fake}",
        "--candidates",
        str(_labels(home)),
        "--json",
        "--out",
        "r.html",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["pick"]["strategy"] == LABELS[1] and doc["pick"]["measured"] == 1010.0
    assert doc["stopped"] in ("confident", "exhausted")
    assert 1 <= len(doc["runs"]) <= len(LABELS)
    assert [r["run"] for r in doc["runs"]] == list(range(1, len(doc["runs"]) + 1))
    for r in doc["runs"]:  # prediction beside measurement, in order
        assert (
            r["measured"] == FAKE[r["strategy"]]
            and r["predicted"] > 0
            and r["believed"][1] < r["believed"][2]
        )
    html = Path("r.html").read_text()
    assert "fig-runs" in html and "fig-belief" in html and LABELS[1] in html
    assert (Path(doc["runs"][0]["run_dir"]).parent / "pick" / "job.sbatch").exists()
    listed = json.loads(runner.invoke(app, ["calibrate", "list", "--json"]).stdout)
    assert listed["count"] == len(doc["runs"])
    assert {r["source"] for r in listed["runs"]} == {"autopar-tune"}


def test_the_study_is_native_optuna_and_a_second_tune_resumes_without_relaunching(home):
    import optuna

    fake = _fake_cluster(
        home, extra='open(os.environ["AUTOPAR_RUN_DIR"] + "/../launched", "a").write(label + "\\n")'
    )
    args = ["--runner", f"cmd:{sys.executable} {fake}", "--candidates", str(_labels(home)), "--json"]
    first = json.loads(_tune(*args, "--max-runs", "2").stdout)
    assert first["stopped"] == "max_runs" and len(first["runs"]) == 2
    second = json.loads(_tune(*args).stdout)
    assert [r["resumed"] for r in second["runs"][:2]] == [True, True]
    launched = (Path(second["runs"][0]["run_dir"]).parent / "launched").read_text().split("\n")
    assert len([x for x in launched if x]) == len(second["runs"])  # none launched twice
    storage = second["study"]["storage"]
    study = optuna.load_study(
        study_name=second["study"]["name"],
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage)),
    )
    assert study.metric_names == ["tokens_per_s_per_gpu"]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == len(second["runs"])
    t = done[0]
    assert t.params["candidate"] in LABELS and t.values[0] == FAKE[t.params["candidate"]]
    assert t.user_attrs["predicted_tokens_per_s_per_gpu"] > 0 and "handle" in t.user_attrs


def test_a_crashed_tune_reattaches_to_the_run_still_going(home):
    """A RUNNING trial whose process is still alive is waited for; one whose process is gone is stale."""
    from autopar.catalog import get_gpu, get_model
    from autopar.specs import ClusterSpec, Workload
    from autopar.tune.candidates import from_labels
    from autopar.tune.runners.base import Job
    from autopar.tune.runners.command import CommandRunner

    m = get_model("llama-3.1-70b")
    c = from_labels(
        m,
        ClusterSpec(gpu=get_gpu("h100"), num_gpus=64),
        Workload(seq_len=8192, global_batch=512),
        LABELS[:1],
        None,
    )[0]
    r1 = CommandRunner(
        f"sleep 1; {sys.executable} -c \"import json,os; json.dump({{'status':'ok','tokens_per_s_per_gpu':900}}, open(os.environ['AUTOPAR_RESULT'],'w'))\""
    )
    job = Job(1, c, home / "run1", 30, 10, 30.0)
    handle = r1.start(job)
    r2 = CommandRunner("true")  # a fresh tune: the process is not its child
    out = r2.attach(job, handle)
    assert out is not None and out.status == "ok" and out.tokens_per_s_per_gpu == 900
    gone = Job(2, c, home / "run2", 30, 10, 30.0)
    gone.run_dir.mkdir()
    assert r2.attach(gone, {"pid": 999_999_999, "start": "0"}) is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            'json.dump({"status": "ok", "tokens_per_s_per_gpu": float("nan")}, open(os.environ["AUTOPAR_RESULT"], "w"))',
            "not a positive number",
        ),
        (
            'json.dump({"status": "ok", "tokens_per_s_per_gpu": -5}, open(os.environ["AUTOPAR_RESULT"], "w"))',
            "not a positive number",
        ),
        (
            'json.dump({"status": "ok", "tokens_per_s_per_gpu": 1e6}, open(os.environ["AUTOPAR_RESULT"], "w"))',
            "the prediction",
        ),
        ('json.dump({"status": "maybe"}, open(os.environ["AUTOPAR_RESULT"], "w"))', "expected one of"),
        ("print('hello'); sys.exit(3)", "exit code 3"),
        ("print('no result')", "no training log"),
        ('json.dump({"status": "oom"}, open(os.environ["AUTOPAR_RESULT"], "w"))', ""),
    ],
)
def test_a_bad_run_fails_with_one_reason_and_the_loop_goes_on(home, body, reason):
    fake = _script(
        home / "bad.py",
        f"""\
        import json, os, sys
        label = os.environ["AUTOPAR_STRATEGY"]
        if label == {LABELS[0]!r}:
            {body}
            sys.exit(0)
        json.dump({{"status": "ok", "tokens_per_s_per_gpu": {json.dumps(FAKE)}[label]}}, open(os.environ["AUTOPAR_RESULT"], "w"))
        """,
    )
    res = _tune("--runner", f"cmd:{sys.executable} {fake}", "--candidates", str(_labels(home)), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    first = next(r for r in doc["runs"] if r["strategy"] == LABELS[0])
    assert first["status"] in ("failed", "oom") and reason in first["reason"]
    assert doc["pick"]["strategy"] == LABELS[1]  # measured on after the bad run


def test_a_run_past_its_timeout_is_stopped(home):
    fake = _fake_cluster(home, extra=f"import time; time.sleep(60) if label == {LABELS[0]!r} else None")
    res = _tune(
        "--runner",
        f"cmd:{sys.executable} {fake}",
        "--candidates",
        str(_labels(home)),
        "--json",
        "--run-timeout",
        "1",
    )
    doc = json.loads(res.stdout)
    first = next(r for r in doc["runs"] if r["strategy"] == LABELS[0])
    assert first["status"] == "failed" and "timeout" in first["reason"] and first["wall_s"] < 30


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--runner", "slurmm"], "slurm"),
        (["--runner", "cmd:"], "cmd:"),
        (["--runner", "cmd:true", "--stop-probability", "2"], "stop-probability"),
        (["--runner", "cmd:true", "--warmup-steps", "40"], "warmup-steps"),
        (["--runner", "cmd:true", "--no-store", "--cluster-tag", "x"], "--no-store"),
    ],
)
def test_bad_flags_are_one_line(home, args, named):
    res = _tune(*args)
    assert res.exit_code == 2 and named in res.output and "Traceback" not in res.output


def test_an_invalid_candidate_is_rejected_by_name_before_any_run(home):
    res = _tune("--runner", "cmd:touch ran", "--candidates", str(_labels(home, [LABELS[0], "TP3 PP7 mb1"])))
    assert res.exit_code == 2 and "TP3 PP7 mb1" in res.output
    assert not list(home.rglob("ran"))


def test_a_record_file_defines_the_problem_so_problem_flags_are_errors(home):
    rows = home / "c.csv"
    rows.write_text(
        "id,model,gpu,num_gpus,seq_len,global_batch,tp,pp,dp,sp,zero,micro_batch,recompute,precision,framework,measured_tokens_per_s_per_gpu\n"
        "a,llama-3.1-70b,H100-SXM,64,8192,512,8,2,4,1,1,1,none,bf16,megatron,123\n"
        "b,llama-3.1-70b,H100-SXM,64,8192,256,8,1,8,1,1,1,none,bf16,megatron,\n"
    )
    bad = _tune("--runner", "cmd:true", "--candidates", str(rows), "--model", "llama-3.1-8b")
    assert bad.exit_code == 2 and "--model" in bad.output
    fake = _script(
        home / "ids.py",
        """\
        import json, os
        tps = {"a": 900.0, "b": 950.0}[os.environ["AUTOPAR_CANDIDATE_ID"]]
        json.dump({"status": "ok", "tokens_per_s_per_gpu": tps}, open(os.environ["AUTOPAR_RESULT"], "w"))
        """,
    )
    doc = json.loads(
        _tune("--runner", f"cmd:{sys.executable} {fake}", "--candidates", str(rows), "--json").stdout
    )
    assert doc["pick"]["candidate_id"] == "b" and doc["pick"]["measured"] == 950.0


def test_slurm_runner_with_fake_sbatch(home, monkeypatch):
    """sbatch writes a Megatron log for the --train-iters the script asks (every iteration logged)."""
    bin_ = home / "bin"
    bin_.mkdir()
    _script(
        bin_ / "sbatch",
        f"""\
        #!{sys.executable}
        import re, sys
        out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--output="))
        script = open(sys.argv[-1]).read()
        iters = int(re.search(r"--train-iters (\\d+)", script).group(1))
        assert "--log-interval 1" in script
        ms = 62000.0 if "--pipeline-model-parallel-size 2" in script else 70000.0
        with open(out.replace("%j", "4242"), "w") as f:
            for i in range(1, iters + 1):
                f.write(f" iteration {{i:8d}}/{{iters:8d}} | consumed samples: {{512*i}} | elapsed time per iteration (ms): {{ms * (3 if i == 1 else 1):.1f}} | global batch size:   512 | lm loss: 1.0 |\\n")
        print("4242")
        """,
    )
    _script(bin_ / "squeue", "#!/bin/sh\nexit 0\n")
    _script(bin_ / "scancel", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    res = _tune("--runner", "slurm", "--candidates", str(_labels(home, LABELS[:2])), "--json", "--no-store")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    ok = [r for r in doc["runs"] if r["status"] == "ok"]
    assert ok
    for r in ok:  # 512 x 8192 tokens per step / (ms / 1000) / 64 GPUs, warm-up iteration left out
        ms = 62000.0 if "PP2" in r["strategy"] else 70000.0
        assert r["measured"] == pytest.approx(512 * 8192 / (ms / 1000) / 64)


def test_dryrun_runner_on_cpu_measures_stops_and_reports(home):
    pytest.importorskip("torch")
    labels = _labels(home, ["TP2+SP DP4/Z1 mb1", "DP8/Z1 mb1", "TP2+SP DP4/Z3 mb1"])
    args = ["--runner", "dryrun", "--candidates", str(labels), "--model", "llama-3.1-8b", "--gpus", "8"]
    args += [
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--steps",
        "3",
        "--warmup-steps",
        "1",
        "--json",
        "--out",
        "d.html",
    ]
    res = _tune(*args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert 1 <= len(doc["runs"]) <= 6 and doc["stopped"] in ("confident", "exhausted")
    assert all(r["status"] == "ok" and r["smoke"] for r in doc["runs"]), doc["runs"]
    assert Path("d.html").exists()


def _tune_process(home: Path, fake: Path, *extra: str):
    import subprocess

    args = [sys.executable, "-m", "autopar", "tune", "--runner", f"cmd:{sys.executable} {fake}"]
    args += [
        "--candidates",
        str(home / "labels.txt"),
        "--json",
        "--no-store",
        "--study-name",
        "shared",
        *extra,
    ]
    env = {**os.environ, "AUTOPAR_HOME": str(home / "home")}
    return subprocess.Popen(
        args, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


_LOG_LAUNCH = (
    'open(os.environ["AUTOPAR_RUN_DIR"] + "/../launched", "a").write(label + "\\n"); '
    'open(os.environ["AUTOPAR_RUN_DIR"] + "/started", "w").write("1"); time.sleep({sleep})'
)


def test_two_tunes_on_one_study_share_the_work_and_launch_nothing_twice(home):
    _labels(home)
    fake = _fake_cluster(home, extra="import time; " + _LOG_LAUNCH.format(sleep=1.0))
    procs = [_tune_process(home, fake) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-500:] for o in outs]
    docs = [json.loads(o[0]) for o in outs]
    launched = [x for x in (home / "autopar-tune" / "shared" / "launched").read_text().split("\n") if x]
    assert len(launched) == len(set(launched))  # no candidate ran twice
    # each tune saw the other's runs: both pick the best that either measured
    assert all(d["pick"]["measured"] == max(FAKE[x] for x in launched) for d in docs)
    assert all(len(d["runs"]) == len(launched) for d in docs)


def test_a_tune_killed_with_sigkill_is_resumed_and_its_run_reattached(home):
    import signal
    import time

    _labels(home)
    fake = _fake_cluster(home, extra="import time; " + _LOG_LAUNCH.format(sleep=3.0))
    first = _tune_process(home, fake)
    runs = home / "autopar-tune" / "shared"
    deadline = time.monotonic() + 120
    while not list(runs.glob("run*/started")) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(first.pid, signal.SIGKILL)  # the run it launched goes on in its own session
    first.communicate()
    second = _tune_process(home, fake)
    out, err = second.communicate(timeout=240)
    assert second.returncode == 0, err[-500:]
    doc = json.loads(out)
    assert doc["runs"][0]["resumed"] and doc["runs"][0]["status"] == "ok"  # re-attached, its result read
    launched = [x for x in (runs / "launched").read_text().split("\n") if x]
    assert len(launched) == len(set(launched)) == len(doc["runs"])


def test_an_oom_run_is_stored_as_memory_evidence(home):
    """A run that ran out of memory is kept in the store (measured_oom, no throughput): the memory
    calibration learns a lower bound from it (calibration/models/features.py OOM_EVIDENCE)."""
    fake = _script(
        home / "oom.py",
        f"""\
        import json, os
        label = os.environ["AUTOPAR_STRATEGY"]
        if label == {LABELS[0]!r}:
            json.dump({{"status": "oom"}}, open(os.environ["AUTOPAR_RESULT"], "w"))
        else:
            json.dump({{"status": "ok", "tokens_per_s_per_gpu": {json.dumps(FAKE)}[label]}}, open(os.environ["AUTOPAR_RESULT"], "w"))
        """,
    )
    res = _tune("--runner", f"cmd:{sys.executable} {fake}", "--candidates", str(_labels(home)), "--json")
    assert res.exit_code == 0, res.output
    runs = json.loads(runner.invoke(app, ["calibrate", "list", "--json"]).stdout)["runs"]
    oom = [r for r in runs if str(r.get("measured_oom")).lower() == "true"]
    assert len(oom) == 1 and not oom[0].get("measured_tokens_per_s_per_gpu")


def test_study_runs_shows_a_tunes_runs_and_how_it_ended(home):
    """`autopar study runs` reads a tune's study (any storage): the runs in order with what each measured, the
    best so far, and the stop rule and pick once the tune has ended; while it runs, no end is shown; an
    optimize study or an unknown one is one line."""
    fake = _fake_cluster(home)
    args = ["--runner", f"cmd:{sys.executable} {fake}", "--candidates", str(_labels(home)), "--json"]
    first = json.loads(_tune(*args, "--max-runs", "2").stdout)
    storage, name = first["study"]["storage"], first["study"]["name"]
    runs = json.loads(runner.invoke(app, ["study", "runs", "--storage", storage, "--json"]).stdout)
    assert runs["name"] == name and runs["candidates"] == len(LABELS) and runs["running"] == 0
    assert [r["strategy"] for r in runs["runs"]] == [r["strategy"] for r in first["runs"]]
    assert [r["measured"] for r in runs["runs"]] == [FAKE[r["strategy"]] for r in first["runs"]]
    best = [max(FAKE[r["strategy"]] for r in first["runs"][: i + 1]) for i in range(2)]
    assert [r["best_so_far"] for r in runs["runs"]] == best
    assert runs["stopped"] == {
        "rule": "max_runs",
        "why": first["why"],
        "pick": first["pick"]["strategy"],
        "runs": 2,
    }
    second = json.loads(_tune(*args).stdout)
    again = json.loads(runner.invoke(app, ["study", "runs", "--storage", storage, "--json"]).stdout)
    assert len(again["runs"]) == len(second["runs"]) and again["stopped"]["rule"] == second["stopped"]
    text = runner.invoke(app, ["study", "runs", "--storage", storage], env={"COLUMNS": "160"})
    assert (
        text.exit_code == 0 and LABELS[1] in text.output and f"stopped ({second['stopped']})" in text.output
    )
    other = runner.invoke(app, ["study", "runs", "--storage", storage, "--study-name", "nope"])
    assert other.exit_code == 2 and len(other.output.strip().splitlines()) == 1
