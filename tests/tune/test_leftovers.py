"""What a tune run leaves, and what bounds it (issue 45, the items round 4 left open).

- A worker that leaves the run's process group (`setsid`) is stopped with the run: every process a run
  starts carries the run's token in its environment (runners/local.py RUN_TOKEN_VAR).
- A run that ended while no tune watched has what it left stopped when a tune finds it again, by its token
  only: its process-group id may belong to an unrelated process by then, which is left alone.
- Without --run-timeout a run has a default timeout (runners/base.py default_timeout), so a hung run is not
  waited for forever; the reason says which rule stopped it.
- A SLURM call's output is bounded (a flooding `squeue` fails the call, memory stays small) and so is its
  time; a job's timeout counts from when it first runs, not from its time in the queue.
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from procs import gone

from autopar.catalog import get_gpu, get_model
from autopar.errors import AutoparError
from autopar.specs import ClusterSpec, Workload
from autopar.tune.candidates import from_labels
from autopar.tune.loop import Tuner, TuneSettings, _job
from autopar.tune.runners import local, slurm
from autopar.tune.runners.base import SLOW_RUN_FACTOR, STARTUP_ALLOWANCE_S, Job, default_timeout
from autopar.tune.runners.command import CommandRunner
from autopar.tune.runners.local import Processes, alive, process_start, token_processes

LABEL = "TP8+SP DP8/Z1 mb1"


def _candidate(calibrated: bool = False):
    from autopar.calibration.apply import load_default_calibration

    (c,) = from_labels(
        get_model("llama-3.1-70b"),
        ClusterSpec(gpu=get_gpu("h100"), num_gpus=64),
        Workload(seq_len=8192, global_batch=512),
        [LABEL],
        load_default_calibration() if calibrated else None,
    )
    return c


def _job_in(tmp: Path, timeout_s: float | None = 60.0) -> Job:
    run = tmp / "run001"
    run.mkdir(parents=True, exist_ok=True)
    return Job(1, _candidate(), run, 30, 10, timeout_s)


def _pid_file_process(path: Path, deadline_s: float = 10.0) -> int:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def _waitgone(pid: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


ESCAPE = textwrap.dedent(
    """\
    setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' < /dev/null > /dev/null 2>&1 &
    while [ ! -s escaped.pid ]; do sleep 0.05; done
    printf '{"status": "ok", "tokens_per_s_per_gpu": 1000.0}' > "$AUTOPAR_RESULT"
    """
)


def test_a_worker_that_left_the_group_is_stopped_with_its_run(tmp_path):
    """The run's first process ends; the worker it started under setsid (its own group and session) holds
    the run's token and is stopped before the tune moves on."""
    job = _job_in(tmp_path)
    runner = CommandRunner(ESCAPE)
    handle = runner.start(job)
    escaped = _pid_file_process(job.run_dir / "escaped.pid")
    assert os.getpgid(escaped) != handle["pid"]  # it did leave the run's group
    outcome = runner.wait(job, handle)
    assert outcome.status == "ok"
    assert _waitgone(escaped)


def test_leftovers_of_a_run_that_ended_unwatched_are_stopped_on_reattach(tmp_path):
    """A tune that died before its run ended: the next tune finds the run over, reads its result and stops
    what the run left (by its token: the group id is not trusted once the run is gone)."""
    job = _job_in(tmp_path)
    handle = CommandRunner(ESCAPE).start(job)
    escaped = _pid_file_process(job.run_dir / "escaped.pid")
    end = time.monotonic() + 10
    while alive(handle) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(handle) and not gone(escaped)  # the run is over, its worker is not
    outcome = CommandRunner(ESCAPE).attach(job, handle)  # a fresh runner: the run is not its child
    assert outcome is not None and outcome.status == "ok"
    assert _waitgone(escaped)


