"""Every output file goes through autopar/files.py: atomic, regular files only, one-line errors.

Device targets: as root, a command that renamed a temporary file over `--out /dev/null` replaced the
node with a regular file for every process on the machine. The tests use a private character device
made with mknod (same major/minor as /dev/null, so `stat` sees exactly what it sees for /dev/null)
instead of the shared one, so a regression fails here without breaking the machine; without the right
to mknod (not root) they use /dev/null itself, which a non-root process cannot replace anyway, so there
the "still a character device" assertion holds whatever autopar does.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from unittest import mock

import pandas as pd
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autopar.cli import app
from autopar.cli.app import guarded
from autopar.data import published_runs_path
from autopar.errors import OutputError
from autopar.files import ensure_dir, write_atomic, write_atomic_with

runner = CliRunner()
REAL_WRITE = os.write


def _one_line_error(r, exit_code: int = 2) -> str:
    """The run failed with `exit_code` and said so on exactly one line, without a traceback."""
    err = r.stderr.strip()
    assert r.exit_code == exit_code, r.output
    assert len(err.splitlines()) == 1 and "Traceback" not in r.output, err
    return err


@pytest.fixture
def char_device(tmp_path: Path) -> Path:
    node = tmp_path / "null-device"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:  # not root: /dev/null itself cannot be replaced by this process
        return Path("/dev/null")
    return node


@pytest.fixture
def runs_csv(tmp_path: Path) -> Path:
    src = tmp_path / "runs.csv"
    pd.read_csv(published_runs_path(), dtype=str, keep_default_na=False).head(3).to_csv(src, index=False)
    return src


@pytest.fixture
def store(tmp_path: Path, runs_csv: Path) -> Path:
    db = tmp_path / "runs.db"
    assert runner.invoke(app, ["calibrate", "ingest", str(runs_csv), "--store", str(db)]).exit_code == 0
    return db


def _export(store: Path, out: Path | str) -> list[str]:
    return ["calibrate", "export", "--store", str(store), "--out", str(out)]


# Quick search (a few hundred ms); a bad --out is refused before it runs.
OPTIMIZE = ["optimize", "--model", "Llama-3.1-8B", "--gpus", "8", "--global-batch", "64", "--budget", "5"]


LAUNCH = ["launch", "--model", "llama-3-70b", "--gpus", "64", "--strategy", "TP4+SP PP2v2 DP8/Z1 mb1 sel-AC"]


# ------------------------------------------------------------------------- devices, symlinks, names
def test_device_target_is_refused_and_stays_a_device(char_device: Path, runs_csv: Path, store: Path):
    for argv in (
        ["estimate", "--batch", str(runs_csv), "--out", str(char_device)],
        _export(store, char_device),
        [*OPTIMIZE, "--out", str(char_device)],
    ):
        err = _one_line_error(runner.invoke(app, argv))
        assert f"'{char_device}': it is a character device, not a regular file" in err
        assert stat.S_ISCHR(os.stat(char_device).st_mode), argv


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory"])
def test_other_non_regular_targets_are_refused(tmp_path: Path, kind: str):
    target = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    with bound_socket(target if kind == "socket" else None):
        mode_before = os.stat(target).st_mode
        with pytest.raises(OutputError, match=r"is a (named pipe \(FIFO\)|socket|directory), not a regular"):
            write_atomic(target, "x")
        assert os.stat(target).st_mode == mode_before
    assert sorted(p.name for p in tmp_path.iterdir()) == [kind]  # no temporary file left behind


@contextmanager
def bound_socket(path: Path | None) -> Iterator[None]:
    """A bound AF_UNIX socket at `path` for the duration (nothing when None)."""
    if path is None:
        yield
        return
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        yield
    finally:
        s.close()


def _plant(target: Path, victim: Path) -> list[Path]:
    """Symlinks to `victim` at every temporary name a writer of `target` could predict."""
    names = [f"{target.name}.tmp", f".{target.name}.tmp", f"{target.name}.{os.getpid()}.tmp"]
    links = [target.with_name(n) for n in names]
    for link in links:
        link.symlink_to(victim)
    return links


def test_planted_temp_symlinks_do_not_redirect_the_write(tmp_path: Path, runs_csv: Path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for out, argv in (
        (tmp_path / "preds.csv", ["estimate", "--batch", str(runs_csv)]),
        (tmp_path / "preds.parquet", ["estimate", "--batch", str(runs_csv)]),
    ):
        links = _plant(out, victim)
        r = runner.invoke(app, [*argv, "--out", str(out)])
        assert r.exit_code == 0, r.output
        assert victim.read_text() == "precious\n"
        assert all(link.is_symlink() and os.readlink(link) == str(victim) for link in links)
        assert (
            stat.S_ISREG(os.lstat(out).st_mode)
            and len(pd.read_csv(out) if out.suffix == ".csv" else pd.read_parquet(out)) == 3
        )
    links = _plant(tmp_path / "model.json", victim)
    write_atomic(tmp_path / "model.json", "{}\n")
    assert victim.read_text() == "precious\n" and all(link.is_symlink() for link in links)


def test_symlink_at_the_target_is_replaced_not_written_through(tmp_path: Path):
    victim, link = tmp_path / "victim.txt", tmp_path / "report.html"
    victim.write_text("precious\n")
    link.symlink_to(victim)
    write_atomic(link, "new\n")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "new\n"


@pytest.mark.parametrize(
    "make_out,fragment",
    [
        (lambda d: d / "afile" / "x.csv", "'{d}/afile' is a file, not a directory"),
        (lambda d: d / ("x" * 300 + ".csv"), "file name too long (304 bytes"),
        (lambda d: d, "it is a directory, not a regular file"),
    ],
    ids=["parent-is-a-file", "300-char-name", "directory"],
)
def test_unwritable_targets_one_line(tmp_path: Path, store: Path, make_out, fragment: str):
    (tmp_path / "afile").write_text("i am a file\n")
    out = make_out(tmp_path)
    err = _one_line_error(runner.invoke(app, _export(store, out)))
    assert f"cannot write '{out}'" in err and fragment.format(d=tmp_path) in err
    assert (tmp_path / "afile").read_text() == "i am a file\n"


def test_launch_out_that_is_a_file(tmp_path: Path):
    f = tmp_path / "afile"
    f.write_text("x\n")
    r = runner.invoke(app, [*LAUNCH, "--out", str(f)])
    assert f"'{f}' is a file, not a directory" in _one_line_error(r)


def test_autopar_home_that_is_a_file(tmp_path: Path, runs_csv: Path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a folder\n")
    monkeypatch.setenv("AUTOPAR_HOME", str(home))
    err = _one_line_error(runner.invoke(app, ["calibrate", "ingest", str(runs_csv)]))
    assert f"AUTOPAR_HOME='{home}' is a file, not a directory" in err
    with pytest.raises(OutputError, match="AUTOPAR_HOME="):
        ensure_dir(home)


def test_missing_parent_folders_are_created(tmp_path: Path, store: Path):
    out = tmp_path / "a" / "b" / "dump.csv"
    assert runner.invoke(app, _export(store, out)).exit_code == 0
    assert len(pd.read_csv(out)) == 3


# ------------------------------------------------------------------------------- full disk (ENOSPC)
@contextmanager
def disk_full_under(folder: Path, after: int = 0) -> Iterator[None]:
    """os.write to files under `folder` writes `after` bytes, then fails with ENOSPC (other fds: real)."""
    left = [after]

    def fake(fd: int, data) -> int:
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = ""
        if not where.startswith(str(folder)):
            return REAL_WRITE(fd, data)
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = REAL_WRITE(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    with mock.patch.object(os, "write", fake):
        yield


def test_full_disk_keeps_the_previous_report(tmp_path: Path):
    out = tmp_path / "r.html"
    before = b"<html>the previous report</html>\n" * 200
    out.write_bytes(before)
    with disk_full_under(tmp_path, after=4096):  # part of the new report lands, then the disk is full
        r = runner.invoke(app, [*OPTIMIZE, "--plotly", "inline", "--out", str(out)])
    assert _one_line_error(r) == f"error: cannot write '{out}': no space left on device"
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_full_disk_export_leaves_no_partial_file(tmp_path: Path, store: Path):
    out = tmp_path / "out" / "dump.csv"
    with disk_full_under(tmp_path / "out", after=10):
        err = _one_line_error(runner.invoke(app, _export(store, out)))
    assert "no space left on device" in err and not out.exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_write_atomic_with_failure_in_the_callback(tmp_path: Path):
    out = tmp_path / "t.parquet"
    out.write_bytes(b"old")

    def half_then_full(fh) -> None:
        fh.write(b"new bytes")
        fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError, match=r"^cannot write '.*t\.parquet': no space left on device$"):
        write_atomic_with(out, half_then_full)
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_other_os_errors_at_the_cli_boundary_are_one_line(capsys):
    @guarded
    def broken() -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO), "/data/x.csv")

    with pytest.raises(typer.Exit) as ex:
        broken()
    assert ex.value.exit_code == 2
    assert capsys.readouterr().err.strip() == "error: Input/output error: /data/x.csv"


# ------------------------------------------------------------------------- permissions, concurrency
def test_overwrite_keeps_the_mode_and_a_new_file_follows_the_umask(tmp_path: Path):
    old = tmp_path / "old.txt"
    old.write_text("x")
    old.chmod(0o640)
    write_atomic(old, "y")
    assert stat.S_IMODE(os.stat(old).st_mode) == 0o640 and old.read_text() == "y"
    umask = os.umask(0o022)
    os.umask(umask)
    new = write_atomic(tmp_path / "new.txt", "z")
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o666 & ~umask


def test_concurrent_writers_leave_one_complete_file(tmp_path: Path):
    target = tmp_path / "out.bin"
    versions = [bytes([65 + i]) * 300_000 for i in range(2)]
    seen: set[bytes] = set()
    stop = threading.Event()

    def writer(data: bytes) -> None:
        for _ in range(15):
            write_atomic(target, data)

    def reader() -> None:
        while not stop.is_set():
            if target.exists():
                seen.add(target.read_bytes())

    threads = [threading.Thread(target=writer, args=(v,)) for v in versions]
    watch = threading.Thread(target=reader)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watch.join()
    assert target.read_bytes() in versions
    assert seen <= set(versions)  # a reader never saw a partial or mixed file
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


@settings(max_examples=60, deadline=None)
@given(
    old=st.none() | st.binary(max_size=3000),
    new=st.binary(max_size=3000) | st.text(max_size=500),
    fail_after=st.none() | st.integers(min_value=0, max_value=3000),
)
def test_write_is_all_or_nothing(old: bytes | None, new: bytes | str, fail_after: int | None):
    """After write_atomic the target holds exactly the new bytes, or (injected failure) exactly what was
    there before (nothing, if nothing was); no temporary file remains either way."""
    new_bytes = new.encode() if isinstance(new, str) else new
    with TemporaryDirectory() as d:
        target = Path(d) / "t.out"
        if old is not None:
            target.write_bytes(old)
        fails = fail_after is not None and fail_after < len(new_bytes)
        with disk_full_under(Path(d), after=fail_after if fails else 1 << 30):
            if fails:
                with pytest.raises(OutputError, match="no space left on device"):
                    write_atomic(target, new)
            else:
                write_atomic(target, new)
        if fails:
            assert (target.read_bytes() if target.exists() else None) == old
        else:
            assert target.read_bytes() == new_bytes
        assert [p.name for p in Path(d).iterdir()] == ([] if fails and old is None else ["t.out"])
