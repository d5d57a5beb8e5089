"""Fitting a Calibration on run records: parameters chosen by the no-worse-by-source gate
(evaluation/validation.py), the out-of-group band, held-out scores, and the layouts it rests on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from autopar.calibration.apply.meta import CalibrationMeta, training_fingerprint
from autopar.calibration.apply.model import Calibration
from autopar.calibration.models.features import (
    TrainingSet,
    build_training_set,
)
from autopar.calibration.models.predictor import FittedCorrector
from autopar.errors import DataError

MIN_MEMORY_RUNS = 8


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
    from autopar.calibration.evaluation.validation import (
        COVERAGE,
        _band_without,
        error_table,
        held_out,
        select_params,
    )
    from autopar.calibration.models.corrector import ThroughputCorrector

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
    from autopar.calibration.evaluation import novelty

    ids = set(used)
    rows = [r for r in records if str(r.get("id")) in ids]
    return [{**asdict(p), "knobs": list(p.knobs)} for p in novelty.record_points(rows)]  # JSON-shaped


def _records(table: Any) -> list[dict[str, Any]]:
    """An error table as JSON-friendly dicts (NaN -> None)."""
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]
