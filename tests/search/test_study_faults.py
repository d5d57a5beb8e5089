"""Stored studies under faults (no database server needed): a torn or refused journal append, studies
written by other clients, read-only commands on missing or special files, honest notes, worker
processes stopped by signals. Server faults are in tests/search/test_postgres_workers.py."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from autopar.catalog import get_gpu
from autopar.cli import app
from autopar.errors import StorageError
from autopar.search import optimize
from autopar.search import storage as storage_mod
from autopar.search.storage import open_storage
from autopar.specs import ClusterSpec, ModelSpec, Workload

ROOT = Path(__file__).resolve().parents[2]
TINY = ModelSpec(name="tiny", layers=4, hidden=512, heads=4, kv_heads=2, ffn_hidden=1024, vocab=32000)
CLUSTER = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=2, gpus_per_node=2)
WL = Workload(seq_len=2048, global_batch=8)
runner = CliRunner()


def _run(path: Path, budget: int, **kw):
    return optimize(
        TINY, CLUSTER, WL, budget=budget, storage=str(path), study_name="s", min_headroom_gib=2.0, **kw
    )


def _complete(path: Path) -> list[tuple]:
    study = optuna.load_study(study_name="s", storage=open_storage(str(path)))
    return [tuple(sorted(t.params.items())) for t in study.trials if t.state == TrialState.COMPLETE]


def test_torn_journal_tail_is_repaired_keeping_every_record(tmp_path):
    path = tmp_path / "s.journal"
    _run(path, 20)
    before = _complete(path)
    assert len(before) == 20
    with open(path, "ab") as f:  # a writer died (or the disk filled) in the middle of a record
        f.write(b'{"op_code":4,"worker_id":"x","study_id":0,"datetime_st')
    r = _run(path, 30)  # used to end in JSONDecodeError once the next append landed after the torn line
    after = _complete(path)
    assert len(after) == 30 and after[:20] == before and len(set(after)) == 30
    assert r.stats["study_states"]["COMPLETE"] == 30
    assert path.read_bytes().endswith(b"\n") and b"datetime_st\n" not in path.read_bytes()
    s = runner.invoke(app, ["study", "status", "--storage", str(path), "--json"])
    assert s.exit_code == 0 and json.loads(s.stdout)["complete"] == 30, s.output


def test_full_disk_leaves_no_partial_record_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "s.journal"
    _run(path, 10)
    intact = path.read_bytes()
    real = os.pwrite

    def half_then_full(fd, data, offset):  # the disk fills in the middle of the batch
        real(fd, data[: len(data) // 2], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage_mod.os, "pwrite", half_then_full)
    with pytest.raises(StorageError, match="disk is full") as err:
        _run(path, 20)
    assert err.value.exit_code == 3 and "\n" not in str(err.value)
    assert path.read_bytes() == intact  # the failed append was cut back
    monkeypatch.setattr(storage_mod.os, "pwrite", real)
    _run(path, 20)  # space freed: the study resumes with every earlier trial
    assert len(_complete(path)) == 20 and len(set(_complete(path))) == 20
    monkeypatch.setattr(storage_mod.os, "pwrite", half_then_full)
    r = runner.invoke(
        app,
        ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--budget", "30"]
        + ["--storage", str(tmp_path / "c.journal"), "--no-calibration"],
    )
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 3 and "disk is full" in r.output and "Traceback" not in r.output, r.output
    assert len(lines) <= 2, r.output


def _foreign(path: Path, attrs: dict) -> None:
    """A study written by another Optuna client: any user attrs, one finished and one RUNNING trial."""
    study = optuna.create_study(storage=open_storage(str(path)), study_name="f", directions=["maximize"])
    for k, v in attrs.items():
        study.set_user_attr(k, v)
    t = study.ask()
    study.tell(t, 1.0)
    study.ask()


@pytest.mark.parametrize(
    "attrs, unreadable, report_words",
    [
        ({"autopar_budget": "1000", "autopar_inputs": ["x"]}, 2, "not an autopar study"),
        (
            {
                "autopar_fingerprint": "f",
                "autopar_budget": 5,
                "autopar_inputs": {"model": {"name": "m"}, "clusters": "x"},
            },
            1,
            "autopar_inputs.model",
        ),
        (
            {
                "autopar_fingerprint": "f",
                "autopar_inputs": {"model": TINY.model_dump(mode="json"), "clusters": "x"},
            },
            1,
            "autopar_inputs.clusters",
        ),
        ({}, 0, "not an autopar study"),
    ],
)
def test_study_written_by_another_client(tmp_path, attrs, unreadable, report_words):
    path = tmp_path / "f.journal"
    _foreign(path, attrs)
    r = runner.invoke(app, ["study", "status", "--storage", str(path), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["states"] == {"COMPLETE": 1, "RUNNING": 1} and len(doc["unreadable"]) == unreadable
    assert doc["budget"] == (5 if attrs.get("autopar_budget") == 5 else None)
    r = runner.invoke(app, ["study", "status", "--storage", str(path)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    r = runner.invoke(app, ["study", "report", "--storage", str(path)])
    assert r.exit_code == 2 and report_words in r.output and "Traceback" not in r.output, r.output


def test_read_only_commands_create_nothing_and_refuse_special_files(tmp_path):
    missing = tmp_path / "none.journal"
    for cmd in ("status", "report"):
        r = runner.invoke(app, ["study", cmd, "--storage", str(missing)])
        assert r.exit_code == 2 and "no such file" in r.output, r.output
        r = runner.invoke(app, ["study", cmd, "--storage", f"sqlite:///{tmp_path}/none.db"])
        assert r.exit_code == 2 and "no such file" in r.output, r.output
    assert list(tmp_path.iterdir()) == []
    t0 = time.monotonic()
    for special in ("/dev/zero", "/dev/null"):
        r = runner.invoke(app, ["study", "status", "--storage", special])
        assert r.exit_code == 2 and "not a regular file" in r.output, r.output
        r = runner.invoke(app, ["optimize", "--budget", "5", "--no-calibration", "--storage", special])
        assert r.exit_code == 2 and "not a regular file" in r.output, r.output
    assert time.monotonic() - t0 < 10  # refused, not read without end


def test_budget_note_counts_what_was_evaluated():
    # NSGA-II with a budget above the space size: the note says "every point" only when it is so
    full = optimize(TINY, CLUSTER, WL, budget=10**6, min_headroom_gib=2.0, sampler="nsga2")
    assert any("every point was evaluated" in n for n in full.notes), full.notes
    cut = optimize(TINY, CLUSTER, WL, budget=10**6, min_headroom_gib=2.0, sampler="nsga2", timeout=1e-9)
    note = next(n for n in cut.notes if "exceeds the space size" in n)
    seen = len({(t.strategy, t.gpu, t.num_gpus, t.precision) for t in cut.trials if t.number >= 0})
    assert "every point" not in note and f"{seen:,} of them were evaluated" in note, (note, seen)
    assert seen < full.space_size


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_two_workers(tmp_path: Path, name: str) -> tuple[subprocess.Popen, int]:
    """`optimize --workers 2` on a journal (a budget it will not finish soon) once both processes
    are searching; returns it and its spawned worker's pid."""
    journal = tmp_path / f"{name}.journal"
    args = [sys.executable, "-m", "autopar", "optimize", "--model", "Llama-3.1-70B", "--gpus", "64..512"]
    args += ["--gpu", "H100-SXM,H200", "--budget", "200000", "--no-calibration", "--storage", str(journal)]
    p = subprocess.Popen(
        [*args, "--workers", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        spawned = [k for k in _children(p.pid) if "spawn_main" in _cmdline(k)]
        if spawned and journal.exists() and journal.stat().st_size > 0:
            return p, spawned[0]
        time.sleep(0.1)
    p.kill()
    raise AssertionError("the worker process never started")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="ignore")
    except OSError:
        return ""


def test_signals_stop_workers_without_orphans(tmp_path):
    p, worker = _start_two_workers(tmp_path, "term")
    time.sleep(1.0)  # both searching
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=90)  # workers get STOP_GRACE_S to flush; generous on a loaded machine
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err[-2000:]
    assert not _alive(worker)  # stopped with the parent, not left writing trials

    p, worker = _start_two_workers(tmp_path, "kill")
    p.kill()  # the parent disappears without a word: its worker notices and stops
    p.wait(timeout=10)
    t0 = time.monotonic()
    while _alive(worker) and time.monotonic() - t0 < 15:
        time.sleep(0.1)
    assert not _alive(worker)


def test_wait_on_other_clients_has_a_deadline(monkeypatch) -> None:
    """Others holding the budget's last trials RUNNING (heartbeats alive) are waited on for OTHERS_WAIT_S
    with no trial finishing, then the search gives up and says how long it waited; a finished trial
    restarts the clock."""
    from types import SimpleNamespace

    from autopar.search import nsga2
    from autopar.search.loops import Run

    clock = [1000.0]
    monkeypatch.setattr(nsga2.time, "perf_counter", lambda: clock[0])
    st = SimpleNamespace(waiting=None, complete=9, run=Run())
    assert not nsga2._waited_out(st)  # starts the clock
    clock[0] += nsga2.OTHERS_WAIT_S - 1
    assert not nsga2._waited_out(st)
    st.complete = 10  # one of theirs finished: wait anew
    clock[0] += 2
    assert not nsga2._waited_out(st)
    clock[0] += nsga2.OTHERS_WAIT_S
    assert nsga2._waited_out(st) and st.run.waited_out == nsga2.OTHERS_WAIT_S
