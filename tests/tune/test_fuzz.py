"""Fuzzing `autopar tune`'s runner surface as an attacker or an unlucky user would (issue 45): a `cmd:` runner
that FLOODS its log, LIES in its result file, DIES mid-run or HANGS past --run-timeout, and `tune` itself
killed with SIGKILL mid-run and started again. Each bad run must FAIL with one short line, leave nothing in
the calibration store, leave no process of its own behind, and the loop must go on; a resumed study must end
with no trial RUNNING and no candidate launched twice.

What tests/tune/test_cli.py already covers is not repeated here: NaN and negative throughput, 1e6 (10x off
the prediction), an unknown status, a non-zero exit without a result, no parsable log, a plain timeout
(a runner that honours SIGTERM), re-attaching to a run still going after SIGKILL, two tunes on one study.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procs import gone
from typer.testing import CliRunner

from autopar.cli import app

cli = CliRunner()
# Llama-3.1-70B on 64 H100 (the default problem), as tests/tune/test_cli.py
LABELS = ["TP8+SP PP2v4 DP4/Z1 mb1", "TP8+SP DP8/Z1 mb1", "TP4+SP PP4 DP4/Z1 mb1", "TP8+SP PP4 DP2/Z1 mb1"]
FAKE = {LABELS[0]: 900.0, LABELS[1]: 1010.0, LABELS[2]: 700.0, LABELS[3]: 880.0}
BAD = LABELS[0]  # the candidate whose run misbehaves (the model ranks it first: it runs first)
REASON_MAX = 600  # a FAIL reason is one line of at most this many characters


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPAR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _runner(tmp: Path, bad: str, labels: list[str] = LABELS[:2]) -> list[str]:
    """A `cmd:` runner (a shell script): every launch appends its label to tmp/launched; the candidate BAD
    runs the shell snippet `bad` (which exits itself), the others answer FAKE in $AUTOPAR_RESULT. The
    --runner and --candidates arguments of a tune over `labels`."""
    cases = "\n".join(f'  "{lab}") tps={FAKE[lab]};;' for lab in labels)
    (tmp / "runner.sh").write_text(
        f'echo "$AUTOPAR_STRATEGY" >> "{tmp}/launched"\n'
        f'if [ "$AUTOPAR_STRATEGY" = "{BAD}" ]; then\n{bad}\nfi\n'
        f'case "$AUTOPAR_STRATEGY" in\n{cases}\nesac\n'
        """printf '{"status": "ok", "tokens_per_s_per_gpu": %s, "peak_mem_gib": 60.0}' "$tps" > "$AUTOPAR_RESULT"\n"""
    )
    (tmp / "labels.txt").write_text("\n".join(labels) + "\n")
    return ["--runner", f"cmd:sh {tmp / 'runner.sh'}", "--candidates", str(tmp / "labels.txt")]


def _tune(*args: str) -> dict:
    res = cli.invoke(app, ["tune", *args, "--json"])
    assert res.exit_code == 0, res.output[-2000:]
    return json.loads(res.stdout)


def _bad_run(doc: dict) -> dict:
    """The BAD candidate's run, after checking its reason is one short line and the loop went on."""
    bad = [r for r in doc["runs"] if r["strategy"] == BAD]
    assert len(bad) == 1, doc["runs"]
    r = bad[0]
    assert r["reason"] and len(r["reason"]) <= REASON_MAX, r["reason"][:2000]
    assert not any(ch in r["reason"] for ch in "\n\r\x1b\x00"), r["reason"]
    assert doc["pick"] is not None and doc["pick"]["strategy"] == LABELS[1]  # measured on after it
    return r


def _stored() -> list[dict]:
    return json.loads(cli.invoke(app, ["calibrate", "list", "--json"]).stdout)["runs"]


def _launched(tmp: Path) -> list[str]:
    path = tmp / "launched"
    return [x for x in path.read_text().split("\n") if x] if path.exists() else []


def _prediction(label: str) -> tuple[float, float, float]:
    """(predicted tokens/s per GPU, predicted MFU, predicted peak GiB) of `label` on the default problem."""
    from autopar.catalog import get_gpu, get_model
    from autopar.specs import ClusterSpec, Workload
    from autopar.tune.candidates import from_labels

    cluster = ClusterSpec(gpu=get_gpu("h100"), num_gpus=64)
    c = from_labels(
        get_model("llama-3.1-70b"), cluster, Workload(seq_len=8192, global_batch=512), [label], None
    )[0]
    return c.predicted, c.mfu, c.mem_gib


