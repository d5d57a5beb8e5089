"""The one boundary for every file autopar writes: atomic replace, regular files only, one-line errors.

`write_atomic` (text or bytes) and `write_atomic_with` (a callback that writes to a binary file object,
for pandas/pyarrow writers) write a temporary file with a random name in the target's folder (created
exclusively, never following a symlink), flush and fsync it, then `os.replace` it onto the target. So
- a reader (or a second writer) sees either the previous file or the complete new one, never a part;
- on any failure the temporary file is removed and the previous target is left exactly as it was;
- a planted symlink at a predictable temporary name cannot redirect the write (there is none);
- a target that exists and is not a regular file (a device such as /dev/null, a FIFO, a socket, a
  directory) is refused: replacing it would swap a device node for a regular file when run as root;
- a symlink at the target itself is replaced by the new file, never written through.
Missing parent folders are created, as every writer did before this module. An existing regular file
is overwritten (atomically) and keeps its permission bits; a new one gets 0o666 less the umask.

OS errors (full disk, quota, permission, read-only, a parent that is a file, a name too long) become an
`OutputError` naming the path and the plain reason. `ensure_dir` is the same boundary for folders
(AUTOPAR_HOME, its cache, `launch --out DIR`); `autopar_home` is where autopar keeps its own data.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from autopar.errors import OutputError

HOME_ENV = "AUTOPAR_HOME"

# The temporary file's name: ".<target name, cut>.<random>.tmp". The cut keeps it under the usual
# 255-byte name limit for any target name that itself fits; the random part (64 bits) makes it
# unpredictable, so it cannot be planted, and lets concurrent writers to one target not collide.
_TEMP_STEM_MAX = 120
_TEMP_TRIES = 16
# O_NOFOLLOW: never open through a symlink; O_EXCL: never open a file that already exists.
_TEMP_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)
_NEW_FILE_MODE = 0o666  # less the umask, as open() gives any new file

_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.EISDIR: "it is a directory",
    errno.ENOENT: "its folder does not exist",
    errno.EFBIG: "file too large",
}
# Errors a folder gives when it refuses a new file; kernel file systems where nothing can be written.
_REFUSED_BY_FOLDER = (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EINVAL)
_KERNEL_FS = frozenset({"proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                        "configfs", "efivarfs", "bpf", "pstore", "binfmt_misc", "fusectl", "mqueue"})  # fmt: skip


def expand_user(path: str | Path) -> Path:
    """`~` and `~user` expanded as the shell does; a `~user` that names no user here stays literal (pathlib
    raises RuntimeError for it, which would otherwise surface as a traceback from a path option)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def autopar_home() -> Path:
    """autopar's data folder: $AUTOPAR_HOME, else ~/.autopar."""
    env = os.environ.get(HOME_ENV)
    return expand_user(env) if env else Path.home() / ".autopar"


def kind_of(mode: int) -> str:
    """What a file mode names, in words ('regular file', 'character device', ...)."""
    kinds = (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe (FIFO)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "regular file")


def _not_a_dir(path: Path) -> tuple[Path, str] | None:
    """The first existing ancestor of `path` (or `path` itself) that is not a directory, and its kind."""
    for p in [*reversed(path.parents), path]:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            return None  # from here on nothing exists (or cannot be seen): no blocking non-directory
        if not stat.S_ISDIR(mode):
            return p, kind_of(mode)
    return None


def _blocked_by(found: tuple[Path, str]) -> str:
    """'<path>' is a file (a device, ...), not a directory; naming $AUTOPAR_HOME when it is that path."""
    blocker, kind = found
    kind = "file" if kind == "regular file" else kind
    env = os.environ.get(HOME_ENV)
    if env and expand_user(env) == blocker:
        return f"{HOME_ENV}='{env}' is a {kind}, not a directory (point it at a directory, or unset it)"
    return f"'{blocker}' is a {kind}, not a directory"


def _name_too_long(path: Path) -> str:
    """The reason for ENAMETOOLONG, with the longest name's length and the file system's limit."""
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    limit = next((_pathconf_name_max(a) for a in path.parents if a.is_dir()), None)
    return f"file name too long ({longest} bytes" + (f"; this file system allows {limit})" if limit else ")")


def _pathconf_name_max(folder: Path) -> int | None:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return None


