"""Calibration objects: fit on run records, persist with versions, apply to an analytical estimate.

`Calibration.throughput_factor(model, cluster, workload, strategy, estimate)` returns the
multiplicative factor on tokens/s and its (low, high) band. A saved model carries its feature
schema, a fingerprint of its training set, and the autopar and scikit-learn versions; loading one
made by an incompatible version is a clear error, never a silent mis-prediction.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import sklearn
from sklearn.base import clone

from autopar.calibration.corrector import ThroughputCorrector
from autopar.calibration.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    TrainingSet,
    build_training_set,
    features,
    memory_features,
)
from autopar.errors import DataError
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

FORMAT = "autopar-calibration"
FORMAT_VERSION = 1
DEFAULT_ARTIFACT = "default_calibration.joblib"
DEFAULT_NAME = "published runs (default)"


class CalibrationVersionError(DataError):
    """A saved calibration model made by an autopar/scikit-learn version this one cannot use."""


def autopar_version() -> str:
    """The installed autopar version ('0+unknown' when running from an uninstalled tree)."""
    try:
        return importlib.metadata.version("autopar")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _major_minor(v: str) -> tuple[str, ...]:
    return tuple(v.split("+")[0].split(".")[:2])


@dataclass
class CalibrationMeta:
    """What a calibration model is and how it was made (stored beside the estimator)."""

    name: str
    model_name: str
    n_train: int
    sources: list[str]
    training_fingerprint: str
    feature_names: list[str] = field(default_factory=lambda: list(FEATURE_NAMES))
    feature_schema_version: str = FEATURE_SCHEMA_VERSION
    autopar_version: str = field(default_factory=autopar_version)
    sklearn_version: str = sklearn.__version__
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    cv_errors: dict[str, float] = field(default_factory=dict)
    loso: list[dict[str, Any]] = field(default_factory=list)  # per-source LOSO rows (error_table)
    memory_n_train: int = 0  # runs with measured memory (0 = no memory corrector)
    memory_sources: list[str] = field(default_factory=list)
    memory_cv: list[dict[str, Any]] = field(default_factory=list)  # K-fold rows (error_table)


def training_fingerprint(*sets: TrainingSet | None) -> str:
    """sha256 of the training set(s): run ids, measured and predicted figures and features (rounded).

    It changes when the data or the analytical model's predictions change, so a cached model
    trained against an older analytical model is not reused.
    """
    h = hashlib.sha256()
    for ts in sets:
        if ts is None:
            continue
        h.update(f"[{ts.target}]\n".encode())
        order = np.argsort(np.array(ts.ids, dtype=str), kind="stable")
        for i in order:
            row = [
                ts.ids[i],
                f"{ts.measured[i]:.6g}",
                f"{ts.predicted[i]:.6g}",
                *(f"{v:.6g}" for v in ts.X[i]),
            ]
            h.update(("|".join(row) + "\n").encode())
    return h.hexdigest()


class Calibration:
    """A fitted throughput corrector plus its metadata; the object the search and reports use."""

    def __init__(
        self,
        corrector: ThroughputCorrector,
        meta: CalibrationMeta,
        memory_corrector: ThroughputCorrector | None = None,
    ):
        self.corrector = corrector
        self.meta = meta
        self.memory_corrector = memory_corrector

    # ------------------------------------------------------------------------------- apply
    def factors(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(factor, low, high) multiplicative throughput factors for rows of features."""
        c, lo, hi = self.corrector.predict_interval(np.atleast_2d(X))
        return np.exp(c), np.exp(lo), np.exp(hi)

    def throughput_factor(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        workload: Workload,
        strategy: Strategy,
        estimate: Estimate,
    ) -> tuple[float, float, float]:
        """Multiplicative correction of the estimate's tokens/s and its (low, high) band."""
        x = features(model, cluster, workload, strategy, estimate)
        if not np.all(np.isfinite(x)):  # a degenerate estimate: no correction, the uncorrected band
            a = self.corrector.prior_halfwidth_
            return 1.0, math.exp(-a), math.exp(a)
        f, lo, hi = self.factors(x)
        return float(f[0]), float(lo[0]), float(hi[0])

    def memory_factor(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        workload: Workload,
        strategy: Strategy,
        estimate: Estimate,
    ) -> tuple[float, float, float]:
        """Multiplicative correction of the estimate's peak memory and its band; (1, 1, 1) without
        a memory corrector. Learned from max-reserved memory of few sources: use with care."""
        if self.memory_corrector is None:
            return 1.0, 1.0, 1.0
        x = memory_features(model, cluster, workload, strategy, estimate)
        if not np.all(np.isfinite(x)):
            a = self.memory_corrector.prior_halfwidth_
            return 1.0, math.exp(-a), math.exp(a)
        c, lo, hi = self.memory_corrector.predict_interval(x[None, :])
        return float(np.exp(c[0])), float(np.exp(lo[0])), float(np.exp(hi[0]))

    def __repr__(self) -> str:
        return f"Calibration({self.describe()!r})"

    def describe(self) -> str:
        """One line naming the corrector and its evidence, for reports and CLI output."""
        m = self.meta
        text = (
            f"calibration '{m.name}': {m.model_name} corrector on {m.n_train} runs from "
            f"{len(m.sources)} source(s)"
        )
        overall = next((r for r in m.loso if r.get("source") == "all"), None)
        if overall:
            text += (
                f"; leave-one-source-out median APE {100 * overall['median_ape_before']:.1f}% -> "
                f"{100 * overall['median_ape_after']:.1f}%"
            )
        if self.memory_corrector is not None:
            text += f"; memory corrector on {m.memory_n_train} runs ({', '.join(m.memory_sources)})"
        return text

    # ---------------------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> Path:
        """Write the model (joblib) with its metadata; the estimator is pickled inside."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "meta": asdict(self.meta),
            "corrector": pickle.dumps(self.corrector, protocol=pickle.HIGHEST_PROTOCOL),
            "memory_corrector": (
                None
                if self.memory_corrector is None
                else pickle.dumps(self.memory_corrector, protocol=pickle.HIGHEST_PROTOCOL)
            ),
        }
        joblib.dump(payload, p, compress=3)
        return p

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a saved model, refusing one made by an incompatible autopar or scikit-learn version.

        Only load files you trust: like any pickle, a model file can run code when loaded.
        """
        p = Path(path)
        if not p.exists():
            raise DataError(f"calibration model not found: {p}")
        try:
            payload = joblib.load(p)
        except Exception as e:
            raise DataError(f"'{p}' is not an autopar calibration model ({type(e).__name__}: {e})") from e
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise DataError(f"'{p}' is not an autopar calibration model (no '{FORMAT}' header)")
        meta = CalibrationMeta(**payload["meta"])
        _check_compatible(p, payload.get("format_version"), meta)
        corrector = pickle.loads(payload["corrector"])
        mem = payload.get("memory_corrector")
        return cls(corrector, meta, None if mem is None else pickle.loads(mem))


