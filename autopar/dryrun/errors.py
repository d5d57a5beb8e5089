"""Errors of `autopar dryrun` and the check that PyTorch (an optional extra) is installed. No torch import."""

from __future__ import annotations

import importlib

from autopar.errors import AutoparError, MissingExtraError, install_hint

DRYRUN_EXTRA = "dryrun"  # pyproject.toml [project.optional-dependencies]
INSTALL_HINT = install_hint(DRYRUN_EXTRA)


class DryrunFailed(AutoparError):
    """A rank of the dry-run failed or the run timed out: not an input error, so its own exit code."""

    exit_code = 4


def require_torch() -> str:
    """PyTorch's version, or the one-line error of the missing extra (MissingExtraError names how to install)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as err:
        raise MissingExtraError("PyTorch", DRYRUN_EXTRA, "autopar dryrun") from err
    return str(torch.__version__)
