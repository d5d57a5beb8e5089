"""Read a stored study without the command that made it: progress (`autopar study status`) and the
full SearchResult (`autopar study report`), rebuilt from the inputs kept in the study's user attrs.

Stored attrs are untrusted: any Optuna client can write them, and another autopar version may have
written other shapes. Each is checked before use; `study status` shows what it could read and lists
the rest in `unreadable`; `study report` names the attr it cannot use in one line. Reading never
creates a storage file (open_storage(create=False)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autopar.errors import AutoparError
from autopar.search.jsontypes import JSONDict, JSONValue
from autopar.search.shared import BUDGET_ATTR, FINGERPRINT_ATTR, INPUTS_ATTR, positive_int
from autopar.search.storage import mask, open_storage, storage_error

if TYPE_CHECKING:
    from types import SimpleNamespace

    import optuna

    from autopar.calibration.apply import Calibration
    from autopar.problem import SearchSettings
    from autopar.search.result import SearchResult


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
    unreadable: list[str] = field(default_factory=list)  # stored attrs ignored, and why

    @property
    def complete(self) -> int:
        return self.states.get("COMPLETE", 0)

    def as_dict(self) -> JSONDict:
        return {
            "study_name": self.name,
            "states": self.states,
            "complete": self.complete,
            "budget": self.budget,
            "feasible": self.feasible,
            "metric_names": self.metric_names,
            "model": self.model,
            "hardware": self.hardware,
            "unreadable": self.unreadable,
        }


def load_study(storage: str, study_name: str | None) -> optuna.Study:
    """A stored Optuna study by name (the only one when no name is given), with one-line errors."""
    return _load(storage, study_name)


def _load(storage: str, study_name: str | None) -> optuna.Study:
    """optuna.load_study with one-line errors; the only study when no name is given."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = open_storage(storage, create=False)
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
    """Trials per state, budget, feasible count of a stored study (attrs it cannot read are listed)."""
    study = _load(storage, study_name)
    states: dict[str, int] = {}
    feasible = 0
    for t in study.get_trials(deepcopy=False):
        states[t.state.name] = states.get(t.state.name, 0) + 1
        if t.state.name == "COMPLETE" and _feasible(t.constraints):
            feasible += 1
    attrs, bad = study.user_attrs, []
    budget = positive_int(attrs.get(BUDGET_ATTR))
    if budget is None and BUDGET_ATTR in attrs:
        bad.append(f"{BUDGET_ATTR}={_short(attrs[BUDGET_ATTR])} is not a count")
    inputs = attrs.get(INPUTS_ATTR, {})
    if not isinstance(inputs, dict):
        bad.append(f"{INPUTS_ATTR} is a {type(inputs).__name__}, not a mapping")
        inputs = {}
    model = inputs.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    if model is not None and not isinstance(name, str):
        bad.append(f"{INPUTS_ATTR}.model has no name")
    hw, ok = _hardware(inputs.get("clusters", []))
    if not ok:
        bad.append(f"{INPUTS_ATTR}.clusters is not a list of clusters")
    metrics = study.metric_names
    if metrics is not None and not (isinstance(metrics, list) and all(isinstance(m, str) for m in metrics)):
        metrics = None
    return StudyStatus(
        study.study_name, states, budget, metrics, feasible, name if isinstance(name, str) else None, hw, bad
    )


def _feasible(constraints: JSONValue) -> bool:
    try:
        return all(float(c) <= 0 for c in constraints.values())
    except (AttributeError, TypeError, ValueError):
        return False


def _hardware(clusters: JSONValue) -> tuple[list[str], bool]:
    """'64x H100-SXM' per stored cluster, and whether every entry could be read."""
    if not isinstance(clusters, list):
        return [], False
    out, ok = [], True
    for c in clusters:
        gpu = c.get("gpu") if isinstance(c, dict) else None
        gpu_name = gpu.get("name") if isinstance(gpu, dict) else None
        n = c.get("num_gpus") if isinstance(c, dict) else None
        if isinstance(gpu_name, str) and positive_int(n):
            out.append(f"{n}x {gpu_name}")
        else:
            ok = False
    return out, ok


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _StoredPrices:
    """The prices a study was searched with, answering like a price book (`entry(gpu, tier)`)."""

    def __init__(self, prices: dict[str, tuple[float, str]]):
        self.prices = prices

    def entry(self, gpu: str, tier: str = "on_demand") -> SimpleNamespace:
        from types import SimpleNamespace

        if gpu not in self.prices:
            raise AutoparError(f"{INPUTS_ATTR}.prices: no stored price for {gpu}")
        price, source = self.prices[gpu]
        return SimpleNamespace(usd_per_gpu_hour=price, source=f"{source} (as stored in the study)")


