"""A tune's runs as its study holds them, at any moment: while it runs, after it stopped, or after it was killed.

Read from the Optuna study alone (any storage: the runs folder's journal, SQLite, a team's PostgreSQL), so
`autopar study runs` and the service's `/api/tunes/{name}` show the same runs a `tune` in progress is making:
each run in order with its candidate, state (RUNNING while the job runs), the prediction and the band the tune
believed when it launched it, what it measured, and the best measured so far; and, once the tune has stopped,
which rule stopped it and its pick (the study attribute `STOPPED_ATTR`, written by the loop at its end).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from autopar.errors import AutoparError
from autopar.tune.study import NOT_RUNS, STOPPED_ATTR, TUNE_ATTR


@dataclass(frozen=True)
class RunRow:
    """One run of a tune, in the order it was launched."""

    number: int
    strategy: str
    hardware: str
    candidate_id: str | None
    state: str  # RUNNING, COMPLETE, FAIL
    status: str  # ok, oom, failed, stale; "running" while RUNNING
    predicted: float | None  # tokens/s per GPU, the calibrated prediction
    believed_low: float | None  # the band the tune believed when it launched the run
    believed_high: float | None
    measured: float | None  # tokens/s per GPU (after warm-up), when the run measured one
    measured_over_predicted: float | None
    best_so_far: float | None  # the highest measured tokens/s per GPU up to this run
    wall_s: float | None
    reason: str  # why it failed, or how it was measured


@dataclass(frozen=True)
class TuneStatus:
    """What a tune's study holds."""

    name: str
    candidates: int
    runs: list[RunRow]
    running: int
    stopped: dict[str, Any] | None  # {"rule", "why", "pick", "runs"} once the tune has ended

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runs": [asdict(r) for r in self.runs]}


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _pair(v: Any) -> tuple[float | None, float | None]:
    if isinstance(v, list | tuple) and len(v) == 2:
        return _num(v[0]), _num(v[1])
    return None, None


def _row(t: Any, best: float | None) -> RunRow:
    a = dict(t.user_attrs)
    lo, hi = _pair(a.get("believed_band"))
    measured = _num(a.get("measured_tokens_per_s_per_gpu")) if t.state.name == "COMPLETE" else None
    state = t.state.name
    status = "running" if state == "RUNNING" else str(a.get("status") or state.lower())
    return RunRow(
        number=t.number + 1,
        strategy=str(a.get("label") or t.params.get("candidate")),
        hardware=str(a.get("hardware") or ""),
        candidate_id=a.get("candidate_id"),
        state=state,
        status=status,
        predicted=_num(a.get("predicted_tokens_per_s_per_gpu")),
        believed_low=lo,
        believed_high=hi,
        measured=measured,
        measured_over_predicted=_num(a.get("measured_over_predicted")),
        best_so_far=best,
        wall_s=_num(a.get("wall_s")),
        reason=str(a.get("fail_reason") or a.get("how") or ""),
    )


def _is_run(t: Any) -> bool:
    """A trial that is a run of a candidate (not a claim another tune won, not a launch never made)."""
    return (
        "candidate" in t.params and t.user_attrs.get("status") not in NOT_RUNS and t.state.name != "WAITING"
    )


def tune_status(study: Any) -> TuneStatus:
    """The runs of a loaded Optuna study that a tune wrote (AutoparError naming the study otherwise)."""
    tune = study.user_attrs.get(TUNE_ATTR)
    if not isinstance(tune, dict):
        raise AutoparError(
            f"study-name={study.study_name!r}: not a tune's study (no {TUNE_ATTR!r} attribute); "
            "`autopar study status` reads an optimize study"
        )
    rows, best = [], None
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if not _is_run(t):
            continue
        x = _num(t.user_attrs.get("measured_tokens_per_s_per_gpu")) if t.state.name == "COMPLETE" else None
        if x is not None:
            best = x if best is None else max(best, x)
        rows.append(_row(t, best))
    rows = [replace(r, number=i) for i, r in enumerate(rows, 1)]  # runs only: claims and WAITING left out
    stopped = study.user_attrs.get(STOPPED_ATTR)
    return TuneStatus(
        name=study.study_name,
        candidates=len(tune.get("candidates") or []),
        runs=rows,
        running=sum(r.state == "RUNNING" for r in rows),
        stopped=stopped if isinstance(stopped, dict) else None,
    )
