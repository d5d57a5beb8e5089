"""autopar's error types: one base class carrying a one-line user message."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from autopar.text import excerpt


def close_hint(value: str, choices: Iterable[str]) -> str:
    """'; did you mean X?' for the choices close to a mistyped value, else ''."""
    close = difflib.get_close_matches(str(value), list(choices), n=2, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


class AutoparError(Exception):
    """A user-facing error; the CLI prints ``str(err)`` on one line and exits 2."""

    exit_code = 2


class SpecError(AutoparError):
    """An invalid model/cluster/workload/strategy specification."""


class UnknownNameError(AutoparError):
    """A GPU, model or other catalog name that does not exist."""

    def __init__(self, kind: str, name: str, choices: Iterable[str]):
        choices = sorted(set(choices))
        close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=3, cutoff=0.4)
        lower_to_real = {c.lower(): c for c in choices}
        close_real = [lower_to_real[c] for c in close]
        hint = f"; did you mean {', '.join(close_real)}?" if close_real else ""
        shown = ", ".join(choices[:12]) + (" ..." if len(choices) > 12 else "")
        super().__init__(f"unknown {kind} '{excerpt(name)}'{hint} (known: {shown})")
        self.kind, self.name, self.suggestions = kind, name, close_real


class InvalidStrategyError(SpecError):
    """A strategy that breaks one or more rules; carries every violation."""

    def __init__(self, violations: list[str]):
        self.violations = violations
        super().__init__("invalid strategy: " + "; ".join(violations))


class DataError(AutoparError):
    """Malformed input data (run records, price files, logs)."""


class OutputError(AutoparError):
    """A file or folder autopar was asked to write cannot be written (the message names it and why)."""


class NoPriceError(AutoparError):
    """No price for a GPU in the requested pricing tier (the message names both and how to add one)."""


# The optional extra (pyproject.toml) that brings scikit-learn and SciPy: fitting a calibration model needs
# them; applying one (calibration/models/predictor.py) and everything else autopar does needs neither.
CALIBRATE_EXTRA = "calibrate"


def install_hint(extra: str) -> str:
    """The exact command that adds optional extra `extra` to the running autopar: from a source checkout (an
    editable install, as scripts/setup.sh makes) `<this python> -m pip install -e '<checkout>[extra]'`, since
    'autopar[extra]' alone would look for autopar on the package index; else `pip install 'autopar[extra]'`."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    try:
        ours = pyproject.is_file() and 'name = "autopar"' in pyproject.read_text(encoding="utf-8")
    except OSError:
        ours = False
    if ours:
        return f"{sys.executable} -m pip install -e '{root}[{extra}]' (this checkout; or: bash scripts/setup.sh extras)"
    return f"pip install 'autopar[{extra}]'"


class MissingExtraError(AutoparError):
    """A command needs a package autopar installs only with one of its optional extras."""

    def __init__(self, package: str, extra: str, purpose: str):
        super().__init__(f"{purpose} needs {package}, an optional part of autopar: {install_hint(extra)}")
        self.package, self.extra = package, extra


class StorageError(AutoparError):
    """The study storage failed at run time: the database server is unreachable (after retrying),
    the journal's disk is full, a write was refused. Not the user's input: its own exit code."""

    exit_code = 3


class NoFeasibleStrategyError(AutoparError):
    """The search found nothing that fits; the message says what to change."""

    exit_code = 1
