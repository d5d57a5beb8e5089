"""A throw-away PostgreSQL server for tests: initdb + pg_ctl in a temp dir on a free local port.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
unprivileged `postgres` user (created by Debian's postgresql package) or `nobody`, owning the data
directory. Durability is switched off (fsync, synchronous_commit) because the data is thrown away.
`find_bin` looks on PATH and in /usr/lib/postgresql/*/bin (Debian's layout).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class PostgresUnavailable(RuntimeError):
    """The server binaries are missing or the server did not start."""


class ServerUrl(str):
    """The server's postgresql:// URL, with `stop(mode)` and `start()` (same data, same port) for
    tests of a server that goes away mid-run. Durability is off, so an "immediate" stop may lose the
    last commits; "fast" closes every session but keeps what was committed."""

    stop: Any
    start: Any


def find_bin(name: str) -> str | None:
    """Path of a PostgreSQL server binary (PATH first, then Debian's versioned folders, newest first)."""
    hit = shutil.which(name)
    if hit:
        return hit
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return cands[-1] if cands else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as() -> list[str]:
    """Command prefix that drops root to an unprivileged user (empty when not root)."""
    if os.geteuid() != 0:
        return []
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", user, "--"]
        return [shutil.which("su") or "su", user, "-s", "/bin/sh", "-c"]  # pragma: no cover
    raise PostgresUnavailable("running as root and no unprivileged user (postgres, nobody) to run the server")


@contextlib.contextmanager
def postgres_server(user: str = "autopar", password: str = "secret") -> Iterator[ServerUrl]:
    """Start a server, create a database and a password user; yield its postgresql:// URL; stop it."""
    initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise PostgresUnavailable("initdb/pg_ctl not found (apt-get install postgresql)")
    prefix = _run_as()
    tmp = Path(tempfile.mkdtemp(prefix="autopar-pg-"))
    data, sock = tmp / "data", tmp / "sock"
    sock.mkdir()
    pwfile = tmp / "pw"
    pwfile.write_text(password + "\n")
    if prefix:
        owner = prefix[2] if prefix[0].endswith("runuser") else prefix[1]
        pw = pwd.getpwnam(owner)
        for p in (tmp, sock, pwfile):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    port = free_port()

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise PostgresUnavailable(f"{cmd[0]} failed: {(r.stderr or r.stdout).strip()[-500:]}")
        return r

    try:
        run(initdb, "-D", str(data), "-U", user, "--pwfile", str(pwfile), "-A", "md5", "--no-sync")
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
        url = ServerUrl(f"postgresql://{user}:{password}@127.0.0.1:{port}/postgres")
        url.start = lambda: run(
            pg_ctl, "-D", str(data), "-o", opts, "-l", str(tmp / "log"), "-w", "-t", "30", "start"
        )
        url.stop = lambda mode="immediate": subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", mode, "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        url.start()
        try:
            yield url
        finally:
            url.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
