"""Errors of `autopar dryrun` and the check that PyTorch (an optional extra) is installed. No torch import."""

from __future__ import annotations

import importlib

from autopar.errors import AutoparError

INSTALL_HINT = "pip install 'autopar[dryrun]'"


class DryrunFailed(AutoparError):
    """A rank of the dry-run failed or the run timed out: not an input error, so its own exit code."""

    exit_code = 4


class TorchMissing(AutoparError):
    """`autopar dryrun` needs PyTorch, which autopar does not install by default."""


def require_torch() -> str:
    """PyTorch's version, or a one-line error saying how to install the extra."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise TorchMissing(f"autopar dryrun needs PyTorch ({e.msg}): {INSTALL_HINT}") from None
    return str(torch.__version__)