def load_result(storage: str, study_name: str | None = None, calibration: object = "stored") -> SearchResult:
    """The SearchResult of whatever a stored study holds (no new trials).

    calibration="stored" uses what the study was searched with (the built-in corrector or the
    same file); None = analytical; otherwise a Calibration object.
    """
    from autopar.search.study import optimize

    study = _load(storage, study_name)
    inputs = study.user_attrs.get(INPUTS_ATTR)
    if not isinstance(inputs, dict) or not inputs or FINGERPRINT_ATTR not in study.user_attrs:
        raise AutoparError(
            f"study-name={study.study_name!r}: not an autopar study (no readable {INPUTS_ATTR} user "
            "attr); `autopar study status` shows its trials, optuna-dashboard browses it"
        )
    args = _problem(study.study_name, inputs)
    ref = args.pop("calibration")
    if calibration == "stored":
        calibration = _stored_calibration(ref)
    budget = positive_int(study.user_attrs.get(BUDGET_ATTR)) or 1
    settings = args.pop("settings").model_copy(
        update={"budget": budget, "storage": storage, "study_name": study.study_name}
    )
    return optimize(**args, settings=settings, calibration=calibration, search=False)


def _problem(name: str, inputs: JSONDict) -> JSONDict:
    """optimize() arguments from the stored inputs, each checked; one line naming the first bad one."""
    from pydantic import ValidationError

    from autopar.specs import ClusterSpec, ModelSpec, Workload

    field = "model"
    try:
        model = ModelSpec.model_validate(inputs.get("model"))
        field = "clusters"
        raw = inputs.get("clusters")
        if not isinstance(raw, list) or not raw:
            raise TypeError("not a list of clusters")
        clusters = [ClusterSpec.model_validate(c) for c in raw]
        field = "workload"
        workload = Workload.model_validate(_stored_workload(inputs.get("workload")))
        field = "objectives"
        objectives = inputs.get("objectives")
        if not isinstance(objectives, list) or not all(isinstance(o, str) for o in objectives):
            raise TypeError("not a list of objective names")
        field = "prices"
        prices = _prices(inputs.get("prices", {}))
        field = "precisions"
        precisions = inputs.get("precisions")
        if precisions is not None and not (
            isinstance(precisions, list) and all(isinstance(p, str) for p in precisions)
        ):
            raise TypeError("not a list of precisions")
        field = "min_headroom_gib"
        headroom = _opt(inputs, "min_headroom_gib", float, 0.0)
        field = "max_cost"
        max_cost = _opt(inputs, "max_cost", float, None)
        field = "tier"
        tier = _opt(inputs, "tier", str, "on_demand")
        field = "calibration"
        ref = _opt(inputs, "calibration", str, None)
        field = "settings"
        settings = _settings(inputs.get("settings"), objectives, precisions, headroom, max_cost, tier)
    except (ValidationError, TypeError, ValueError) as e:
        first = str(e).strip().splitlines()
        raise AutoparError(
            f"study-name={name!r}: stored input {INPUTS_ATTR}.{field} is not readable "
            f"({first[0] if first else type(e).__name__}); was the study written by another client or "
            "autopar version? `autopar study status` shows its trials"
        ) from None
    return dict(
        model=model,
        clusters=clusters,
        workload=workload,
        settings=settings,
        price_book=_StoredPrices(prices),
        calibration=ref,
    )


def _stored_workload(node: JSONValue) -> JSONValue:
    """The stored workload; one stored before Workload.grad_reduce_dtype existed ran fp32 main gradients (the
    default then; megatron's is bf16 now), so it is rebuilt with fp32 and its fingerprint still matches."""
    return {"grad_reduce_dtype": "fp32", **node} if isinstance(node, dict) else node


def _settings(
    node: JSONValue,
    objectives: list[str],
    precisions: JSONValue,
    headroom: float,
    max_cost: JSONValue,
    tier: str,
) -> SearchSettings:
    """The study's SearchSettings: its stored tree node (autopar/problem.py), or, for a study written before
    the tree was stored, rebuilt from the separate fields it kept; the objectives as the study has them."""
    from autopar.problem import SearchSettings

    # A study stored before the memory band (issue 21) was searched with the point estimate and its
    # min_headroom_gib alone: rebuilt the same way, so its fingerprint still matches.
    if node is not None:
        node = {"memory_band": False, **node}
        return SearchSettings.model_validate({**node, "objectives": tuple(objectives)})
    return SearchSettings(
        objectives=tuple(objectives),
        precisions=precisions,
        min_headroom_gib=headroom,
        max_cost=max_cost,
        tier=tier,
        memory_band=False,
    )


def _opt(inputs: JSONDict, key: str, kind: type, default: JSONValue) -> JSONValue:
    """inputs[key] if it has the expected type (ints accepted as floats), `default` when absent/None."""
    value = inputs.get(key)
    if value is None:
        return default
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    raise TypeError(f"{key}={_short(value)} is not a {kind.__name__}")


def _prices(raw: JSONValue) -> dict[str, tuple[float, str]]:
    """{gpu: (usd per GPU-hour, source)} from the stored prices."""
    if not isinstance(raw, dict):
        raise TypeError("not a mapping of GPU -> [price, source]")
    out = {}
    for gpu, entry in raw.items():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)):
            raise TypeError(f"{gpu}: not [price, source]")
        price = entry[0]
        if isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < float("inf"):
            raise TypeError(f"{gpu}: price {_short(price)} is not a non-negative number")
        out[str(gpu)] = (float(price), entry[1])
    return out


def _stored_calibration(ref: JSONValue) -> Calibration | None:
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
