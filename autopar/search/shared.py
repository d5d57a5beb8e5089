"""The stored side of a search: one Optuna study in a storage, shared by any number of workers.

Each worker samples with NSGA-II on a private in-memory study (fast) and writes only finished,
honest trials to the shared study:

- COMPLETE: a strategy with an estimate, its real objective values, named constraints
  (`trial.constraints`, <= 0 feasible) and user attrs (strategy, memory, bottleneck, ...);
- PRUNED: a proposal that is not a valid layout (no objective values), with `autopar_reason`;
- FAILED: left by Optuna's `fail_stale_trials` when a server worker dies mid-trial (heartbeats).

Duplicates of an already stored strategy are not written, and nothing is ever enqueued in the shared
study, so it holds no WAITING trials. The budget is the study-wide number of COMPLETE trials.

Writes: on a database server (``live``) each trial is created RUNNING before it is evaluated, kept
alive by a heartbeat thread and finished in place, so a kill leaves a trial that becomes FAILED.
On a journal file or SQLite, finished trials are buffered and written in batches (one write per
trial, `create_new_trial(template_trial=...)`), which is what makes a stored run nearly as fast as
an in-memory one; a killed file worker loses at most its unflushed batch. A batch is written under
an exclusive lock on the storage file (`flock`), after re-reading the study: a strategy another
worker already stored is dropped, and COMPLETE trials beyond the study's budget are dropped, so file
workers never store a strategy twice nor overshoot the budget.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from autopar.errors import AutoparError
from autopar.search.jsontypes import JSONDict, Key
from autopar.search.optuna_compat import trial_id
from autopar.search.storage import StorageSpec, is_server, open_storage, scheme, storage_error

if TYPE_CHECKING:
    from optuna.storages import BaseStorage, RDBStorage
    from optuna.trial import FrozenTrial, TrialState

FINGERPRINT_ATTR = "autopar_fingerprint"
INPUTS_ATTR = "autopar_inputs"
REASON_ATTR = "autopar_reason"
BUDGET_ATTR = "autopar_budget"  # the budget of the latest worker (study-wide COMPLETE trials)
FLUSH_EVERY = 64  # buffered trials per batch on file storages
SYNC_EVERY_S = 1.0  # how often a worker reads the others' trials (and fails stale ones)


class SharedStudy:
    """One study in a storage: creation/checks, batched or live trial writes, sync, counts."""

    def __init__(
        self,
        spec: str | Path | BaseStorage,
        name: str,
        directions: Sequence[str],
        metric_names: Sequence[str],
        fingerprint: str,
        inputs: JSONDict | None = None,
        heartbeat_s: int | None = None,
        key: Callable[[JSONDict], Hashable] | None = None,
    ):
        import optuna

        self.spec = spec
        # What makes two trials the same strategy: the search's decoded strategy key (a repaired vpp, sp or
        # micro-batch maps different choices onto one strategy), else the choices themselves.
        self.key = key or _params_key
        self.live = is_server(spec)
        self.storage = open_storage(spec, heartbeat_s)
        try:
            self.study = optuna.create_study(
                storage=self.storage, study_name=name, directions=list(directions), load_if_exists=True
            )
            self.study_id = self.storage.get_study_id_from_name(self.study.study_name)
            self._check(fingerprint, metric_names, inputs)
        except AutoparError:
            raise
        except Exception as e:  # noqa: BLE001 - connection lost, schema problems: one line
            raise storage_error(str(spec), e) from e
        self.mine: set[int] = set()  # trial ids this worker wrote
        self.pulled: set[int] = set()  # finished trial ids already handed to the caller by sync()
        self.buffer: list[FrozenTrial] = []
        self.last_sync = 0.0
        self.last_counts: dict[str, int] = {}  # trials per state at the last sync
        self._running: dict[Hashable, int] = {}  # strategy key -> number of others' RUNNING trials
        self._beat = _Heartbeat(self.storage) if self.live else None
        self._lock_path = _lock_path(spec)
        self.dropped = 0  # buffered trials not written: already stored by another worker, or over budget

    @property
    def name(self) -> str:
        return self.study.study_name

    def _check(self, fp: str, metric_names: Sequence[str], inputs: JSONDict | None) -> None:
        attrs = self.study.user_attrs
        stored = attrs.get(FINGERPRINT_ATTR)
        if stored is None:
            self.study.set_user_attr(FINGERPRINT_ATTR, fp)
        elif stored != fp:
            raise AutoparError(
                f"study-name={self.study.study_name!r}: that study was created for other inputs "
                f"(fingerprint {stored}, these inputs give {fp}){self._objectives_hint(metric_names, inputs)}; "
                "pick another --study-name"
            )
        if inputs is not None and INPUTS_ATTR not in attrs:
            self.study.set_user_attr(INPUTS_ATTR, inputs)
        if self.study.metric_names is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # set_metric_names is flagged experimental
                self.study.set_metric_names(list(metric_names))

    def _objectives_hint(self, metric_names: Sequence[str], inputs: JSONDict | None) -> str:
        """', searched with --objectives A,B,C' when the stored study's objectives differ from these (a study
        from before free memory became a constraint searched throughput,headroom,cost by default)."""
        stored = (self.study.user_attrs.get(INPUTS_ATTR) or {}).get("objectives") or self.study.metric_names
        asked = (inputs or {}).get("objectives") or list(metric_names)
        if not stored or list(stored) == list(asked):
            return ""
        return f", searched with --objectives {','.join(stored)} (add it to resume that study)"

    # --- writing ---------------------------------------------------------------------------------
    def add(self, trial: FrozenTrial) -> None:
        """Store a finished FrozenTrial (buffered on file storages, written now on a server)."""
        if self.live:
            self.mine.add(self.storage.create_new_trial(self.study_id, template_trial=trial))
        else:
            self.buffer.append(trial)
            if len(self.buffer) >= FLUSH_EVERY:
                self.flush()

    def flush(self) -> None:
        """Write the buffered trials, under the storage's file lock, except those whose strategy the
        study already holds and the COMPLETE ones beyond its budget."""
        from optuna.trial import TrialState

        if not self.buffer:
            return
        with _exclusive(self._lock_path):
            stored = self.storage.get_all_trials(self.study_id, deepcopy=False)
            taken = {
                self.key(t.params) for t in stored if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            }
            room = self._budget_left(stored)
            for t in self.buffer:
                key, counts = self.key(t.params), t.state == TrialState.COMPLETE
                if key in taken or (counts and room <= 0):
                    self.dropped += 1
                    continue
                self.mine.add(self.storage.create_new_trial(self.study_id, template_trial=t))
                taken.add(key)
                room -= counts
        self.buffer.clear()

    def _budget_left(self, stored: Sequence[FrozenTrial]) -> float:
        """COMPLETE trials the study's budget still allows (no limit when the attr is not a count)."""
        from optuna.trial import TrialState

        budget = positive_int(self.storage.get_study_user_attrs(self.study_id).get(BUDGET_ATTR))
        if budget is None:
            return float("inf")
        return budget - sum(t.state == TrialState.COMPLETE for t in stored)

    def start(self, trial: FrozenTrial) -> int:
        """Create `trial` (a finished FrozenTrial: params, attrs, constraints) RUNNING in the study and
        start its heartbeat (server storages); `finish` then sets its state and values."""
        from optuna.trial import TrialState, create_trial

        t = create_trial(
            state=TrialState.RUNNING,
            params=trial.params,
            distributions=trial.distributions,
            user_attrs=trial.user_attrs,
            system_attrs=trial.system_attrs,
        )
        tid = self.storage.create_new_trial(self.study_id, template_trial=t)
        self.mine.add(tid)
        assert self._beat is not None
        self._beat.watch(tid)
        return tid

    def finish(
        self, tid: int, state: TrialState, values: Sequence[float] | None = None, reason: str = ""
    ) -> None:
        """Finish a RUNNING trial: COMPLETE with values, or PRUNED with `reason` (no values)."""
        try:
            if reason:
                self.storage.set_trial_user_attr(tid, REASON_ATTR, reason)
            self.storage.set_trial_state_values(tid, state, values)
        finally:
            if self._beat is not None:
                self._beat.unwatch(tid)

    def running_ahead(self, tid: int) -> tuple[int, int]:
        """(COMPLETE trials, RUNNING trials numbered before `tid`) in the study, for the budget claim."""
        from optuna.trial import TrialState

        number = self.storage.get_trial_number_from_id(tid)
        ts = self.storage.get_all_trials(
            self.study_id, deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)
        )
        done = sum(t.state == TrialState.COMPLETE for t in ts)
        return done, sum(t.state == TrialState.RUNNING and t.number < number for t in ts)

    # --- reading ---------------------------------------------------------------------------------
    def sync(self) -> list[FrozenTrial]:
        """Flush, fail stale trials, and return the finished trials of other workers not seen yet."""
        import optuna

        self.flush()
        if self.live:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # fail_stale_trials is flagged experimental
                optuna.storages.fail_stale_trials(self.study)
        self.last_sync = time.monotonic()
        new: list[FrozenTrial] = []
        counts: dict[str, int] = {}
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False):
            counts[t.state.name] = counts.get(t.state.name, 0) + 1
            tid = trial_id(t)
            if t.state.is_finished() and tid not in self.pulled:
                self.pulled.add(tid)
                if tid not in self.mine:
                    new.append(t)
        self.last_counts = counts
        return new

    def poll(self) -> list[FrozenTrial]:
        """Finished trials of other workers not seen yet (no flush, no stale check: cheap)."""
        new = []
        self._running = {}
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False):
            tid = trial_id(t)
            if t.state.is_finished():
                if tid not in self.pulled:
                    self.pulled.add(tid)
                    if tid not in self.mine:
                        new.append(t)
            elif tid not in self.mine:
                self._running[self.key(t.params)] = min(
                    t.number, self._running.get(self.key(t.params), t.number)
                )
        return new

    def running_same(self, params: JSONDict) -> int | None:
        """Number of another worker's RUNNING trial with these params (as of the last poll), or None."""
        return self._running.get(self.key(params))

    def due(self) -> bool:
        return time.monotonic() - self.last_sync > SYNC_EVERY_S

    def trials(self) -> list[FrozenTrial]:
        return self.storage.get_all_trials(self.study_id, deepcopy=False)

    def close(self) -> None:
        """Write what is buffered and stop the heartbeat thread."""
        try:
            self.flush()
        finally:
            if self._beat is not None:
                self._beat.stop()