def _vm_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


_WARM: list[bool] = []
GROWTH_MAX_MIB = 64  # what reading a run's leavings may add to tune's peak memory, at most


def _tune_measured(home: Path, *args: str) -> tuple[dict, float]:
    """_tune(*args) and how much it grew this process's peak RSS (MiB; 0.0 where Linux cannot reset the
    peak). A first, quiet tune takes the imports and caches out of the measurement."""
    if not _WARM:
        (home / "warm-up").mkdir()
        _tune(*_runner(home / "warm-up", ":"), "--no-store", "--study-name", "warm-up")
        _WARM.append(True)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    except OSError:
        return _tune(*args), 0.0
    before = _vm_kib("VmRSS")
    doc = _tune(*args)
    return doc, (_vm_kib("VmHWM") - before) / 1024


# ------------------------------------------------------------------------------------------------ LIES
def _lie(body: str) -> str:
    return f"printf '%s' '{body}' > \"$AUTOPAR_RESULT\"; exit 0"


LIES = {
    "inf": _lie('{"status": "ok", "tokens_per_s_per_gpu": Infinity}'),
    "minus-inf": _lie('{"status": "ok", "tokens_per_s_per_gpu": -Infinity}'),
    "zero": _lie('{"status": "ok", "tokens_per_s_per_gpu": 0}'),
    "1e308": _lie('{"status": "ok", "tokens_per_s_per_gpu": 1e308}'),
    "1e-308": _lie('{"status": "ok", "tokens_per_s_per_gpu": 1e-308}'),
    "overflowing-int": _lie('{"status": "ok", "tokens_per_s_per_gpu": 1' + "0" * 400 + "}"),
    "int-over-4300-digits": _lie('{"status": "ok", "tokens_per_s_per_gpu": 9' + "9" * 5000 + "}"),
    "string": _lie('{"status": "ok", "tokens_per_s_per_gpu": "900"}'),
    "bool": _lie('{"status": "ok", "tokens_per_s_per_gpu": true}'),
    "nested-object": _lie('{"status": "ok", "tokens_per_s_per_gpu": {"value": 900}}'),
    "list-value": _lie('{"status": "ok", "tokens_per_s_per_gpu": [900]}'),
    "json-list": _lie('[{"status": "ok", "tokens_per_s_per_gpu": 900}]'),
    "status-list": _lie('{"status": ["ok"], "tokens_per_s_per_gpu": 900}'),
    "deep-nesting": _lie("[" * 50_000 + "]" * 50_000),
    "truncated": _lie('{"status": "ok", "tokens_per'),
    "empty": ': > "$AUTOPAR_RESULT"; exit 0',
    "invalid-utf8": 'printf \'{"status": "ok", "tokens_per_s_per_gpu": 900, "x": "\\377\\376"}\' '
    '> "$AUTOPAR_RESULT"; exit 0',
    "nul-bytes": "printf '\\000\\000{}' > \"$AUTOPAR_RESULT\"; exit 0",
    "peak-mem-1e308": _lie('{"status": "ok", "tokens_per_s_per_gpu": 900, "peak_mem_gib": 1e308}'),
    "peak-mem-1e-300": _lie('{"status": "ok", "tokens_per_s_per_gpu": 900, "peak_mem_gib": 1e-300}'),
    "oom-with-peak-1e308": _lie('{"status": "oom", "peak_mem_gib": 1e308}'),
    "huge-failed-reason": 'printf \'{"status": "failed", "reason": "\' > "$AUTOPAR_RESULT"; '
    "yes 'line \\\\n \\\\u001b[31m red' | head -c 900000 | tr '\\n' ' ' >> \"$AUTOPAR_RESULT\"; "
    'printf \'"}\' >> "$AUTOPAR_RESULT"; exit 0',
    "fifo": 'mkfifo "$AUTOPAR_RESULT"; exit 0',
    "symlink-dev-zero": 'ln -s /dev/zero "$AUTOPAR_RESULT"; exit 0',
    "symlink-dev-urandom": 'ln -s /dev/urandom "$AUTOPAR_RESULT"; exit 0',
    "directory": 'mkdir "$AUTOPAR_RESULT"; exit 0',
    "sparse-1GB": """printf '{"status": "ok", "tokens_per_s_per_gpu": 900}' > "$AUTOPAR_RESULT"; """
    'truncate -s 1G "$AUTOPAR_RESULT"; exit 0',
    "log-is-a-fifo": "rm -f output.log; mkfifo output.log; exit 1",
    "log-is-dev-zero": "rm -f output.log; ln -s /dev/zero output.log; exit 1",
}


