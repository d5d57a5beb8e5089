"""The tune's Optuna study: every run is a trial, so any Optuna storage keeps it and optuna-dashboard shows it.

A run is a trial RUNNING while the job runs (its runner's handle, a process or SLURM job id, stored as the
user attribute `handle` before the tune waits), COMPLETE with the measured values (metric names set with
`set_metric_names`) and the prediction beside them as user attributes, or FAIL with its `status` (oom,
failed, stale) and `fail_reason`. The candidate is the trial's categorical parameter `candidate`, and its
main degrees integer parameters (for the dashboard's parameter plots); the tune enqueues the candidate it
chose and asks for that trial, so the sampler never chooses. The study's user attribute `tune` names the
candidate set (`fingerprint`): a `tune` started again on the same storage and study resumes it, and one on
another problem is refused.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autopar.errors import AutoparError
from autopar.layouts import Axis

SINGLE_METRICS = (("tokens_per_s_per_gpu", "maximize"),)
MULTI_METRICS = (("tokens_per_s", "maximize"), ("usd_per_mtoken", "minimize"))
# FAIL trials that are no run of their candidate: a claim another tune won, a launch a killed tune never made
NOT_RUNS = ("duplicate", "not_launched")
TUNE_ATTR = (
    "tune"  # the study attribute naming the candidate set and problem (how a tune's study is told apart)
)
STOPPED_ATTR = "stopped"  # how the tune ended: {"rule", "why", "pick", "runs"}; None while one runs
KNOB_PARAMS = (Axis.TP.value, Axis.PP.value, Axis.CP.value, Axis.DP.value, Axis.EP.value, "micro_batch")


def fingerprint(keys: Sequence[str]) -> str:
    """A short digest of the candidate keys (the study's identity)."""
    return hashlib.sha256(json.dumps(list(keys)).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class StoredTrial:
    """A trial of an earlier (or this) tune, as the loop needs it."""

    number: int
    trial_id: int
    key: str
    state: str  # COMPLETE, FAIL, RUNNING, WAITING
    attrs: dict[str, Any]
    values: tuple[float, ...] | None


class TuneStudy:
    """An Optuna study holding one tune's runs."""

    def __init__(
        self, storage: str | None, name: str, keys: Sequence[str], multi: bool, problem: dict[str, Any]
    ):
        import optuna

        from autopar.search.storage import open_storage

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.keys = list(keys)
        self.multi = multi
        self._knob_max: dict[str, int] = {}
        metrics = MULTI_METRICS if multi else SINGLE_METRICS
        self.study = optuna.create_study(
            storage=open_storage(storage) if storage else None,
            study_name=name,
            directions=[d for _, d in metrics],  # type: ignore[misc]  # 'maximize'/'minimize'
            load_if_exists=True,
            sampler=optuna.samplers.RandomSampler(seed=0),
        )
        self.name = name
        self._check_identity(problem)
        with warnings.catch_warnings():  # set_metric_names is flagged experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.set_metric_names([m for m, _ in metrics])

    def _check_identity(self, problem: dict[str, Any]) -> None:
        fp = fingerprint(self.keys)
        stored = self.study.user_attrs.get(TUNE_ATTR)
        if stored is None:
            self.study.set_user_attr(
                TUNE_ATTR, {"fingerprint": fp, "candidates": self.keys, "problem": problem}
            )
        elif stored.get("fingerprint") != fp:
            raise AutoparError(
                f"study-name={self.name!r}: this study tuned another candidate set ({len(stored.get('candidates', []))} "
                f"candidates, first {str((stored.get('candidates') or ['?'])[0])!r}); give another --study-name"
            )

    def set_stopped(self, stopped: dict[str, Any] | None) -> None:
        """Record how the tune ended (STOPPED_ATTR, read by tune/status.py); None while a tune runs on it."""
        self.study.set_user_attr(STOPPED_ATTR, stopped)

    def trials(self) -> list[StoredTrial]:
        """Every trial of the study that names a candidate."""
        out = []
        for t in self.study.get_trials(deepcopy=False):
            key = t.params.get("candidate")
            if key is None:
                continue
            vals = tuple(t.values) if t.values is not None else None
            out.append(StoredTrial(t.number, t._trial_id, str(key), t.state.name, dict(t.user_attrs), vals))
        return out

    def _distributions(self, knobs: dict[str, int]) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution, IntDistribution

        dist: dict[str, Any] = {"candidate": CategoricalDistribution(self.keys)}
        for k, v in knobs.items():
            dist[k] = IntDistribution(1, max(v, self._knob_max.get(k, v)))
        return dist

    def set_knob_ranges(self, ranges: dict[str, int]) -> None:
        """The largest value of each integer knob over the candidates (its distribution's upper end)."""
        self._knob_max = dict(ranges)

    def begin(self, key: str, knobs: dict[str, int], attrs: dict[str, Any]) -> Any:
        """A RUNNING trial for candidate `key`, with `attrs` as user attributes, created in one storage call: no
        WAITING trial exists between an enqueue and an ask, so a second tune starting on the same study
        (whose resume fails WAITING trials left behind) cannot fail or pop it."""
        import optuna
        from optuna.trial import TrialState, create_trial

        template = create_trial(
            state=TrialState.RUNNING,
            params={"candidate": key, **knobs},
            distributions=self._distributions(knobs),
            user_attrs=attrs,
        )
        tid = self.study._storage.create_new_trial(self.study._study_id, template_trial=template)
        return optuna.trial.Trial(self.study, tid)

    def set_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        for k, v in attrs.items():
            self.study._storage.set_trial_user_attr(trial_id, k, v)

    def complete(self, trial: Any, values: Sequence[float], attrs: dict[str, Any]) -> None:
        from optuna.trial import TrialState

        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        self.study.tell(trial, list(values), state=TrialState.COMPLETE, skip_if_finished=True)

    def fail(self, trial: Any, attrs: dict[str, Any]) -> None:
        from optuna.trial import TrialState

        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)

    def claimed_before(self, key: str, number: int) -> bool:
        """True when a trial numbered before `number` (another tune's, running or finished) ran `key`."""
        return any(
            t.key == key
            and t.number < number
            and t.attrs.get("status") not in NOT_RUNS
            and t.state != "WAITING"
            for t in self.trials()
        )

    def trial_of(self, stored: StoredTrial) -> Any:
        """A live handle on a stored RUNNING trial (to finish it after re-attaching)."""
        import optuna

        return optuna.trial.Trial(self.study, stored.trial_id)

    def fail_waiting(self) -> None:
        """FAIL the WAITING trials an interrupted tune left queued (so no later ask pops them)."""
        from optuna.trial import TrialState

        for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            self.study._storage.set_trial_user_attr(t._trial_id, "fail_reason", "queued, never started")
            self.study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
