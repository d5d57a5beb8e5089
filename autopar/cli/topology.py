"""`autopar topology` and `--cluster detect`: run this host's GPU/NIC tools, or read their recorded outputs.

The I/O edge of `autopar.catalog.topology`: each tool of RECORDED_FILES runs without a shell, with a
timeout, and a missing tool is simply absent. `--from DIR` (or `--cluster detect@DIR`, or the
AUTOPAR_TOPOLOGY_DIR environment variable) reads the same outputs recorded on the cluster.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar.errors import DataError, SpecError
from autopar.files import expand_user
from autopar.text import excerpt

# Seconds one tool may run (nvidia-smi -q on a busy 8-GPU host takes a few seconds).
TOOL_TIMEOUT_S = 30
# Largest recorded file read (nvidia-smi -q of 8 GPUs is ~100 KB).
RECORD_FILE_MAX_BYTES = 8 * 2**20
ENV_DIR = "AUTOPAR_TOPOLOGY_DIR"
SYSFS_IB = Path("/sys/class/infiniband")
DETECT = "detect"
NIC_FILES = frozenset({"ibstat.txt", "sysfs-infiniband.txt"})
# Digits of detect:COUNT: 10^9 hosts is beyond any cluster; int() of a run over 4300 digits stops with a
# ValueError.
MAX_COUNT_DIGITS = 9


def run_tool(argv: tuple[str, ...]) -> str | None:
    """stdout of one tool, or None when it is not installed, fails or times out."""
    if not argv or shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def _read_small(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def sysfs_infiniband(root: Path = SYSFS_IB) -> str | None:
    """/sys/class/infiniband/*/ports/* as 'DEVICE PORT rate=... link_layer=... state=...' lines."""
    if not root.is_dir():
        return None
    lines = []
    for port in sorted(root.glob("*/ports/*")):
        rate, layer, state = (_read_small(port / f) for f in ("rate", "link_layer", "state"))
        lines.append(f"{port.parent.parent.name} {port.name} rate={rate} link_layer={layer} state={state}")
    return "\n".join(lines) + "\n" if lines else None


def probe_host() -> dict[str, str]:
    """The outputs of every tool of RECORDED_FILES found on this host, by recorded file name."""
    from autopar.catalog.topology import RECORDED_FILES

    out = {name: text for name, argv in RECORDED_FILES.items() if argv and (text := run_tool(argv))}
    if "ibstat.txt" not in out and (ib := sysfs_infiniband()):
        out["sysfs-infiniband.txt"] = ib
    return out


def _recorded_path(d: Path, root: Path, name: str) -> Path | None:
    """`d/name` resolved, or None when absent; a link leading out of the folder, a broken or looping link,
    and anything but a regular file (FIFO, device, folder) are one-line errors, checked without opening it."""
    p = d / name
    if not p.is_symlink() and not p.exists():
        return None
    try:
        real = p.resolve(strict=True)
        mode = real.stat().st_mode
    except (OSError, RuntimeError):
        raise DataError(f"recorded {name} in '{d}' is a broken or looping link") from None
    if not real.is_relative_to(root):
        raise DataError(
            f"recorded {name} in '{d}' is a link leading outside the folder; copy the file in instead"
        )
    if not stat.S_ISREG(mode):
        raise DataError(f"recorded {name} in '{d}' is not a regular file (a FIFO, device or folder)")
    return real


def _read_regular(p: Path, name: str) -> str:
    """A recorded file's text, opened without following links or blocking, refused unless regular and small."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        with os.fdopen(os.open(p, flags), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise DataError(f"recorded {name} '{p}' is not a regular file (a FIFO, device or folder)")
            raw = fh.read(RECORD_FILE_MAX_BYTES + 1)
    except OSError as e:
        raise DataError(f"recorded {name} '{p}' cannot be read ({e.strerror or type(e).__name__})") from None
    if len(raw) > RECORD_FILE_MAX_BYTES:
        raise DataError(
            f"recorded {name} '{p}' is larger than the {RECORD_FILE_MAX_BYTES // 2**20} MiB allowed"
        )
    return raw.decode("utf-8-sig", errors="replace")


def read_recorded(folder: str | Path) -> dict[str, str]:
    """The recorded outputs in `folder` (files named as in RECORDED_FILES; others are ignored). Only regular
    files inside the folder are read: a recorded file that links elsewhere is refused, not followed."""
    from autopar.catalog.topology import RECORDED_FILES

    d = expand_user(folder)
    if not d.is_dir():
        raise DataError(f"topology folder '{folder}' does not exist or is not a folder")
    root = d.resolve()
    paths = {n: _recorded_path(d, root, n) for n in RECORDED_FILES}
    files = {n: _read_regular(p, n) for n, p in paths.items() if p is not None}
    if not files:
        raise DataError(
            f"topology folder '{folder}' holds none of the recorded files ({', '.join(RECORDED_FILES)})"
        )
    return files


def _no_gpu_message() -> str:
    from autopar.catalog.topology import RECORDED_FILES

    tools = sorted({argv[0] for n, argv in RECORDED_FILES.items() if argv and n not in NIC_FILES})
    found = [t for t in tools if shutil.which(t)]
    return (
        "no GPU found on this host: looked for "
        + ", ".join(tools)
        + f" (on PATH: {', '.join(found) or 'none'}); "
        "run `autopar topology --save DIR` on a GPU node and plan here with `--from DIR`"
    )


def probed() -> dict[str, str]:
    """This host's tool outputs; a host where no GPU tool answered is a one-line error saying what was tried."""
    files = probe_host()
    if not set(files) - NIC_FILES:
        raise DataError(_no_gpu_message())
    return files


def detect_host(folder: str | Path | None) -> Any:
    """HostTopology of this host (folder None and no AUTOPAR_TOPOLOGY_DIR) or of a recorded folder."""
    from autopar.catalog.topology import host_topology

    folder = folder or os.environ.get(ENV_DIR) or None
    return host_topology(read_recorded(folder) if folder else probed())


def parse_detect(text: str) -> tuple[str | None, int] | None:
    """'detect', 'detect:COUNT', 'detect@DIR', 'detect@DIR:COUNT' -> (DIR or None, COUNT); else None."""
    if text != DETECT and not text.startswith((DETECT + ":", DETECT + "@")):
        return None
    rest = text[len(DETECT) :]
    folder = None
    head, sep, count = rest.rpartition(":")
    digits = count.strip().removeprefix("-")
    if not sep or not (digits.isascii() and digits.isdigit()):
        head, count = rest, "1"
    if head.startswith("@"):
        folder = head[1:]
        if not folder:
            raise SpecError(f"cluster={text!r}: detect@DIR needs a folder of recorded tool outputs")
    elif head:
        raise SpecError(f"cluster={text!r}: expected detect, detect:COUNT, detect@DIR or detect@DIR:COUNT")
    digits = count.strip().removeprefix("-")
    if len(digits) > MAX_COUNT_DIGITS:
        raise SpecError(
            f"cluster={excerpt(text)!r}: COUNT has {len(digits)} digits (at most {MAX_COUNT_DIGITS})"
        )
    return folder, int(count)


def _emit_text(host: Any, desc: Any, folder: Path | None) -> None:
    from autopar.cli.app import console, styled
    from autopar.text import shell_word

    console.print(styled(("GPU", "bold"), f"  {host.product} -> catalog {host.gpu}"))
    console.print(styled(("host", "bold"), f"  {host.gpus_per_host} GPUs"))
    console.print(styled(("NVLink domain", "bold"), f"  {host.nvlink_domain} ({host.domain_basis})"))
    nic = f"{host.internode_gbps:g} GB/s per GPU" if host.internode_gbps is not None else "unknown"
    console.print(styled(("scale-out", "bold"), f"  {nic} ({host.nic_basis})"))
    for n in host.nics:
        console.print(
            f"  NIC {n.name}/{n.port}: {n.rate_gbps:g} Gb/s {n.link_layer} {'up' if n.active else 'down'}"
        )
    for line in (*host.numa, *host.notes):
        console.print(f"  {line}")
    console.print(styled(("flags", "bold"), f"  {desc.flags()}"))
    short = desc.shorthand or "none matches (`autopar clusters`)"
    where = f"@{folder}" if folder is not None else ""
    detect = shell_word(f"detect{where}:{desc.num_gpus // host.gpus_per_host}")
    console.print(styled(("--cluster", "bold"), f"  {short}; or --cluster {detect}"))


def _save(folder: Path, files: dict[str, str]) -> None:
    from autopar.files import describe_os_error

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
    except OSError as e:
        raise DataError(describe_os_error(e)) from None


def _register() -> None:
    from autopar.cli.app import command, emit_json

    @command("topology")
    def topology_cmd(
        from_dir: Annotated[
            Path | None,
            typer.Option("--from", help="Read recorded tool outputs from DIR instead of probing this host."),
        ] = None,
        save: Annotated[
            Path | None,
            typer.Option("--save", help="Also write this host's tool outputs to DIR (for --from)."),
        ] = None,
        hosts: Annotated[int, typer.Option("--hosts", min=1, help="Hosts of this kind in the cluster.")] = 1,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text")] = False,
    ) -> None:
        """Detect this host's GPUs, NVLink domain and NICs; print the --cluster / explicit flags for it."""
        from dataclasses import asdict

        from autopar.catalog.topology import describe, host_topology

        files = read_recorded(from_dir) if from_dir is not None else probed()
        if save is not None:
            _save(save, files)
        host = host_topology(files)
        desc = describe(host, hosts)
        if as_json:
            emit_json({"host": asdict(host), "cluster": {**asdict(desc), "flags": desc.flags()}})
            return
        _emit_text(host, desc, from_dir if from_dir is not None else save)


_register()
