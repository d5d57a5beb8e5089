"""Calibration objects: fit on run records (validated by source), persist as JSON, apply to estimates.

The object and its application: apply/model.py; its metadata: apply/meta.py; fitting: apply/fit.py; the
default model: apply/default.py; calibrated batch estimates: apply/batch.py. The public entry points are
importable from here.
"""

from __future__ import annotations

from autopar.calibration.apply.default import load_default_calibration
from autopar.calibration.apply.fit import fit_calibration, fit_training_set
from autopar.calibration.apply.meta import CalibrationMeta
from autopar.calibration.apply.model import Calibration, load_calibration
from autopar.calibration.models.modelfile import CalibrationVersionError

__all__ = [
    "Calibration",
    "CalibrationMeta",
    "CalibrationVersionError",
    "fit_calibration",
    "fit_training_set",
    "load_calibration",
    "load_default_calibration",
]