def _check_compatible(p: Path, fmt_version: Any, meta: CalibrationMeta) -> None:
    """Raise CalibrationVersionError unless this autopar/scikit-learn can use the saved model."""
    refit = f"refit it with `autopar calibrate fit --out {p}`"
    if fmt_version != FORMAT_VERSION:
        raise CalibrationVersionError(
            f"calibration model '{p}' has format version {fmt_version}; this "
            f"autopar reads version {FORMAT_VERSION}: {refit}"
        )
    if _major_minor(meta.sklearn_version) != _major_minor(sklearn.__version__):
        raise CalibrationVersionError(
            f"calibration model '{p}' was made with scikit-learn "
            f"{meta.sklearn_version}; this environment has {sklearn.__version__}: {refit}"
        )
    if _major_minor(meta.autopar_version) != _major_minor(autopar_version()):
        raise CalibrationVersionError(
            f"calibration model '{p}' was made with autopar {meta.autopar_version}; "
            f"this is autopar {autopar_version()}: {refit}"
        )
    if meta.feature_schema_version != FEATURE_SCHEMA_VERSION or list(meta.feature_names) != list(
        FEATURE_NAMES
    ):
        raise CalibrationVersionError(
            f"calibration model '{p}' uses feature schema {meta.feature_schema_version}; "
            f"this autopar uses {FEATURE_SCHEMA_VERSION}: {refit}"
        )


def load_calibration(path: str | Path) -> Calibration:
    """Load a saved calibration model (see Calibration.load)."""
    return Calibration.load(path)


# ------------------------------------------------------------------------------------------ fitting
MIN_MEMORY_RUNS = 8


def fit_calibration(
    records: Sequence[Mapping[str, Any]],
    *,
    name: str,
    estimator: ThroughputCorrector | None = None,
    evaluate: bool = True,
) -> Calibration:
    """Fit the throughput corrector (and a memory one where enough runs measured memory) on records."""
    return fit_training_set(
        build_training_set(records),
        name=name,
        estimator=estimator,
        evaluate=evaluate,
        memory_ts=build_training_set(records, "memory"),
    )