def reason(path: Path, err: OSError) -> str:
    """The plain reason an OS error stopped writing `path`."""
    if err.errno in (errno.ENOTDIR, errno.EEXIST):
        found = _not_a_dir(path.parent)
        if found is not None:
            return _blocked_by(found)
    if err.errno == errno.ENAMETOOLONG:
        return _name_too_long(path)
    if err.errno in _REFUSED_BY_FOLDER and _is_dir(path.parent):
        fs = _fs_type(path.parent)
        if fs in _KERNEL_FS:  # /proc, /sys: files there are kernel interfaces, nothing can be created
            return (
                f"'{path.parent}' is on a {fs} file system (a kernel interface), where no file can be written"
            )
        if err.errno == errno.ENOENT:  # the folder is there, so it is not what is missing
            return f"its folder '{path.parent}' does not accept new files" + (
                f" (a {fs} file system)" if fs else ""
            )
    return _REASONS.get(err.errno or 0) or (err.strerror or str(err)).lower()


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:
        return False


def _fs_type(folder: Path) -> str | None:
    """The type of the file system `folder` is on ('proc', 'sysfs', 'ext4', ...), from /proc/self/mounts
    (Linux; None elsewhere or when it cannot be read)."""
    try:
        where = os.path.realpath(folder)
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            mounts = [line.split()[1:3] for line in f if len(line.split()) >= 3]
    except OSError:
        return None
    best, fs = -1, None
    for point, kind in mounts:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)  # \040 is a space
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, fs = len(point), kind
    return fs


def output_error(path: str | Path, err: OSError) -> OutputError:
    """The one-line user error for an OS error raised while writing `path`."""
    return OutputError(f"cannot write '{path}': {reason(Path(path), err)}")


def describe_os_error(err: OSError) -> str:
    """One line for an OS error that reached the CLI boundary: errno's text and the file(s) named."""
    names = [str(n) for n in (err.filename, err.filename2) if n is not None]
    text = err.strerror or str(err) or type(err).__name__
    return f"{text}: {' -> '.join(names)}" if names else text


def ensure_dir(path: str | Path) -> Path:
    """Create folder `path` and its parents if missing; one-line OutputError when it cannot be one."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        found = _not_a_dir(p)
        if found is not None and found[0] == p:  # the folder itself is something else: one statement
            raise OutputError(_blocked_by(found)) from e
        why = _blocked_by(found) if found is not None else reason(p / "_", e)
        raise OutputError(f"cannot create folder '{p}': {why}") from e
    return p


def check_target(path: str | Path) -> os.stat_result | None:
    """Refuse a target that exists and is not a regular file (checked before a long computation too);
    returns its stat (None when it does not exist yet)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise output_error(p, e) from e
    if not stat.S_ISREG(st.st_mode):
        kind = kind_of(st.st_mode)
        hint = "give a file name inside it" if kind == "directory" else "autopar writes only regular files"
        raise OutputError(f"cannot write '{p}': it is a {kind}, not a regular file ({hint})")
    return st


def _create_temp(p: Path) -> tuple[int, Path]:
    """A new, exclusively created temporary file next to `p` (never through a symlink)."""
    for _ in range(_TEMP_TRIES):
        tmp = p.with_name(f".{p.name[:_TEMP_STEM_MAX]}.{os.urandom(8).hex()}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, _NEW_FILE_MODE), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "could not create a unique temporary file", str(p.parent))


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _commit(path: str | Path, fill: Callable[[int], None]) -> Path:
    """Check the target, fill a fresh temporary file through `fill(fd)`, fsync it, replace the target."""
    p = Path(path)
    try:
        old = check_target(p)
        if old is None:
            ensure_dir(p.parent)
        fd, tmp = _create_temp(p)
    except OSError as e:
        raise output_error(p, e) from e
    try:
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
            fill(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        check_target(p)  # again, just before replacing: it may have changed while we wrote
        os.replace(tmp, p)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise output_error(p, e) from e
        raise
    _sync_dir(p.parent)
    return p


def _sync_dir(folder: Path) -> None:
    """fsync the folder so the rename itself survives a crash (best effort: not every system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: str | Path, data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` atomically (see the module doc); returns `path` as a Path."""
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    return _commit(path, lambda fd: _write_all(fd, raw))


def write_atomic_with(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Like write_atomic, the content written by `write(fh)` to a binary file object (e.g. a pandas or
    pyarrow writer); the file object is flushed and fsynced before the replace."""

    def fill(fd: int) -> None:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            write(fh)

    return _commit(path, fill)