def test_a_reused_group_id_is_left_alone(tmp_path):
    """A handle whose process id now names an unrelated process (another start time, no token): the
    re-attaching tune stops nothing of it."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        job = _job_in(tmp_path)
        (job.run_dir / "output.log").write_text("nothing parsable\n")
        handle = {"pid": other.pid, "start": "1", "token": "0" * 32}
        assert process_start(other.pid) != "1" and not alive(handle)
        CommandRunner("true").attach(job, handle)
        time.sleep(0.3)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_token_processes_finds_only_its_own_run(tmp_path):
    procs = Processes()
    mine = procs.start(["sleep", "30"], {}, tmp_path, tmp_path / "a.log")
    theirs = procs.start(["sleep", "30"], {}, tmp_path, tmp_path / "b.log")
    try:
        assert token_processes(mine["token"]) == [mine["pid"]]
        assert mine["token"] != theirs["token"]
    finally:
        for h in (mine, theirs):
            local.stop_run(h)
    assert token_processes(mine["token"]) == []


@pytest.mark.parametrize("calibrated", [True, False])
def test_default_timeout_by_hand(calibrated):
    """Llama-3.1-70B on 64 H100, global batch 512 at 8,192 tokens: 4,194,304 tokens a step. At the band's
    low end L tokens/s per GPU (half the prediction without a band), a step takes 4,194,304 / (64 L) s; 30
    steps, x10, plus 30 minutes."""
    c = _candidate(calibrated)
    low = c.lo if calibrated else c.predicted / 2
    assert low > 0 and math.isnan(c.lo) != calibrated
    step_s = 512 * 8192 / (64 * low)
    want = STARTUP_ALLOWANCE_S + SLOW_RUN_FACTOR * 30 * step_s
    got, why = default_timeout(c, 30)
    assert got == pytest.approx(want, rel=1e-12)
    assert "--run-timeout" in why and "30 steps" in why
    assert 2 * 3600 < got < 12 * 3600  # 30 steps of ~1-2 min: a hung run is stopped within hours, not never


def test_a_tune_without_run_timeout_gives_each_run_the_default(tmp_path):
    c = _candidate()
    tuner = Tuner([c])
    job = _job(tuner, 0, 1, TuneSettings(runs_dir=tmp_path))
    assert job.timeout_s == pytest.approx(default_timeout(c, job.steps)[0])
    assert job.timeout_why.startswith("default")
    flagged = _job(tuner, 0, 1, TuneSettings(runs_dir=tmp_path, run_timeout_s=5.0))
    assert (flagged.timeout_s, flagged.timeout_why) == (5.0, "--run-timeout")


def test_a_run_stopped_by_the_default_says_so(tmp_path):
    job = Job(1, _candidate(), tmp_path, 30, 10, 0.5, default_timeout(_candidate(), 30)[1])
    runner = CommandRunner("sleep 30")
    outcome = runner.wait(job, runner.start(job))
    assert outcome.status == "failed" and outcome.reason.startswith("timeout: stopped after 0.5 s (default:")


# ------------------------------------------------------------------------------------------------ SLURM
def _fake_slurm(bin_dir: Path, squeue: str, sacct: str = "echo COMPLETED") -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in {
        "sbatch": "echo 4242",
        "squeue": squeue,
        "sacct": sacct,
        "scancel": f'echo "$@" >> {bin_dir}/cancelled',
    }.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)


def test_a_flooding_squeue_fails_the_call_in_bounded_memory(tmp_path, monkeypatch):
    _fake_slurm(tmp_path / "bin", "yes RUNNING")  # prints forever
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with pytest.raises(AutoparError, match=r"squeue printed more than 65,536 bytes"):
        slurm.SlurmRunner(poll_s=0.01)._queued("4242")
    assert time.monotonic() - t0 < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB: no flood kept


def test_a_hanging_slurm_call_times_out(tmp_path, monkeypatch):
    _fake_slurm(tmp_path / "bin", "sleep 30")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "COMMAND_TIMEOUT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(AutoparError, match=r"squeue took longer than 0.5 s"):
        slurm.SlurmRunner(poll_s=0.01)._queued("4242")
    assert time.monotonic() - t0 < 5


def test_a_job_timeout_counts_from_when_it_runs_not_its_queue_wait(tmp_path, monkeypatch):
    """squeue says PENDING for the first 1.5 s, then RUNNING; with a 1 s timeout the job is cancelled only
    after it has run for 1 s (not at 1 s after submission, while it still waited)."""
    bin_dir = tmp_path / "bin"
    start = tmp_path / "t0"
    start.write_text(str(time.time()))
    squeue = (
        f'python3 -c "import time; t0=float(open(\\"{start}\\").read()); '
        "print('PENDING' if time.time() - t0 < 1.5 else 'RUNNING')\""
    )
    _fake_slurm(bin_dir, squeue)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    job = _job_in(tmp_path, timeout_s=1.0)
    runner = slurm.SlurmRunner(poll_s=0.05)
    t0 = time.monotonic()
    outcome = runner.wait(job, {"job_id": "4242", "submitted": time.time()})
    waited = time.monotonic() - t0
    assert outcome.status == "failed" and "job 4242 cancelled" in outcome.reason
    assert waited >= 2.4  # 1.5 s pending + 1 s running (the old rule cancelled at 1 s)
    assert (bin_dir / "cancelled").read_text().split() == ["4242"]
    handle = (job.run_dir / "handle.json").read_text()
    assert "running_since" in handle  # a re-attached tune counts from the same moment


def test_bounded_output_keeps_a_short_answer_whole():
    proc = subprocess.Popen(["sh", "-c", "echo RUNNING; echo warn >&2"], stdout=-1, stderr=-1)
    out, err, why = local.bounded_output(proc, 1024, 5.0)
    assert (out, err, why) == (b"RUNNING\n", b"warn\n", "")
    assert proc.returncode == 0