@pytest.mark.parametrize("lie", list(LIES), ids=list(LIES))
def test_a_lying_result_fails_with_one_reason_stores_nothing_and_the_loop_goes_on(home, lie):
    t0 = time.monotonic()
    doc, growth = _tune_measured(home, *_runner(home, LIES[lie]), "--run-timeout", "20")
    assert time.monotonic() - t0 < 15  # no read of an endless or huge file, no wait on a FIFO
    assert growth < GROWTH_MAX_MIB, f"tune's peak RSS grew {growth:.0f} MiB reading the result"
    r = _bad_run(doc)
    assert r["status"] == "failed" and r["measured"] is None
    stored = _stored()
    assert len(stored) == 1 and BAD not in stored[0]["notes"]  # only the good run was learned from
    assert sorted(_launched(home)) == sorted(LABELS[:2])  # each ran once


def test_a_measurement_over_100_percent_mfu_fails(home):
    """Within 10x of the prediction but more model FLOPs than the GPU's dense peak."""
    predicted, mfu, _ = _prediction(BAD)
    assert 0 < mfu < 1
    tps = predicted / mfu * 1.2  # MFU 120%
    doc = _tune(*_runner(home, _lie(f'{{"status": "ok", "tokens_per_s_per_gpu": {tps}}}')))
    r = _bad_run(doc)
    assert r["status"] == "failed" and "MFU" in r["reason"]
    assert all(BAD not in s["notes"] for s in _stored())


def _torchtitan(memory: str, tps: str) -> str:
    """A torchtitan log of 30 steps with the given memory (GiB) and tokens/s per GPU fields."""
    return (
        'i=1; while [ $i -le 30 ]; do echo "step: $i  loss: 1.0  memory: '
        f'{memory}GiB(50%)  tps: {tps}  tflops: 300  mfu: 30%"; i=$((i + 1)); done; exit 0'
    )


LOG_LIES = {
    "negative-memory": _torchtitan("-1", "900"),  # a log of log(negative) once crashed the belief
    "nan-throughput": _torchtitan("60", "nan"),
    "huge-throughput": _torchtitan("60", "9" * 40),
    "memory-over-the-gpu": _torchtitan("900000", "900"),
}


@pytest.mark.parametrize("lie", list(LOG_LIES), ids=list(LOG_LIES))
def test_a_lying_training_log_fails_with_one_reason(home, lie):
    doc = _tune(*_runner(home, LOG_LIES[lie]))
    r = _bad_run(doc)
    assert r["status"] == "failed" and r["measured"] is None, r
    assert all(BAD not in s["notes"] for s in _stored())


# ----------------------------------------------------------------------------------------------- FLOOD
_MEGATRON = (
    'i=1; while [ $i -le 30 ]; do echo " iteration $i/      30 | consumed samples: $((512 * i)) | '
    'elapsed time per iteration (ms): 62000.0 | global batch size:   512 | lm loss: 1.0 |"; i=$((i + 1)); done'
)
FLOODS = {
    # 200 MB of lines, exit 0, no result
    "200MB-of-lines": (
        "yes 'NCCL INFO a line of a log that never ends' | head -c 200000000; exit 0",
        "failed",
    ),
    # one 50 MB line with no newline, then a non-zero exit
    "one-50MB-line": ("head -c 50000000 /dev/zero | tr '\\000' a; exit 1", "failed"),
    # many megatron-looking fragments on one line: a regex that scans each to the line's end is quadratic
    "pathological-line": (
        "yes 'iteration 1/ 2 | step: 1 x ' | head -c 30000000 | tr -d '\\n'; exit 1",
        "failed",
    ),
    # 100 MB of noise, then a real Megatron-LM log: the tail still measures the run
    "noise-then-a-log": (f"yes 'warning: noise' | head -c 100000000; {_MEGATRON}; exit 0", "ok"),
}


