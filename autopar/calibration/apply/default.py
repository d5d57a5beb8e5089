"""The default calibration: trained on the published runs shipped with autopar, packaged as
autopar/data/default_calibration.json, and loaded once per process when its training fingerprint matches.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from pathlib import Path

import numpy as np

from autopar.calibration.apply.fit import MIN_MEMORY_RUNS, fit_training_set
from autopar.calibration.apply.meta import training_fingerprint
from autopar.calibration.apply.model import Calibration
from autopar.calibration.models.features import (
    TrainingSet,
    build_training_set,
)
from autopar.errors import DataError, OutputError
from autopar.files import write_atomic
from autopar.inputs import read_text

DEFAULT_ARTIFACT = "default_calibration.json"


DEFAULT_NAME = "published runs (default)"


REGENERATE = "python -m autopar.calibration.build_default"


def published_training_sets() -> tuple[TrainingSet, TrainingSet]:
    """Throughput and memory training sets of the published runs shipped with autopar."""
    from autopar.calibration.ingest.tables import read_run_records
    from autopar.data import published_runs_path

    recs = read_run_records(published_runs_path()).to_dict("records")
    return build_training_set(recs), build_training_set(recs, "memory")


def _default_fingerprint(ts: TrainingSet, mem: TrainingSet) -> str:
    return training_fingerprint(ts, mem if len(mem) >= MIN_MEMORY_RUNS else None)


def build_default_calibration() -> Calibration:
    """Train the default corrector on the published runs shipped with autopar (deterministic)."""
    ts, mem = published_training_sets()
    return fit_training_set(ts, name=DEFAULT_NAME, memory_ts=mem)


def default_artifact_path() -> Path:
    """Where the packaged default model lives (autopar/data/default_calibration.json)."""
    from autopar.data import data_path

    return data_path(DEFAULT_ARTIFACT)


def _try_load(path: Path, fp: str) -> Calibration | None:
    """The packaged default model if it loads and was trained on exactly this training set."""
    try:
        cal = Calibration.load(path)
    except DataError:
        return None
    return cal if cal.meta.training_fingerprint == fp else None


# Files whose bytes can change the default model's training fingerprint: autopar's code and data.
_INPUT_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".csv", ".json"})


def inputs_digest() -> str:
    """sha256 of autopar's source and data files (and numpy's version): equal digests mean equal training
    sets, so the fingerprint computed once for a digest can be reused (a few ms instead of reading the
    published runs with pandas and estimating each)."""
    root = Path(__file__).resolve().parents[2]  # autopar/
    h = hashlib.sha256(f"numpy {np.__version__}\n".encode())
    for p in sorted(root.rglob("*")):
        if p.suffix in _INPUT_SUFFIXES and "__pycache__" not in p.parts and p.is_file():
            h.update(f"{p.relative_to(root).as_posix()}\n".encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _fingerprint_stamp(digest: str) -> Path:
    from autopar.calibration.store.run_store import autopar_home

    return autopar_home() / "cache" / f"default_fingerprint-{digest[:16]}.txt"


def _known_fingerprint(digest: str) -> str | None:
    """The training fingerprint recorded for these inputs by an earlier process, if any."""
    try:  # 1 kB: a 64-character hex digest; a planted large file is not read
        fp = read_text(_fingerprint_stamp(digest), 1024, "fingerprint stamp").strip()
    except (OSError, DataError):
        return None
    return fp if len(fp) == 64 else None


def _remember_fingerprint(digest: str, fp: str) -> None:
    with contextlib.suppress(OSError, OutputError):  # an unwritable home only costs recomputing it next time
        write_atomic(_fingerprint_stamp(digest), fp + "\n")


@functools.lru_cache(maxsize=1)
def load_default_calibration() -> Calibration:
    """The default model (once per process): the packaged file when it matches the shipped data and the
    current analytical model (checked by training fingerprint), else trained now on the shipped data.

    Only the packaged file, part of autopar's own code, is ever labelled the default. No model file under
    $AUTOPAR_HOME is read here: without a secret a cache cannot be told from a planted file, and a planted
    model would give every plan its numbers under the "(default)" label. A stale packaged model (autopar's
    analytical model edited, `python -m autopar.calibration.build_default` not run) costs a refit of a few seconds per process. The
    fingerprint of unchanged inputs (inputs_digest) is remembered under $AUTOPAR_HOME/cache to skip
    recomputing it; a wrong remembered value can only select the packaged file or cause a refit.
    """
    digest = inputs_digest()
    fp = _known_fingerprint(digest)
    if fp is not None:
        cal = _try_load(default_artifact_path(), fp)
        if cal is not None:
            return cal
    ts, mem = published_training_sets()
    fp = _default_fingerprint(ts, mem)
    _remember_fingerprint(digest, fp)
    cal = _try_load(default_artifact_path(), fp)
    if cal is not None:
        return cal
    return fit_training_set(ts, name=DEFAULT_NAME, memory_ts=mem)
