"""Calibration objects: fit on run records (validated by source), persist as JSON, apply to estimates.

`Calibration.throughput_factor(...)` / `memory_factor(...)` return a multiplicative factor and its
80% band; `Calibration.apply(...)` returns the corrected Estimate (tokens/s scaled by the throughput
factor, memory by the memory factor). A model may carry a `group` (the user's cluster id): its
learned offset then applies to every prediction, which is how a handful of ingested runs moves the
predictions for the rest of that cluster.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from autopar.calibration.adapter import AdaptedCorrector, corrector_from_params
from autopar.calibration.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    MEMORY_FEATURE_NAMES,
    TrainingSet,
    build_training_set,
    features,
    memory_features,
)
from autopar.calibration.modelfile import CalibrationVersionError, read_model_doc, write_model_doc
from autopar.calibration.predictor import FittedCorrector
from autopar.calibration.stack_prior import stack_prior, unprofiled_mask
from autopar.errors import CALIBRATE_EXTRA, DataError, MissingExtraError, OutputError
from autopar.files import write_atomic
from autopar.inputs import read_text
from autopar.perf.types import Estimate
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload

__all__ = [
    "Calibration",
    "CalibrationMeta",
    "CalibrationVersionError",
    "fit_calibration",
    "fit_training_set",
    "load_calibration",
    "load_default_calibration",
]

DEFAULT_ARTIFACT = "default_calibration.json"
DEFAULT_NAME = "published runs (default)"
REGENERATE = "python -m autopar.calibration.build_default"
MIN_MEMORY_RUNS = 8
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
    # The throughput runs it was fitted on, as novelty sees them (calibration/novelty.py LayoutPoint fields):
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
        unprofiled-stack prior on their throughput (calibration/stack_prior.py)."""
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
            meta = _meta_from(doc.get("meta"))
        except (TypeError, ValueError) as e:
            raise DataError(f"'{path}' is not an autopar calibration model (bad metadata: {e})"[:240]) from e
        _check_schema(Path(path), meta)
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


def _meta_from(d: Any) -> CalibrationMeta:
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
    from autopar.calibration.novelty import KNOBS, LayoutPoint

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


def _check_schema(p: Path, meta: CalibrationMeta) -> None:
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


# ------------------------------------------------------------------------------------------ fitting
def fit_calibration(
    records: Sequence[Mapping[str, Any]],
    *,
    name: str,
    group: str | None = None,
    evaluate: bool = True,
    caps: tuple[float | None, float | None] = (None, None),
) -> Calibration:
    """Fit the throughput and memory correctors on run records (see fit_training_set)."""
    return fit_training_set(
        build_training_set(records),
        name=name,
        memory_ts=build_training_set(records, "memory"),
        group=group,
        evaluate=evaluate,
        caps=caps,
        records=records,
    )


def _fit_one(
    ts: TrainingSet, evaluate: bool, cap: float | None = None
) -> tuple[FittedCorrector, dict[str, Any], list, str]:
    """Choose parameters by the nested no-worse gate (or under a given shrink cap), fit on everything,
    put the out-of-group band on it."""
    from autopar.calibration.corrector import ThroughputCorrector
    from autopar.calibration.validation import (
        COVERAGE,
        _band_without,
        error_table,
        held_out,
        select_params,
    )

    ch = select_params(ts.X, ts.y, ts.groups, cap=cap)
    g = np.asarray(ts.groups)
    m = ThroughputCorrector(alpha=ch.alpha, shrink=ch.shrink, coverage=COVERAGE, prior_scale=ch.prior_scale)
    m.fit(ts.X, ts.y, groups=g)
    if len(set(ts.groups)) >= 2:
        m.band_ = _band_without(ts.X, ts.y, g, ch.alpha, ch.shrink)
    table, scheme = [], ""
    if evaluate:
        res = held_out(ts, ch.alpha, ch.shrink, ch.folds)
        table, scheme = _records(error_table(res)), res.scheme
    choice = {
        "alpha": ch.alpha,
        "shrink": ch.shrink,
        "prior_scale": ch.prior_scale,
        "cap": ch.cap,
        "reason": ch.reason,
    }
    return m, choice, table, scheme


def fit_training_set(
    ts: TrainingSet,
    *,
    name: str,
    memory_ts: TrainingSet | None = None,
    group: str | None = None,
    evaluate: bool = True,
    caps: tuple[float | None, float | None] = (None, None),
    records: Sequence[Mapping[str, Any]] = (),
) -> Calibration:
    """Fit on prepared training sets; `group` names the cluster whose offset every prediction gets.
    `caps`: (throughput, memory) shrink caps to use instead of the nested check (None: run it).
    `records`: the run records `ts` was built from; the layouts of those it used are kept (meta.layouts)
    so that novelty counts them as measured evidence."""
    if len(ts) < 3:
        raise DataError(
            f"need at least 3 usable runs to fit a calibration, have {len(ts)}"
            + (f" ({len(ts.skipped)} skipped: {ts.skipped[0][1]})" if ts.skipped else "")
        )
    if group is not None and group not in set(ts.groups):
        raise DataError(f"--group {group!r} has no usable runs (groups: {', '.join(sorted(set(ts.groups)))})")
    corrector, choice, loso, _ = _fit_one(ts, evaluate, caps[0])
    use_memory = memory_ts is not None and len(memory_ts) >= MIN_MEMORY_RUNS
    mem, mchoice, mcv, mscheme = (None, {}, [], "")
    if use_memory:
        mem, mchoice, mcv, mscheme = _fit_one(memory_ts, evaluate, caps[1])
    meta = CalibrationMeta(
        name=name,
        n_train=len(ts),
        sources=sorted(set(ts.sources)),
        groups=sorted(set(ts.groups)),
        group=group,
        training_fingerprint=training_fingerprint(ts, memory_ts if use_memory else None),
        choice=choice,
        loso=loso,
        memory_n_train=len(memory_ts) if use_memory else 0,
        memory_sources=sorted(set(memory_ts.sources)) if use_memory else [],
        memory_stacks=sorted(set(memory_ts.stacks)) if use_memory else [],
        memory_choice=mchoice,
        memory_cv=mcv,
        memory_scheme=mscheme,
        layouts=training_layouts(records, ts.ids),
    )
    return Calibration(corrector, meta, mem)


def training_layouts(records: Sequence[Mapping[str, Any]], used: Sequence[str]) -> list[dict[str, Any]]:
    """The novelty LayoutPoints (as plain dicts) of the records whose ids a training set used."""
    from autopar.calibration import novelty

    ids = set(used)
    rows = [r for r in records if str(r.get("id")) in ids]
    return [{**asdict(p), "knobs": list(p.knobs)} for p in novelty.record_points(rows)]  # JSON-shaped


def _records(table: Any) -> list[dict[str, Any]]:
    """An error table as JSON-friendly dicts (NaN -> None)."""
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]


# ---------------------------------------------------------------------------------- default model
def published_training_sets() -> tuple[TrainingSet, TrainingSet]:
    """Throughput and memory training sets of the published runs shipped with autopar."""
    from autopar.calibration.runs import read_run_records
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
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"numpy {np.__version__}\n".encode())
    for p in sorted(root.rglob("*")):
        if p.suffix in _INPUT_SUFFIXES and "__pycache__" not in p.parts and p.is_file():
            h.update(f"{p.relative_to(root).as_posix()}\n".encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _fingerprint_stamp(digest: str) -> Path:
    from autopar.calibration.store import autopar_home

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