@pytest.mark.parametrize("flood", list(FLOODS), ids=list(FLOODS))
def test_a_flooded_log_is_read_in_bounded_memory_and_time(home, flood):
    body, status = FLOODS[flood]
    t0 = time.monotonic()
    doc, growth = _tune_measured(home, *_runner(home, body), "--no-store")
    wall = time.monotonic() - t0
    assert growth < GROWTH_MAX_MIB, f"tune's peak RSS grew {growth:.0f} MiB reading the log"
    bad = next(r for r in doc["runs"] if r["strategy"] == BAD)
    assert bad["status"] == status, bad
    assert len(bad["reason"]) <= REASON_MAX and "\n" not in bad["reason"]
    if status == "ok":  # 512 x 8192 tokens per step / 62 s / 64 GPUs, from the log's last lines
        assert bad["measured"] == pytest.approx(512 * 8192 / 62 / 64)
    else:
        _bad_run(doc)
    assert wall < 30, wall
    for log in home.rglob("output.log"):
        log.unlink()  # 200 MB is not kept in the test's temporary folder


# ------------------------------------------------------------------------------------------------ DIES
DEATHS = {
    "sigkill-leaving-a-worker": (
        'sleep 30 & echo $! > "$AUTOPAR_RUN_DIR/worker.pid"; kill -KILL $$; sleep 5',
        "SIGKILL",
    ),
    "sigsegv": ('sleep 30 & echo $! > "$AUTOPAR_RUN_DIR/worker.pid"; kill -SEGV $$; sleep 5', "SIGSEGV"),
    "python-segfault": (f"{sys.executable} -c 'import ctypes; ctypes.string_at(0)'; exit $?", "SIGSEGV"),
    "exit-0-without-a-result": ("exit 0", "no result.json"),
    "exit-3-leaving-a-worker": ('sleep 30 & echo $! > "$AUTOPAR_RUN_DIR/worker.pid"; exit 3', "exit code 3"),
    "removes-its-own-folder": ('cd /; rm -rf "$AUTOPAR_RUN_DIR"; exit 0', "no result.json"),
    "killed-while-writing-the-result": (
        """printf '{"status": "ok", "tokens_per' > "$AUTOPAR_RESULT"; kill -KILL $$""",
        "not JSON",
    ),
}


@pytest.mark.parametrize("death", list(DEATHS), ids=list(DEATHS))
def test_a_run_that_dies_fails_with_one_reason_and_leaves_no_process(home, death):
    body, reason = DEATHS[death]
    doc = _tune(*_runner(home, body), "--run-timeout", "20")
    r = _bad_run(doc)
    assert r["status"] == "failed" and reason in r["reason"], r["reason"]
    assert all(BAD not in s["notes"] for s in _stored())
    for pid_file in home.rglob("worker.pid"):  # the run's own workers went with it (no GPU held on)
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(pid), f"worker {pid} of the dead run still runs"


# ------------------------------------------------------------------------------------------------ HANGS
def test_a_run_ignoring_sigterm_is_killed_with_its_group_and_the_tune_ends(home):
    from autopar.tune.runners.local import KILL_GRACE_S

    body = (
        "trap '' TERM; (trap '' TERM; sleep 60) & echo $! > \"$AUTOPAR_RUN_DIR/worker.pid\"; "
        'echo $$ > "$AUTOPAR_RUN_DIR/leader.pid"; sleep 60; exit 0'
    )
    t0 = time.monotonic()
    doc = _tune(*_runner(home, body), "--run-timeout", "1")
    assert time.monotonic() - t0 < 1 + KILL_GRACE_S + 15
    r = _bad_run(doc)
    assert r["status"] == "failed" and "timeout" in r["reason"]
    for name in ("worker.pid", "leader.pid"):
        pid = int(next(home.rglob(name)).read_text())
        assert gone(pid), f"{name} {pid} survived the timeout"


