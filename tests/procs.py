"""Process state for the tests of runs that start processes (tune's runners)."""

from __future__ import annotations

from pathlib import Path


def gone(pid: int) -> bool:
    """True when process `pid` no longer runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"
