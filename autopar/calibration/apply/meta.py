"""What a calibration model is (`CalibrationMeta`): its name, evidence, choice of parameters, held-out scores,
versions and feature schema; the training fingerprint, and the checks a loaded model's metadata must pass.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from autopar.calibration.models.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    MEMORY_FEATURE_NAMES,
    TrainingSet,
)
from autopar.calibration.models.modelfile import CalibrationVersionError
from autopar.errors import CALIBRATE_EXTRA, MissingExtraError


def sklearn_version() -> str:
    """The scikit-learn version (imported only when a model is fitted, never to apply one)."""
    try:
        import sklearn
    except ModuleNotFoundError as err:
        raise MissingExtraError("scikit-learn", CALIBRATE_EXTRA, "fitting a calibration model") from err

    return sklearn.__version__


def autopar_version() -> str:
    """The installed autopar version ('0+unknown' when running from an uninstalled tree)."""
    try:
        return importlib.metadata.version("autopar")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass
class CalibrationMeta:
    """What a calibration model is, how it was chosen and how it scored on held-out sources."""

    name: str
    n_train: int
    sources: list[str]
    training_fingerprint: str
    choice: dict[str, Any] = field(default_factory=dict)  # alpha, shrink, prior_scale, cap, reason
    loso: list[dict[str, Any]] = field(default_factory=list)  # held-out rows per source + 'all'
    group: str | None = None  # the cluster whose offset applies to every prediction
    groups: list[str] = field(default_factory=list)
    feature_names: list[str] = field(default_factory=lambda: list(FEATURE_NAMES))
    memory_feature_names: list[str] = field(default_factory=lambda: list(MEMORY_FEATURE_NAMES))
    feature_schema_version: str = FEATURE_SCHEMA_VERSION
    autopar_version: str = field(default_factory=autopar_version)
    sklearn_version: str = field(default_factory=sklearn_version)
    memory_n_train: int = 0
    memory_sources: list[str] = field(default_factory=list)
    memory_choice: dict[str, Any] = field(default_factory=dict)
    memory_cv: list[dict[str, Any]] = field(default_factory=list)
    memory_scheme: str = ""
    # The throughput runs it was fitted on, as novelty sees them (calibration/evaluation/novelty.py LayoutPoint fields):
    # a prediction's band widens with the distance to these and to the published runs (issue 21).
    layouts: list[dict[str, Any]] = field(default_factory=list)
    # The software stacks (Workload.framework) of the runs the memory band was fitted on: the band's upper end
    # is the search's memory margin only for these stacks (search/margin.py).
    memory_stacks: list[str] = field(default_factory=list)


def training_fingerprint(*sets: TrainingSet | None) -> str:
    """sha256 of the training set(s): ids, groups, measured/predicted figures and features (rounded).

    It changes when the data or the analytical model's predictions change, so a model trained
    against an older analytical model is not reused silently.
    """
    h = hashlib.sha256()
    for ts in sets:
        if ts is None:
            continue
        h.update(f"[{ts.target}]\n".encode())
        for i in np.argsort(np.array(ts.ids, dtype=str), kind="stable"):
            row = [ts.ids[i], ts.groups[i], f"{ts.measured[i]:.6g}", f"{ts.predicted[i]:.6g}"]
            h.update(("|".join(row + [f"{v:.6g}" for v in ts.X[i]]) + "\n").encode())
    return h.hexdigest()


def meta_from_doc(d: Any) -> CalibrationMeta:
    """CalibrationMeta from its JSON object; unknown keys are ignored, types checked loosely."""
    if not isinstance(d, dict):
        raise ValueError("'meta' must be an object")
    known = {f.name for f in fields(CalibrationMeta)}
    meta = CalibrationMeta(**{k: v for k, v in d.items() if k in known})
    if not isinstance(meta.name, str) or not isinstance(meta.feature_names, list):
        raise ValueError("name/feature_names")
    if not isinstance(meta.layouts, list) or not all(_is_layout(p) for p in meta.layouts):
        raise ValueError("layouts must be a list of layout objects")
    if not isinstance(meta.memory_stacks, list) or not all(isinstance(x, str) for x in meta.memory_stacks):
        raise ValueError("memory_stacks must be a list of names")
    return meta


def _is_layout(raw: Any) -> bool:
    """Whether `raw` is a novelty LayoutPoint as a JSON object (knobs a list of numbers, the rest text)."""
    from autopar.calibration.evaluation.novelty import KNOBS, LayoutPoint

    names = {f.name for f in fields(LayoutPoint)}
    required = {"knobs", "family", "stack", "precision"}
    if not isinstance(raw, dict) or set(raw) - names or required - set(raw):
        return False
    if not isinstance(raw["knobs"], list):
        return False
    knobs_ok = len(raw["knobs"]) == len(KNOBS) and all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in raw["knobs"]
    )
    return knobs_ok and all(isinstance(v, str) for k, v in raw.items() if k != "knobs")


def check_feature_schema(p: Path, meta: CalibrationMeta) -> None:
    """Raise CalibrationVersionError unless the model's features are this autopar's features."""
    if (
        meta.feature_schema_version != FEATURE_SCHEMA_VERSION
        or list(meta.feature_names) != list(FEATURE_NAMES)
        or list(meta.memory_feature_names) != list(MEMORY_FEATURE_NAMES)
    ):
        raise CalibrationVersionError(
            f"calibration model '{p}' uses feature schema {meta.feature_schema_version}; this autopar "
            f"uses {FEATURE_SCHEMA_VERSION}: refit it with `autopar calibrate fit --out {p}`"
        )
