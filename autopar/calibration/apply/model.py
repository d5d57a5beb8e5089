"""The Calibration object: fitted throughput (and memory) correctors with their metadata, applied to estimates.

`Calibration.throughput_factor(...)` / `memory_factor(...)` return a multiplicative factor and its
80% band; `Calibration.apply(...)` returns the corrected Estimate (tokens/s scaled by the throughput
factor, memory by the memory factor). A model may carry a `group` (the user's cluster id): its
learned offset then applies to every prediction, which is how a handful of ingested runs moves the
predictions for the rest of that cluster. Saved and loaded as JSON (models/modelfile.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from autopar.calibration.apply.meta import CalibrationMeta, check_feature_schema, meta_from_doc
from autopar.calibration.models.adapter import AdaptedCorrector, corrector_from_params
from autopar.calibration.models.features import (
    FEATURE_NAMES,
    MEMORY_FEATURE_NAMES,
    features,
    memory_features,
)
from autopar.calibration.models.modelfile import read_model_doc, write_model_doc
from autopar.calibration.models.predictor import FittedCorrector
from autopar.calibration.models.stack_prior import stack_prior, unprofiled_mask
from autopar.errors import DataError
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

# Sources a description names before "+N more": the published runs have 6; a user's store may have many.
SOURCES_NAMED = 6


def provenance(name: str, n_runs: int | None, sources: list[str] | tuple[str, ...] | None) -> str:
    """ "calibration 'NAME' (N runs from K sources: a, b, ...)": which model corrected a figure and on what
    evidence, for every place that says so (a user's model is never "the published runs")."""
    if n_runs is None or sources is None:
        return f"calibration '{name}'"
    shown = ", ".join(sources[:SOURCES_NAMED])
    more = f", +{len(sources) - SOURCES_NAMED} more" if len(sources) > SOURCES_NAMED else ""
    noun = "source" if len(sources) == 1 else "sources"
    return f"calibration '{name}' ({n_runs} runs from {len(sources)} {noun}: {shown}{more})"


class Calibration:
    """Fitted throughput (and optionally memory) correctors with metadata; what search and CLI use."""

    def __init__(
        self,
        corrector: FittedCorrector,
        meta: CalibrationMeta,
        memory_corrector: FittedCorrector | None = None,
    ):
        self.corrector = corrector
        self.meta = meta
        self.memory_corrector = memory_corrector

    # ------------------------------------------------------------------------------- apply
    def _groups(self, n: int, groups: Sequence[str] | None) -> list[str] | None:
        if groups is not None:
            return list(groups)
        return None if self.meta.group is None else [self.meta.group] * n

    def factors(
        self, X: np.ndarray, groups: Sequence[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(factor, low, high) multiplicative throughput factors for rows of features."""
        X = np.atleast_2d(X)
        c, lo, hi = self.corrector.predict_interval(X, self._groups(len(X), groups))
        return np.exp(c), np.exp(lo), np.exp(hi)

    def memory_factors(
        self, X: np.ndarray, groups: Sequence[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(factor, low, high) of peak memory for rows of memory features ((1, 1, 1) without a model)."""
        X = np.atleast_2d(X)
        if self.memory_corrector is None:
            one = np.ones(len(X))
            return one, one, one
        c, lo, hi = self.memory_corrector.predict_interval(X, self._groups(len(X), groups))
        return np.exp(c), np.exp(lo), np.exp(hi)

    def memory_moves(self) -> bool:
        """False when the memory factor is 1 for every input (no memory model, or shrink 0 and no offset
        for this model's group): the search then skips the memory features."""
        mc = self.memory_corrector
        if mc is None:
            return False
        return mc.shrink > 0 or abs(mc.offsets_.get(str(self.meta.group), 0.0)) > 0

    def bands(
        self,
        kind: Literal["throughput", "memory"],
        X: np.ndarray,
        groups: Sequence[str] | None = None,
        stacks: str | Sequence[str] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(factor, low, high) arrays over the rows of features X, one prediction for all rows: the one
        place a corrector is applied (single estimates, the search's batches, its array sweeps and
        `estimate --batch` all come here). A row with a non-finite feature gets no correction and the
        analytical band; the band always holds the factor; (1, 1, 1) without a corrector of that kind.
        `stacks` (Workload.stack, one for all rows or one per row): rows on an unprofiled stack get the
        unprofiled-stack prior on their throughput (calibration/models/stack_prior.py)."""
        f, lo, hi = self._bands(kind, X, groups)
        on = unprofiled_mask(stacks, len(f))
        if kind == "throughput" and on.any():
            return stack_prior().apply(f, lo, hi, on)
        return f, lo, hi

    def _bands(
        self, kind: Literal["throughput", "memory"], X: np.ndarray, groups: Sequence[str] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = np.atleast_2d(X)
        corrector = self.corrector if kind == "throughput" else self.memory_corrector
        n = len(X)
        if corrector is None or not n:
            one = np.ones(n)
            return one, one, one
        fn = self.factors if kind == "throughput" else self.memory_factors
        ok = np.isfinite(X).all(axis=1)
        if ok.all():  # the usual case, kept lean: a single estimate comes here once per search trial
            f, lo, hi = fn(X, groups)
            return f, np.minimum(lo, f), np.maximum(hi, f)
        low, high = np.exp(corrector.prior_band_)
        f, lo, hi = np.ones(n), np.full(n, low), np.full(n, high)
        if ok.any():
            g = None if groups is None else [x for x, k in zip(groups, ok, strict=True) if k]
            fo, loo, hio = fn(X[ok], g)
            f[ok], lo[ok], hi[ok] = fo, np.minimum(loo, fo), np.maximum(hio, fo)
        return f, lo, hi

    def factor(
        self,
        kind: Literal["throughput", "memory"],
        model: ModelSpec,
        cluster: ClusterSpec,
        workload: Workload,
        strategy: Strategy,
        estimate: Estimate,
        group: str | None = None,
    ) -> tuple[float, float, float]:
        """Multiplicative correction of the estimate's tokens/s (kind "throughput") or peak memory ("memory")
        and its (low, high) 80% band; (1, 1, 1) without a corrector of that kind."""
        fn = features if kind == "throughput" else memory_features
        x = fn(model, cluster, workload, strategy, estimate)
        f, lo, hi = self.bands(kind, x, None if group is None else [group], workload.stack)
        return float(f[0]), float(lo[0]), float(hi[0])

    # factor(kind, ...) with the kind bound: same arguments and result as `factor`.
    throughput_factor = functools.partialmethod(factor, "throughput")
    memory_factor = functools.partialmethod(factor, "memory")

    def apply(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        workload: Workload,
        strategy: Strategy,
        estimate: Estimate,
        group: str | None = None,
    ) -> Estimate:
        """The corrected estimate: throughput x its factor (band recorded), memory x its factor."""
        f, lo, hi = self.throughput_factor(model, cluster, workload, strategy, estimate, group)
        out = estimate.calibrated(f, lo, hi, self.meta.name)
        if workload.stack:
            out = replace(out, notes=(*out.notes, stack_prior().sentence(workload.stack)))
        if group is None and not self.memory_moves():
            return out
        mf = self.memory_factor(model, cluster, workload, strategy, estimate, group)[0]
        return scale_memory(out, mf)

    def __repr__(self) -> str:
        return f"Calibration({self.describe()!r})"

    def provenance(self) -> str:
        """Which model this is and its evidence, on one short line (`provenance`)."""
        return provenance(self.meta.name, self.meta.n_train, self.meta.sources)

    def info(self) -> dict[str, Any]:
        """The model's name and evidence as JSON fields (search results and `--json` carry them)."""
        return {"name": self.meta.name, "n_runs": self.meta.n_train, "sources": list(self.meta.sources)}

    def describe(self) -> str:
        """One line naming the corrector and its evidence, for reports and CLI output."""
        m = self.meta
        shrink = m.choice.get("shrink", 1.0)
        # An adapted model (calibrate fit --group) replaces the offsets by per-cluster offsets and slopes.
        cluster = (
            "cluster offsets and slopes"
            if isinstance(self.corrector, AdaptedCorrector)
            else "cluster offsets"
        )
        what = (
            f"analytical model + {cluster} (no global correction passed the no-worse-by-source gate)"
            if shrink == 0
            else f"ridge correction x{shrink:.1f} + {cluster}"
        )
        text = f"{provenance(m.name, m.n_train, m.sources)}: {what}"
        overall = next((r for r in m.loso if r.get("source") == "all"), None)
        if overall:
            text += (
                f"; leave-one-source-out median APE {100 * overall['median_ape_before']:.1f}% -> "
                f"{100 * overall['median_ape_after']:.1f}%, 80% band covers "
                f"{100 * overall['band_coverage']:.0f}% (mean width {100 * overall['band_width']:.0f}%)"
            )
        if m.group:
            text += f"; adapted to cluster '{m.group}'"
        if self.memory_corrector is not None:
            text += f"; memory band from {m.memory_n_train} runs ({', '.join(m.memory_sources)})"
        return text

    # ---------------------------------------------------------------------------- persistence
    def to_doc(self) -> dict[str, Any]:
        """The JSON document of this model (parameters, metadata, versions, feature schema)."""
        return {
            "meta": asdict(self.meta),
            "throughput": self.corrector.to_params(),
            "memory": None if self.memory_corrector is None else self.memory_corrector.to_params(),
        }

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON (no pickle: loading it can never run code)."""
        return write_model_doc(path, self.to_doc())

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a JSON model file; one-line DataError for a foreign, corrupt or incompatible file."""
        doc = read_model_doc(path)
        try:
            meta = meta_from_doc(doc.get("meta"))
        except (TypeError, ValueError) as e:
            raise DataError(f"'{path}' is not an autopar calibration model (bad metadata: {e})"[:240]) from e
        check_feature_schema(Path(path), meta)
        try:
            tp = corrector_from_params(_dict(doc, "throughput"), len(FEATURE_NAMES))  # adapter if any
            mem = doc.get("memory")
            mc = (
                None
                if mem is None
                else FittedCorrector.from_params(_dict(doc, "memory"), len(MEMORY_FEATURE_NAMES))
            )
        except (TypeError, ValueError) as e:
            raise DataError(f"'{path}' is a corrupt autopar calibration model ({e})"[:240]) from e
        return cls(tp, meta, mc)


def _dict(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key)
    if not isinstance(v, dict):
        raise ValueError(f"'{key}' must be an object")
    return v


def scale_memory(est: Estimate, factor: float) -> Estimate:
    """The estimate with every memory term scaled by `factor` (headroom and fit recomputed)."""
    if factor == 1.0 or not math.isfinite(factor) or factor <= 0:
        return est
    mem = type(est.memory)(**{k: v * factor for k, v in asdict(est.memory).items()})
    head = est.capacity_bytes - mem.total
    note = f"calibrated peak memory x{factor:.3f}"
    return replace(est, memory=mem, headroom_bytes=head, fits=head >= 0, notes=(*est.notes, note))


def load_calibration(path: str | Path) -> Calibration:
    """Load a saved calibration model (see Calibration.load)."""
    return Calibration.load(path)
