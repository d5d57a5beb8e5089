"""Read a stored study without the command that made it: progress (`autopar study status`) and the
full SearchResult (`autopar study report`), rebuilt from the inputs kept in the study's user attrs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autopar.errors import AutoparError
from autopar.search.shared import BUDGET_ATTR, FINGERPRINT_ATTR, INPUTS_ATTR
from autopar.search.storage import mask, open_storage, storage_error


@dataclass
class StudyStatus:
    """Progress of a stored study."""

    name: str
    states: dict[str, int]  # Optuna state name -> trials
    budget: int | None  # latest worker's --budget (study-wide COMPLETE trials)
    metric_names: list[str] | None
    feasible: int  # COMPLETE trials whose constraints are all <= 0
    model: str | None
    hardware: list[str] = field(default_factory=list)

    @property
    def complete(self) -> int:
        return self.states.get("COMPLETE", 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "study_name": self.name,
            "states": self.states,
            "complete": self.complete,
            "budget": self.budget,
            "feasible": self.feasible,
            "metric_names": self.metric_names,
            "model": self.model,
            "hardware": self.hardware,
        }


def _load(storage: str, study_name: str | None) -> Any:
    """optuna.load_study with one-line errors; the only study when no name is given."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = open_storage(storage)
    try:
        names = optuna.get_all_study_names(storage=st)
    except Exception as e:  # noqa: BLE001
        raise storage_error(str(storage), e) from e
    if study_name is None:
        if len(names) != 1:
            listed = ", ".join(names[:10]) or "none"
            raise AutoparError(f"study-name: give one of the studies in {mask(str(storage))}: {listed}")
        study_name = names[0]
    if study_name not in names:
        import difflib

        close = difflib.get_close_matches(study_name, names, n=3)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else f"; studies: {', '.join(names[:10]) or 'none'}"
        )
        raise AutoparError(f"study-name={study_name!r}: no such study in {mask(str(storage))}{hint}")
    return optuna.load_study(study_name=study_name, storage=st)


def study_status(storage: str, study_name: str | None = None) -> StudyStatus:
    """Trials per state, budget, feasible count of a stored study."""
    study = _load(storage, study_name)
    states: dict[str, int] = {}
    feasible = 0
    for t in study.get_trials(deepcopy=False):
        states[t.state.name] = states.get(t.state.name, 0) + 1
        if t.state.name == "COMPLETE" and all(c <= 0 for c in t.constraints.values()):
            feasible += 1
    attrs = study.user_attrs
    inputs = attrs.get(INPUTS_ATTR) or {}
    hw = [f"{c.get('num_gpus')}x {c.get('gpu', {}).get('name')}" for c in inputs.get("clusters", [])]
    return StudyStatus(
        study.study_name,
        states,
        attrs.get(BUDGET_ATTR),
        study.metric_names,
        feasible,
        (inputs.get("model") or {}).get("name"),
        hw,
    )


class _StoredPrices:
    """The prices a study was searched with, answering like a price book (`entry(gpu, tier)`)."""

    def __init__(self, prices: dict[str, list[Any]]):
        self.prices = prices

    def entry(self, gpu: str, tier: str = "on_demand") -> Any:
        from types import SimpleNamespace

        price, source = self.prices[gpu]
        return SimpleNamespace(usd_per_gpu_hour=float(price), source=f"{source} (as stored in the study)")


def load_result(storage: str, study_name: str | None = None, calibration: Any = "stored") -> Any:
    """The SearchResult of whatever a stored study holds (no new trials).

    calibration="stored" uses what the study was searched with (the built-in corrector or the
    same file); None = analytical; otherwise a Calibration object.
    """
    from autopar.search.study import optimize
    from autopar.specs import ClusterSpec, ModelSpec, Workload

    study = _load(storage, study_name)
    inputs = study.user_attrs.get(INPUTS_ATTR)
    if not inputs or FINGERPRINT_ATTR not in study.user_attrs:
        raise AutoparError(
            f"study-name={study.study_name!r}: not an autopar study (no {INPUTS_ATTR} user attr); "
            "browse it with optuna-dashboard"
        )
    if calibration == "stored":
        calibration = _stored_calibration(inputs.get("calibration"))
    return optimize(
        ModelSpec.model_validate(inputs["model"]),
        [ClusterSpec.model_validate(c) for c in inputs["clusters"]],
        Workload.model_validate(inputs["workload"]),
        budget=int(study.user_attrs.get(BUDGET_ATTR) or 1),
        objectives=inputs["objectives"],
        storage=storage,
        study_name=study.study_name,
        min_headroom_gib=inputs.get("min_headroom_gib", 0.0),
        max_cost=inputs.get("max_cost"),
        precisions=inputs.get("precisions"),
        price_book=_StoredPrices(inputs.get("prices", {})),
        tier=inputs.get("tier", "on_demand"),
        calibration=calibration,
        search=False,
    )


def _stored_calibration(ref: Any) -> Any:
    from pathlib import Path

    from autopar.calibration.apply import load_calibration, load_default_calibration

    if ref is None:
        return None
    if ref == "default":
        return load_default_calibration()
    if not Path(ref).is_file():
        raise AutoparError(
            f"calibration={ref!r}: the study was searched with this calibration file, which is not "
            "here; pass --calibration FILE or --no-calibration"
        )
    return load_calibration(Path(ref))
