"""Data shipped with autopar: the published-runs dataset (a copy of shared/groundtruth/public.csv)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(name: str) -> Path:
    """Filesystem path of a data file shipped inside the package."""
    return Path(str(resources.files("autopar.data").joinpath(name)))


def published_runs_path() -> Path:
    """The published, measured training runs used for the accuracy benchmark and default calibration."""
    return data_path("published_runs.csv")