def fit_training_set(
    ts: TrainingSet,
    *,
    name: str,
    estimator: ThroughputCorrector | None = None,
    evaluate: bool = True,
    memory_ts: TrainingSet | None = None,
) -> Calibration:
    """Fit on prepared training sets; with `evaluate`, store the held-out error tables too."""
    from autopar.calibration.evaluate import error_table, kfold_cross_validated, leave_one_source_out

    if len(ts) < 3:
        raise DataError(
            f"need at least 3 usable runs to fit a calibration, have {len(ts)}"
            + (f" ({len(ts.skipped)} skipped: {ts.skipped[0][1]})" if ts.skipped else "")
        )
    est = estimator if estimator is not None else ThroughputCorrector()
    corrector = clone(est).fit(ts.X, ts.y, groups=np.array(ts.sources))
    loso: list[dict[str, Any]] = []
    if evaluate and len(set(ts.sources)) >= 2:
        loso = _records(error_table(leave_one_source_out(ts, est)))
    mem_corrector, mem_cv = None, []
    use_memory = memory_ts is not None and len(memory_ts) >= MIN_MEMORY_RUNS
    if use_memory:
        mem_corrector = clone(est).fit(memory_ts.X, memory_ts.y, groups=np.array(memory_ts.sources))
        if evaluate:
            mem_cv = _records(error_table(kfold_cross_validated(memory_ts, est)))
    meta = CalibrationMeta(
        name=name,
        model_name=corrector.model_name_,
        n_train=len(ts),
        sources=sorted(set(ts.sources)),
        training_fingerprint=training_fingerprint(ts, memory_ts if use_memory else None),
        cv_errors=dict(corrector.cv_errors_),
        loso=loso,
        memory_n_train=len(memory_ts) if use_memory else 0,
        memory_sources=sorted(set(memory_ts.sources)) if use_memory else [],
        memory_cv=mem_cv,
    )
    return Calibration(corrector, meta, mem_corrector)


def _records(table: Any) -> list[dict[str, Any]]:
    """An error table as JSON-friendly dicts (NaN -> None)."""
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]


# ---------------------------------------------------------------------------------- default model
def _published_training_sets() -> tuple[TrainingSet, TrainingSet]:
    """Throughput and memory training sets of the published runs shipped with autopar."""
    from autopar.calibration.records import read_run_records
    from autopar.data import published_runs_path

    recs = read_run_records(published_runs_path()).to_dict("records")
    return build_training_set(recs), build_training_set(recs, "memory")


def build_default_calibration() -> Calibration:
    """Train the default corrector on the published runs shipped with autopar."""
    ts, mem = _published_training_sets()
    return fit_training_set(ts, name=DEFAULT_NAME, memory_ts=mem)


def default_artifact_path() -> Path:
    """Where the packaged default model lives (autopar/data/default_calibration.joblib)."""
    from autopar.data import data_path

    return data_path(DEFAULT_ARTIFACT)


def write_default_calibration(path: str | Path | None = None) -> Path:
    """Rebuild the default model and write it (default: the packaged artifact, for maintainers)."""
    return build_default_calibration().save(path or default_artifact_path())


def _user_cache_path(fp: str) -> Path:
    from autopar.calibration.store import autopar_home

    return autopar_home() / "cache" / f"default_calibration-{fp[:16]}.joblib"


def _try_load(path: Path, fp: str) -> Calibration | None:
    """A saved default model if it loads and was trained on exactly this training set."""
    if not path.exists():
        return None
    try:
        cal = Calibration.load(path)
    except DataError:
        return None
    return cal if cal.meta.training_fingerprint == fp else None


@functools.lru_cache(maxsize=1)
def load_default_calibration() -> Calibration:
    """The default model: the packaged artifact or a user cache when they match the shipped data and
    the current analytical model, else trained now (and cached under $AUTOPAR_HOME/cache)."""
    ts, mem = _published_training_sets()
    fp = training_fingerprint(ts, mem if len(mem) >= MIN_MEMORY_RUNS else None)
    for path in (default_artifact_path(), _user_cache_path(fp)):
        cal = _try_load(path, fp)
        if cal is not None:
            return cal
    cal = fit_training_set(ts, name=DEFAULT_NAME, memory_ts=mem)
    with contextlib.suppress(OSError):  # a read-only home only costs a refit next time
        cal.save(_user_cache_path(fp))
    return cal