def test_a_reattached_run_keeps_the_timeout_from_its_start():
    """A run found again by a later tune is stopped at --run-timeout counted from the run's own start (a
    tune killed and resumed again and again must not give a hanging run a fresh timeout each time)."""
    from autopar.tune.runners.local import Processes, process_start

    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)  # not a child of the Processes below
    try:
        handle = {"pid": proc.pid, "start": process_start(proc.pid)}
        time.sleep(1.5)
        t0 = time.monotonic()
        code, timed_out = Processes().wait(handle, 1.0)
        assert timed_out and time.monotonic() - t0 < 0.8
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------- KILL -9
def _tune_process(home: Path, args: list[str], driver: Path | None = None) -> subprocess.Popen[str]:
    head = [sys.executable, str(driver)] if driver else [sys.executable, "-m", "autopar"]
    argv = [*head, "tune", *args, "--json", "--no-store", "--study-name", "fuzz", "--run-timeout", "60"]
    env = {**os.environ, "AUTOPAR_HOME": str(home / "home")}
    return subprocess.Popen(
        argv, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(
    pattern: str, folder: Path, proc: subprocess.Popen[str], timeout: float = 90, more_than: int = 0
) -> Path:
    """The first file matching `pattern` once more than `more_than` match (the tune still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern))
        if len(found) > more_than:
            return found[0]
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    raise AssertionError(f"no {pattern} in {timeout} s")


def _finish(home: Path, args: list[str]) -> dict:
    """The same command again, to its end; the study it leaves must hold no RUNNING trial."""
    import optuna

    again = _tune_process(home, args)
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0, err[-2000:]
    doc = json.loads(out)
    study = optuna.load_study(
        study_name="fuzz",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(doc["study"]["storage"])
        ),
    )
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states and "WAITING" not in states, states
    launched = _launched(home)
    assert len(launched) == len(set(launched)), launched  # no candidate launched twice
    assert {r["strategy"] for r in doc["runs"]} == set(launched)
    return doc


def test_a_run_lost_while_the_tune_was_killed_is_stale_and_never_relaunched(home):
    body = 'echo $$ > "$AUTOPAR_RUN_DIR/leader.pid"; sleep 60; exit 0'
    args = _runner(home, body, LABELS[:3])
    first = _tune_process(home, args)
    pid_file = _wait_for("autopar-tune/fuzz/run*/leader.pid", home, first)
    time.sleep(0.2)
    first.kill()  # SIGKILL: the run goes on in its own session...
    first.communicate()
    pid = int(pid_file.read_text())
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # ...until its node is lost too
    doc = _finish(home, args)
    r = next(r for r in doc["runs"] if r["strategy"] == BAD)
    assert r["resumed"] and r["status"] == "failed" and r["reason"].startswith("stale"), r
    assert doc["pick"]["strategy"] == LABELS[1]


_KILL_DRIVER = """\
import os, signal, sys
import optuna
import autopar.tune.runners.command as command
def die():
    os.kill(os.getpid(), signal.SIGKILL)
set_attr = optuna.trial.Trial.set_user_attr
def set_user_attr(self, key, value):
    if key == "handle" and "{at}" == "handle":  # launched; the study does not know its process yet
        die()
    return set_attr(self, key, value)
optuna.trial.Trial.set_user_attr = set_user_attr
write_job_files = command.write_job_files
def write_then_die(job):  # the trial is RUNNING, its folder made; nothing launched
    write_job_files(job)
    if "{at}" == "launch":
        die()
command.write_job_files = write_then_die
from autopar.cli import main
sys.argv[0] = "autopar"
main()
"""


def test_a_tune_killed_before_it_stored_the_runs_handle_still_reattaches(home):
    """SIGKILL at the worst moment: the run is launched but its trial has no handle yet. The run must be
    found again (its run folder names its process), not left running unseen beside the next candidate."""
    driver = home / "kill_at_handle.py"
    driver.write_text(_KILL_DRIVER.replace("{at}", "handle"))
    args = _runner(home, ":", LABELS[:2])
    _slow_runs(home, 1.0)
    first = _tune_process(home, args, driver)
    first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL and len(_launched(home)) == 1
    doc = _finish(home, args)
    r = doc["runs"][0]  # the run the killed tune launched: waited for, its result read
    assert r["resumed"] and r["status"] == "ok" and r["measured"] == FAKE[r["strategy"]], r


def test_a_tune_killed_before_it_launched_leaves_the_candidate_open(home):
    """SIGKILL after the trial began but before the run was launched: no run, so the candidate is not lost
    (marked stale for ever), and the next tune launches it once."""
    driver = home / "kill_at_launch.py"
    driver.write_text(_KILL_DRIVER.replace("{at}", "launch"))
    args = _runner(home, ":", LABELS[:2])
    first = _tune_process(home, args, driver)
    first.communicate(timeout=120)
    assert first.returncode == -signal.SIGKILL and _launched(home) == []
    doc = _finish(home, args)
    assert sorted(r["strategy"] for r in doc["runs"]) == sorted(LABELS[:2])
    assert all(r["status"] == "ok" and not r["resumed"] for r in doc["runs"]), doc["runs"]


def _slow_runs(home: Path, seconds: float) -> None:
    """Every run of the runner takes `seconds` before it answers."""
    script = home / "runner.sh"
    script.write_text(script.read_text().replace("\ncase", f"\nsleep {seconds}\ncase", 1))


def test_tune_killed_at_seeded_moments_then_resumed_ends_consistent(home):
    """SIGKILL at a (seeded) random moment after a run started, three times, then the same command to its
    end: every candidate ran once, the study holds no RUNNING trial."""
    rng = random.Random(45)
    args = [*_runner(home, ":", LABELS), "--stop-probability", "1e-9"]
    _slow_runs(home, 0.5)
    started = "autopar-tune/fuzz/run*/strategy.json"
    for _ in range(3):
        before = len(list(home.glob(started)))
        proc = _tune_process(home, args)
        while len(list(home.glob(started))) <= before and proc.poll() is None:
            time.sleep(0.05)  # until it launches a run of its own (or has nothing left to run)
        time.sleep(rng.uniform(0.0, 1.0))
        proc.kill()
        assert proc.communicate()[1].count("Traceback") == 0
    doc = _finish(home, args)
    assert doc["stopped"] == "exhausted" and len(doc["runs"]) == len(LABELS)


# ------------------------------------------------------------------------------------------ RE-ATTACH
def test_a_runner_error_on_reattach_fails_that_run_and_the_resumed_loop_goes_on(tmp_path):
    """A RUNNING trial whose runner cannot say what became of it (squeue down, a broken result) FAILs with
    one reason; the resumed tune does not crash on it, and it is never launched again."""
    from autopar.catalog import get_gpu, get_model
    from autopar.errors import AutoparError
    from autopar.specs import ClusterSpec, Workload
    from autopar.tune.candidates import from_labels
    from autopar.tune.loop import Tuner, TuneSettings, run_loop
    from autopar.tune.runners.base import Outcome
    from autopar.tune.runners.replay import ReplayRunner
    from autopar.tune.study import TuneStudy

    cands = from_labels(
        get_model("llama-3.1-70b"),
        ClusterSpec(gpu=get_gpu("h100"), num_gpus=64),
        Workload(seq_len=8192, global_batch=512),
        LABELS[:2],
        None,
    )
    keys = [c.key for c in cands]
    study = TuneStudy(str(tmp_path / "s.journal"), "s", keys, multi=False, problem={})
    trial = study.begin(keys[0], {}, {"runner": "replay", "run_dir": str(tmp_path / "run001")})
    trial.set_user_attr("handle", {"key": keys[0]})

    class Broken(ReplayRunner):
        def attach(self, job, handle):
            raise AutoparError("runner=slurm: squeue exited 1: slurm_load_jobs error: Socket timed out")

    runner = Broken({k: Outcome("ok", FAKE[lab]) for k, lab in zip(keys, LABELS, strict=False)})
    result = run_loop(Tuner(cands), runner, TuneSettings(runs_dir=tmp_path), study)
    first = result.runs[0]
    assert first.resumed and first.outcome.status == "failed" and "squeue" in first.outcome.reason
    assert runner.asked == [keys[1]]  # the other ran; the lost one was not launched again
    assert {t.state for t in study.trials()} == {"COMPLETE", "FAIL"}


# ------------------------------------------------------------------------------------------- PROPERTY
@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096))
def test_the_result_reader_never_raises_on_random_bytes(tmp_path, data):
    from autopar.tune.runners.base import STATUSES, read_result_file

    path = tmp_path / "result.json"
    path.write_bytes(data)
    _check_outcome(read_result_file(path), STATUSES)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_VALUES = _JSON | st.integers(min_value=10**300, max_value=10**400)


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    status=st.sampled_from(["ok", "oom", "failed"]) | _JSON,
    tps=_VALUES,
    mem=_VALUES,
    extra=st.dictionaries(st.text(max_size=8), _JSON, max_size=3),
)
def test_the_result_reader_never_raises_on_random_json(tmp_path, status, tps, mem, extra):
    from autopar.tune.runners.base import STATUSES, read_result_file

    doc = {**extra, "status": status, "tokens_per_s_per_gpu": tps, "peak_mem_gib": mem}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    _check_outcome(read_result_file(path), STATUSES)


def _check_outcome(o, statuses) -> None:
    import math

    assert o.status in statuses
    assert "\n" not in o.reason and len(o.reason) <= REASON_MAX
    if o.status == "ok":
        assert isinstance(o.tokens_per_s_per_gpu, float) and math.isfinite(o.tokens_per_s_per_gpu)
        assert o.tokens_per_s_per_gpu > 0
    if o.peak_mem_gib is not None:
        assert isinstance(o.peak_mem_gib, float) and math.isfinite(o.peak_mem_gib) and o.peak_mem_gib > 0
    if o.status == "failed":
        assert o.reason