def settle_stale(spec: StorageSpec, name: str, heartbeat_s: int | None) -> int:
    """On a server study, wait until the RUNNING trials left by a dead worker are stale and fail them
    (at most one grace period and a beat); returns how many RUNNING trials remain (a live client's)."""
    import optuna

    from autopar.search.storage import GRACE_FACTOR, HEARTBEAT_S

    if not is_server(spec):
        return 0
    beat = heartbeat_s or HEARTBEAT_S
    deadline = time.monotonic() + (GRACE_FACTOR + 1) * beat + 1
    study = optuna.load_study(study_name=name, storage=open_storage(spec, heartbeat_s))
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fail_stale_trials is flagged experimental
            optuna.storages.fail_stale_trials(study)
        running = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.25)


def _params_key(params: JSONDict) -> Key:
    return tuple(sorted(params.items()))


def positive_int(value: object) -> int | None:
    """A stored attr read as a count: an int >= 1 (not a bool, string or float), else None.
    Stored attrs are untrusted: any Optuna client can write them."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _lock_path(spec: StorageSpec) -> str | None:
    """The file whose `flock` serialises batch writes: the journal itself, or a companion of an
    SQLite file (SQLite's own POSIX locks must not share a file descriptor with ours)."""
    if not isinstance(spec, str | os.PathLike):
        return None
    s = str(spec)
    kind = scheme(s)
    if kind == "journal":
        return os.path.expanduser(s)
    if kind == "sqlite" and ":///" in s:
        path = s.split(":///", 1)[1]
        return None if path in ("", ":memory:") else os.path.expanduser(path) + ".autopar-lock"
    return None


@contextlib.contextmanager
def _exclusive(path: str | None) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (no-op without a path or without fcntl, e.g. Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        fcntl = None  # type: ignore[assignment]  # no fcntl (not POSIX): None marks its absence
    if path is None or fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class _Heartbeat:
    """One background thread recording Optuna heartbeats for this worker's RUNNING trials."""

    def __init__(self, storage: RDBStorage):
        self.storage = storage
        self.interval = float(storage.get_heartbeat_interval() or 10)
        self.trials: set[int] = set()
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="autopar-heartbeat", daemon=True)
        self.thread.start()

    def watch(self, tid: int) -> None:
        self.storage.record_heartbeat(tid)
        with self.lock:
            self.trials.add(tid)

    def unwatch(self, tid: int) -> None:
        with self.lock:
            self.trials.discard(tid)

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            with self.lock:
                ids = list(self.trials)
            for tid in ids:
                with contextlib.suppress(Exception):  # a missed beat only risks a stale-trial verdict
                    self.storage.record_heartbeat(tid)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)
